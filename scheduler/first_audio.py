"""Where a request's time to first audio goes: its server-side TTFA cut into consecutive phases.

The router sees a request arrive and its first chunk leave; the LM lane stamps, on the stream's first chunk, when
the request reached the engine, when it was admitted (a slot and its KV extent), when its prefill ended and when
the chunk left the engine. With the router's own stamps (the chunk received, decoded) the phases are consecutive,
so they add up to the TTFA that `voxlane_ttfa_ms` observes. Every stamp is `time.monotonic()`: one clock for all
the server's processes on a host.

| phase | from | to |
| --- | --- | --- |
| `to_lm` | the router saw the request | the LM engine took it (a cloned voice's encoding, the hop to the lane) |
| `queue` | the engine took it | admitted: a slot and its KV extent (waiting for room, the step in flight, or a streaming text's first words) |
| `prefill` | admitted | its prompt prefilled (batched with the others admitted at that step) |
| `frames` | prefilled | the first chunk's frames decoded and the chunk handed to the channel |
| `channel` | the chunk left the engine | the router received it |
| `codec` | received | decoded (the routed codec lane's call; a cascade's refinement first) |
| `send` | decoded | sent to the client (resampling, encoding, the response) |

Without the LM's stamps (a lane that sent none, or out of order) the first five phases are one, `lm`.
"""
from __future__ import annotations

from dataclasses import dataclass

PHASES = ("to_lm", "queue", "prefill", "frames", "channel", "codec", "send")
LM_PHASE = "lm"  # to_lm through channel, where the LM sent no stamps


@dataclass(frozen=True)
class LMStamps:
    """The LM lane's stamps on a stream's first chunk (time.monotonic() seconds)."""

    arrival: float
    admitted: float
    prefilled: float
    emitted: float

    def as_tuple(self) -> tuple[float, float, float, float]:
        return self.arrival, self.admitted, self.prefilled, self.emitted

    @classmethod
    def from_values(cls, values) -> "LMStamps":
        """From the four values of `as_tuple`, in order; ValueError for another count."""
        values = [float(v) for v in values]
        if len(values) != 4:
            raise ValueError(f"the LM's first-chunk stamps are 4 values (arrival, admitted, prefilled, emitted), "
                             f"got {len(values)}")
        return cls(*values)


def first_audio_phases(arrival: float, lm: LMStamps | None, received: float, decoded: float,
                       sent: float) -> dict[str, float]:
    """Seconds of each phase (PHASES; with `lm` None: `lm`, `codec`, `send`) between the router's `arrival` of a
    request and its first chunk `sent`; they add up to `sent - arrival`. A stamp out of order (another host's
    clock, a lane restarted between the stamps) would make a phase negative: the LM's stamps are then left out."""
    tail = {"codec": decoded - received, "send": sent - decoded}
    if lm is not None:
        stamps = (arrival, *lm.as_tuple(), received)
        if all(a <= b for a, b in zip(stamps, stamps[1:])):
            return {phase: end - start for phase, start, end in zip(PHASES, stamps, stamps[1:])} | tail
    return {LM_PHASE: received - arrival} | tail
