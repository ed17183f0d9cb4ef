"""CosyVoice 3's codec decoder behind the `Codec` contract: speech tokens (1 codebook of 6561, 25 Hz) ->
mel (flow matching, flow.py) -> 24 kHz waveform (HiFT, hift.py), 960 samples per token, conditioned on a
192-d speaker embedding (`condition_dim`; None: zeros, the reference's empty embedding).

Windows. The decoder is not causal: the pre-lookahead conv reads 3 tokens ahead, the DiT attends over the
whole window both ways (its causal conv position embedding reaches 30 tokens back), HiFT's first conv
reads 2 tokens ahead and its convs ~12 tokens back, and the NSF source's phase is a running sum (restarted
on a grid of stream positions, hift.py). So a chunk's window holds `left_context_frames` = 32 (past the
position embedding's reach; with HiFT's 16-token restart period it always holds a restart >= 4 tokens into
the window and >= 12 before its new frames, which makes HiFT exact there) and `lookahead_frames` = 4: the
1 `overlap_frames` decoded past the chunk (cross-faded into the next chunk: `crossfade`, as the router's
OverlapJoin) and the pre-lookahead's 3 after it, so the token condition of every frame kept is exact.
Measured against a full-utterance decode (random weights, 60 frames, the engine's chunks 2, 4, 8, 10, ...;
tests/unit/test_cosyvoice3_codec.py): given the same mel, HiFT's windows are exact (<= 6.1e-7); the flow's
mel differs by rms 0.023-0.025 (max 0.135-0.141; mel std 1.66): the DiT attends to frames outside the
window, which no finite window removes (left context 25: rms 0.055-0.062, 50: 0.017-0.018; a 4x wider and
4x deeper DiT at 32: rms 0.047); and the waveform by rms 0.016-0.020 (max 0.13-0.17; audio std 0.032): the
small mel error moves f0, and f0 errors accumulate in the source's phase until its next restart.

Noise. The flow starts from the reference's fixed noise at the frame's position in its stream (flow.py),
and the source's phase restarts on stream positions: a window learns where it is from `start_frames` (its
first new frame's index in the stream: the runner's StreamChunk.start_frame). Without them each window is
taken to start at stream frame 0, which only a stream's first window does; the others then start from other
noise, and their mel is as far from the full decode's as two samples of the flow are (rms 1.15, pinned).

Batching. `decode_windows` right-pads the windows' tokens into one flow batch with a mask (the DiT never
attends to padding and zeroes it; the rest of the flow is per frame or causal, so a row decodes as if
alone), then vocodes windows of equal length together (HiFT's STFT/iSTFT edges and its read-ahead would
see padding).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..base import Codec, CodecShape
from ..layers.dit import compile_blocks, rotary_inv_freq, uncompile_blocks
from ..layers.empty_weights import empty_weights
from .codec_checkpoint import random_parameter, read_official, read_safetensors
from .codec_checkpoint import read_hyperpyyaml  # noqa: F401  (checkpoint.py reads the official yaml from here)
from .codec_config import CosyVoice3CodecConfig
from .flow import Flow, fixed_noise
from .flow_graphs import FlowGraphs, try_capture
from .hift import HiFTGenerator

CONFIG_FILE = "codec_config.json"  # our layout: a checkpoint's codec/ dir
WEIGHTS_FILE = "codec.safetensors"
CODEC_DIR = "codec"
OFFICIAL_FILES = ("flow.pt", "hift.pt", "cosyvoice3.yaml")  # the reference's model dir
CONDITION_DIM = 192


def crossfade(tail: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
    """`head` (a chunk's first samples) with its start cross-faded from `tail` (the previous chunk's audio
    decoded past its new frames, over the same stream samples): complementary raised-cosine fades over
    min(len(tail), len(head)) samples, as the router's OverlapJoin."""
    n = min(tail.shape[-1], head.shape[-1])
    i = torch.arange(n, dtype=torch.float32, device=head.device)
    fade_in = torch.sin(0.5 * math.pi * (i + 0.5) / n).pow(2).to(head.dtype)
    out = head.clone()
    out[..., :n] = tail[..., :n] * (1.0 - fade_in) + head[..., :n] * fade_in
    return out


class CosyVoice3Codec(Codec):
    """Flow (tokens -> mel) then HiFT (mel -> audio); windows decoded as described in the module docstring."""

    condition_dim = CONDITION_DIM
    uses_stream_position = True  # windows are laid out by their start frames (fixed noise, phase restarts)

    def __init__(self, cfg: CosyVoice3CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.shape = CodecShape(1, cfg.flow.vocab_size, cfg.hift.sampling_rate, cfg.samples_per_frame,
                                cfg.left_context_frames, cfg.lookahead_frames, cfg.overlap_frames)
        self.flow = Flow(cfg.flow)
        self.hift = HiFTGenerator(cfg.hift)
        self.flow_graphs: FlowGraphs | None = None  # the flow's steps in CUDA graphs (capture_graphs), else eager

    @property
    def device(self) -> torch.device:
        return self.flow.input_embedding.weight.device

    # ------------------------------------------------------------ decoding

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, T, 1] int64 in [0, 6561) -> audio [B, T * 960] float32, default speaker, from stream frame 0."""
        self.check_codes(codes)
        return torch.stack(self.decode_windows([(row, 0) for row in codes]))

    @torch.inference_mode()
    def decode_windows(self, windows: list[tuple[torch.Tensor, int]],
                       conditions: list[torch.Tensor | None] | None = None,
                       start_frames: list[int] | None = None) -> list[torch.Tensor]:
        """As `Codec.decode_windows`; `start_frames[i]`: the stream index of window i's first new frame
        (None: each window's first frame is stream frame 0). Returns [(T_i - c_i) * 960] float32 each."""
        spf = self.samples_per_frame
        if self.flow_graphs is not None:  # the flow and HiFT in one graph of the batch's bucket
            audio = self.flow_graphs.run_audio(*self.flow_inputs(windows, conditions, start_frames))
            if audio is not None:
                return [audio[row, context * spf:codes.shape[0] * spf]
                        for row, (codes, context) in enumerate(windows)]
        mels = self.window_mels(windows, conditions, start_frames)
        firsts = self.first_frames(windows, start_frames)
        audio = self.vocode(mels, [f * self.cfg.flow.token_mel_ratio for f in firsts])
        return [a[context * spf:] for a, (_, context) in zip(audio, windows)]

    @torch.inference_mode()
    def window_mels(self, windows: list[tuple[torch.Tensor, int]],
                    conditions: list[torch.Tensor | None] | None = None,
                    start_frames: list[int] | None = None) -> list[torch.Tensor]:
        """Each whole window's mel (context included): [T_i * token_mel_ratio, 80] in the flow's dtype."""
        tokens, lengths, embedding, firsts = self.flow_inputs(windows, conditions, start_frames)
        if self.flow_graphs is not None:
            mel = self.flow_graphs.run(tokens, lengths, embedding, firsts)
        else:
            mel = self.flow(tokens, lengths, embedding, firsts, self.cfg.n_timesteps, self.cfg.cfg_rate)
        ratio = self.cfg.flow.token_mel_ratio
        return [mel[row, : codes.shape[0] * ratio] for row, (codes, _) in enumerate(windows)]

    def flow_inputs(self, windows: list[tuple[torch.Tensor, int]], conditions: list[torch.Tensor | None] | None,
                    start_frames: list[int] | None) -> tuple[torch.Tensor, ...]:
        """The windows checked, as the flow takes them: tokens [B, max T] right-padded, lengths [B], speaker
        embeddings [B, 192] and each window's first stream frame [B], on the codec's device."""
        self.check_conditions(windows, conditions)
        for codes, context in windows:
            self.check_codes(codes[None])
            if not 0 <= context < codes.shape[0]:
                raise ValueError(f"a window of {codes.shape[0]} frames cannot have {context} context frames")
        device = self.device
        lengths = torch.tensor([codes.shape[0] for codes, _ in windows], device=device)
        tokens = self.pad_windows(windows)[..., 0].to(device)
        firsts = torch.tensor(self.first_frames(windows, start_frames), device=device)
        return tokens, lengths, self.stack_conditions(conditions, len(windows)), firsts

    @staticmethod
    def first_frames(windows: list[tuple[torch.Tensor, int]], start_frames: list[int] | None) -> list[int]:
        """Each window's first frame's index in its stream (context included; negative before frame 0)."""
        if start_frames is None:
            return [0] * len(windows)
        if len(start_frames) != len(windows):
            raise ValueError(f"need one start frame per window, got {len(start_frames)} for {len(windows)}")
        return [start - context for start, (_, context) in zip(start_frames, windows)]

    def vocode(self, mels: list[torch.Tensor], start_mel_frames: list[int] | None = None) -> list[torch.Tensor]:
        """Mels [N_i, 80] (starting at stream mel frame start_mel_frames[i], default 0) -> audio [N_i * 480]
        float32, one HiFT batch per length."""
        starts = torch.tensor(start_mel_frames or [0] * len(mels), device=self.device)
        out: list[torch.Tensor | None] = [None] * len(mels)
        for length in sorted({m.shape[0] for m in mels}):
            group = [i for i, m in enumerate(mels) if m.shape[0] == length]
            audio = self.hift(torch.stack([mels[i] for i in group]).transpose(1, 2), starts[group])
            for row, i in enumerate(group):
                out[i] = audio[row]
        return out

    def stack_conditions(self, conditions: list[torch.Tensor | None] | None, num_rows: int) -> torch.Tensor:
        """[num_rows, 192] float32 on the codec's device; None rows (or no list) are zeros."""
        out = torch.zeros(num_rows, self.condition_dim, device=self.device)
        for row, c in enumerate(conditions or []):
            if c is not None:
                out[row] = c.to(device=self.device, dtype=torch.float32)
        return out

    def capture_graphs(self) -> bool:
        """The flow's steps and HiFT in one CUDA graph per (windows, tokens) bucket (flow_graphs.py), the DiT's blocks
        compiled first with `use_torch_compile`. A capture that fails leaves the codec eager (and says so in the
        log); compiled blocks that fail to capture are dropped for plain ones."""
        if self.device.type != "cuda":
            return False
        blocks = self.flow.decoder.estimator.transformer_blocks
        if self.use_torch_compile:
            compile_blocks(blocks)
        self.flow_graphs = try_capture(self._flow_graphs())
        if self.flow_graphs is None and self.use_torch_compile:  # the compiled blocks did not capture: plain ones
            uncompile_blocks(blocks)
            self.flow_graphs = try_capture(self._flow_graphs())
        return self.flow_graphs is not None

    def _flow_graphs(self) -> FlowGraphs:
        return FlowGraphs(self.flow, self.condition_dim, self.cfg.n_timesteps, self.cfg.cfg_rate, self.device,
                          vocoder=self.hift)

    def check_codes(self, codes: torch.Tensor) -> None:
        if codes.dim() != 3 or codes.shape[-1] != 1 or codes.shape[1] < 1:
            raise ValueError(f"codes must be [B, T >= 1, 1], got {tuple(codes.shape)}")

    # ------------------------------------------------------------ construction

    def prepare(self, device: torch.device | str, dtype: torch.dtype) -> "CosyVoice3Codec":
        """The flow in `dtype`, HiFT in float32 with its f0 net in float64 (as the reference runs it)."""
        self.set_buffers("cpu")  # a codec built on the meta device has none yet
        self.flow.to(device=device, dtype=dtype)
        self.hift.to(device=device, dtype=torch.float32)
        self.hift.f0_predictor.to(torch.float64)
        self.set_buffers(device)
        return self.eval()

    def set_buffers(self, device: torch.device | str) -> None:
        """The fixed noise, rotary frequencies and STFT window, computed afresh in float32 on `device`."""
        self.flow.decoder.rand_noise = fixed_noise(self.cfg.flow.output_size).to(device)
        self.flow.decoder.estimator.rotary_embed.inv_freq = rotary_inv_freq(self.cfg.flow.estimator.dim_head).to(device)
        self.hift.stft_window = torch.hann_window(self.cfg.hift.istft_n_fft, periodic=True, device=device)

    @classmethod
    def from_config(cls, cfg: CosyVoice3CodecConfig, device: torch.device | str = "cpu",
                    dtype: torch.dtype = torch.float32, seed: int = 0,
                    n_timesteps: int | None = None) -> "CosyVoice3Codec":
        """Random weights, deterministic in `seed`: every parameter drawn, scaled so the output is neither
        silent nor clipped and f0 lands in the voiced range (so the sine source is exercised)."""
        if n_timesteps is not None:
            cfg = replace(cfg, n_timesteps=n_timesteps)
        codec = cls(cfg)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in codec.named_parameters():
                param.copy_(random_parameter(name, param, generator))
        return codec.prepare(device, dtype)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, device: torch.device | str = "cpu",
                        dtype: torch.dtype = torch.float32, n_timesteps: int | None = None) -> "CosyVoice3Codec":
        """Our layout (codec_config.json + codec.safetensors, in `path` or `path`/codec) or the reference's
        model dir (flow.pt + hift.pt + cosyvoice3.yaml); strict on every key."""
        path = Path(path)
        if not (path / CONFIG_FILE).exists() and (path / CODEC_DIR / CONFIG_FILE).exists():
            path = path / CODEC_DIR
        if (path / CONFIG_FILE).exists():
            cfg = CosyVoice3CodecConfig.from_dict(json.loads((path / CONFIG_FILE).read_text()))
            state = read_safetensors(path / WEIGHTS_FILE)
        elif all((path / name).exists() for name in OFFICIAL_FILES):
            cfg, state = read_official(path)
        else:
            raise FileNotFoundError(f"{path} holds neither {CONFIG_FILE} nor the reference's "
                                    f"{', '.join(OFFICIAL_FILES)}")
        if n_timesteps is not None:
            cfg = replace(cfg, n_timesteps=n_timesteps)
        with empty_weights():
            codec = cls(cfg)
        state.setdefault("flow.decoder.estimator.rotary_embed.inv_freq",
                         torch.zeros(cfg.flow.estimator.dim_head // 2))  # rebuilt by `prepare`
        codec.load_state_dict(state, strict=True, assign=True)
        return codec.prepare(device, dtype)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write codec_config.json and codec.safetensors (reference names under flow. and hift., weight
        norm folded) into `path`."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / CONFIG_FILE).write_text(json.dumps(self.cfg.to_dict(), indent=2))
        state = {k: v.detach().to("cpu").contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(path / WEIGHTS_FILE), metadata={"format": "pt"})
