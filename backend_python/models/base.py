"""The two interfaces every SpeechLM family implements: an LM that emits frames
of codebook tokens, and a codec that turns frames into waveform.

The engine (backend_python/engine/) drives an `SpeechLM` through named phases:
`encode_prompt` (CPU, per request) -> `prefill` (one request into one KV slot)
-> `decode` (one frame for every live slot in one batched step) -> `release`.
A family that clones voices also has a `VoiceEncoder`: reference audio in, a `VoiceReference`'s tensors
out, which `encode_prompt` takes beside the text. The codec runner drives a `Codec` with stateless windows: a chunk's frames plus
a few frames of left context from the same request, new samples out. A codec
that declares `supports_streaming_state` can also decode only new frames from a
per-request `CodecStreamState` (models/codec_stream.py), batched over requests.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch
from torch import nn

from backend_python.models.codec_stream import (CodecStreamState, StreamCarry, StreamWindow, split_states,
                                                stack_states)
from backend_python.models.delay_pattern import DelayPattern
from backend_python.models.input_feed import InputFeed
from protocol.tensors import REQUEST_INPUTS
from protocol.voices import VoiceSpec

SAMPLING_SPECS = {name: REQUEST_INPUTS[name] for name in ("temperature", "top_k", "top_p", "repetition_penalty")}


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings (codebook 0 and the sub-codebooks alike): the defaults and ranges of
    the request's tensors of the same names (protocol/tensors.py states them, once). The seed is not one
    of them: the LM lane seeds each stream's generator."""

    temperature: float = SAMPLING_SPECS["temperature"].default  # 0 is greedy
    top_k: int = SAMPLING_SPECS["top_k"].default  # 0 disables it
    top_p: float = SAMPLING_SPECS["top_p"].default
    repetition_penalty: float = SAMPLING_SPECS["repetition_penalty"].default

    def __post_init__(self) -> None:
        for name, spec in SAMPLING_SPECS.items():
            value = getattr(self, name)
            if not (spec.bound_at_dtype(spec.low) <= value <= spec.bound_at_dtype(spec.high)):
                raise ValueError(f"{name} must be in [{spec.low:g}, {spec.high:g}], got {value}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


AUTO_LANGUAGE = "auto"  # a request's `language` that leaves it to the model


@dataclass(frozen=True)
class PromptOptions:
    """A request's settings of its prompt beside the text and the voice. A family takes those its `SpeechLM`
    declares (`languages`, `supports_instructions`, `supports_text_first`); the LM lane refuses the others by
    name before `encode_prompt`, and passes `options` only to a family with `takes_prompt_options`."""

    language: str | None = None  # lowercase, e.g. "english", or AUTO_LANGUAGE; None: the model's own setting
    instructions: str = ""  # a style or emotion text (Qwen3-TTS's instruct); "": none
    is_text_first: bool = False  # the whole text in the prefill, not one text token per frame (non_streaming_mode)


@dataclass
class Prompt:
    """Everything `prefill` needs for one request, built on CPU by `encode_prompt`.

    `tensors` is family-specific (e.g. text ids, speaker id); `num_tokens` is
    the prefill length, which the engine checks against the KV capacity. A
    streaming-text request's prompt also holds its live `text`: the model reads
    the text tokens that arrive after the prefill from it.
    """

    num_tokens: int
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    text: "TextFeed | None" = None
    input: "InputFeed | None" = None  # an interleaved model's input frames, more to come until it is closed


class TextFeed(ABC):
    """The text of a streaming-text request as its family tokenises it: pieces in, the prefill prompt
    once the text it needs is final, later text tokens as they become final (the model reads them).

    Only the engine's thread touches it. The tokens must equal those of the whole text in one
    request, whatever the pieces (models/incremental_tokenizer.py).
    """

    is_segmented = False  # True: spoken segment by segment, each its own prompt (models/text_segments.py)

    @abstractmethod
    def append(self, text: str) -> None:
        """More text (possibly empty)."""

    @abstractmethod
    def close(self) -> None:
        """No more text; raises ValueError when the whole text is empty."""

    @property
    @abstractmethod
    def is_closed(self) -> bool: ...

    @property
    @abstractmethod
    def num_prompt_tokens(self) -> int:
        """The prefill length, known before the text is."""

    @abstractmethod
    def prompt(self) -> Prompt | None:
        """The prefill prompt once the text it needs is final; None until then."""


@dataclass
class DecodeBatch:
    """One decode step over the live slots; row b belongs to `slots[b]`."""

    slots: list[int]
    sampling: list[SamplingParams]
    generators: list[torch.Generator]  # one per request, seeded from its `seed`
    ignore_eos: list[bool]


@dataclass
class VoiceReference:
    """A voice to clone, as the family's `VoiceEncoder` made it from reference audio.

    `tensors` is family-specific, on the CPU (Qwen3-TTS: "speaker_embedding" [D] float32 and, in-context,
    "ref_codes" [T, K] int64); `text` is the reference audio's transcript, for a family that puts it in the
    prompt (None: the speaker embedding alone).
    """

    tensors: dict[str, torch.Tensor]
    text: str | None = None


class VoiceEncoder(nn.Module, ABC):
    """Reference audio -> the tensors of a `VoiceReference`, batched over requests.

    `reference_tensors` declares what `encode` returns, name -> (Triton dtype, shape with -1 for a
    variable axis), e.g. {"speaker_embedding": ("FP32", [D]), "ref_codes": ("INT32", [-1, K])}, so the
    serving glue can declare its tensors; a name may be missing from an x-vector-only result.
    """

    reference_tensors: dict[str, tuple[str, list[int]]]
    code_limits: tuple[int, ...] = ()  # `ref_codes`' exclusive bound per codebook (its quantizers' sizes)
    in_context_needs_text: bool = True  # an in-context voice's prompt holds its transcript (TontaubeV1's does not)

    def voice_spec(self) -> VoiceSpec:
        """What this encoder's voices hold, which a stored or imported voice must match (protocol/voices.py)."""
        return VoiceSpec({name: tuple(shape) for name, (_, shape) in self.reference_tensors.items()},
                         tuple(self.code_limits), self.in_context_needs_text)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    @abstractmethod
    def sample_rate(self) -> int:
        """The rate of the audio `encode` takes."""

    @abstractmethod
    def encode(self, audio: list[torch.Tensor], x_vector_only: list[bool]) -> list[dict[str, torch.Tensor]]:
        """audio[i]: [N_i] float32 mono in [-1, 1] at `sample_rate` -> each request's tensors (on the CPU);
        x_vector_only[i] leaves out what only in-context cloning needs (the reference's codes)."""

    @staticmethod
    def check_flags(audio: list[torch.Tensor], x_vector_only: list[bool]) -> None:
        """`encode`'s arguments pair up: one flag per audio."""
        if len(audio) != len(x_vector_only):
            raise ValueError(f"need one x_vector_only flag per audio, got {len(x_vector_only)} for {len(audio)}")

    def encode_codes(self, audio: list[torch.Tensor]) -> list[torch.Tensor]:
        """audio[i]: [N_i] float32 at `sample_rate`, a chunk of a stream's input audio (an interleaved model's:
        audio in while audio goes out) -> its codes [T_i, K] (on the CPU), nothing of the speaker. This default
        encodes each in context and keeps its `ref_codes`; an encoder whose codes need not the speaker network
        codes them alone, batched (Qwen3TTSVoiceEncoder)."""
        return [result["ref_codes"] for result in self.encode(audio, [False] * len(audio))]


class SpeechLM(nn.Module, ABC):
    """An autoregressive backbone that emits one frame of `num_codebooks` tokens per step.

    The model owns its batch slots: a KV cache of `num_slots` rows (extents of one pool) and the
    per-slot state a family needs between steps (next-token logits, last hidden
    state, remaining text). Slot ids are plain ints handed out by the engine.
    """

    @property
    @abstractmethod
    def num_codebooks(self) -> int: ...

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    @abstractmethod
    def frame_rate(self) -> float:
        """Frames per second of audio."""

    @property
    @abstractmethod
    def voices(self) -> tuple[str, ...]:
        """Voice names accepted by `encode_prompt`; empty when the family has none."""

    supports_reference = False  # True where `encode_prompt` can clone a voice from a `VoiceReference`

    # What a request's PromptOptions may set. `languages`: the names `language` may give besides "auto"
    # (lowercase); a family that takes no language (`takes_prompt_options` False) lists the one it speaks,
    # which then changes nothing. `takes_prompt_options`: `encode_prompt`, `open_text` and `encode_segment`
    # take an `options` keyword.
    languages: tuple[str, ...] = ()
    supports_instructions = False
    supports_text_first = False
    takes_prompt_options = False

    @abstractmethod
    def encode_prompt(self, text: str, voice: str | None, reference: VoiceReference | None = None) -> Prompt:
        """Tokenize and build the prompt; raises ValueError naming an unknown voice, or a reference the
        model cannot use."""

    frames_per_step = 1  # > 1: `decode` emits several frames per step (multi-token prediction heads)
    # Set: `decode` emits codebook j of frame k at step k + codebook_delays[j] (models/delay_pattern.py), one row
    # of K codes per step, and reports the end of speech on codebook 0; the engine assembles complete frames and
    # runs the steps that close the last codebooks. None: every step's codes are one whole frame.
    codebook_delays: tuple[int, ...] | None = None

    @property
    def delay_pattern(self) -> DelayPattern | None:
        return None if self.codebook_delays is None else DelayPattern(self.codebook_delays)

    @property
    def num_delay_steps(self) -> int:
        """Decode steps a stream runs past its frames: its largest codebook delay (0 undelayed)."""
        pattern = self.delay_pattern
        return 0 if pattern is None else pattern.max_delay

    def codec_condition(self, prompt: Prompt) -> torch.Tensor | None:
        """The stream's condition vector for a codec with `condition_dim` > 0 ([D] float32, cpu): a flow-matching
        decoder's speaker embedding (a preset voice's, or the reference's). None: the codec's default."""
        return None

    def refine_context(self, prompt: Prompt) -> torch.Tensor | None:
        """A cascade's stream context for its refinement lane ([n] int32, cpu: what its refiners read besides
        the chunk's codes; its layout is the family's), or None: the family's chunks go to the codec as they are
        (every family but a cascade: TontaubeV1)."""
        return None

    def codec_prefix(self, prompt: Prompt) -> torch.Tensor | None:
        """Frames the codec decodes before the stream's first as its left context, or None: an in-context
        clone's reference codes, where the family's reference decodes the answer after them (Qwen3-TTS)."""
        return None

    def check_no_reference(self, reference: VoiceReference | None) -> None:
        """For a model without voice cloning: a reference is a ValueError that says so."""
        if reference is not None:
            raise ValueError(f"{type(self).__name__} cannot clone a voice: it takes no reference audio")

    # True where `prefill` reuses a cached voice prompt prefix (models/prompt_cache.py): the LM lane then gives the
    # model its `prompt_cache` (a PromptCache, or None for none)
    caches_prompts = False

    def forget_voice(self, reference: VoiceReference) -> int:
        """Drop what the model keeps of a cloned voice (its cached prompt prefixes) -> how many entries went."""
        return 0

    supports_streaming_text = False  # True where the prompt needs only the text's start (the text trails)

    def open_text(self, voice: str | None) -> TextFeed:
        """A streaming-text request's text, empty so far; raises ValueError naming an unknown voice. A family
        whose prompt needs the whole text does not: it is spoken segment by segment (text_segments.py)."""
        raise NotImplementedError(f"{type(self).__name__} needs the whole text in one prompt")

    def encode_segment(self, text: str, voice: str | None, context,
                       reference: VoiceReference | None = None, **options) -> Prompt:
        """One segment of a streamed text, or of a whole text too long for one prompt; `context` (a
        text_segments.SegmentContext, or None) is the segment spoken before it, for a family that can
        condition on it. Default: the segment alone, same voice (the same reference and `options` in each)."""
        return self.encode_prompt(text, voice, reference=reference, **options)

    def is_waiting_for_text(self, slot: int) -> bool:
        """Whether `slot`'s next frame needs a text token that has not arrived (its text is still open)."""
        return False

    # An interleaved model listens while it speaks: its prompt holds an `InputFeed` (models/input_feed.py) the
    # engine appends the stream's input frames to as they come; it reads them in chunks of `input_chunk_frames`
    # between its own chunks of output, and ends the stream once its output has caught up with a closed input.
    takes_input = False
    input_chunk_frames = 0

    def is_waiting_for_input(self, slot: int) -> bool:
        """Whether `slot`'s next frame needs input frames that have not arrived (its input is still open)."""
        return False

    @abstractmethod
    def allocate_slots(self, num_slots: int, max_seq_len: int, max_batch: int | None = None,
                       kv_positions: int | None = None) -> None:
        """Allocate the KV cache and per-slot state on the model's device: `num_slots` resident streams, decode
        steps of up to `max_batch` rows (None: num_slots), and a KV pool of `kv_positions` shared positions
        (None: a static row of max_seq_len per slot)."""

    def kv_positions_for(self, num_prompt_tokens: int, num_frames: int) -> int:
        """KV positions a stream of this prompt and up to num_frames frames writes: its extent in a pooled cache."""
        return num_prompt_tokens + num_frames + 1 + self.num_delay_steps

    def place(self, slot: int, start: int, num_positions: int) -> None:
        """`slot`'s stream owns KV positions start .. start + num_positions - 1 of a pooled cache."""

    def kv_bytes_per_position(self) -> int:
        """Bytes one KV position takes (0: a model whose memory does not grow with its streams)."""
        return 0

    @abstractmethod
    def prefill(self, slot: int, prompt: Prompt) -> int | None:
        """Run the prompt into `slot`'s KV cache; afterwards `decode` can emit frame 0. -> the positions it ran,
        where a cached prompt prefix filled some (`caches_prompts`); None: all of the prompt's tokens."""

    def prefill_batch(self, slots: list[int], prompts: list[Prompt]) -> int:
        """Prefill several prompts, prompts[i] into slots[i]; a family may batch them (one by one here).
        On an error no slot of the call counts as prefilled: the engine retries them one by one.
        -> the positions run (the engine's prefill timing counts them): the prompts' tokens, less those a cached
        prompt prefix filled."""
        num_run = 0
        for slot, prompt in zip(slots, prompts):
            ran = self.prefill(slot, prompt)
            num_run += prompt.num_tokens if ran is None else ran
        return num_run

    @abstractmethod
    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Emit one frame for every slot of the batch.

        Returns (codes: [B, K] int64 in [0, codebook_size), is_eos: [B] bool). A
        row with is_eos has no audio frame (its codes are meaningless); the
        engine then releases the slot. Rows with ignore_eos never stop here.
        With `frames_per_step` M > 1: (codes [B, M, K], is_eos [B, M]); a row's
        frames after its first end-of-speech are ignored. With `codebook_delays`: one delayed row per slot,
        codes [B, K] (padding where a codebook has no frame yet or any more), is_eos [B] once codebook 0 has
        ended; the engine goes on stepping the slot until its last codebook closes.
        """

    @abstractmethod
    def release(self, slot: int) -> None:
        """Forget a slot's state; its KV rows are overwritten by the next prefill."""


@dataclass(frozen=True)
class CodecWindowing:
    """How a codec's chunks are cut, in frames: left context before a chunk's new frames, lookahead after them,
    and the overlap (audio past the new frames, cross-faded into the next chunk). What the LM lane reads off a
    model family without loading its codec (registry.codec_windowing)."""

    left_context_frames: int
    lookahead_frames: int = 0
    overlap_frames: int = 0

    def __post_init__(self) -> None:
        if min(self.left_context_frames, self.lookahead_frames, self.overlap_frames) < 0:
            raise ValueError(f"codec windowing frames must be >= 0: {self}")
        if self.overlap_frames > self.lookahead_frames:
            raise ValueError(f"overlap_frames ({self.overlap_frames}) must not exceed lookahead_frames "
                             f"({self.lookahead_frames}): the overlap is decoded from the lookahead")


@dataclass(frozen=True)
class CodecShape:
    """What the engine, the lanes and the router read off a codec: its frames and its audio."""

    num_codebooks: int  # K, codes per frame
    codebook_size: int  # valid codes are [0, codebook_size)
    sample_rate: int
    samples_per_frame: int
    left_context_frames: int  # frames of left context a window needs to match a full decode (tolerance pinned by tests)
    # frames after a chunk's new ones that its window must hold (until the stream ends) for the new frames' audio to
    # match a full decode: a chunk is held back until they exist (a non-causal decoder: a flow-matching one, SNAC)
    lookahead_frames: int = 0
    # frames of audio past a chunk's new ones, decoded from its lookahead, that are cross-faded into the start of
    # the stream's next chunk (a vocoder whose excitation does not carry across windows); <= lookahead_frames
    overlap_frames: int = 0

    def __post_init__(self) -> None:
        if min(self.num_codebooks, self.codebook_size, self.sample_rate, self.samples_per_frame) < 1:
            raise ValueError(f"codebooks, codebook size, sample rate and samples per frame must be >= 1: {self}")
        if self.left_context_frames < 0:
            raise ValueError(f"left_context_frames must be >= 0, got {self.left_context_frames}")
        if not 0 <= self.overlap_frames <= self.lookahead_frames:
            raise ValueError(f"need 0 <= overlap_frames <= lookahead_frames, got {self.overlap_frames} and "
                             f"{self.lookahead_frames}")

    @property
    def window(self) -> "CodecWindowing":
        return CodecWindowing(self.left_context_frames, self.lookahead_frames, self.overlap_frames)

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.samples_per_frame


class Codec(nn.Module, ABC):
    """A causal neural codec decoder: frames of K codebook tokens -> mono waveform.

    Each codec sets `shape` in its constructor; the properties below read it.
    """

    shape: CodecShape

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def num_codebooks(self) -> int:
        return self.shape.num_codebooks

    @property
    def codebook_size(self) -> int:
        """Valid codes are [0, codebook_size)."""
        return self.shape.codebook_size

    @property
    def sample_rate(self) -> int:
        return self.shape.sample_rate

    @property
    def samples_per_frame(self) -> int:
        return self.shape.samples_per_frame

    @property
    def left_context_frames(self) -> int:
        """Frames of left context a window needs to match a full decode (tolerance pinned by tests)."""
        return self.shape.left_context_frames

    @property
    def lookahead_frames(self) -> int:
        return self.shape.lookahead_frames

    @property
    def overlap_frames(self) -> int:
        return self.shape.overlap_frames

    # > 0: the codec takes a per-stream condition vector of this size with every window (a flow-matching
    # decoder's speaker embedding), which the LM's prompt names (`SpeechLM.codec_condition`)
    condition_dim = 0
    # True: `decode_windows` also takes `start_frames`, each window's first new frame's index in its stream (a
    # flow decoder's fixed noise and a vocoder's phase restarts are laid out by stream position)
    uses_stream_position = False

    @abstractmethod
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, T, K] int64 -> audio: [B, T * samples_per_frame] float32 in [-1, 1]."""

    supports_cuda_graphs = False  # True where `decode` is capturable (no host syncs, static shapes per call)
    # set by the lane before warm-up (`voxlane serve --codec-compile`): a codec that captures its own graphs may
    # compile their hot part with Inductor first (the flow-matching DiTs); others ignore it
    use_torch_compile = False

    def capture_graphs(self) -> bool:
        """A codec that graphs a part of its decode itself (a flow decoder's steps, where `decode` as a whole is
        not capturable) captures it here, on CUDA; True when it did. The runner calls it at warm-up."""
        return False

    def decode_windows(self, windows: list[tuple[torch.Tensor, int]],
                       conditions: list[torch.Tensor | None] | None = None) -> list[torch.Tensor]:
        """Decode several requests' windows in one batch.

        windows: (codes [T_i, K] int64, context_frames c_i) pairs; the first c_i
        frames are left context. Returns the samples of each window after its context:
        [(T_i - c_i) * samples_per_frame] float32 (a window's lookahead frames are decoded
        too; the runner keeps what the chunk needs of them). Windows are right-padded to a
        common length, which is exact because the decoder is causal. `conditions`: one
        [condition_dim] float32 per window, for a codec with `condition_dim` > 0.
        """
        self.check_conditions(windows, conditions)
        return self.new_samples(self.decode(self.pad_windows(windows)), windows)

    def check_conditions(self, windows: list, conditions: list | None) -> None:
        """A codec without a condition takes none; one with a condition takes one per window (None: its default)."""
        if conditions is None:
            return
        if len(conditions) != len(windows):
            raise ValueError(f"need one condition per window, got {len(conditions)} for {len(windows)} windows")
        if self.condition_dim == 0 and any(c is not None for c in conditions):
            raise ValueError(f"{type(self).__name__} takes no condition")
        for c in conditions:
            if c is not None and tuple(c.shape) != (self.condition_dim,):
                raise ValueError(f"a condition must be [{self.condition_dim}], got {list(c.shape)}")

    supports_streaming_state = False  # True where `decode_stream` is exact: a strictly causal decoder
    # True: the kept state covers only a causal stage behind a non-causal one (TontaubeV1: VibeVoice behind
    # DualCodec), so a chunk continued from its state still decodes a window, `state_context_frames` of left
    # context and its lookahead, through `decode_stream_windows` (not `decode_stream`); no overlap
    state_reads_windows = False
    state_context_frames = 0

    def decode_stream_windows(self, states: list[CodecStreamState | None],
                              windows: list[StreamWindow]) -> tuple[list[torch.Tensor], list[CodecStreamState | None]]:
        """A codec with `state_reads_windows`: each window's new frames' audio [num_new * samples_per_frame]
        float32, continuing `states[b]` (None: a fresh stream state at the window's start, its whole context
        decoded), in one batch where shapes allow; and each row's state after its new frames, or None where no
        next chunk can continue it (a chunk that ends off the codec's grid, or the stream's last). The input
        states are not modified."""
        raise NotImplementedError(f"{type(self).__name__} keeps no windowed streaming state")

    def new_stream_state(self) -> CodecStreamState:
        """The state of a stream before its first frame (zero tails, position 0), on the codec's device."""
        raise NotImplementedError(f"{type(self).__name__} keeps no streaming state")

    def decode_with_carry(self, codes: torch.Tensor, carry: StreamCarry) -> torch.Tensor:
        """codes: [B, T, K] int64 (right-padded) -> audio [B, T * samples_per_frame], tails read from and
        written to `carry`. Only codecs with `supports_streaming_state` implement it."""
        raise NotImplementedError(f"{type(self).__name__} keeps no streaming state")

    @torch.inference_mode()
    def decode_stream(self, states: list[CodecStreamState],
                      codes: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[CodecStreamState]]:
        """Decode each request's new frames after its state, in one batch.

        codes[b]: [T_b, K] int64, the frames right after `states[b]`'s position (rows may be at different
        positions and have different T_b). Returns each row's audio [T_b * samples_per_frame] float32
        and its state after those frames; the input states are not modified.
        """
        if len(states) != len(codes) or not states:
            raise ValueError(f"need one state per row, got {len(states)} states for {len(codes)} rows")
        carry = StreamCarry.for_rows(stack_states(states), [c.shape[0] for c in codes])
        audio = self.decode_with_carry(self.pad_windows([(c, 0) for c in codes]), carry)
        spf = self.samples_per_frame
        pieces = [audio[row, : c.shape[0] * spf] for row, c in enumerate(codes)]
        return pieces, split_states(carry.new_state, len(states))

    def pad_windows(self, windows: list[tuple[torch.Tensor, int]]) -> torch.Tensor:
        """The windows' codes right-padded with code 0 into one batch: [B, max T_i, K] int64."""
        lengths = [codes.shape[0] for codes, _ in windows]
        padded = torch.zeros(len(windows), max(lengths), self.num_codebooks, dtype=torch.long,
                             device=windows[0][0].device)
        for row, (codes, _) in enumerate(windows):
            padded[row, : codes.shape[0]] = codes
        return padded

    def new_samples(self, audio: torch.Tensor, windows: list[tuple[torch.Tensor, int]]) -> list[torch.Tensor]:
        """Each window's samples after its left context, out of a padded batch's audio [B', T' * spf]."""
        spf = self.samples_per_frame
        return [audio[row, context * spf: codes.shape[0] * spf] for row, (codes, context) in enumerate(windows)]


def to_device(values: list, device: torch.device) -> torch.Tensor:
    """A small host list as a device tensor, copied without a wait for the device (pageable memory is
    staged at once; the device reads it in stream order). `torch.tensor(values, device=cuda)` would
    synchronise with the decode step in flight, which undoes the engine's overlapped step."""
    return torch.tensor(values).to(device, non_blocking=True)
