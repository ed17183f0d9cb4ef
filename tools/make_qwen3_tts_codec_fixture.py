"""Write the golden fixture for the Qwen3-TTS codec decoder from the reference package.

Run with the reference venv (qwen-tts 0.1.1, transformers 4.57.3), from the repo root:

    $QWEN_TTS_VENV/bin/python tools/make_qwen3_tts_codec_fixture.py

It builds the tiny reference `Qwen3TTSTokenizerV2Model`, gives its decoder the
weights of our `build_tiny_codec_checkpoint(seed=0)` in the fixture's shape (the real
16 codebooks: `FIXTURE_SHAPE`; the tiny preset has 4), saves it with the
reference `save_pretrained` into tests/fixtures/qwen3_tts_tiny/speech_tokenizer/
and writes codes plus the reference decoder's outputs to codec_golden.npz:

    codes       [1, 100, 16] int64   longer than the sliding window (72), so the window binds
    audio_head  [1, 19200]   float32 frames 0..9 of the reference decoder forward (one pass)
    audio_tail  [1, 19200]   float32 frames 90..99 of the same pass
    last_chunk  [1, 19200]   float32 frames 90..99 of the reference chunked_decode(chunk_size=10,
                                     left_context_size=25), i.e. decoded from the window 65..99
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the reference set-up's torchaudio stub (only the 25 Hz tokenizer needs it), beside the checkout
STUBS = os.environ.get("QWEN3TTS_REFERENCE_STUBS",
                       os.path.join(os.path.dirname(REPO), "shared", "tools", "qwen3tts-reference", "stubs"))
sys.path[:0] = [STUBS, REPO]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from backend_python.models.qwen3_tts.codec import build_tiny_codec_checkpoint  # noqa: E402
from backend_python.models.qwen3_tts.codec_config import FIXTURE_SHAPE, tiny_codec_config  # noqa: E402

OUT_DIR = os.path.join(REPO, "tests", "fixtures", "qwen3_tts_tiny")
NUM_FRAMES, SEED = 100, 0
CHUNK_FRAMES, CONTEXT_FRAMES = 10, 25

# The smallest Mimi encoder the reference builds; our loader ignores encoder.* keys.
ENCODER_CONFIG = dict(hidden_size=16, num_filters=4, num_residual_layers=1, upsampling_ratios=[8, 6, 5, 4],
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=8,
                      intermediate_size=16, codebook_size=64, codebook_dim=16, num_quantizers=16,
                      num_semantic_quantizers=1, upsample_groups=16, sampling_rate=24000)


def reference_model(decoder_config: dict) -> Qwen3TTSTokenizerV2Model:
    cfg = Qwen3TTSTokenizerV2Config(encoder_config=ENCODER_CONFIG, decoder_config=decoder_config,
                                    encoder_valid_num_quantizers=16)
    cfg._attn_implementation = "eager"
    cfg.decoder_config._attn_implementation = "eager"
    return Qwen3TTSTokenizerV2Model(cfg).eval()


def load_our_decoder_weights(model: Qwen3TTSTokenizerV2Model, tiny_dir: str) -> None:
    weights = load_file(os.path.join(tiny_dir, "model.safetensors"))
    ours = {k[len("decoder."):]: v for k, v in weights.items()}
    missing, unexpected = model.decoder.load_state_dict(ours, strict=False)
    # rotary inv_freq is a non-persistent buffer, so strict loading has nothing else to miss
    assert not missing and not unexpected, (missing, unexpected)


def shrink_encoder(folder: str) -> None:
    """Keep the fixture small: the encoder's tensors are irrelevant to decoding, keep a few as decoys."""
    path = os.path.join(folder, "model.safetensors")
    weights = load_file(path)
    encoder_keys = sorted(k for k in weights if k.startswith("encoder."))
    for key in encoder_keys[3:]:
        del weights[key]
    save_file(weights, path, metadata={"format": "pt"})


def main() -> None:
    torch.manual_seed(SEED)
    with tempfile.TemporaryDirectory() as tiny_dir:
        build_tiny_codec_checkpoint(tiny_dir, seed=SEED, cfg=tiny_codec_config(**FIXTURE_SHAPE))
        with open(os.path.join(tiny_dir, "config.json")) as f:
            decoder_config = json.load(f)["decoder_config"]
        model = reference_model(decoder_config)
        load_our_decoder_weights(model, tiny_dir)

    generator = torch.Generator().manual_seed(SEED + 1)
    codes = torch.randint(0, decoder_config["codebook_size"], (1, NUM_FRAMES, 16), generator=generator)
    with torch.no_grad():
        audio = model.decoder(codes.transpose(1, 2))[:, 0]  # [1, T * 1920]
        chunked = model.decoder.chunked_decode(codes.transpose(1, 2), CHUNK_FRAMES, CONTEXT_FRAMES)[:, 0]
        via_decode = model.decode(codes, return_dict=True).audio_values[0]
    assert torch.equal(via_decode, audio[0]), "model.decode is one pass below 300 frames"
    tail = CHUNK_FRAMES * 1920  # samples of the last chunk

    folder = os.path.join(OUT_DIR, "speech_tokenizer")
    model.save_pretrained(folder)
    shrink_encoder(folder)
    np.savez(os.path.join(OUT_DIR, "codec_golden.npz"), codes=codes.numpy(), audio_head=audio[:, :tail].numpy(),
             audio_tail=audio[:, -tail:].numpy(), last_chunk=chunked[:, -tail:].numpy())
    clipped = (audio.abs() >= 1).float().mean().item()
    print(f"saved {folder}: audio std {audio.std().item():.3f}, clipped {clipped:.4f}, "
          f"chunked vs full max err {(audio - chunked).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
