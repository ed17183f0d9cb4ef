"""What the gateway measures about itself, served at `/metrics` in Prometheus' text format."""
from __future__ import annotations

from collections import Counter, deque

import numpy as np

QUANTILES = (0.5, 0.9, 0.99)


class GatewayStats:
    def __init__(self, window: int = 100_000) -> None:
        self.write_s: deque[float] = deque(maxlen=window)  # per chunk: gRPC arrival → written to the HTTP socket
        self.num_chunks = 0
        self.num_streams = 0
        self.num_errors: Counter[int] = Counter()  # by HTTP status

    def on_chunk_written(self, seconds: float) -> None:
        self.write_s.append(seconds)
        self.num_chunks += 1

    def quantiles_ms(self) -> dict[float, float | None]:
        if not self.write_s:
            return {q: None for q in QUANTILES}
        values = np.quantile(np.asarray(self.write_s) * 1e3, QUANTILES)
        return {q: round(float(v), 4) for q, v in zip(QUANTILES, values)}

    def prometheus(self, live_by_server: dict[str, int]) -> str:
        lines = ["# HELP voxlane_gateway_chunk_write_ms per chunk: from its gRPC arrival to its HTTP write",
                 "# TYPE voxlane_gateway_chunk_write_ms summary"]
        for q, value in self.quantiles_ms().items():
            lines.append(f'voxlane_gateway_chunk_write_ms{{quantile="{q}"}} {"NaN" if value is None else value}')
        lines += [f"voxlane_gateway_chunk_write_ms_count {len(self.write_s)}",
                  "# TYPE voxlane_gateway_chunks_total counter", f"voxlane_gateway_chunks_total {self.num_chunks}",
                  "# TYPE voxlane_gateway_streams_total counter", f"voxlane_gateway_streams_total {self.num_streams}",
                  "# TYPE voxlane_gateway_errors_total counter"]
        lines += [f'voxlane_gateway_errors_total{{status="{s}"}} {n}' for s, n in sorted(self.num_errors.items())]
        lines.append("# TYPE voxlane_gateway_live_streams gauge")
        lines += [f'voxlane_gateway_live_streams{{server="{url}"}} {n}' for url, n in live_by_server.items()]
        return "\n".join(lines) + "\n"
