"""Several servers on one host: replicated per GPU (or per cpu replica) and the disaggregated layout."""
from __future__ import annotations

import os

import pytest

from backend_python.stub_common.params import LaneSettings
from server.mps import MpsDaemon
from server.fleet import FleetConfig
from server.serve import ServeConfig, render_repository
from server.triton_launch import Ports

CUDA = ServeConfig(model="qwen3-tts-1.7b", device="cuda", ports=Ports(8000, 8001, 8002))


def test_replicate_gives_each_gpu_a_whole_server_on_its_own_ports():
    servers = FleetConfig(server=CUDA, gpus=("2", "3")).server_configs()
    assert [s.gpus for s in servers] == [("2",), ("3",)]
    assert [s.ports for s in servers] == [Ports(8000, 8001, 8002), Ports(8010, 8011, 8012)]
    assert all(s.codec_gpu == 0 and s.sm_percentage("speechlm_lm") == ServeConfig().lm_sm_pct for s in servers)


def test_cpu_replicas_inherit_the_environment():
    servers = FleetConfig(server=ServeConfig(), replicas=3).server_configs()
    assert [s.ports.grpc for s in servers] == [8001, 8011, 8021] and all(s.gpus == () for s in servers)
    assert servers[0].server_env(has_mps=False) == {}


def test_server_env_names_physical_gpus_or_the_mps_daemons_renumbered_ones():
    server = FleetConfig(server=CUDA, gpus=("2", "3"), layout="disaggregate").server_configs()[0]
    assert server.server_env(has_mps=False) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert server.server_env(has_mps=True) == {"CUDA_VISIBLE_DEVICES": "0,1"}  # the daemon sees 2,3 as 0,1


def test_disaggregate_renders_the_lm_on_the_first_gpu_and_codecs_on_the_second(tmp_path):
    server = FleetConfig(server=CUDA, gpus=("0", "1"), layout="disaggregate").server_configs()
    assert len(server) == 1
    repo = render_repository(server[0], tmp_path / "repo")
    lm = (repo / "speechlm_lm" / "config.pbtxt").read_text()
    assert "gpus: [ 0 ]" in lm and 'key: "pin_gpu" value: { string_value: "true" }' in lm
    assert 'key: "mps_active_thread_percentage" value: { string_value: "100" }' in lm  # a GPU of its own
    for lane, pct in (("codec", str(ServeConfig().codec_sm_pct)), ("codec_urgent", "100")):
        text = (repo / lane / "config.pbtxt").read_text()
        assert "gpus: [ 1 ]" in text
        assert f'key: "mps_active_thread_percentage" value: {{ string_value: "{pct}" }}' in text


def test_replicated_servers_do_not_pin(tmp_path):
    repo = render_repository(FleetConfig(server=CUDA, gpus=("1",)).server_configs()[0], tmp_path / "repo")
    for lane in ("speechlm_lm", "codec", "codec_urgent"):
        assert 'key: "pin_gpu" value: { string_value: "false" }' in (repo / lane / "config.pbtxt").read_text()


@pytest.mark.parametrize("kwargs", [
    {"server": CUDA, "gpus": ("0",), "layout": "disaggregate"},
    {"server": CUDA, "gpus": ("0", "1", "2"), "layout": "disaggregate"},
    {"server": ServeConfig(), "gpus": ("0",)},
    {"server": CUDA, "replicas": 2},
    {"server": CUDA, "gpus": ("0", "0")},
    {"server": CUDA, "gpus": ("0", "1"), "layout": "pipeline"},
])
def test_bad_layouts_are_refused(kwargs):
    with pytest.raises(ValueError):
        FleetConfig(**kwargs)


def test_pinned_stub_sees_only_its_instance_gpu_as_device_0(monkeypatch):
    lane = LaneSettings(device="cuda", pin_gpu=True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert lane.device_for(lane.pin_instance_gpu("1")) == "cuda:0"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"
    unpinned = LaneSettings(device="cuda")
    assert unpinned.device_for(unpinned.pin_instance_gpu("1")) == "cuda:1"


def test_each_servers_mps_daemon_drives_only_that_servers_gpus(tmp_path):
    assert MpsDaemon(tmp_path, "3")._environ()["CUDA_VISIBLE_DEVICES"] == "3"
    assert MpsDaemon(tmp_path)._environ().get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")


def test_an_inherited_gpu_is_renumbered_for_the_mps_daemons_clients():
    """CUDA_VISIBLE_DEVICES=1 without --gpus: the daemon drives GPU 1 and calls it 0 (seen on a 2-GPU host:
    a client that kept "1" found no GPU and the server failed to start)."""
    config = ServeConfig(device="cuda")
    assert config.server_env(has_mps=True, inherited="1") == {"CUDA_VISIBLE_DEVICES": "0"}
    assert config.server_env(has_mps=True, inherited="GPU-aaaa,GPU-bbbb") == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert config.server_env(has_mps=False, inherited="1") == {}  # no daemon: inherited as is
    assert config.server_env(has_mps=True, inherited="") == {}
