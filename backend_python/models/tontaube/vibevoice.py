"""TontaubeV1's resynthesis stage: DualCodec's 24 kHz waveform through the VibeVoice acoustic tokenizer.

The waveform is encoded to the tokenizer's 64-d latent (the σ-VAE's mean, no sampling: 7.5 frames/s, 3,200
samples a frame) and decoded causally, piece by piece, with a streaming cache. This is a thin wrapper over
transformers' maintained port (`transformers.models.vibevoice_acoustic_tokenizer`), checked against the reference's
vendored `modular_vibevoice_tokenizer.py` (tests/unit/test_tontaube_vibevoice.py). How the reference calls it
(its `vv_encode`, `vv_decode_streaming` and `VVDecodeEngine`):

- encode: `tokenizer.encode(wav[B, 1, N]).mean` -> [B, frames, 64], causal convolutions without a cache;
- decode: `tokenizer.decode(frames, cache=..., sample_indices=..., use_cache=True)`, one cache entry per stream.

transformers' port computes the same functions with two differences this wrapper deals with:

- the reference right-pads every strided encoder convolution's input with zeros to a whole number of strides
  (`get_extra_padding_for_conv1d`), so a waveform that is not a multiple of 3,200 samples still yields its last,
  partial frame (ceil); transformers' causal convolution drops the remainder (floor). A forward pre-hook on each
  strided encoder convolution pads as the reference does (`_pad_to_stride`).
- the reference's `decode` reads [B, frames, 64] as channels-first when frames == 64 (it permutes only when
  `latents.shape[1] != vae_dim`), so a 64-frame piece is decoded transposed. That is a reference bug; this
  wrapper always takes [B, frames, 64].

Where the reference's config asks for something transformers' port cannot build (`config_from_reference`),
loading fails rather than computing something else.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..layers.empty_weights import empty_weights
from ..optional_imports import hide_unimportable_optional_packages

SAMPLE_RATE = 24000
HOP_LENGTH = 3200  # samples a latent frame (7.5 Hz)
LATENT_DIM = 64
REFERENCE_PREFIX = "model.acoustic_tokenizer."  # the acoustic tokenizer's names inside VibeVoice-1.5B
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"  # a tokenizer folder (`AcousticResynth.from_dir`)
STREAM_SIDES = ("encoder", "decoder")  # the halves whose causal convolutions keep tails (`resynth_stream`)

# VibeVoice-1.5B's `acoustic_tokenizer_config` (its config.json), in the reference's fields
VIBEVOICE_1P5B_ACOUSTIC = {
    "channels": 1, "causal": True, "vae_dim": 64, "fix_std": 0.5, "std_dist_type": "gaussian",
    "corpus_normalize": 0.0, "mixer_layer": "depthwise_conv", "conv_norm": "none", "pad_mode": "constant",
    "disable_last_norm": True, "layernorm": "RMSNorm", "layernorm_eps": 1e-5, "layernorm_elementwise_affine": True,
    "conv_bias": True, "layer_scale_init_value": 1e-6, "weight_init_value": 1e-2,
    "encoder_n_filters": 32, "encoder_ratios": [8, 5, 5, 4, 2, 2], "encoder_depths": "3-3-3-3-3-3-8",
    "decoder_n_filters": 32, "decoder_ratios": [8, 5, 5, 4, 2, 2], "decoder_depths": None,
}
# The tests' tiny size: one filter doubling through six stages, the ratios (product 3,200) in the other order
# than VibeVoice's so that the narrow stages carry the long kernels, blocks only at 2 to 16 channels (a
# one-channel RMSNorm is about sign(x): it magnifies rounding), latents of 8 (a frame count the tests avoid but
# for the test of the reference's 64-frame quirk).
TINY_REFERENCE = {**VIBEVOICE_1P5B_ACOUSTIC, "vae_dim": 8, "encoder_n_filters": 1, "decoder_n_filters": 1,
                  "encoder_ratios": [2, 2, 4, 5, 5, 8], "decoder_ratios": [2, 2, 4, 5, 5, 8],
                  "encoder_depths": "0-2-1-1-1-0-0"}
# what transformers' port always builds: the reference's options it has no switch for
FIXED_OPTIONS = {"causal": True, "mixer_layer": "depthwise_conv", "conv_norm": "none", "pad_mode": "constant",
                 "disable_last_norm": True, "layernorm": "RMSNorm", "layernorm_elementwise_affine": True,
                 "conv_bias": True, "kernel_size": 7, "last_kernel_size": 7}


def _tokenizer_module():
    """transformers' `vibevoice_acoustic_tokenizer` modeling module (imported when first needed: it is heavy)."""
    hide_unimportable_optional_packages()  # before transformers' modeling code loads (a scipy built for numpy 2)
    from transformers.models.vibevoice_acoustic_tokenizer import modeling_vibevoice_acoustic_tokenizer

    return modeling_vibevoice_acoustic_tokenizer


def _depths(depths) -> list[int]:
    """The reference writes depths as "3-3-8" or a list."""
    return [int(d) for d in depths.split("-")] if isinstance(depths, str) else [int(d) for d in depths]


def _unsupported(reference: dict) -> list[str]:
    """The reference options that transformers' port cannot express, as readable differences."""
    problems = [f"{k}={reference[k]!r} (transformers builds {v!r})"
                for k, v in FIXED_OPTIONS.items() if k in reference and reference[k] != v]
    if not reference.get("layer_scale_init_value", 0) > 0:
        problems.append("layer_scale_init_value <= 0 (the reference then has no gamma; transformers always has)")
    if reference.get("decoder_n_filters", reference["encoder_n_filters"]) != reference["encoder_n_filters"]:
        problems.append("decoder_n_filters != encoder_n_filters")
    if reference.get("decoder_ratios") not in (None, reference["encoder_ratios"]):
        problems.append("decoder_ratios != encoder_ratios")
    decoder_depths = reference.get("decoder_depths")
    if decoder_depths is not None and _depths(decoder_depths) != _depths(reference["encoder_depths"])[::-1]:
        problems.append("decoder_depths != reversed encoder_depths")
    return problems


def config_from_reference(reference: dict):
    """transformers' `VibeVoiceAcousticTokenizerConfig` of a reference `acoustic_tokenizer_config`.

    Field by field, as transformers' conversion script maps them: the encoder runs `encoder_ratios` reversed
    (`downsampling_ratios`; the decoder runs them in order), `vae_dim` is `hidden_size`, `layernorm_eps` is
    `rms_norm_eps`, and the reference's gaussian sampling scale `fix_std / 0.8` is `vae_std` (unused here: we
    take the mean). Raises ValueError for options transformers cannot build.
    """
    problems = _unsupported(reference)
    if problems:
        raise ValueError("transformers' VibeVoice acoustic tokenizer cannot build: " + "; ".join(problems))
    from transformers import VibeVoiceAcousticTokenizerConfig

    return VibeVoiceAcousticTokenizerConfig(
        channels=reference["channels"], hidden_size=reference["vae_dim"], kernel_size=7,
        rms_norm_eps=reference["layernorm_eps"], layer_scale_init_value=reference["layer_scale_init_value"],
        num_filters=reference["encoder_n_filters"], downsampling_ratios=list(reversed(reference["encoder_ratios"])),
        depths=_depths(reference["encoder_depths"]), vae_std=reference["fix_std"] / 0.8)


def full_config():
    """VibeVoice-1.5B's acoustic tokenizer (the one TontaubeV1 extracts) in transformers' fields."""
    return config_from_reference(VIBEVOICE_1P5B_ACOUSTIC)


def tiny_config():
    """A tiny acoustic tokenizer for tests: the same hop (3,200 samples) and stage count, 37k parameters."""
    return config_from_reference(TINY_REFERENCE)


def encoder_lookback(config) -> int:
    """Samples before a latent frame's first sample that its mean reads (the encoder's receptive field reaches
    back this far; it reads forward to its frame's last sample): 31,390 for `tiny_config`, 185,562 (58 frames)
    for VibeVoice-1.5B's.

    Exact index arithmetic over the causal stack: a k-tap convolution (the stem, each ConvNeXt block's depthwise
    mixer, the head) reads k - 1 elements back at its rate; a strided convolution of kernel 2r, stride r, left
    padding r makes output t from inputs r·t - r … r·t + r - 1 (its own block and the one before)."""
    k, depths, ratios = config.kernel_size, list(config.depths), list(config.downsampling_ratios)
    index = -(k - 1)  # latent 0's first input to the head
    for stage in reversed(range(len(ratios))):
        index -= depths[stage + 1] * (k - 1)
        index = index * ratios[stage] - ratios[stage]
    return -(index - (k - 1) * (1 + depths[0]))


def _decoder_first_latent(config, sample: int) -> int:
    """The first latent frame output `sample` reads: a causal transposed convolution of kernel 2r, stride r
    (its last r outputs trimmed) makes output m from inputs floor(m / r) - 1 and floor(m / r)."""
    k, depths, ratios = config.kernel_size, list(reversed(config.depths)), list(reversed(config.downsampling_ratios))
    index = sample - (k - 1)  # the head
    for stage in reversed(range(len(ratios))):
        index -= depths[stage + 1] * (k - 1)
        index = index // ratios[stage] - 1
    return index - (k - 1) * (1 + depths[0])  # the stem's convolution and blocks


def lookback_samples(config) -> int:
    """Samples before an output sample that decoding the encoded waveform reads: max over a frame's 3,200 phases
    of sample - (the first waveform sample it depends on). Both halves are causal stacks, so a waveform whose
    first sample is a frame boundary of the stream reproduces the streamed output for every sample at least this
    far after its start (up to rounding). 65,979 samples (20.6 frames) for `tiny_config` (the autograd measure:
    tests/unit/test_tontaube_codec.py); 374,323 (117.0 frames, 15.6 s: the encoder's 185,562 plus the decoder's
    188,761) for VibeVoice-1.5B's, mostly at 7.5 Hz: the encoder's last stage (8 blocks) and head, and the decoder's
    stem convolution and 8 blocks, each read 9 × 6 frames back. The maximum is at phase 3,161 (tiny: 2,589)."""
    hop = config.hop_length  # the stack repeats every frame (a shift by one frame shifts every index with it)
    return encoder_lookback(config) + max(sample - hop * _decoder_first_latent(config, sample) for sample in range(hop))


def _stage(side: str, index: int) -> str:
    """The reference's stage `index` (0: the stem) in transformers' names."""
    return f"{side}.stem" if index == 0 else f"{side}.conv_layers.{index - 1}"


def reference_key(key: str) -> str:
    """transformers' name of one reference parameter (as transformers' conversion script renames them).

    encoder.downsample_layers.0.0.conv.conv.*   -> encoder.stem.conv.conv.*
    encoder.downsample_layers.{i}.0.conv.conv.* -> encoder.conv_layers.{i-1}.conv.conv.*
    decoder.upsample_layers.0.0.conv.conv.*     -> decoder.stem.conv.conv.*
    decoder.upsample_layers.{i}.0.convtr.convtr.* -> decoder.conv_layers.{i-1}.convtr.convtr.*
    {side}.stages.0.{j}.*                       -> {side}.stem.stage.{j}.*
    {side}.stages.{i}.{j}.*                     -> {side}.conv_layers.{i-1}.stage.{j}.*
      (within a block: mixer.conv.conv.conv.* -> mixer.conv.*; norm, ffn_norm, ffn.linear1/2, gamma, ffn_gamma kept)
    {side}.head.conv.conv.*                     -> {side}.head.conv.*
    """
    if m := re.fullmatch(r"(encoder)\.downsample_layers\.(\d+)\.0\.(conv\.conv\.\w+)", key) or \
            re.fullmatch(r"(decoder)\.upsample_layers\.(\d+)\.0\.((?:conv\.conv|convtr\.convtr)\.\w+)", key):
        return f"{_stage(m[1], int(m[2]))}.{m[3]}"
    if m := re.fullmatch(r"(encoder|decoder)\.stages\.(\d+)\.(\d+)\.(.+)", key):
        block = re.sub(r"^mixer\.conv\.conv\.conv\.", "mixer.conv.", m[4])
        return f"{_stage(m[1], int(m[2]))}.stage.{m[3]}.{block}"
    if m := re.fullmatch(r"(encoder|decoder)\.head\.conv\.conv\.(\w+)", key):
        return f"{m[1]}.head.conv.{m[2]}"
    raise KeyError(f"not a VibeVoice acoustic tokenizer parameter: {key}")


def from_reference_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A reference acoustic tokenizer's state dict under transformers' names.

    Takes the tokenizer's own names (`encoder.*`, `decoder.*`: the reference model's `state_dict()`, or the
    acoustic tokenizer TontaubeV1 extracts) or VibeVoice-1.5B's whole state, of which only
    `model.acoustic_tokenizer.*` is kept.
    """
    if any(k.startswith(REFERENCE_PREFIX) for k in state):
        state = {k.removeprefix(REFERENCE_PREFIX): v for k, v in state.items() if k.startswith(REFERENCE_PREFIX)}
    return {reference_key(k): v for k, v in state.items()}


def _pad_to_stride(conv: nn.Module, args: tuple, kwargs: dict):
    """Forward pre-hook: right-pad a strided convolution's input with zeros to a whole number of strides, as the
    reference's non-streaming `SConv1d` does (for kernel 2·stride its extra padding is exactly that). A streamed
    piece of whole frames needs none; a partial piece is padded as a waveform ending there is (its cache then
    holds the padding: no piece may follow it, `AcousticResynth.resynth_stream`)."""
    hidden = args[0]
    extra = -hidden.shape[-1] % conv.conv.stride[0]
    if extra == 0:
        return None
    return (nn.functional.pad(hidden, (0, extra)), *args[1:]), kwargs


def is_reference_dir(path: Path) -> bool:
    """Whether a folder's config.json is the reference's `acoustic_tokenizer_config` (TontaubeV1's extraction)
    rather than transformers' config."""
    return "encoder_ratios" in json.loads((Path(path) / CONFIG_FILE).read_text(encoding="utf-8"))


def read_dir_config(path: str | Path):
    """The transformers config of a VibeVoice acoustic tokenizer folder, its weights unread: config.json in the
    reference's fields (`config_from_reference`) or in transformers' (`save_pretrained`)."""
    fields = json.loads((Path(path) / CONFIG_FILE).read_text(encoding="utf-8"))
    if "encoder_ratios" in fields:
        return config_from_reference(fields)
    from transformers import VibeVoiceAcousticTokenizerConfig

    return VibeVoiceAcousticTokenizerConfig.from_dict(fields)


@dataclass
class DecodeStream:
    """One stream's causal decoder state: transformers' per-convolution padding cache (the last inputs each
    convolution needs, made on the first piece), the batch it was made for, and the frames decoded so far."""

    cache: object
    batch: int | None = None
    frames: int = 0


class AcousticResynth:
    """Encode a waveform to the acoustic tokenizer's mean latents; decode latents whole or streamed.

    Wraps a transformers `VibeVoiceAcousticTokenizerModel` (eval mode; it installs `_pad_to_stride` on the
    encoder's strided convolutions). Inputs are cast to the model's dtype; latents come back in it and audio in
    float32 (as the reference's `vv_decode_streaming` returns it), on the model's device.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model.eval()
        for layer in model.encoder.conv_layers:
            layer.conv.register_forward_pre_hook(_pad_to_stride, with_kwargs=True)

    @classmethod
    def from_config(cls, config, dtype: torch.dtype = torch.float32, device: str = "cpu") -> AcousticResynth:
        """Random weights (transformers' initialisation) at `config`'s size."""
        model = _tokenizer_module().VibeVoiceAcousticTokenizerModel(config)
        return cls(model.to(device=device, dtype=dtype))

    @classmethod
    def random(cls, config, seed: int = 0, layer_scale: float = 0.2, bias_std: float = 0.3,
               gain: float = 1.0) -> AcousticResynth:
        """Random weights at `config`'s size, deterministic in `seed`, that carry a waveform through at speech
        level (float32, cpu; built on the meta device first: transformers' own init of VibeVoice-1.5B's 687M
        parameters takes seconds, and its N(0, 0.01) weights shrink every stage: a random tokenizer's output is
        ~1e-22, all denormals). Convolutions and linears N(0, 1 / fan-in); biases N(0, `bias_std`), which keep the
        narrow stages' activations off zero, where an RMSNorm over 2 channels is about sign(x) and turns a small
        change of its input into a large one (zero biases: 10x the input's change); unit norms; the ConvNeXt
        blocks' layer scales `layer_scale` (transformers' 1e-6 leaves them all but identities); the decoder's head
        scaled so that noise at speech level (0.2) comes out `gain` times as loud."""
        module = _tokenizer_module()
        with empty_weights():
            model = module.VibeVoiceAcousticTokenizerModel(config)
        model.to_empty(device="cpu")
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for layer in model.modules():
                if isinstance(layer, (nn.Conv1d, nn.ConvTranspose1d, nn.Linear)):
                    if isinstance(layer, nn.Linear):
                        fan_in = layer.in_features
                    elif isinstance(layer, nn.ConvTranspose1d):  # each output reads kernel / stride inputs
                        fan_in = layer.in_channels * layer.kernel_size[0] // layer.stride[0]
                    else:
                        fan_in = layer.in_channels // layer.groups * layer.kernel_size[0]
                    layer.weight.normal_(0.0, fan_in ** -0.5, generator=generator)
                    layer.bias.normal_(0.0, bias_std, generator=generator)
                elif isinstance(layer, module.VibeVoiceAcousticTokenizerRMSNorm):
                    layer.weight.fill_(1.0)
                elif isinstance(layer, module.VibeVoiceAcousticTokenizerConvNext1dLayer):
                    layer.gamma.fill_(layer_scale)
                    layer.ffn_gamma.fill_(layer_scale)
            resynth = cls(model)
            probe = 0.2 * torch.randn(1, 4 * config.hop_length, generator=generator)  # about speech level
            head = model.decoder.head.conv
            scale = gain * probe.std() / resynth.decode(resynth.encode_mean(probe)).std().clamp_min(1e-12)
            head.weight.mul_(scale)
            head.bias.mul_(scale)
        return resynth

    @classmethod
    def from_reference_state(cls, reference_config: dict, state: dict[str, torch.Tensor],
                             dtype: torch.dtype = torch.float32, device: str = "cpu") -> AcousticResynth:
        """The reference's config (its fields) and weights (its names), loaded strictly."""
        resynth = cls.from_config(config_from_reference(reference_config), dtype, device)
        resynth.model.load_state_dict(from_reference_state(state), strict=True)
        return resynth

    @classmethod
    def from_reference_dir(cls, path: str | Path, dtype: torch.dtype = torch.float32,
                           device: str = "cpu") -> AcousticResynth:
        """The folder TontaubeV1 extracts from VibeVoice-1.5B: `config.json` (the reference's
        `acoustic_tokenizer_config`) and `model.safetensors` (the reference's names, prefix removed)."""
        from safetensors.torch import load_file

        path = Path(path)
        reference = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
        return cls.from_reference_state(reference, load_file(str(path / WEIGHTS_FILE)), dtype, device)

    @classmethod
    def from_dir(cls, path: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> AcousticResynth:
        """A VibeVoice acoustic tokenizer folder of either layout `read_dir_config` reads: the reference's extracted
        one (`from_reference_dir`) or transformers' `save_pretrained` one (its names, loaded strictly)."""
        path = Path(path)
        if is_reference_dir(path):
            return cls.from_reference_dir(path, dtype, device)
        from safetensors.torch import load_file

        with empty_weights():  # no init: every weight comes from the folder
            model = _tokenizer_module().VibeVoiceAcousticTokenizerModel(read_dir_config(path))
        index = path / (WEIGHTS_FILE + ".index.json")  # a sharded save_pretrained
        files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else [WEIGHTS_FILE]
        state = {k: v for name in files for k, v in load_file(str(path / name)).items()}
        model.load_state_dict(state, strict=True, assign=True)
        return cls(model.to(device=device, dtype=dtype))

    def save_dir(self, path: str | Path) -> None:
        """transformers' `save_pretrained` layout (config.json in its fields, model.safetensors in its names)."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.config.to_json_file(str(path / CONFIG_FILE))
        save_file({k: v.contiguous() for k, v in self.model.state_dict().items()}, str(path / WEIGHTS_FILE))

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def hop_length(self) -> int:
        return self.model.config.hop_length

    @property
    def latent_dim(self) -> int:
        return self.model.config.hidden_size

    @torch.no_grad()
    def encode_mean(self, audio: torch.Tensor) -> torch.Tensor:
        """audio [B, samples] -> the σ-VAE's mean [B, ceil(samples / hop), latent_dim] (no sampling)."""
        if audio.dim() != 2:
            raise ValueError(f"audio must be [batch, samples], got {tuple(audio.shape)}")
        wav = audio.to(self.device, self.dtype)[:, None]
        return self.model.encode(wav, sample=False).latents

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [B, n, latent_dim] -> audio [B, n * hop], all at once (causal: equals a streamed decode)."""
        return self.model.decode(self._latents(latents)).audio[:, 0].float()

    def start_stream(self) -> DecodeStream:
        """A fresh decoder state for one stream (of any batch, fixed at its first piece)."""
        return DecodeStream(cache=_tokenizer_module().VibeVoiceAcousticTokenizerConv1dPaddingCache())

    @torch.no_grad()
    def decode_stream(self, stream: DecodeStream, latents: torch.Tensor) -> torch.Tensor:
        """The next piece of a stream: latents [B, n, latent_dim] -> audio [B, n * hop].

        Pieces decoded in turn equal the whole sequence decoded at once. An empty piece returns no samples and
        leaves the state alone (transformers' transposed convolution would return its whole cache for it).
        """
        latents = self._latents(latents)
        if stream.batch is not None and latents.shape[0] != stream.batch:
            raise ValueError(f"this stream decodes a batch of {stream.batch}, got {latents.shape[0]}")
        if latents.shape[1] == 0:
            return torch.zeros(latents.shape[0], 0, device=self.device)
        stream.batch = latents.shape[0]
        audio = self.model.decode(latents, padding_cache=stream.cache, use_cache=True).audio
        stream.frames += latents.shape[1]
        return audio[:, 0].float()

    def new_stream_tails(self) -> dict[str, torch.Tensor]:
        """A stream's encoder and decoder state before its first sample: every causal convolution's left tail
        ("encoder.<cache key>", "decoder.<cache key>": [1, in_channels, left_pad]), zeros as its causal padding."""
        return {f"{side}.{conv.cache_key}": torch.zeros(1, conv.in_channels, conv.left_pad, device=self.device,
                                                       dtype=self.dtype)
                for side in STREAM_SIDES for conv in self._cached_convs(side)}

    @torch.no_grad()
    def resynth_stream(self, tails: dict[str, torch.Tensor],
                       audio: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The next piece of B streams' waveforms through the encoder's mean latents and the decoder, each row
        continuing its tails ([B, ...] each, as `new_stream_tails` stacked): audio [B, N] -> (audio [B, ceil(N /
        hop) · hop] float32, the tails after it). Pieces of whole frames decoded in turn equal the whole waveform's
        `decode(encode_mean(...))`; a partial piece is padded as the whole waveform's end is, so it must be the
        stream's last (its tails are not a stream's state). The input tails are not modified."""
        if audio.dim() != 2:
            raise ValueError(f"audio must be [batch, samples], got {tuple(audio.shape)}")
        caches = {side: self._padding_cache(side, tails) for side in STREAM_SIDES}
        wav = audio.to(self.device, self.dtype)[:, None]
        latents = self.model.encode(wav, padding_cache=caches["encoder"], use_cache=True, sample=False).latents
        decoded = self.model.decode(latents, padding_cache=caches["decoder"], use_cache=True).audio[:, 0].float()
        return decoded, {f"{side}.{key}": layer.cache for side, cache in caches.items()
                         for key, layer in cache.layers.items()}

    def _cached_convs(self, side: str) -> list[nn.Module]:
        """The causal (transposed) convolutions of one half that keep a tail when streamed."""
        return [m for m in getattr(self.model, side).modules() if hasattr(m, "cache_key") and hasattr(m, "left_pad")]

    def _padding_cache(self, side: str, tails: dict[str, torch.Tensor]):
        """transformers' padding cache of one half, holding copies of `tails` (its update writes in place)."""
        module = _tokenizer_module()
        cache = module.VibeVoiceAcousticTokenizerConv1dPaddingCache()
        for conv in self._cached_convs(side):
            layer = module.VibeVoiceAcousticTokenizerConv1dCacheLayer()
            layer.cache = tails[f"{side}.{conv.cache_key}"].to(self.device, self.dtype).clone()
            layer.left_pad, layer.in_channels, layer.is_initialized = conv.left_pad, conv.in_channels, True
            cache.layers[conv.cache_key] = layer
        return cache

    def _latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Checked [B, n, latent_dim] latents in the model's dtype and device."""
        if latents.dim() != 3 or latents.shape[-1] != self.latent_dim:
            raise ValueError(f"latents must be [batch, frames, {self.latent_dim}], got {tuple(latents.shape)}")
        return latents.to(self.device, self.dtype)
