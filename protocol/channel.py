"""The kinds of message on the router's chunk channel (backend_python/stub_common/chunk_channel.py).

Each message is `(stream_id, kind, payload)`: CHUNK carries a dict of the chunk's arrays by output
name (`tokens`, `context_frames`, `chunk_index`, `start_frame`, `is_last`, `lookahead_frames`,
`overlap_frames`, for a codec with a condition `codec_condition`, and in timeshare `audio`, `sample_rate`); END
carries the stream's `Ended` value and is its last message.
"""
from __future__ import annotations

from enum import Enum


class ChannelKind(str, Enum):
    CHUNK = "chunk"
    END = "end"
