"""The benchmark's settings, built once from the command line."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from clients.bench.arrivals import ARRIVALS
from protocol.limits import RequestLimits

MAX_AUDIO_SECONDS = RequestLimits.max_audio_seconds  # the server's limit on max_audio_seconds
PROTOCOLS = ("grpc", "openai")


@dataclass(frozen=True)
class BenchConfig:
    url: str = "localhost:8001"
    rates: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)  # requests/s offered
    duration_s: float = 60.0  # arrivals stop after this; the run lasts until every stream ends
    num_seeds: int = 1  # runs per rate, seeds 0..N-1 (pooled in the summary)
    arrival: str = "poisson"
    burstiness: float = 1.0  # Gamma shape for --arrival gamma (< 1 burstier)
    workload: Path | str | None = None  # a TSV or a shared name (workload.NAMED_WORKLOADS); None: the short TSV
    ttfa_slo_ms: float = 200.0
    out: Path = Path("bench-results")
    audio_scale: float = 1.0  # requested audio = utterance duration × scale, capped below
    max_audio_seconds: float | None = None  # cap per request (CPU smoke runs)
    ignore_eos: bool = True  # random weights: generate exactly the requested duration
    voice: str | None = None
    num_channels: int = 4  # gRPC connections the streams are spread over
    request_timeout_s: float = 300.0
    search_steps: int = 0  # bisection steps after the sweep (--search)
    bracket_width: float = 0.0  # then more rates until each capacity lies within this (req/s); 0: off
    max_rates: int = 8  # the most rates one run measures with --bracket
    warmup: bool = True
    protocol: str = "grpc"  # grpc: Triton's stream; openai: the gateway's /v1/audio/speech at `url`
    metrics_url: str | None = None  # the server's /metrics; None: port 8002 on the gRPC url's host
    text_rate: float | None = None  # tokens/s: each text streams in token-like pieces at this pace; None: whole
    # × real time: each request an audio-in session, its input sent in pieces at this pace (audio_pace.py)
    audio_in_rate: float | None = None

    @property
    def is_text_stream(self) -> bool:
        return self.text_rate is not None

    @property
    def is_audio_in(self) -> bool:
        return self.audio_in_rate is not None

    @property
    def is_session(self) -> bool:
        """Each request is a session of pieces (text or input audio)."""
        return self.is_text_stream or self.is_audio_in

    def __post_init__(self) -> None:
        if not self.rates or min(self.rates) <= 0:
            raise ValueError(f"--rates must be > 0, got {list(self.rates)}")
        if self.duration_s <= 0 or self.num_seeds < 1 or self.num_channels < 1:
            raise ValueError("--duration must be > 0, --seeds and channels >= 1")
        if self.arrival not in ARRIVALS or self.burstiness <= 0:
            raise ValueError(f"--arrival must be one of {ARRIVALS} and --burstiness > 0")
        if self.ttfa_slo_ms <= 0 or self.audio_scale <= 0:
            raise ValueError("--ttfa-slo-ms and --audio-scale must be > 0")
        if self.max_audio_seconds is not None and not 0 < self.max_audio_seconds <= MAX_AUDIO_SECONDS:
            raise ValueError(f"--max-audio-seconds must be in (0, {MAX_AUDIO_SECONDS:g}]")
        if self.search_steps < 0 or self.bracket_width < 0 or self.max_rates < 1:
            raise ValueError("--search and --bracket must be >= 0, --max-rates >= 1")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.text_rate is not None and not (self.text_rate > 0 and self.protocol == "grpc"):
            raise ValueError(f"--text-rate must be > 0 and needs --protocol grpc, got {self.text_rate} "
                             f"with {self.protocol}")
        if self.audio_in_rate is not None and not (self.audio_in_rate > 0 and self.protocol == "grpc"
                                                   and self.text_rate is None):
            raise ValueError(f"--audio-in-rate must be > 0 and needs --protocol grpc and no --text-rate, got "
                             f"{self.audio_in_rate} with {self.protocol}")

    @property
    def seeds(self) -> range:
        return range(self.num_seeds)

    def to_json(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
                for k, v in self.__dict__.items()}


def smoke_config(url: str, out: Path) -> BenchConfig:
    """The CPU smoke run (tiny model, low rates, short requests): well under a minute."""
    return replace(BenchConfig(), url=url, out=out, rates=(1.0, 2.0), duration_s=4.0, max_audio_seconds=1.2,
                   num_channels=1)
