"""`TontaubeCodec`: TontaubeV1's frames (the semantic code and three acoustic codes) -> 24 kHz audio through
DualCodec's decoder (dualcodec.py), then, where the checkpoint has VibeVoice's acoustic tokenizer, re-synthesised
through it as the reference does (`ENABLE_VIBEVOICE=1`): DualCodec's waveform -> VibeVoice's encoder (mean latents,
7.5 Hz, 3,200 samples a frame) -> VibeVoice's decoder (vibevoice.py). Without it (`vibevoice=None`, a checkpoint
without `vibevoice/`) the audio is DualCodec's alone (`ENABLE_VIBEVOICE=0`).

DualCodec. DAC's decoder is not causal, so a chunk's window holds `LOOKAHEAD_FRAMES` after its new ones (the
reference streams holding its last 5 codes back for the same reason) and `LEFT_CONTEXT_FRAMES` before them (the
causal ConvNeXt stack reads 4 × 6 frames back, DAC's first conv 3 more); windows of one length decode in one batch,
so no padding reaches a window's audio. A decode of T frames gives 1920 · T − 4 samples (the tiny shape: − 16):
the last ones, which belong to the lookahead, are zero-padded to whole frames.

VibeVoice. Both halves are causal convolution stacks (vibevoice.py `lookback_samples`): an output sample reads
the waveform from R samples before it up to the end of its own 3,200-sample frame, where R is 65,979 samples for
the tiny tokenizer and 374,323 (15.6 s) for VibeVoice-1.5B's. Frames are laid out from the stream's first sample,
so a window learns its stream position (`uses_stream_position`, its start frame) and re-synthesises from the
VibeVoice frame boundary at or before its first sample (zeros before the window, as the stream's start has). Its
audio then equals the whole stream's wherever what it reads is exact: DualCodec's audio is exact (to DualCodec's
window tolerance) from `LEFT_CONTEXT_FRAMES` after the window's start, so the left context grows by
ceil(R / 1920) frames: 27 + 35 = 62 for the tiny tokenizer, 27 + 195 = 222 (17.8 s) for VibeVoice-1.5B's
(`left_context_frames`). At the other end a VibeVoice frame reads its whole 3,200 samples: 5 DualCodec frames are
3 VibeVoice frames, so a chunk that ends on that grid (a multiple of 5 frames from the stream's start) needs
nothing past its own frames, whose DualCodec audio its 5 frames of lookahead make exact. The chunk plan keeps
every chunk on the grid (description.py: 5, 10, 20, then 25 frames), as the reference streams on a
0.4 s quantum; the stream's last chunk ends where the whole stream does, its partial last frame padded as the
whole stream's. A chunk that ends off the grid (another plan, or a streamed text's segment, whose chunk plan starts
at the segment's first frame) reads up to 1.3 frames of its lookahead's audio, which has less lookahead of its own:
near the whole stream's audio, not equal (at a segment's end DualCodec alone is near only, too: it has no lookahead
there). A window's start needs no grid: it re-synthesises from the frame boundary before it. The price of exact
windows is their length: a 25-frame chunk's window decodes 222 + 25 + 5 frames through both models (10x its new
frames; DualCodec alone 2.3x), where the reference re-decodes its whole stream for every 0.4 s. The reference clips
at ±1 when it writes PCM; the re-synthesised audio is clamped to [-1, 1] here (DualCodec's ends in tanh).

Stream state. A lane that keeps stream states (engine/codec_runner.py; `state_reads_windows`) keeps VibeVoice's
causal tails per stream instead (vibevoice.py `resynth_stream`: every causal convolution's last inputs, encoder and
decoder; 6 kB a stream at the tiny size, 1.4 MB at VibeVoice-1.5B's in float32), and a chunk that continues its
stream's state decodes a window of `state_context_frames` before its new frames and its lookahead through
DualCodec, then only the new frames' audio (and the lag's) through VibeVoice. DualCodec is not causal, so its
window stays, and its audio of a window's last new frames misses lookahead: DAC's decoder reads
`lookahead_reach_frames` ahead (9 frames at the tiny shape, 27 at the official one), 5 of which a window holds. A
state that held that audio would carry its error on for VibeVoice's whole reach (tiny: 1.3e-3 in the chunked
audio), so the state stays `state_lag_frames` VibeVoice frames behind the chunk's end (those that hold the last 4,
or 22, new frames: 3 frames, or 14), and a continued chunk re-reads them from its own window, where they have their
lookahead; DualCodec's context grows by their frames: 27 + 5 = 32 at the tiny shapes (62 for the whole window), 27
+ 24 = 51 at the official ones (222), so a 25-frame chunk decodes 51 + 25 + 5 frames through DualCodec and 29
VibeVoice frames, where its whole window is 252 and 151. The tails are kept only after a chunk with its full
lookahead that ends on the grid and is not its stream's last; a chunk without a state (the stream's first on the
lane, one after a chunk that went to the other lane, the first after the lane was reloaded) decodes its whole
window from a fresh state, as `decode_windows` does, and leaves one. Chunked with the state equals the whole
stream within the windows' tolerance (tests/unit/test_tontaube_codec_state.py: max 1.8e-5, as today's windows).
At the official DualCodec shape 27 frames of context and 5 of lookahead are short of the decoder's reach (51 back
with the ConvNeXt stack's 24, 27 ahead): with random weights today's windows are 0.072 off the whole stream, and
the state path as far (rms 5.6e-3 either way)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..base import Codec, CodecShape, CodecWindowing
from ..codec_stream import CodecStreamState, StreamWindow, split_states, stack_states
from .config import SAMPLE_RATE, SEMANTIC_CODES
from .dualcodec import DualCodecConfig, DualCodecDecoder, decoder_state, lookahead_reach_frames
from .vibevoice import AcousticResynth, lookback_samples, read_dir_config

LEFT_CONTEXT_FRAMES = 27  # DualCodec's
LOOKAHEAD_FRAMES = 5
WINDOWING = CodecWindowing(LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES, 0)  # DualCodec alone
RANDOM_LEVEL = 0.2  # a random codec's output standard deviation (DualCodec's, before tanh)
# a random VibeVoice (vibevoice.py `AcousticResynth.random`): its ConvNeXt blocks' layer scales, its biases' standard
# deviation and its gain on noise. DualCodec's random audio comes out at about 0.11; the output depends on the input
# (another stream's audio changes it by 0.04 rms) and a small change of the input comes out 0.3 times as large
RANDOM_LAYER_SCALE, RANDOM_VIBEVOICE_BIAS, RANDOM_VIBEVOICE_GAIN = 0.2, 0.3, 0.5
DUALCODEC_DIR, DUALCODEC_WEIGHTS, DUALCODEC_CONFIG = "dualcodec", "dualcodec_12hz_16384_4096.safetensors", \
    "voxlane_decoder.json"
VIBEVOICE_DIR = "vibevoice"  # the acoustic tokenizer (vibevoice.py `AcousticResynth.from_dir`: either layout)
HOP_LENGTH = 1920  # DualCodec's samples a frame (the windows' frames)


def left_context_frames(vibevoice_config=None, samples_per_frame: int = HOP_LENGTH) -> int:
    """Frames of left context a window needs: DualCodec's, plus VibeVoice's reach in whole frames (module doc)."""
    if vibevoice_config is None:
        return LEFT_CONTEXT_FRAMES
    return LEFT_CONTEXT_FRAMES + math.ceil(lookback_samples(vibevoice_config) / samples_per_frame)


def state_lag_frames(config: DualCodecConfig, vibevoice_hop: int) -> int:
    """VibeVoice frames a stream's kept state stays behind its last chunk's end: those that hold DualCodec audio a
    window's lookahead does not cover (its last `lookahead_reach_frames` − `LOOKAHEAD_FRAMES` new frames): 3 for
    the tiny shapes, 14 for the official ones (module doc, "Stream state")."""
    missing = max(0, lookahead_reach_frames(config) - LOOKAHEAD_FRAMES) * config.hop_length
    return math.ceil(missing / vibevoice_hop)


def windowing(vibevoice_config=None) -> CodecWindowing:
    """How the codec's chunks are cut, with VibeVoice at `vibevoice_config` (None: DualCodec alone)."""
    return CodecWindowing(left_context_frames(vibevoice_config), LOOKAHEAD_FRAMES, 0)


def checkpoint_vibevoice_config(path: Path):
    """The transformers config of a checkpoint's `vibevoice/` folder, or None: it has none (DualCodec alone)."""
    folder = Path(path) / VIBEVOICE_DIR
    return read_dir_config(folder) if (folder / "config.json").is_file() else None


@dataclass(frozen=True)
class VibeVoicePiece:
    """The waveform VibeVoice reads for one window, from a frame boundary of its stream."""

    samples: torch.Tensor  # [N] float32
    skip: int  # output samples before the window's new frames'
    keep: int | None  # samples after which the tails are the stream's state (None: no state to keep)


class TontaubeCodec(Codec):
    def __init__(self, config: DualCodecConfig, vibevoice: AcousticResynth | None = None) -> None:
        super().__init__()
        self.dualcodec = DualCodecDecoder(config)
        self.resynth = vibevoice
        self.vibevoice = None if vibevoice is None else vibevoice.model  # a submodule: it moves with the codec
        self.uses_stream_position = vibevoice is not None  # VibeVoice's frames are laid out from the stream's start
        # a stateful lane keeps VibeVoice's tails per stream; DualCodec's windows stay (module doc, "Stream state")
        self.supports_streaming_state = self.state_reads_windows = vibevoice is not None
        self.state_lag_frames = 0 if vibevoice is None else state_lag_frames(config, vibevoice.hop_length)
        self.state_context_frames = LEFT_CONTEXT_FRAMES + (0 if vibevoice is None else math.ceil(
            self.state_lag_frames * vibevoice.hop_length / config.hop_length))  # DualCodec's, and the lag's frames
        self.shape = CodecShape(num_codebooks=4, codebook_size=SEMANTIC_CODES, sample_rate=SAMPLE_RATE,
                                samples_per_frame=config.hop_length,
                                left_context_frames=left_context_frames(
                                    None if vibevoice is None else vibevoice.model.config, config.hop_length),
                                lookahead_frames=LOOKAHEAD_FRAMES)

    @property
    def has_vibevoice(self) -> bool:
        return self.resynth is not None

    @classmethod
    def from_dir(cls, path: Path, device="cpu", vibevoice: bool | None = None) -> "TontaubeCodec":
        """`path/dualcodec/`: the official weights file and the decoder's shape (ours; the official `12hz_v1`
        when absent); `path/vibevoice/`: the acoustic tokenizer (either layout), loaded where present unless
        `vibevoice` is False (True: required)."""
        from safetensors.torch import load_file
        folder = path / DUALCODEC_DIR
        shape = folder / DUALCODEC_CONFIG
        config = DualCodecConfig(**{k: tuple(v) if isinstance(v, list) else v
                                    for k, v in json.loads(shape.read_text()).items()}) if shape.is_file() \
            else DualCodecConfig()
        has_folder = (path / VIBEVOICE_DIR / "config.json").is_file()
        if vibevoice and not has_folder:
            raise FileNotFoundError(f"{path}: no {VIBEVOICE_DIR}/ folder (VibeVoice's acoustic tokenizer)")
        resynth = AcousticResynth.from_dir(path / VIBEVOICE_DIR) if has_folder and vibevoice is not False else None
        codec = cls(config, resynth)
        state = decoder_state(load_file(str(folder / DUALCODEC_WEIGHTS)), config.n_acoustic)
        codec.dualcodec.load_state_dict(state, strict=True)
        return codec.to(device).eval()

    @classmethod
    def random(cls, config: DualCodecConfig, device="cpu", seed: int = 0, vibevoice_config=None,
               vibevoice_layer_scale: float = RANDOM_LAYER_SCALE) -> "TontaubeCodec":
        """Random weights as DAC starts them (its modules' own init), from `seed`; with `vibevoice_config`, a
        random VibeVoice at the same level (vibevoice.py `AcousticResynth.random`, from `seed` too)."""
        resynth = None if vibevoice_config is None else \
            AcousticResynth.random(vibevoice_config, seed, vibevoice_layer_scale, RANDOM_VIBEVOICE_BIAS,
                                   RANDOM_VIBEVOICE_GAIN)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            codec = cls(config, resynth)
            probe = torch.stack([torch.randint(0, config.semantic_codebook_size, (16,)),
                                 *torch.randint(0, config.codebook_size, (config.n_acoustic, 16))], dim=1)
        with torch.no_grad():  # DAC's N(0, 0.02) start is all but silent: scale its last conv to speech levels
            last = codec.dualcodec.dac.decoder.model[-2]
            level = codec.fit(codec.dualcodec_audio(probe[None]), probe.shape[0]).std()
            last.weight_g.mul_(RANDOM_LEVEL / level.clamp_min(1e-12))
        return codec.to(device).eval()

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, 4], each row a whole stream -> [B, T * 1920] (DualCodec's last samples padded; with
        VibeVoice, its re-synthesis of DualCodec's T · 1920 − 4 samples, cut to whole DualCodec frames)."""
        audio = self.dualcodec_audio(codes)
        if self.resynth is not None:
            return self.resynthesise(audio, [0] * codes.shape[0], codes.shape[1])
        return self.fit(audio, codes.shape[1])

    def dualcodec_audio(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, 4] -> DualCodec's audio [B, 1920 · T − 4] (as the reference's decode gives it)."""
        return self.dualcodec.decode(codes[..., 0], codes[..., 1:].transpose(1, 2))

    def resynthesise(self, audio: torch.Tensor, heads: list[int], num_frames: int) -> torch.Tensor:
        """DualCodec's audio [B, N] of `num_frames` frames through VibeVoice, row b after heads[b] zeros (its
        window's first sample's offset from the VibeVoice frame boundary at or before it) -> [B, num_frames ·
        1920] (the partial last VibeVoice frame padded up, then cut), clamped to [-1, 1]. Rows of one head share a
        batch: their waveforms are of one length, so each pads its partial last frame as it would alone."""
        out = audio.new_zeros(audio.shape[0], num_frames * self.samples_per_frame, dtype=torch.float32)
        for head in sorted(set(heads)):
            rows = [b for b, h in enumerate(heads) if h == head]
            wav = torch.nn.functional.pad(audio[rows], (head, 0))
            decoded = self.resynth.decode(self.resynth.encode_mean(wav))[:, head:].clamp(-1.0, 1.0)
            out[rows] = self.fit(decoded, num_frames)
        return out

    def fit(self, audio: torch.Tensor, num_frames: int) -> torch.Tensor:
        """Audio [B, N] zero-padded or cut to num_frames whole frames: [B, num_frames * 1920]."""
        return torch.nn.functional.pad(audio, (0, num_frames * self.samples_per_frame - audio.shape[1]))

    def head_samples(self, first_frame: int) -> int:
        """Samples between the VibeVoice frame boundary at or before stream frame `first_frame` and its start."""
        return first_frame * self.samples_per_frame % self.resynth.hop_length

    @torch.inference_mode()
    def decode_windows(self, windows: list[tuple[torch.Tensor, int]], conditions=None,
                       start_frames: list[int] | None = None) -> list[torch.Tensor]:
        """As `Codec.decode_windows`; `start_frames[i]`: the stream index of window i's first new frame (None:
        each window starts its stream), which lays out VibeVoice's frames (DualCodec alone ignores it). One
        DualCodec batch per window length: padding would reach a window's audio through the non-causal decoder."""
        self.check_conditions(windows, conditions)
        if start_frames is not None and len(start_frames) != len(windows):
            raise ValueError(f"need one start frame per window, got {len(start_frames)} for {len(windows)} windows")
        starts = start_frames if start_frames is not None else [context for _, context in windows]
        out: list[torch.Tensor | None] = [None] * len(windows)
        for length in sorted({codes.shape[0] for codes, _ in windows}):
            group = [i for i, (codes, _) in enumerate(windows) if codes.shape[0] == length]
            audio = self.dualcodec_audio(torch.stack([windows[i][0] for i in group]))
            if self.resynth is not None:
                heads = [self.head_samples(starts[i] - windows[i][1]) for i in group]
                audio = self.resynthesise(audio, heads, length)
            else:
                audio = self.fit(audio, length)
            for row, i in enumerate(group):
                out[i] = audio[row, windows[i][1] * self.samples_per_frame:]
        return out

    @property
    def state_lag_samples(self) -> int:
        return self.state_lag_frames * self.resynth.hop_length

    def new_stream_state(self) -> CodecStreamState:
        """VibeVoice's tails before a stream's first sample (zeros: its causal padding)."""
        return CodecStreamState(self.resynth.new_stream_tails())

    @torch.inference_mode()
    def decode_stream_windows(self, states: list[CodecStreamState | None],
                              windows: list[StreamWindow]) -> tuple[list[torch.Tensor], list[CodecStreamState | None]]:
        """As `Codec.decode_stream_windows` (module doc, "Stream state"): DualCodec's windows in one batch per
        length, then VibeVoice's pieces from each row's tails in one batch per piece shape."""
        if len(states) != len(windows) or not windows:
            raise ValueError(f"need one state per window, got {len(states)} states for {len(windows)} windows")
        audio = self._dualcodec_windows([w.codes for w in windows])
        pieces = [self._vibevoice_piece(w, a, s is None) for w, s, a in zip(windows, states, audio)]
        out: list[torch.Tensor | None] = [None] * len(windows)
        new_states: list[CodecStreamState | None] = [None] * len(windows)
        for shape in dict.fromkeys((p.samples.shape[0], p.keep) for p in pieces):
            rows = [i for i, p in enumerate(pieces) if (p.samples.shape[0], p.keep) == shape]
            tails = stack_states([states[i] or self.new_stream_state() for i in rows])
            decoded, kept = self._resynth_keeping(tails, torch.stack([pieces[i].samples for i in rows]), shape[1])
            kept_states = [None] * len(rows) if kept is None else split_states(kept, len(rows))
            for row, i in enumerate(rows):
                skip = pieces[i].skip
                out[i] = self.fit(decoded[row:row + 1, skip:].clamp(-1.0, 1.0), windows[i].num_new)[0]
                new_states[i] = kept_states[row]
        return out, new_states

    def _resynth_keeping(self, tails: dict, samples: torch.Tensor, keep: int | None):
        """VibeVoice over a batch of pieces from `tails`: (audio [B, ...], the tails after the pieces' first
        `keep` samples, or None: keep nothing)."""
        if keep is None:
            return self.resynth.resynth_stream(tails, samples)[0], None
        first, kept = self.resynth.resynth_stream(tails, samples[:, :keep]) if keep else (samples[:, :0], tails)
        if keep == samples.shape[1]:
            return first, kept
        rest, _ = self.resynth.resynth_stream(kept, samples[:, keep:])
        return torch.cat((first, rest), dim=1), kept

    def _dualcodec_windows(self, windows: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each window's DualCodec audio [1920 · T − 4]: one batch per window length (the decoder is not causal)."""
        audio: list[torch.Tensor | None] = [None] * len(windows)
        for length in sorted({codes.shape[0] for codes in windows}):
            group = [i for i, codes in enumerate(windows) if codes.shape[0] == length]
            decoded = self.dualcodec_audio(torch.stack([windows[i] for i in group]))
            for row, i in enumerate(group):
                audio[i] = decoded[row]
        return audio

    def _vibevoice_piece(self, window: StreamWindow, audio: torch.Tensor, is_fresh: bool) -> VibeVoicePiece:
        """What VibeVoice reads of a window (module doc, "Stream state"). Continued: from `state_lag_frames`
        VibeVoice frames before the new frames (where the state stopped). Fresh: the whole window, after the zeros
        back to the VibeVoice frame boundary at or before its start (as `decode_windows`). Either runs on to the
        first boundary at or after the new frames' end, into the lookahead's audio (cut at the window's end: a
        partial last frame is padded as the whole stream's is)."""
        spf, hop, lag = self.samples_per_frame, self.resynth.hop_length, self.state_lag_samples
        if is_fresh:
            head = self.head_samples(window.start_frame - window.context_frames)
            begin, pad, skip = 0, head, head + window.context_frames * spf
        else:
            begin, pad, skip = window.context_frames * spf - lag, 0, lag
            if (window.start_frame * spf - lag) % hop or begin < 0:
                raise ValueError(f"no stream state can stand {lag} samples before frame {window.start_frame} with "
                                 f"{window.context_frames} frames of context")
        reach = skip + window.num_new * spf  # the new frames' end in the piece's samples
        samples = torch.nn.functional.pad(audio[begin:begin - pad + math.ceil(reach / hop) * hop], (pad, 0))
        can_keep = (not window.is_last and window.lookahead_frames >= self.lookahead_frames
                    and samples.shape[0] == reach and reach >= lag)
        return VibeVoicePiece(samples, skip, reach - lag if can_keep else None)
