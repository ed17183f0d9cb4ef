"""The flow-matching codecs' DiT blocks compiled with Inductor (`--codec-compile`): the same mel as the plain
blocks, for windows of two shapes, and undone by `uncompile_blocks`; the setting reaches
the codec lanes. On the CPU (Inductor's C++ backend), tiny random weights; the first call compiles (~40 s)."""
from __future__ import annotations

import torch

from backend_python.models.cosyvoice3.codec import CosyVoice3Codec
from backend_python.models.cosyvoice3.codec_config import CosyVoice3CodecConfig
from backend_python.models.layers.dit import compile_blocks, uncompile_blocks
from backend_python.stub_common.params import LaneSettings
from server.serve import ServeConfig


def windows(shapes, seed):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 6561, (n, 1), generator=generator), c) for n, c in shapes]


def test_compiled_blocks_give_the_plain_blocks_mel():
    codec = CosyVoice3Codec.from_config(CosyVoice3CodecConfig.tiny(), device="cpu", dtype=torch.float32, seed=0)
    blocks = codec.flow.decoder.estimator.transformer_blocks
    first, second = windows(((13, 5), (10, 8)), 3), windows(((30, 5), (20, 8), (7, 0)), 4)
    plain = [codec.window_mels(first, None, [40, 7]), codec.window_mels(second, None, [40, 7, 0])]
    compile_blocks(blocks)
    try:
        compiled = [codec.window_mels(first, None, [40, 7]), codec.window_mels(second, None, [40, 7, 0])]
        assert all(block._compiled_call_impl is not None for block in blocks)
    finally:
        uncompile_blocks(blocks)
    assert all(block._compiled_call_impl is None for block in blocks)
    for expected, got in zip(plain, compiled):
        for a, b in zip(expected, got):
            torch.testing.assert_close(b, a, rtol=0, atol=1e-5)


def test_the_setting_reaches_the_lanes_on_by_default():
    assert ServeConfig().codec_compile is True
    for value in (True, False):
        config = ServeConfig(model="cosyvoice3-tiny", codec_compile=value)
        for lane in ("codec", "codec_urgent", "speechlm_lm"):
            assert LaneSettings.from_parameters(config.parameters(lane)).codec_compile is value


def test_the_cli_turns_it_off():
    import argparse

    from server.cli import _add_server_flags

    parser = argparse.ArgumentParser()
    _add_server_flags(parser)
    assert parser.parse_args([]).codec_compile is True
    assert parser.parse_args(["--no-codec-compile"]).codec_compile is False
    assert parser.parse_args(["--codec-compile"]).codec_compile is True


def test_flashtts_compiled_block_attention_gives_the_plain_audio():
    from backend_python.models.flashtts import FlashTTSCodec, FlashTTSCodecConfig

    codec = FlashTTSCodec.from_config(FlashTTSCodecConfig.tiny(), device="cpu", dtype=torch.float32, seed=0)
    blocks = codec.transformer.transformer_blocks
    batch = windows(((42, 18), (24, 0)), 7)  # the chunk plan's two windows: steady, first
    plain = codec.decode_windows(batch, None, [54, 0])
    compile_blocks(blocks)
    try:
        compiled = codec.decode_windows(batch, None, [54, 0])
    finally:
        uncompile_blocks(blocks)
    for a, b in zip(plain, compiled):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
