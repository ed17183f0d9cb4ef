"""tools/smoke.py's pure parts: which servers it starts and what it reads from their metrics."""
from tools.smoke import codec_latency, codec_totals, parse_args, server_configs

METRICS = """# HELP voxlane_codec_ms codec call latency
voxlane_codec_ms_sum{{lane="urgent"}} {urgent_sum}
voxlane_codec_ms_count{{lane="urgent"}} {urgent_count}
voxlane_codec_ms_sum{{lane="background"}} 40.0
voxlane_codec_ms_count{{lane="background"}} 4
"""


def test_one_server_per_model_mode_and_first_chunk_size():
    args = parse_args(["--models", "qwen3-tts-tiny", "csm-tiny", "--modes", "voxlane", "timeshare",
                       "--first-chunk-frames", "1", "2"])
    configs = server_configs(args)
    assert [(c.model, c.mode.value, c.first_chunk_frames) for c in configs][:3] == [
        ("qwen3-tts-tiny", "voxlane", 1), ("qwen3-tts-tiny", "voxlane", 2), ("qwen3-tts-tiny", "timeshare", 1)]
    assert len(configs) == 8


def test_the_defaults_are_the_served_ones():
    [config] = server_configs(parse_args([]))
    assert (config.model, config.mode.value, config.chunking().first_chunk_frames) == ("qwen3-tts-tiny", "voxlane", 2)


def test_codec_latency_is_the_mean_over_one_level():
    before = codec_totals(METRICS.format(urgent_sum=10.0, urgent_count=2))
    after = codec_totals(METRICS.format(urgent_sum=40.0, urgent_count=5))
    assert codec_latency(before, after) == {"codec_ms_mean_urgent": 10.0}  # background made no call meanwhile
    assert codec_latency({}, after) == {"codec_ms_mean_urgent": 8.0, "codec_ms_mean_background": 10.0}
