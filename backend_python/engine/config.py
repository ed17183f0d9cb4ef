"""The LM engine's settings: rendered into, and parsed from, the LM lane's config.pbtxt parameters.

Torch-free, so `voxlane serve` can build and render it without loading the model stack.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping

from protocol.settings import read_settings
from scheduler import SchedulerConfig


class KVLayout(enum.Enum):
    POOLED = "pooled"  # one pool of KV positions; each stream an extent sized to what it can write
    STATIC = "static"  # a row of max_seq_len positions per slot (the layout before pooling)


# rendered into config.pbtxt (codec_left_context_frames comes from the model family)
_RENDERED = ("max_slots", "max_batch", "max_seq_len", "max_queued", "kv_layout", "kv_cache_gb", "kv_block_size",
             "overlap_min_rows")
# a parameter that, where present, replaces the family's codec lookahead (`voxlane serve --codec-lookahead-frames`)
LOOKAHEAD_OVERRIDE = "codec_lookahead_frames"


@dataclass(frozen=True)
class EngineConfig:
    """Resident streams, step rows, KV memory, sequence length and queue limit of the LM lane, plus its
    scheduler settings.

    A stream holds a slot (and its KV extent) from admission to its end, paused on its listener or not;
    a decode step runs at most `max_batch` of the slots' streams (scheduler/pacing.py picks them). So
    `max_slots` and the KV memory bound the live streams, and `max_batch` bounds a step.
    """

    max_slots: int = 256  # resident streams
    max_batch: int = 128  # rows of one decode step (CUDA graph buckets up to it)
    max_seq_len: int = 2048  # positions one stream may use (prompt tokens + frames)
    max_queued: int = 128  # requests waiting for a slot or KV memory; beyond it new ones are refused (overloaded)
    kv_layout: KVLayout = KVLayout.POOLED
    kv_cache_gb: float = 0.0  # the KV pool's size; 0: auto (engine/kv_memory.py)
    kv_block_size: int = 16  # positions per KV block (extents are whole blocks)
    codec_left_context_frames: int = 25
    codec_lookahead_frames: int = 0  # a chunk waits for this many frames after it (models/base.py CodecWindowing)
    codec_overlap_frames: int = 0  # of those, frames of audio cross-faded into the next chunk
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)  # chunking and admission
    overlap_steps: bool | None = None  # launch step t+1 before reading step t's codes; None: on CUDA only
    # overlapped, a step of fewer rows than this is read before the next is launched: a request that arrives
    # meanwhile is prefilled at once instead of after a step already queued (its TTFA a frame shorter); at low load
    # the streams are far ahead of their listeners and lose nothing. 1: every step overlapped.
    overlap_min_rows: int = 8
    num_delay_steps: int = 0  # steps a stream runs past its frames: its family's SpeechLM.num_delay_steps

    def __post_init__(self) -> None:
        if self.max_slots < 1 or self.max_batch < 1:
            raise ValueError(f"max_slots and max_batch must be >= 1, got {self.max_slots}, {self.max_batch}")
        if not self.kv_cache_gb >= 0 or self.kv_block_size < 1:
            raise ValueError(f"kv_cache_gb must be >= 0 and kv_block_size >= 1, got {self.kv_cache_gb}, "
                             f"{self.kv_block_size}")
        if self.max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {self.max_queued}")
        if self.max_seq_len < 16:
            raise ValueError(f"max_seq_len must be >= 16, got {self.max_seq_len}")
        if min(self.codec_left_context_frames, self.codec_lookahead_frames, self.codec_overlap_frames) < 0:
            raise ValueError("codec context, lookahead and overlap frames must be >= 0")
        if self.codec_overlap_frames > self.codec_lookahead_frames:
            raise ValueError("codec_overlap_frames must not exceed codec_lookahead_frames")
        if self.num_delay_steps < 0:
            raise ValueError(f"num_delay_steps must be >= 0, got {self.num_delay_steps}")
        if self.overlap_min_rows < 1:
            raise ValueError(f"overlap_min_rows must be >= 1, got {self.overlap_min_rows}")

    def length_error(self, needed: int, num_prompt_tokens: int, num_frames: int, what: str = "request") -> str | None:
        """Why a prompt and its frames would not fit one stream's `max_seq_len` (`what`: the request, or its
        text segment), or None when they fit; `needed`: the KV positions they write, as the model counts them
        (`SpeechLM.kv_positions_for`: an interleaved model writes its input's frames too, a delayed one its delay
        steps). One check for the LM lane, which refuses such a request as bad input before it queues, and the
        engine, which ends it at admission if one reaches it."""
        if needed <= self.max_seq_len:
            return None
        delay = f" + {self.num_delay_steps} codebook delay steps" if self.num_delay_steps else ""
        return (f"{what} needs {needed} positions (prompt {num_prompt_tokens} tokens + {num_frames} frames{delay}) "
                f"but the server's max_seq_len is {self.max_seq_len}")

    @classmethod
    def from_parameters(cls, params: Mapping[str, str], codec_windowing, num_delay_steps: int = 0) -> "EngineConfig":
        """From the LM model's config.pbtxt parameters (strings); absent keys keep the defaults.
        `codec_windowing`: the model family's (registry.codec_windowing), or its left context frames alone;
        `num_delay_steps`: the loaded model's (SpeechLM.num_delay_steps). A `codec_lookahead_frames` parameter
        replaces the family's lookahead (its overlap shrinks with it): fewer frames of right context for a
        non-causal decoder, a chunk sooner, its last samples an approximation of a full decode."""
        if isinstance(codec_windowing, int):
            window = {"codec_left_context_frames": codec_windowing}
        else:
            window = {"codec_left_context_frames": codec_windowing.left_context_frames,
                      "codec_lookahead_frames": codec_windowing.lookahead_frames,
                      "codec_overlap_frames": codec_windowing.overlap_frames}
        if params.get(LOOKAHEAD_OVERRIDE, "").strip():
            window.update(_lookahead_override(params[LOOKAHEAD_OVERRIDE], window.get("codec_overlap_frames", 0)))
        given = {**window, "num_delay_steps": num_delay_steps,
                 "scheduler": SchedulerConfig.from_dict(params, ignore_unknown=True)}
        return read_settings(cls, params, keys={key: key for key in _RENDERED}, given=given, ignore_unknown=True,
                             what="engine parameter")

    def to_parameters(self) -> dict[str, str]:
        """The parameters `from_parameters` reads: the sizes and every scheduler field."""
        return {**{key: _render(getattr(self, key)) for key in _RENDERED}, **self.scheduler.to_parameters()}


def _lookahead_override(text: str, overlap: int) -> dict[str, int]:
    try:
        lookahead = int(text)
    except ValueError:
        raise ValueError(f"bad engine parameter: codec_lookahead_frames {text!r} is not an integer") from None
    return {"codec_lookahead_frames": lookahead, "codec_overlap_frames": min(overlap, max(lookahead, 0))}


def _render(value) -> str:
    return value.value if isinstance(value, enum.Enum) else f"{value:g}" if isinstance(value, float) else str(value)
