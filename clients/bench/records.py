"""Per-request records and what they mean for a listener: TTFA, stalls, SLO.

Times are seconds on the client's monotonic clock, relative to the start of the run.
Playback starts when the first chunk arrives and plays chunks back to back; a chunk that arrives
after the audio before it has finished playing is a stall, and playback resumes when it arrives.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

# perf_counter readings are exact to well under this; a chunk this close to its deadline is on time.
ON_TIME_TOLERANCE_S = 1e-9


@dataclass(frozen=True)
class Chunk:
    index: int
    arrival_s: float
    duration_s: float  # audio seconds in the chunk
    lane: str


@dataclass(frozen=True)
class RequestRecord:
    """What the load generator saw of one request."""

    request_id: str
    utterance_id: str
    scheduled_s: float  # when the arrival process said to send it
    sent_s: float  # when the request went out
    requested_audio_s: float  # max_audio_seconds sent
    chunks: tuple[Chunk, ...] = ()
    done_s: float | None = None  # final response (or error) received
    error: str | None = None

    @property
    def first_audio_s(self) -> float | None:
        return self.chunks[0].arrival_s if self.chunks else None

    @property
    def audio_s(self) -> float:
        return sum(c.duration_s for c in self.chunks)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "RequestRecord":
        return cls(**{**data, "chunks": tuple(Chunk(**c) for c in data["chunks"])})


@dataclass(frozen=True)
class Slo:
    ttfa_s: float = 0.2  # playback starts within this of sending

    def __post_init__(self) -> None:
        if self.ttfa_s <= 0:
            raise ValueError(f"the TTFA target must be > 0, got {self.ttfa_s}")


@dataclass(frozen=True)
class Outcome:
    """One request judged against the SLO."""

    ttfa_s: float | None
    num_stalls: int
    stall_s: float
    is_complete: bool  # ended with the final flag and no error
    meets_slo: bool
    stalled_chunks: tuple[int, ...] = field(default=())


def stalls(chunks: tuple[Chunk, ...] | list[Chunk]) -> list[tuple[int, float]]:
    """(chunk index, seconds the listener waited for it) for every late chunk."""
    late = []
    playing_until = None
    for chunk in chunks:
        if playing_until is None:
            playing_until = chunk.arrival_s
        wait = chunk.arrival_s - playing_until
        if wait > ON_TIME_TOLERANCE_S:
            late.append((chunk.index, wait))
            playing_until = chunk.arrival_s
        playing_until += chunk.duration_s
    return late


def evaluate(record: RequestRecord, slo: Slo) -> Outcome:
    first = record.first_audio_s
    ttfa = None if first is None else first - record.sent_s
    late = stalls(record.chunks)
    is_complete = record.error is None and record.done_s is not None
    meets = is_complete and ttfa is not None and ttfa <= slo.ttfa_s + ON_TIME_TOLERANCE_S and not late
    return Outcome(ttfa_s=ttfa, num_stalls=len(late), stall_s=sum(w for _, w in late), is_complete=is_complete,
                   meets_slo=meets, stalled_chunks=tuple(i for i, _ in late))
