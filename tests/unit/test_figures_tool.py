"""tools/figures.py: job specs and the rates an `@F` job starts at."""
import pytest

from tools.figures import SERVERS, parse_job, resolve_rates, server_fields


def test_a_job_spec_parses_and_names_its_results():
    job = parse_job("voxlane:gamma:@0.8:3:2:4")
    assert (job.server, job.arrival, job.rates, job.seeds, job.width, job.max_rates) == \
        ("voxlane", "gamma", ("@0.8",), 3, 2.0, 4)
    assert job.label == "voxlane-gamma" and parse_job("timeshare:poisson:@1.5/@2:1:0:2").label == "timeshare-poisson-past"


def test_a_fixed_rate_job_is_past_capacity_whether_its_rates_are_scaled_or_absolute():
    bracket, past = parse_job("voxlane-pf:poisson:34:3:2:3"), parse_job("voxlane-pf:poisson:46/56:3:0:2")
    assert (bracket.label, past.label) == ("voxlane-pf-poisson", "voxlane-pf-poisson-past")
    assert parse_job("timeshare:poisson:28/@1.5:3:0:2").label == "timeshare-poisson-past"


@pytest.mark.parametrize("spec", ["voxlane:poisson:36:3:2", "nosuch:poisson:36:3:2:4", "voxlane:burst:36:3:2:4",
                                  "voxlane:poisson:x:3:2:4"])
def test_a_bad_spec_is_refused(spec):
    with pytest.raises(ValueError):
        parse_job(spec)


def test_scaled_rates_land_on_the_two_req_s_grid_and_need_a_capacity():
    assert resolve_rates(parse_job("voxlane:gamma:@0.8/30:3:2:4"), 34.9) == (28.0, 30.0)
    with pytest.raises(ValueError):
        resolve_rates(parse_job("voxlane:gamma:@0.8:3:2:4"), None)
    assert set(SERVERS) >= {"timeshare", "colocate", "partition", "voxlane", "voxlane-pf"}


def test_a_job_may_name_the_model_its_server_serves():
    job = parse_job("timeshare@cosyvoice3-0.5b:poisson:8/12:1:0:2")
    assert (job.config_name, job.model, job.label) == ("timeshare", "cosyvoice3-0.5b",
                                                       "timeshare_cosyvoice3-0.5b-poisson-past")
    assert parse_job("voxlane:poisson:36:3:2:4").model is None
    with pytest.raises(ValueError):
        parse_job("nosuch@cosyvoice3-0.5b:poisson:8:1:0:1")


def test_a_servers_name_may_override_its_chunk_plan_for_a_sweep():
    job = parse_job("voxlane+first=1+chunk=25+la=2+growth=none@higgs-v3-4b:poisson:12:1:0:1")
    assert (job.config_name, job.model) == ("voxlane+first=1+chunk=25+la=2+growth=none", "higgs-v3-4b")
    assert server_fields(job.config_name) == {"first_chunk_frames": 1, "chunk_frames": 25,
                                              "codec_lookahead_frames": 2, "chunk_growth": None}
    assert server_fields("timeshare+growth=2") == {"mode": SERVERS["timeshare"]["mode"], "chunk_growth": 2.0}
    for bad in ("voxlane+speed=2@higgs-v3-4b", "voxlane+first=x", "nosuch+first=1"):
        with pytest.raises(ValueError):
            parse_job(f"{bad}:poisson:12:1:0:1")


def test_a_servers_name_may_turn_the_fused_predictor_off():
    assert server_fields("voxlane+fp=0") == {"fused_predictor": False}
    assert server_fields("voxlane+fp=1") == {"fused_predictor": True}
