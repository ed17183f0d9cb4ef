"""Backpressure: how far a stream's audio may run ahead of what its client has taken.

Triton's gRPC frontend tells a backend nothing of what its client has read: every response is queued
in `tritonserver` until the client takes it. So "taken" is what the client says it took (it acks
chunks: `client_acks`), or, for a client that says nothing, the audio real-time playback has used
up since the first chunk left. A stream whose emitted audio is `max_unread_s` or more ahead of that
is paused in the LM lane (it keeps its slot; the other streams go on) until its client catches up.

Both sides use this: the LM's loop (in frames, to pause and resume rows) and the router (in
seconds of audio, to know when the LM is paused on its client and when that client has stalled).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from protocol.settings import read_settings


@dataclass
class UnreadBound:
    """One stream's bound, in frames of the model (`frame_rate` per second of audio)."""

    max_unread_frames: int  # 0: unbounded
    frame_rate: float
    acks: bool  # taken = what the client acked; else real-time playback from the first chunk
    taken_frames: int = 0  # acked frames (acks only), raised by the router's updates

    def taken(self, now: float, t_first: float | None) -> float:
        """Frames the client has taken by `now` (`t_first`: when the stream's first chunk left)."""
        if self.acks:
            return self.taken_frames
        return 0.0 if t_first is None else (now - t_first) * self.frame_rate

    def is_paused(self, emitted_frames: int, now: float, t_first: float | None) -> bool:
        """Whether the stream must not be decoded now: its emitted frames are the bound ahead."""
        if self.max_unread_frames <= 0:
            return False
        return emitted_frames - self.taken(now, t_first) >= self.max_unread_frames

    def resumes_at(self, emitted_frames: int, t_first: float | None) -> float | None:
        """When a paused stream may go on by itself (playback), or None: it waits for an ack."""
        if self.acks or t_first is None:
            return None
        return t_first + (emitted_frames - self.max_unread_frames + 1) / self.frame_rate  # one frame under

    def on_taken(self, frames: int) -> None:
        """The router's update: the client has taken `frames` frames (it never goes back)."""
        self.taken_frames = max(self.taken_frames, frames)


class AckedFlow:
    """The router's side of an acking stream: what it sent, what was acked, what the LM was told.

    Seconds of audio for the client's view, frames (the LM's chunk spans) for the LM's updates.
    """

    def __init__(self, max_unread_s: float, stall_timeout_s: float) -> None:
        self.max_unread_s, self.stall_timeout_s = max_unread_s, stall_timeout_s
        self.sent_s = self.acked_s = self.told_s = 0.0
        self.acked_frames = self.told_frames = 0  # `told`: the last update the LM was sent
        self._last_ack: float | None = None
        self._unacked: dict[int, tuple[float, int, float]] = {}  # index -> (end of audio, end frame, sent at)

    def on_sent(self, index: int, duration_s: float, end_frame: int, now: float) -> None:
        self.sent_s += duration_s
        self._unacked[index] = (self.sent_s, end_frame, now)

    def on_ack(self, index: int, now: float) -> bool:
        """The client took every chunk up to `index`; True when the LM should be told (`told_frames`)."""
        acked = [i for i in self._unacked if i <= index]
        if not acked:
            return False  # a repeat, or ahead of what was sent: nothing new
        self.acked_s, self.acked_frames, _ = self._unacked[max(acked)]
        for i in acked:
            del self._unacked[i]
        self._last_ack = now
        # tell the LM at once when it may be paused on this client, else in steps of a quarter bound
        if self.is_lm_paused or self.acked_s - self.told_s >= self.max_unread_s / 4:
            self.told_s, self.told_frames = self.acked_s, self.acked_frames
            return True
        return False

    @property
    def unread_s(self) -> float:
        return self.sent_s - self.acked_s

    @property
    def is_lm_paused(self) -> bool:
        """Whether what was sent is the bound ahead of what the LM was last told was taken."""
        return self.max_unread_s > 0 and self.sent_s - self.told_s >= self.max_unread_s

    def stalled_s(self, now: float) -> float:
        """How long audio has waited for the client with nothing taken (0 when nothing waits)."""
        if not self._unacked:
            return 0.0
        oldest = min(sent_at for _, _, sent_at in self._unacked.values())
        return now - max(oldest, self._last_ack if self._last_ack is not None else oldest)

    def is_stalled(self, now: float) -> bool:
        return self.stall_timeout_s > 0 and self.stalled_s(now) >= self.stall_timeout_s


@dataclass(frozen=True)
class FlowConfig:
    """The router's backpressure settings (its config.pbtxt parameters of the same names)."""

    max_unread_audio_s: float = 5.0  # audio emitted but not taken before the LM pauses a stream; 0: unbounded
    stall_timeout_s: float = 30.0  # an acking client that takes nothing this long is cancelled; 0: never

    def __post_init__(self) -> None:
        if not self.max_unread_audio_s >= 0 or not self.stall_timeout_s >= 0:
            raise ValueError(f"max_unread_audio_s and stall_timeout_s must be >= 0, got {self}")

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> "FlowConfig":
        return read_settings(cls, params, ignore_unknown=True, what="backpressure parameter")

    def to_parameters(self) -> dict[str, str]:
        return {f.name: f"{getattr(self, f.name):g}" for f in fields(self)}
