"""Make tests/fixtures/voxtral_golden.pt: Voxtral-TTS's per-frame head, audio embedding and codec decoder run by
a public reference implementation on tiny random weights, for tests/unit/test_voxtral_golden.py.

The reference is the standalone PyTorch port `Flinlix/Faster-Voxtral-4B-TTS` (its `voxtral/` package: the
modules that load the official checkpoint), run here on CPU:
- `acoustic.flow_matching.FlowMatchingAudioTransformer` with `num_ode_steps = 8`, i.e. `linspace(0, 1, 8)`:
  vllm-omni's 7 Euler steps (that port's default of 7 timesteps is one step short of vllm-omni's); its noise is
  `torch.randn`, recorded here;
- `embedding.AudioTokenEmbedding`;
- `codec.decoder.CodecDecoder`, whose attention calls flash-attn: flash-attn has no CPU build, so
  `flash_attn_func` is given by vllm-omni's own fallback for it (`Attention._native_attention` in
  `voxtral_tts_audio_tokenizer.py`: ALiBi bias slope · (j - i), causal, keys i - w .. i), transcribed below.

    python tools/make_voxtral_fixture.py REFERENCE_CHECKOUT   # a checkout holding voxtral/
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "tests" / "fixtures" / "voxtral_golden.pt"

SHAPE = dict(semantic=64, levels=21, acoustic=36, dim=32, flow_layers=2, heads=4, kv_heads=2, head_dim=8,
             hidden_dim=48, steps=7, cfg=1.2, codec_dim=32, codec_hidden=48, codec_heads=4, codec_head_dim=8,
             semantic_dim=16)


def flash_attn_func(q, k, v, causal, window_size, alibi_slopes):
    """vllm-omni's SDPA fallback for flash-attn (q, k, v [B, S, H, D]; window_size (left, right))."""
    batch, length, heads, _ = q.shape
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if k.shape[1] != heads:
        k, v = k.repeat_interleave(heads // k.shape[1], dim=1), v.repeat_interleave(heads // v.shape[1], dim=1)
    positions = torch.arange(length)
    relative = positions.unsqueeze(0) - positions.unsqueeze(1)
    bias = alibi_slopes.to(q.dtype).view(heads, 1, 1) * relative.unsqueeze(0).to(q.dtype)
    if causal:
        bias = bias.masked_fill(relative.unsqueeze(0) > 0, float("-inf"))
    outside = (relative < -window_size[0]) | (relative > window_size[1])
    bias = bias.masked_fill(outside.unsqueeze(0), float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.unsqueeze(0)).transpose(1, 2)


def import_reference(checkout: Path):
    package = types.ModuleType("voxtral")  # its __init__ imports the whole server (mistral-inference, CUDA)
    package.__path__ = [str(checkout / "voxtral")]
    sys.modules["voxtral"] = package
    shim = types.ModuleType("flash_attn")
    shim.flash_attn_func = flash_attn_func
    sys.modules["flash_attn"] = shim
    from voxtral.acoustic.flow_matching import FlowMatchingAudioTransformer
    from voxtral.codec.decoder import CodecDecoder
    from voxtral.config import AcousticTransformerConfig, CodecConfig
    from voxtral.embedding import AudioTokenEmbedding
    return FlowMatchingAudioTransformer, CodecDecoder, AcousticTransformerConfig, CodecConfig, AudioTokenEmbedding


def main(checkout: str) -> None:
    from tests.unit.test_voxtral_golden import fixture_config
    from backend_python.models.voxtral.codec import VoxtralCodec
    from backend_python.models.voxtral.lm import VoxtralLM

    Flow, Decoder, FlowConfig, RefCodecConfig, Embedding = import_reference(Path(checkout))
    s, config = SHAPE, fixture_config(SHAPE)
    torch.manual_seed(0)
    ours = VoxtralLM.from_config(config, seed=3)
    codec = VoxtralCodec.from_config(config.codec, seed=4)  # weight norm on: the reference's own parametrization

    flow = Flow(FlowConfig(model_dim=s["dim"], num_layers=s["flow_layers"], head_dim=s["head_dim"],
                           hidden_dim=s["hidden_dim"], num_heads=s["heads"], num_kv_heads=s["kv_heads"],
                           input_dim=s["dim"], semantic_codebook_size=s["semantic"], acoustic_levels=s["levels"],
                           num_acoustic_codes=s["acoustic"], num_ode_steps=s["steps"] + 1,
                           classifier_free_guidance_scale=s["cfg"])).eval()
    head_state = ours.acoustic_transformer.state_dict()
    missing, unexpected = flow.load_state_dict(head_state, strict=False)
    assert not unexpected and missing == ["time_embedding.inverse_frequencies"], (missing, unexpected)
    hidden = torch.randn(6, s["dim"])
    hidden[5] *= 0.0  # an all-zero state, as the unconditional half
    noise = torch.randn(6, s["acoustic"])
    real_randn = torch.randn
    torch.randn = lambda *shape, **kw: noise.to(kw.get("dtype", torch.float32)).clone()
    try:
        with torch.no_grad():
            frame_codes = flow(hidden)
    finally:
        torch.randn = real_randn

    embedding = Embedding(s["dim"], s["semantic"], s["levels"], s["acoustic"])
    embedding.load_state_dict({"embeddings.weight": ours.audio_embeddings.weight.detach()})
    embed_codes = torch.cat((torch.randint(2, s["semantic"] + 2, (5, 1)), torch.randint(2, s["levels"] + 2, (5, 36))),
                            dim=1)
    with torch.no_grad():
        embeds = embedding(embed_codes.T[None])[0]

    decoder = Decoder(RefCodecConfig(semantic_dim=s["semantic_dim"], model_dim=s["codec_dim"],
                                     hidden_dim=s["codec_hidden"], num_heads=s["codec_heads"],
                                     num_kv_heads=s["codec_heads"], head_dim=s["codec_head_dim"],
                                     semantic_codebook_size=s["semantic"])).eval()
    missing, unexpected = decoder.load_state_dict(codec.state_dict(), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    decoder.quantizer.semantic_codebook._embedding = None
    codec_codes = torch.cat((torch.randint(0, s["semantic"], (1, 24, 1)), torch.randint(0, s["levels"], (1, 24, 36))),
                            dim=2)
    with torch.no_grad():
        audio = decoder.decode(codec_codes.transpose(1, 2))[:, 0]

    torch.save({"shape": s, "lm_state": {k: v.detach().clone() for k, v in ours.state_dict().items()
                                         if k.startswith(("acoustic_transformer.", "audio_embeddings."))},
                "codec_state": {k: v.detach().clone() for k, v in codec.state_dict().items()},
                "hidden": hidden, "noise": noise, "frame_codes": frame_codes,
                "embed_codes": embed_codes, "embeds": embeds, "codec_codes": codec_codes, "audio": audio}, OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): frame codes {frame_codes[:, :4].tolist()}")


if __name__ == "__main__":
    main(sys.argv[1])
