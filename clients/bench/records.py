"""Per-request records and what they mean for a listener: TTFA, stalls, SLO.

Times are seconds on the client's monotonic clock, relative to the start of the run.
Playback starts when the first chunk arrives and plays chunks back to back; a chunk that arrives
after the audio before it has finished playing is a stall, and playback resumes when it arrives.

A request whose text streams in pieces (`--text-rate`) is judged as the server's work: a stall whose
chunk needed text not yet sent by its deadline is the text's (no server could have met it), and its
TTFA counts, for the SLO, from when the text of its first chunk had been sent (text_pace.py). A request whose
input audio streams in (`--audio-in-rate`) alike, with the input in place of the text (audio_pace.py), and
each chunk's algorithmic latency: its arrival less when the input it answers had been sent.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from clients.bench.audio_pace import input_sent_by
from clients.bench.text_pace import text_sent_by
from protocol.chunks import ChunkPlan, ChunkSizes

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
    piece_sent_s: tuple[float, ...] = ()  # streamed text: when each piece went out (0: the first request)
    text_closed_s: float | None = None  # streamed text: when sequence_end went out (None: never)
    # streamed input audio: the input frames sent once each request of `piece_sent_s` was out (cumulative)
    piece_frames: tuple[float, ...] = ()

    @property
    def is_text_stream(self) -> bool:
        """A session of pieces: text, or input audio (`is_audio_in`)."""
        return bool(self.piece_sent_s)

    @property
    def is_audio_in(self) -> bool:
        return bool(self.piece_frames)

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
        return cls(**{**data, "chunks": tuple(Chunk(**c) for c in data["chunks"]),
                      "piece_sent_s": tuple(data.get("piece_sent_s", ())),
                      "piece_frames": tuple(data.get("piece_frames", ()))})


@dataclass(frozen=True)
class Slo:
    ttfa_s: float = 0.2  # playback starts within this of sending (streamed text: of sending what it needs)
    chunking: ChunkSizes = field(default_factory=ChunkSizes)  # the server's: a chunk's frames

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
    text_stalled_chunks: tuple[int, ...] = ()  # of those, late because their text was sent after the deadline
    # from when the first chunk's text had been sent (whole text: = ttfa_s); 0 when it came before that
    # (the model had its tokens sooner than the client's count of them says)
    server_ttfa_s: float | None = None
    # streamed input audio: each chunk's arrival less when the input it answers had been sent (audio_pace.py)
    algorithmic_latency_s: tuple[float, ...] = ()

    @property
    def num_text_stalls(self) -> int:
        return len(self.text_stalled_chunks)

    @property
    def num_server_stalls(self) -> int:
        return self.num_stalls - self.num_text_stalls


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
    text_late = text_stalls(record, late, slo.chunking)
    server_ttfa = None if first is None else max(0.0, first - text_ready_s(record, record.chunks[0].index,
                                                                            slo.chunking))
    is_complete = record.error is None and record.done_s is not None
    meets = (is_complete and server_ttfa is not None and server_ttfa <= slo.ttfa_s + ON_TIME_TOLERANCE_S
             and len(late) == len(text_late))
    latency = tuple(c.arrival_s - text_ready_s(record, c.index, slo.chunking) for c in record.chunks) \
        if record.is_audio_in else ()
    return Outcome(ttfa_s=ttfa, num_stalls=len(late), stall_s=sum(w for _, w in late), is_complete=is_complete,
                   meets_slo=meets, stalled_chunks=tuple(i for i, _ in late), text_stalled_chunks=text_late,
                   server_ttfa_s=server_ttfa, algorithmic_latency_s=latency)


def text_ready_s(record: RequestRecord, chunk_index: int, chunking: ChunkSizes) -> float:
    """When the text chunk `chunk_index` needs had been sent: the request's start for a whole text."""
    if not record.is_text_stream:
        return record.sent_s
    end_frame = ChunkPlan(chunking).end(chunk_index)
    if record.is_audio_in:
        return max(record.sent_s, input_sent_by(record.piece_sent_s, record.piece_frames, record.text_closed_s,
                                                end_frame))
    return max(record.sent_s, text_sent_by(record.piece_sent_s, record.text_closed_s, end_frame))


def text_stalls(record: RequestRecord, late: list[tuple[int, float]], chunking: ChunkSizes) -> tuple[int, ...]:
    """The late chunks (`stalls`' answer) whose text was sent after their deadline (arrival less the wait)."""
    if not record.is_text_stream:
        return ()
    arrival = {c.index: c.arrival_s for c in record.chunks}
    return tuple(i for i, wait in late
                 if text_ready_s(record, i, chunking) > arrival[i] - wait + ON_TIME_TOLERANCE_S)
