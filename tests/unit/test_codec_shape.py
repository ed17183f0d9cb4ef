"""`CodecShape`: one value per codec that the `Codec` properties read, checked where it is made."""
from __future__ import annotations

import pytest

from backend_python.models.base import CodecShape
from backend_python.models.qwen3_tts.codec import Qwen3TTSCodec
from backend_python.models.qwen3_tts.codec_config import tiny_codec_config


def test_the_codec_properties_read_the_shape():
    codec = Qwen3TTSCodec.from_config(tiny_codec_config(), seed=0)
    shape = codec.shape
    assert shape == CodecShape(num_codebooks=4, codebook_size=64, sample_rate=24000, samples_per_frame=1920,
                               left_context_frames=25)
    assert (codec.num_codebooks, codec.codebook_size, codec.sample_rate, codec.samples_per_frame,
            codec.left_context_frames) == (4, 64, 24000, 1920, 25)
    assert shape.frame_rate == 12.5


@pytest.mark.parametrize("field, value", [("num_codebooks", 0), ("codebook_size", 0), ("sample_rate", 0),
                                          ("samples_per_frame", 0), ("left_context_frames", -1)])
def test_a_shape_out_of_range_is_refused(field, value):
    fields = dict(num_codebooks=7, codebook_size=4096, sample_rate=24000, samples_per_frame=2048,
                  left_context_frames=3)
    with pytest.raises(ValueError, match=field if field == "left_context_frames" else "must be >= 1"):
        CodecShape(**{**fields, field: value})
