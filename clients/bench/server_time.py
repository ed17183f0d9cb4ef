"""Where the LM lane's time went during a run, from the server's Prometheus metrics.

`voxlane_lm_{prefill,decode,host,idle}_seconds_total` cover the LM thread's wall time and
`voxlane_lm_step_batch` counts its decode steps by batch size (backend_python/stub_common/metrics.py).
A run's `server_time` block is the change of these between a scrape before and one after it.
The LM exports them once a second, so a scrape lags the server by up to that much: the bench
waits `EXPORT_LAG_S` after a run before its second scrape, and that wait (an idle LM) is inside the
window. `busy_share` is each working phase's share of the time the LM was not idle: it does not
depend on the window's edges. `occupancy` reads the streams off the same window: the mean live streams
(resident in the LM lane, playing or paused), the share of time some request waited for a slot or KV
memory, and the LM's idle share of that waiting time (what admission wastes).
"""
from __future__ import annotations

import re
import urllib.error
import urllib.request

PHASES = ("prefill", "decode", "host", "idle")
EXPORT_LAG_S = 1.2  # the LM's export period (1 s) and a margin
_SAMPLE = re.compile(r'^(voxlane_lm_[a-z_]+)(?:\{le="([^"]+)"\})? ([0-9.e+-]+)$')


def metrics_url_for(grpc_url: str, metrics_port: int = 8002) -> str:
    """Triton's metrics endpoint on the gRPC server's host (its default port unless told)."""
    host = grpc_url.rsplit(":", 1)[0]
    return f"http://{host}:{metrics_port}/metrics"


def scrape(url: str, timeout_s: float = 5.0) -> dict[str, float] | None:
    """The LM lane's phase samples by name (histogram buckets as `name{le}`), or None if unreachable."""
    text = scrape_text(url, timeout_s)
    return None if text is None else parse(text)


def scrape_text(url: str, timeout_s: float = 5.0) -> str | None:
    """The /metrics text, or None if unreachable."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read().decode()
    except (urllib.error.URLError, OSError):
        return None


def parse(text: str) -> dict[str, float]:
    samples = {}
    for line in text.splitlines():
        if match := _SAMPLE.match(line):
            name, le, value = match.groups()
            samples[f"{name}{{{le}}}" if le else name] = float(value)
    return samples


def server_time(before: dict[str, float] | None, after: dict[str, float] | None) -> dict | None:
    """The `server_time` block of a run: seconds and shares per phase, steps and their mean batch."""
    if before is None or after is None:
        return None
    delta = {name: after[name] - before.get(name, 0.0) for name in after}
    seconds = {phase: round(delta.get(f"voxlane_lm_{phase}_seconds_total", 0.0), 4) for phase in PHASES}
    total = sum(seconds.values())
    steps = delta.get("voxlane_lm_step_batch_count", 0.0)
    batch_sum = delta.get("voxlane_lm_step_batch_sum", 0.0)
    return {"seconds": seconds, "share": {p: round(s / total, 4) if total else None for p, s in seconds.items()},
            "busy_share": _busy_share(seconds), "num_steps": int(steps), "mean_step_batch": round(batch_sum / steps, 2) if steps else None,
            "step_batch_le": {name[len("voxlane_lm_step_batch_bucket{"):-1]: int(value) for name, value in delta.items()
                              if name.startswith("voxlane_lm_step_batch_bucket{")},
            "occupancy": _occupancy({name: delta.get(f"voxlane_lm_{name}_total", 0.0) for name in INTEGRALS}, total)}


INTEGRALS = ("live_stream_seconds", "waiting_seconds", "idle_waiting_seconds")


def _occupancy(integrals: dict[str, float], total_s: float) -> dict:
    """Mean live streams, waiting share and idle-while-waiting share of a window of `total_s` seconds."""
    waiting = integrals["waiting_seconds"]
    return {"integrals": {k: round(v, 4) for k, v in integrals.items()},
            "mean_live_streams": round(integrals["live_stream_seconds"] / total_s, 2) if total_s else None,
            "waiting_share": round(waiting / total_s, 4) if total_s else None,
            "idle_while_waiting": round(integrals["idle_waiting_seconds"] / waiting, 4) if waiting else None}


def add_server_times(blocks: list[dict | None]) -> dict | None:
    """Several runs' blocks (the seeds of one rate) pooled into one."""
    blocks = [b for b in blocks if b is not None]
    if not blocks:
        return None
    seconds = {p: round(sum(b["seconds"][p] for b in blocks), 4) for p in PHASES}
    total = sum(seconds.values())
    steps = sum(b["num_steps"] for b in blocks)
    batch_sum = sum((b["mean_step_batch"] or 0.0) * b["num_steps"] for b in blocks)
    buckets: dict[str, int] = {}
    for b in blocks:
        for le, count in b["step_batch_le"].items():
            buckets[le] = buckets.get(le, 0) + count
    integrals = {name: sum(b.get("occupancy", {}).get("integrals", {}).get(name, 0.0) for b in blocks)
                 for name in INTEGRALS}
    return {"seconds": seconds, "share": {p: round(s / total, 4) if total else None for p, s in seconds.items()},
            "busy_share": _busy_share(seconds), "num_steps": steps, "mean_step_batch": round(batch_sum / steps, 2) if steps else None,
            "step_batch_le": buckets, "occupancy": _occupancy(integrals, total)}


def _busy_share(seconds: dict[str, float]) -> dict[str, float | None]:
    busy = sum(s for phase, s in seconds.items() if phase != "idle")
    return {p: round(s / busy, 4) if busy else None for p, s in seconds.items() if p != "idle"}
