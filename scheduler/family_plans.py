"""The chunk plan a model family streams with when `voxlane serve` is given none: torch-free, so the serving
CLI reads it without loading the model stack.

Most families take the engine's default ramp (2, 4, 8, 10 frames: protocol/chunks.py). A flow-matching
codec pays for every window with its left context and lookahead, and some decode on a fixed grid:
- FlashTTS: chunks of 18 tokens from the start (no ramp); with the codec's 6 tokens of lookahead the first
  leaves once 24 tokens exist, then one every 18, as FlashTTS streams. Its DiT attends in blocks of 6 tokens,
  so chunks that start and end on that grid match a full decode best (tests/unit/test_flashtts.py).
- CosyVoice 3: a ramp from 4 up to 25 tokens (4, 8, 16, 25), CosyVoice's own token hop: a window holds
  32 tokens of context and 4 of lookahead around its new ones, so a 25-token chunk costs 2.4x its frames
  where a 10-token one costs 4.6x.
- Higgs v3 and Zonos: a non-causal DAC decoder takes 10 frames of lookahead after each chunk, so a first chunk
  must hold enough audio to outlast making the next chunk; both plans come from a measured sweep (below).
A family can also take its own MPS split of the SMs between the LM lane and the background codec lane
(`sm_shares`; most take 60/40, measured with Qwen3-TTS 1.7B): CosyVoice 3's LM steps in 2 ms and needs 25 tokens
a second per stream, while its codec runs a 22-layer DiT 10 times (twice over, for the guidance) per window,
so its codec lane takes the larger share.
A model is named by a preset or a checkpoint directory; a directory's family comes from its config.json's
`model_type` (Zonos's official config.json has none: its `prefix_conditioner` names it).
"""
from __future__ import annotations

import json
from pathlib import Path

from .chunking import ChunkingConfig

PLANS = {
    "flashtts": {"first_chunk_frames": 18, "chunk_frames": 18, "chunk_growth": None},
    # 4, 8, 16, 25: a window costs about the same from 12 tokens to 61 (BENCHMARKS.md, "Flow-matching
    # families"), so a 2-token first chunk buys 4 ms of time to first audio for a call that plays 80 ms
    "cosyvoice3": {"first_chunk_frames": 4, "chunk_frames": 25},
    # from a measured sweep on an H200 (BENCHMARKS.md, "Delay-pattern families: Figure 6 and the chunk-plan sweep"):
    # 2, 4, 8, 16, 32, 45 frames. Capacity at 90 % (TTFA <= 400 ms, no stall): first chunk 1 / 2 / 3 / 5 frames
    # 5.6 / 14.0 / 13.1 / 10.4 req/s (one frame is 40 ms of audio, gone before the next chunk and its 10 frames of
    # lookahead exist); steady chunk 25 / 45 / 64 frames 9.3 / 14.0 / 12.2 (its non-causal decoder decodes 12 frames
    # of context and 10 of lookahead around every chunk's new ones)
    "higgs_v3": {"first_chunk_frames": 2, "chunk_frames": 45},
    # the same sweep: 6, 9, 14, 21, 32, 43 frames. A chunk's audio must outlast making the next one, and a frame is
    # 11.6 ms of audio against an LM step of 5-7 ms under load, so the ramp grows by 1.5, not 2: first chunk and
    # growth 1 / 2 -> 2.0 req/s, 8 / 2 5.3, 4 / 1.25 5.5, 6 / 1.5 5.6, 8 / 1.5 >= 6.0 (TTFA 5 ms more); steady chunk
    # 22 / 43 / 86 frames 5.6 / 5.6 / >= 6.0, within one rate step of each other
    "zonos": {"first_chunk_frames": 6, "chunk_frames": 43, "chunk_growth": 1.5},
    # TontaubeV1: DualCodec's non-causal decoder takes 5 frames of lookahead after each chunk, and the refiners
    # re-read a stream's semantic codes for every chunk: 5 frames first (0.4 s, the reference's quantum), then 25.
    # Every chunk ends on the 5-frame grid (5, 10, 20, then 25: growth 2 from 5, capped at 25), where VibeVoice's
    # 7.5 Hz frames meet DualCodec's (3 to 5), so the re-synthesis needs no audio past a chunk's own frames
    # (models/tontaube/codec.py); a plan whose sizes leave the grid decodes near the full stream, not equal to it
    "tontaube": {"first_chunk_frames": 5, "chunk_frames": 25, "chunk_growth": 2.0},
}
# preset names and checkpoint `model_type`s that name a family otherwise than by its own name
ALIASES = {"higgs-v3": "higgs_v3", "higgs_audio": "higgs_v3", "voxlane_tse": "tse", "qwen3-tts": "qwen3_tts"}
# families none of whose models has a voice encoder (none clones a voice); Qwen3-TTS has one in its Base models
# only (`tts_model_type` "base", the presets named `-base`). The voice encoder lane of such a model answers every
# reference with `reference_unsupported` without loading torch or the model (`clones_voices`)
VOICELESS_FAMILIES = ("orpheus", "flashtts", "voxtral")
QWEN3_TTS_BASE_TYPE = "base"
# families that listen while they speak: a request streams input audio in an audio-in session, and sends no text
# (the router refuses input audio for every other family by name, before any lane is called)
INPUT_AUDIO_FAMILIES = ("tse",)
# cascades: the LM lane writes a first codebook, the refinement lanes (`refiner`, `refiner_urgent`) the others, per
# chunk, before the codec lanes; `voxlane serve` loads those lanes for these families only
REFINING_FAMILIES = ("tontaube",)
# On a GPU, a request that starts with no other stream running sends its first chunk after one frame where the
# family takes the engine's ramp: one LM frame sooner (Qwen3-TTS 1.7B on an H200: idle TTFA 23.3 vs 28.8 ms), and,
# acting only on a lone request, it cannot cost capacity (BENCHMARKS.md, "Lever: the first chunk from the LM's
# load"). Not on the CPU, whose end-to-end tests pin the plan; `--first-chunk-frames-idle 0` turns it off.
GPU_IDLE_FIRST_CHUNK_FRAMES = 1
DEFAULT_SM_SHARES = (60, 40)  # (LM lane %, background codec lane %)
SM_SHARES = {"cosyvoice3": (40, 60)}
# The LM lane's `max_seq_len` where a family's frame rate outgrows the repository's 2048 (sized for 12.5-25 Hz):
# Zonos speaks 86 frames a second, so the default 60 s cap is 5168 frames, and a streamed-text segment of 300
# characters may run to 7543 before its cap ends it (text_segments.SegmentRules): 8192 holds both with its prompt.
MAX_SEQ_LENS = {"zonos": 8192}


def family_of_model(model: str) -> str | None:
    """The family a `--model` value names, where it can be told without loading anything: a preset's name
    starts with it, or a checkpoint directory's config.json names it as `model_type`."""
    for family in (*PLANS, *ALIASES, *INPUT_AUDIO_FAMILIES, *REFINING_FAMILIES, *VOICELESS_FAMILIES):
        if model == family or model.startswith(family + "-"):
            return ALIASES.get(family, family)
    if (Path(model).expanduser() / "cb0" / "config.json").is_file():  # TontaubeV1's bundle: one folder a codebook
        return "tontaube"
    fields = _checkpoint_config(model)
    if fields is None:
        return None
    if "prefix_conditioner" in fields:  # an official Zonos config.json names no model_type
        return "zonos"
    model_type = fields.get("model_type")
    return ALIASES.get(model_type, model_type)


def _checkpoint_config(model: str) -> dict | None:
    """The config.json of the checkpoint directory `model` names, or None (no such file, or not a JSON object)."""
    config = Path(model).expanduser() / "config.json"
    try:
        fields = json.loads(config.read_text()) if config.is_file() else None
    except (OSError, ValueError):
        return None
    return fields if isinstance(fields, dict) else None


def clones_voices(model: str) -> bool | None:
    """Whether the model has a voice encoder, where that can be told without loading it (VOICELESS_FAMILIES);
    None: not told here, the voice encoder lane loads the model and finds out."""
    family = family_of_model(model)
    if family == "qwen3_tts":
        fields = _checkpoint_config(model)
        kind = model.rsplit("-", 1)[-1] if fields is None else fields.get("tts_model_type")
        return kind == QWEN3_TTS_BASE_TYPE
    return False if family in VOICELESS_FAMILIES else None


def chunk_plan(model: str) -> ChunkingConfig:
    """The model's family's chunk plan, else the engine's default."""
    return ChunkingConfig(**PLANS.get(family_of_model(model) or "", {}))


def takes_default_plan(model: str) -> bool:
    """Whether the model's family streams with the engine's default ramp (no plan of its own)."""
    return (family_of_model(model) or "") not in PLANS


def sm_shares(model: str) -> tuple[int, int]:
    """The model's family's MPS shares (LM lane %, background codec lane %), else the default 60/40."""
    return SM_SHARES.get(family_of_model(model) or "", DEFAULT_SM_SHARES)


def takes_input_audio(model: str) -> bool:
    """Whether the model's family takes streamed input audio (INPUT_AUDIO_FAMILIES)."""
    return family_of_model(model) in INPUT_AUDIO_FAMILIES


def refines(model: str) -> bool:
    """Whether the model's family is a cascade with refinement lanes (REFINING_FAMILIES)."""
    return family_of_model(model) in REFINING_FAMILIES


def max_seq_len(model: str) -> int | None:
    """The model's family's `max_seq_len` for the LM lane, or None: the repository's config.pbtxt keeps its own."""
    return MAX_SEQ_LENS.get(family_of_model(model) or "")
