"""tools/smoke.py's pure parts: which servers it starts and what it reads from their metrics."""
from tools.smoke import codec_latency, codec_totals, lm_account, lm_totals, parse_args, server_configs

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


LM_METRICS = """# HELP voxlane_lm_decode_seconds_total Seconds the LM lane's thread spent in decode
voxlane_lm_prefill_seconds_total{{model="speechlm_lm",version="1"}} {prefill}
voxlane_lm_decode_seconds_total{{model="speechlm_lm",version="1"}} {decode}
voxlane_lm_host_seconds_total{{model="speechlm_lm",version="1"}} 1.0
voxlane_lm_idle_seconds_total{{model="speechlm_lm",version="1"}} 5.0
voxlane_lm_step_batch_count{{model="speechlm_lm",version="1"}} {steps}
voxlane_lm_step_batch_sum{{model="speechlm_lm",version="1"}} {rows}
voxlane_lm_step_batch_bucket{{model="speechlm_lm",version="1",le="8"}} 3
"""


def test_the_lm_account_is_the_difference_over_one_level():
    before = lm_totals(LM_METRICS.format(prefill=0.5, decode=2.0, steps=100, rows=100))
    after = lm_totals(LM_METRICS.format(prefill=0.7, decode=2.8, steps=180, rows=740))
    assert before == {"prefill": 0.5, "decode": 2.0, "host": 1.0, "idle": 5.0, "steps": 100.0, "rows": 100.0}
    assert lm_account(before, after) == {"lm_prefill_s": 0.2, "lm_decode_s": 0.8, "lm_host_s": 0.0, "lm_idle_s": 0.0,
                                         "lm_steps": 80, "lm_rows_mean": 8.0, "lm_decode_ms_per_step": 10.0}


def test_a_server_without_an_lm_account_adds_nothing():
    assert lm_account({}, lm_totals(METRICS.format(urgent_sum=1.0, urgent_count=1))) == {}
