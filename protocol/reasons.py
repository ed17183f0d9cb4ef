"""Why a stream ended, as a value that travels beside its message.

Inside the server an ending is an `Ended(reason, message)` value; it crosses a process boundary
either pickled (the chunk channel) or encoded in a Triton error message (`wire.py`). Nothing reads
the message to learn the reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class EndReason(str, Enum):
    """Why a stream ended. The values are the codes of the wire form (`wire.py`)."""

    DONE = "done"  # every chunk was sent
    CANCELLED = "cancelled"  # the client went away or cancelled
    REFUSED_BAD_INPUT = "bad_input"  # the request is wrong: retrying it unchanged fails again
    OVERLOADED = "overloaded"  # too many requests wait for the LM lane: retry later or elsewhere
    LANE_DOWN = "lane_down"  # a lane's process died and is out of service: retry elsewhere
    INTERNAL = "internal"  # a failure inside the server (a codec call raised, a bug)

    @property
    def is_error(self) -> bool:
        return self not in (EndReason.DONE, EndReason.CANCELLED)

    @property
    def is_retryable_elsewhere(self) -> bool:
        """Another server (or this one later) may well serve the same request."""
        return self in (EndReason.OVERLOADED, EndReason.LANE_DOWN)


@dataclass(frozen=True)
class Ended:
    """How one stream ended: a reason, the human message, and for bad input the input it names."""

    reason: EndReason
    message: str = ""
    param: str | None = None  # REFUSED_BAD_INPUT: the request input at fault (a tensor name), if one is
    code: str | None = None  # REFUSED_BAD_INPUT: a finer machine-readable code (e.g. "unknown_voice")

    @property
    def is_error(self) -> bool:
        return self.reason.is_error


DONE = Ended(EndReason.DONE)
CANCELLED_BY_CLIENT = Ended(EndReason.CANCELLED, "cancelled by the client")
# a stream cut short because its server stops (SIGTERM) or its LM lane is unloaded: the request itself is
# fine, so it is LANE_DOWN (503, retried elsewhere), not INTERNAL
SHUTTING_DOWN = Ended(EndReason.LANE_DOWN, "the server is shutting down (or its LM lane was unloaded); "
                                           "retry on another server")
# the same, said by the router as it unloads: each live stream gets it before the router's stub exits
ROUTER_STOPPING = Ended(EndReason.LANE_DOWN, "the server is shutting down (or vox_ensemble was unloaded); "
                                             "retry on another server")
