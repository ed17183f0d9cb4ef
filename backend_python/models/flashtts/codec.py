"""FlashTTS's codec: speech tokens -> mel (the mean-flow DiT, `meanflow.py`) -> 24 kHz audio (HiFi-GAN, `vocoder.py`).

Tokens at 25 Hz, one codebook of 6561 codes; each token is 4 mel frames of 10 ms, each mel frame 240 samples.
The stream's condition (`condition_dim` 320) is [CAMPPlus speaker embedding (192) | the ECAPA-TDNN embedding of
the reference mel (128)], both constant over a stream; None = zeros, which is what FlashTTS's DiT sees when its
audio condition is dropped.

Windows: one evaluation of the DiT's block attention makes a token depend on the tokens from 3 blocks (18 tokens)
before its block to 1 block (6 tokens) after it, on a grid of 6-token blocks (n evaluations: 3n back, n ahead).
Windows are laid out by stream position (`uses_stream_position`): the block grid starts at the stream's first
token, and the fixed noise (x at t = 1) is a table of `noise_tokens` tokens indexed by stream position, so a window
sees the full decode's grid and noise wherever it starts. When its chunk starts and ends on block boundaries (the
FlashTTS plan: 18 new tokens a chunk), 1 evaluation, 18 tokens of context and FlashTTS's 6 of lookahead give a
window's new tokens exactly the full decode's mel; the vocoder, which reads a few mel frames to each side, adds
the error at a chunk's last tokens, where it reads the lookahead block's mel (that block misses its own next
block). The tests pin it. Nothing is causal, so windows of different lengths are decoded in separate batches.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from .. import checkpoint_io
from ..base import Codec, CodecShape
from ..checkpoint_io import CONFIG_FILE, WEIGHTS_FILE
from ..layers.dit import compile_blocks, rotary_inv_freq, uncompile_blocks
from ..layers.empty_weights import empty_weights
from .codec_config import FlashTTSCodecConfig
from .description import DESCRIPTION
from .meanflow import FOREIGN_PREFIXES, MeanFlowDiT
from .vocoder import HiFiGAN, fold_weight_norm
from .window_graphs import WindowGraphs, try_capture

NUM_CODEBOOKS = 1


class FlashTTSCodec(Codec):
    """`transformer.*`: the DiT (FlashTTS's CFM names its DiT so); `vocoder.*`: the HiFi-GAN generator."""

    uses_stream_position = True  # the block grid and the fixed noise are laid out by stream position

    def __init__(self, cfg: FlashTTSCodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.shape = CodecShape(NUM_CODEBOOKS, cfg.codebook_size, cfg.sample_rate, cfg.samples_per_frame,
                                cfg.left_context_frames, cfg.lookahead_frames, cfg.overlap_frames)
        self.condition_dim = cfg.flow.condition_dim
        self.transformer = MeanFlowDiT(cfg.flow)
        self.vocoder = HiFiGAN(cfg.vocoder)
        self.register_buffer("noise", noise_table(cfg), persistent=False)  # [noise_tokens * 4, mel] float32
        self.window_graphs: WindowGraphs | None = None  # on CUDA, the chunk plan's windows (capture_graphs)

    # ---- decoding --------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def decode(self, codes: torch.Tensor, conditions: torch.Tensor | None = None) -> torch.Tensor:
        """codes: [B, T, 1] int64 in [0, 6561), conditions: [B, 320] float32 or None (zeros) -> audio:
        [B, T * 960] float32 in [-1, 1]. Each row is a whole stream (its first token is stream token 0)."""
        if codes.dim() != 3 or codes.shape[-1] != NUM_CODEBOOKS:
            raise ValueError(f"codes must be [B, T, {NUM_CODEBOOKS}], got {tuple(codes.shape)}")
        origins = torch.zeros(codes.shape[0], dtype=torch.long, device=codes.device)
        return self.decode_from(codes[..., 0], origins, self.stack_conditions([None] * codes.shape[0], conditions))

    @torch.inference_mode()
    def decode_windows(self, windows: list[tuple[torch.Tensor, int]],
                       conditions: list[torch.Tensor | None] | None = None,
                       start_frames: list[int] | None = None) -> list[torch.Tensor]:
        """As `Codec.decode_windows`; `start_frames[i]`: the stream index of window i's first new token (None:
        each window starts its stream). Windows of one length share a batch (padding would reach real frames)."""
        self.check_conditions(windows, conditions)
        conditions = conditions if conditions is not None else [None] * len(windows)
        starts = start_frames if start_frames is not None else [context for _, context in windows]
        if len(starts) != len(windows):
            raise ValueError(f"need one start frame per window, got {len(starts)} for {len(windows)} windows")
        out: list[torch.Tensor | None] = [None] * len(windows)
        for length in sorted({codes.shape[0] for codes, _ in windows}):
            group = [i for i, (codes, _) in enumerate(windows) if codes.shape[0] == length]
            codes = torch.stack([windows[i][0][:, 0] for i in group])  # [G, length]
            origins = torch.tensor([starts[i] - windows[i][1] for i in group], device=codes.device)
            rows = self.stack_conditions([conditions[i] for i in group])
            audio = self.window_graphs.run(codes, origins, rows) if self.window_graphs is not None else None
            if audio is None:
                audio = self.decode_from(codes, origins, rows)
            for row, i in enumerate(group):
                out[i] = audio[row, windows[i][1] * self.samples_per_frame:]
        return out

    def capture_graphs(self) -> bool:
        """The chunk plan's windows in CUDA graphs per (rows, length) (window_graphs.py), the DiT's blocks compiled
        first with `use_torch_compile`; a capture that fails leaves the codec eager (and says so in the log)."""
        if self.device.type != "cuda":
            return False
        blocks = self.transformer.transformer_blocks
        if self.use_torch_compile:
            compile_blocks(blocks)
        self.window_graphs = try_capture(WindowGraphs(self, plan_window_lengths(self.cfg)))
        if self.window_graphs is None and self.use_torch_compile:  # the compiled blocks did not capture: plain ones
            uncompile_blocks(blocks)
            self.window_graphs = try_capture(WindowGraphs(self, plan_window_lengths(self.cfg)))
        return self.window_graphs is not None

    def decode_from(self, codes: torch.Tensor, origins: torch.Tensor, conditions: torch.Tensor) -> torch.Tensor:
        """codes [B, T] int64, origins [B] int64 (the stream index of each row's first token), conditions
        [B, 320] -> audio [B, T * 960] float32."""
        mel = self.token_to_mel(codes, origins, conditions)  # [B, 4T, 80]
        return self.vocoder(mel.transpose(1, 2)).clamp(-1.0, 1.0)

    def token_to_mel(self, codes: torch.Tensor, origins: torch.Tensor, conditions: torch.Tensor) -> torch.Tensor:
        """-> mel [B, 4T, 80] float32 after `n_evals` sampler steps from the fixed noise at the rows' positions."""
        flow = self.cfg.flow
        frames = (origins * flow.mel_per_token)[:, None] \
            + torch.arange(codes.shape[1] * flow.mel_per_token, device=codes.device)[None]  # [B, N] stream mel frames
        noise = self.noise[frames.remainder(self.noise.shape[0])]
        block_ids = torch.div(frames, flow.block_size, rounding_mode="floor")
        condition = self.transformer.condition(codes, conditions)
        return self.transformer.sample(noise, condition, block_ids, self.cfg.n_evals)

    def stack_conditions(self, rows: list[torch.Tensor | None], batch: torch.Tensor | None = None) -> torch.Tensor:
        """Per-row conditions (None: zeros) -> [B, condition_dim] float32 on the codec's device."""
        if batch is not None:
            if tuple(batch.shape) != (len(rows), self.condition_dim):
                raise ValueError(f"conditions must be [{len(rows)}, {self.condition_dim}], got {tuple(batch.shape)}")
            return batch.to(self.device, torch.float32)
        out = torch.zeros(len(rows), self.condition_dim, device=self.device)
        for row, condition in enumerate(rows):
            if condition is not None:
                out[row] = condition.to(self.device, torch.float32)
        return out

    # ---- construction ----------------------------------------------------------------------------------------
    def prepare(self, device: torch.device | str, dtype: torch.dtype) -> "FlashTTSCodec":
        """The DiT in `dtype`, the vocoder in float32 (its tanh-bounded convs lose precision in half types); the
        noise and the rotary frequencies computed afresh in float32 on `device`."""
        self.to(device=device)
        self.transformer.to(dtype=dtype)
        self.transformer.rotary_embed.inv_freq = rotary_inv_freq(self.cfg.flow.dim_head).to(device)
        self.noise = noise_table(self.cfg).to(device)
        return self.eval()

    @classmethod
    def from_config(cls, cfg: FlashTTSCodecConfig, device: torch.device | str = "cpu",
                    dtype: torch.dtype = torch.float32, seed: int = 0) -> "FlashTTSCodec":
        """Random weights, deterministic in `seed` (built on `meta`, drawn on the CPU)."""
        with empty_weights():
            codec = cls(cfg)
        codec.to_empty(device="cpu")
        init_codec_weights(codec, seed)
        return codec.prepare(device, dtype)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu",
                        dtype: torch.dtype = torch.float32) -> "FlashTTSCodec":
        """A codec folder (config.json + model.safetensors), strict on every key but FlashTTS's foreign ones."""
        path = Path(path)
        cfg = FlashTTSCodecConfig.from_dict(json.loads((path / CONFIG_FILE).read_text()))
        with empty_weights():
            codec = cls(cfg)
        state = serving_state(checkpoint_io.read_state_dict(path, lambda k: True))
        codec.load_state_dict(state, strict=True, assign=True)
        return codec.prepare(device, dtype)

    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / CONFIG_FILE).write_text(json.dumps(self.cfg.to_dict(), indent=2))
        save_file(checkpoint_io.cpu_state(self.state_dict()), str(path / WEIGHTS_FILE), metadata={"format": "pt"})


def plan_window_lengths(cfg: FlashTTSCodecConfig) -> tuple[int, int]:
    """The window lengths FlashTTS's chunk plan makes (description.py): its first chunk with lookahead, and every
    later one with left context too (18 + 6 = 24 and 18 + 18 + 6 = 42 tokens)."""
    chunk = DESCRIPTION.chunk_plan.chunk_frames
    return chunk + cfg.lookahead_frames, cfg.left_context_frames + chunk + cfg.lookahead_frames


def serving_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A stored state dict -> ours: weight norm folded, the DiT's foreign keys dropped (`FOREIGN_PREFIXES`)."""
    foreign = tuple("transformer." + p for p in FOREIGN_PREFIXES)
    return {k: v for k, v in fold_weight_norm(state).items() if not k.startswith(foreign)}


def flashtts_state(ema_state: dict[str, torch.Tensor], generator_state: dict[str, torch.Tensor]) -> dict:
    """FlashTTS's two checkpoints (the CFM's `ema_model_state_dict`, the HiFi-GAN's `generator`) -> one state
    dict in our names, ready for `serving_state` (save it as model.safetensors beside our config.json)."""
    state = {k.removeprefix("ema_model."): v for k, v in ema_state.items() if k not in ("initted", "step")}
    state = {k: v for k, v in state.items() if k.startswith("transformer.")}
    return {**state, **{"vocoder." + k: v for k, v in generator_state.items()}}


def noise_table(cfg: FlashTTSCodecConfig) -> torch.Tensor:
    """[noise_tokens * mel_per_token, mel_dim] float32 N(0, 1), from `noise_seed` on the CPU."""
    generator = torch.Generator().manual_seed(cfg.noise_seed)
    rows = cfg.noise_tokens * cfg.flow.mel_per_token
    return torch.randn(rows, cfg.flow.mel_dim, generator=generator, device="cpu")


@torch.no_grad()
def init_codec_weights(codec: nn.Module, seed: int) -> None:
    """Deterministic init in module order: N(0, 1/fan_in) linear and conv weights, N(0, 1) embeddings, zero biases.
    A transposed conv's fan-in per output sample is in_channels * kernel / stride."""
    generator = torch.Generator().manual_seed(seed)
    for module in codec.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d)):
            module.weight.normal_(0.0, module.weight[0].numel() ** -0.5, generator=generator)
        elif isinstance(module, nn.ConvTranspose1d):
            fan_in = module.in_channels * module.kernel_size[0] / module.stride[0]
            module.weight.normal_(0.0, fan_in ** -0.5, generator=generator)
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, 1.0, generator=generator)
        if getattr(module, "bias", None) is not None:
            module.bias.zero_()
