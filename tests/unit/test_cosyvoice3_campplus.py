"""CosyVoice 3's speaker encoder (CAM++, `CampPlusEncoder`): the Kaldi fbank front end, the network batched over
variable lengths, checkpoints (ours and CosyVoice's campplus.onnx), and a golden from the reference
(tools/make_cosyvoice3_campplus_fixture.py: 3D-Speaker's CAMPPlus exported to ONNX and run by ONNX Runtime on
kaldi-native-fbank's fbank, on our tiny random weights)."""
from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from backend_python.models.cosyvoice3 import fbank as kaldi
from backend_python.models.cosyvoice3.campplus import segment_means, statistics_pooling
from backend_python.models.cosyvoice3.campplus_onnx import onnx_scope
from backend_python.models.cosyvoice3.voice_encoder import (CONFIG_FILE, ONNX_FILE, SPEAKER_EMBEDDING, WEIGHTS_FILE,
                                                            CampPlusConfig, CampPlusEncoder)
from backend_python.models.onnx_io import read_onnx
from tests.golden import assert_float32_close, num_layers

torch.set_flush_denormal(True)
torch.set_num_threads(1)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cosyvoice3_campplus_tiny"
SAMPLE_RATE = 16000
FBANK_ATOL = 5e-4  # observed 8e-5: float32 FFT rounding in bins ~1e-6 of a frame's loudest, in both implementations
PIPELINE_ATOL = 1e-4  # observed 1.6e-5: the fbank's differences carried through the network
BATCH_ATOL = 1e-5  # observed 7e-7 (norms ~10): padded convs pick other kernels than unpadded ones
FULL_192_PARAMETERS = 6_848_544  # 3D-Speaker's CAMPPlus(feat_dim=80, embedding_size=192); 937 state-dict tensors
FULL_512_PARAMETERS = 7_176_224  # embedding_size=512: the "7.2 M" of the CAM++ paper


@pytest.fixture(scope="module")
def golden() -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v) for k, v in np.load(FIXTURE / "golden.npz").items()}


@pytest.fixture(scope="module")
def tiny() -> CampPlusEncoder:
    return CampPlusEncoder.from_config(CampPlusConfig.tiny(), seed=0)


def voice(f0: float, tilt: float, seed: int, num_samples: int) -> torch.Tensor:
    """A vibrato harmonic tone (harmonic k at 1 / k^tilt) plus a little noise: [num_samples] float32."""
    t = torch.arange(num_samples, dtype=torch.float64) / SAMPLE_RATE
    phase = 2 * math.pi * torch.cumsum(f0 * (1 + 0.05 * torch.sin(2 * math.pi * 3 * t)), 0) / SAMPLE_RATE
    harmonics = sum(torch.sin(k * phase) / k ** tilt for k in range(1, 30))
    noise = torch.randn(num_samples, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (0.1 * harmonics + 0.003 * noise).float()


def embeddings(encoder: CampPlusEncoder, audio: list[torch.Tensor]) -> list[torch.Tensor]:
    return [out[SPEAKER_EMBEDDING] for out in encoder.encode(audio, [True] * len(audio))]


# ---- the fbank front end -------------------------------------------------------------------------
def banks() -> torch.Tensor:
    return kaldi.mel_banks(80, SAMPLE_RATE)


@pytest.mark.parametrize("num_samples, num_frames", [(399, 0), (400, 1), (559, 1), (560, 2), (16000, 98)])
def test_fbank_keeps_whole_25ms_frames_every_10ms(num_samples, num_frames):
    assert kaldi.num_frames(num_samples, SAMPLE_RATE) == num_frames
    assert kaldi.fbank(torch.zeros(num_samples), banks(), SAMPLE_RATE).shape == (num_frames, 80)


def test_fbank_matches_kaldi_native_fbank(golden):
    ours = kaldi.fbank(golden["waveform"], banks(), SAMPLE_RATE)
    torch.testing.assert_close(ours, golden["fbank"], atol=FBANK_ATOL, rtol=0)


def test_fbank_matches_kaldi_native_fbank_on_noise():
    knf = pytest.importorskip("kaldi_native_fbank")  # the fixture's generator's dependency, not ours
    opts = knf.FbankOptions()
    opts.frame_opts.dither, opts.frame_opts.window_type, opts.mel_opts.num_bins = 0.0, "povey", 80
    opts.mel_opts.low_freq, opts.mel_opts.high_freq = 20.0, 0.0
    audio = 0.1 * torch.randn(5000, generator=torch.Generator().manual_seed(3))
    reference = knf.OnlineFbank(opts)
    reference.accept_waveform(SAMPLE_RATE, audio.tolist())
    reference.input_finished()
    expected = torch.tensor(np.stack([reference.get_frame(i) for i in range(reference.num_frames_ready)]))
    torch.testing.assert_close(kaldi.fbank(audio, banks(), SAMPLE_RATE), expected, atol=FBANK_ATOL, rtol=0)


@pytest.mark.parametrize("hz", [300.0, 1000.0, 3000.0])
def test_a_pure_tone_peaks_in_the_bin_centred_nearest_it(hz):
    tone = 0.5 * torch.sin(2 * math.pi * hz * torch.arange(8000, dtype=torch.float64) / SAMPLE_RATE).float()
    peak = kaldi.fbank(tone, banks(), SAMPLE_RATE).mean(dim=0).argmax().item()
    low, high = kaldi.kaldi_mel(kaldi.LOW_FREQ_HZ), kaldi.kaldi_mel(SAMPLE_RATE / 2)
    centres = [low + (b + 1) * (high - low) / 81 for b in range(80)]
    assert peak == min(range(80), key=lambda b: abs(centres[b] - kaldi.kaldi_mel(hz)))


def test_twice_the_amplitude_is_four_times_the_power():
    audio = voice(150.0, 1.0, seed=0, num_samples=4000)
    quiet, loud = (kaldi.fbank(a, banks(), SAMPLE_RATE) for a in (audio, 2 * audio))
    torch.testing.assert_close(loud - quiet, torch.full_like(quiet, math.log(4.0)), atol=1e-4, rtol=0)


def test_utterance_features_subtract_each_utterance_mean_and_pad_with_zeros():
    audio = [voice(120.0, 1.0, seed=1, num_samples=n) for n in (1000, 3000)]
    feats, lengths = kaldi.utterance_features(audio, banks(), SAMPLE_RATE)
    assert lengths.tolist() == [4, 17] and feats.shape == (2, 17, 80)
    alone = kaldi.fbank(audio[0], banks(), SAMPLE_RATE)
    torch.testing.assert_close(feats[0, :4], alone - alone.mean(dim=0), atol=1e-6, rtol=0)
    assert feats[0, :4].mean(dim=0).abs().max() < 1e-5 and not feats[0, 4:].any()


# ---- the network ---------------------------------------------------------------------------------
def test_segment_means_are_3d_speakers_ceil_mode_average_pooling():
    x = torch.randn(2, 3, 23, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 1, 23)
    pooled = F.avg_pool1d(x, kernel_size=8, stride=8, ceil_mode=True)  # the last segment has 7 frames
    expected = pooled.unsqueeze(-1).expand(*pooled.shape, 8).reshape(2, 3, -1)[..., :23]
    torch.testing.assert_close(segment_means(x, mask, 8), expected)
    padded, row_mask = F.pad(x[:1, :, :10], (0, 13)), (torch.arange(23) < 10).float()[None, None]
    torch.testing.assert_close(segment_means(padded, row_mask, 8)[..., :10], segment_means(x[:1, :, :10],
                                                                                          mask[:1, :, :10], 8))


def test_statistics_pooling_is_mean_and_unbiased_std_over_the_rows_frames():
    x = torch.randn(1, 4, 9, generator=torch.Generator().manual_seed(0))
    padded, mask = F.pad(x, (0, 5), value=7.0), (torch.arange(14) < 9).float()[None, None]
    torch.testing.assert_close(statistics_pooling(padded, mask), torch.cat([x.mean(-1), x.std(-1)], dim=-1))


def test_embedding_is_192_float32_on_cpu_and_deterministic(tiny):
    audio = voice(130.0, 1.0, seed=0, num_samples=12000)
    [out] = tiny.encode([audio], [False])  # x_vector_only or not: CAM++ makes only the x-vector
    assert out.keys() == {SPEAKER_EMBEDDING} and tiny.sample_rate == SAMPLE_RATE
    embedding = out[SPEAKER_EMBEDDING]
    assert embedding.shape == (192,) and embedding.dtype == torch.float32 and embedding.device.type == "cpu"
    assert torch.equal(embedding, embeddings(tiny, [audio])[0])
    assert torch.equal(embedding, embeddings(CampPlusEncoder.from_config(CampPlusConfig.tiny(), seed=0), [audio])[0])
    assert not torch.allclose(embedding, embeddings(CampPlusEncoder.from_config(CampPlusConfig.tiny(), seed=1),
                                                    [audio])[0])


def test_a_batch_of_variable_lengths_equals_each_alone(tiny):
    # 720 samples: the fewest (3 fbank frames, 2 pooled); 33333: 207 fbank frames, 104 pooled in 13 segments
    audio = [voice(100.0 + 20 * i, 1.0, seed=i, num_samples=n) for i, n in enumerate((720, 4000, 33333, 9999))]
    batch = embeddings(tiny, audio)
    for a, batched in zip(audio, batch):
        torch.testing.assert_close(batched, embeddings(tiny, [a])[0], atol=BATCH_ATOL, rtol=0)


def test_another_voice_moves_the_embedding_more_than_another_take(tiny):
    take1, take2 = voice(110.0, 1.0, seed=0, num_samples=24000), voice(110.0, 1.0, seed=1, num_samples=20000)
    other = voice(220.0, 2.0, seed=2, num_samples=24000)
    e1, e2, e3 = embeddings(tiny, [take1, take2, other])
    assert (e1 - e3).norm() > 0.3 * e1.norm() and (e1 - e3).norm() > 2 * (e1 - e2).norm()


def test_encode_refuses_short_or_malformed_audio(tiny):
    assert tiny.min_samples == 720  # 3 fbank frames: 2 after the TDNN layer for the unbiased std
    with pytest.raises(ValueError, match="N >= 720"):
        tiny.encode([torch.zeros(719)], [True])
    with pytest.raises(ValueError, match="mono"):
        tiny.encode([torch.zeros(1, 2000)], [True])
    with pytest.raises(ValueError, match="one x_vector_only flag per audio"):
        tiny.encode([torch.zeros(2000)], [])
    assert tiny.encode([], []) == []


def test_reference_tensors_declare_what_encode_returns(tiny):
    [out] = tiny.encode([voice(120.0, 1.0, seed=0, num_samples=2000)], [True])
    assert tiny.reference_tensors == {SPEAKER_EMBEDDING: ("FP32", [192])}
    assert list(out[SPEAKER_EMBEDDING].shape) == tiny.reference_tensors[SPEAKER_EMBEDDING][1]


def test_full_config_is_3d_speakers_campplus_192():
    with torch.device("meta"):
        full = CampPlusEncoder(CampPlusConfig.full())
        wide = CampPlusEncoder(dataclasses.replace(CampPlusConfig.full(), embedding_size=512))
    state = full.campplus.state_dict()
    assert sum(p.numel() for p in full.parameters()) == FULL_192_PARAMETERS and len(state) == 937
    assert sum(p.numel() for p in wide.parameters()) == FULL_512_PARAMETERS
    shapes = {"head.conv1.weight": (32, 1, 3, 3), "head.layer1.0.shortcut.1.running_var": (32,),
              "xvector.tdnn.linear.weight": (128, 320, 5),
              "xvector.block1.tdnnd1.cam_layer.linear1.weight": (64, 128, 1),
              "xvector.block3.tdnnd16.cam_layer.linear2.bias": (32,), "xvector.transit1.linear.weight": (256, 512, 1),
              "xvector.out_nonlinear.batchnorm.weight": (512,), "xvector.dense.linear.weight": (192, 1024, 1),
              "xvector.dense.nonlinear.batchnorm.running_mean": (192,)}
    assert {k: tuple(state[k].shape) for k in shapes} == shapes
    assert "xvector.dense.nonlinear.batchnorm.weight" not in state  # 3D-Speaker's "batchnorm_": no affine


def test_config_round_trips_and_refuses_bad_shapes():
    for cfg in (CampPlusConfig.full(), CampPlusConfig.tiny()):
        assert CampPlusConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="multiple of 8"):
        CampPlusConfig(feat_dim=84)
    with pytest.raises(ValueError, match="one kernel size and one dilation per block"):
        CampPlusConfig(block_layers=(12, 24))
    with pytest.raises(ValueError, match="odd"):
        CampPlusConfig(block_kernel_sizes=(3, 4, 3))
    with pytest.raises(ValueError, match="unknown CAM\\+\\+ config keys"):
        CampPlusConfig.from_dict({"feat_dim": 80, "channels": 3})


# ---- checkpoints -----------------------------------------------------------------------------------
def test_save_and_load_round_trip(tiny, tmp_path):
    tiny.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {CONFIG_FILE, WEIGHTS_FILE}
    loaded = CampPlusEncoder.from_pretrained(tmp_path)
    assert loaded.config == tiny.config
    assert all(torch.equal(v, loaded.campplus.state_dict()[k]) for k, v in tiny.campplus.state_dict().items())
    audio = [voice(140.0, 1.5, seed=0, num_samples=n) for n in (3000, 8000)]
    assert all(torch.equal(a, b) for a, b in zip(embeddings(tiny, audio), embeddings(loaded, audio)))


def test_onnx_scopes_follow_torch_export_names():
    assert onnx_scope("xvector.tdnn.linear") == "/xvector/tdnn/linear"
    assert onnx_scope("head.layer1.0.conv1") == "/head/layer1/layer1.0/conv1"
    assert onnx_scope("head.layer1.0.shortcut.0") == "/head/layer1/layer1.0/shortcut/shortcut.0"


def test_onnx_reader_sees_the_exported_graph():
    graph = read_onnx(FIXTURE / ONNX_FILE)
    nodes = graph.nodes_by_name()
    assert len(graph.initializers) == 617  # as many as CosyVoice's campplus.onnx has
    conv = nodes["/xvector/block1/tdnnd1/cam_layer/linear_local/Conv"]
    assert conv.op_type == "Conv" and conv.inputs[1] == "xvector.block1.tdnnd1.cam_layer.linear_local.weight"
    weight = graph.initializers[conv.inputs[1]]
    assert weight.shape == (4, 8, 3) and weight.dtype == torch.float32
    assert len(nodes["/head/conv1/Conv"].inputs) == 3  # bn1 folded in: a bias the conv does not have
    assert "/head/bn1/BatchNormalization" not in nodes


def test_onnx_weights_give_the_reference_embedding(golden):
    """Our network with weights read out of campplus.onnx, on kaldi-native-fbank's features, vs ONNX Runtime."""
    encoder = CampPlusEncoder.from_pretrained(FIXTURE)
    feats = golden["fbank"] - golden["fbank"].mean(dim=0)
    with torch.inference_mode():
        embedding = encoder.campplus(feats[None], torch.tensor([feats.shape[0]]))[0]
    # our convs vs ONNX Runtime's, BatchNorms folded there: float32 rounding through the network (tests/golden.py)
    assert_float32_close(embedding, golden["embedding"], num_layers(encoder.campplus))


def test_encode_matches_cosyvoices_frontend(golden):
    """Waveform to embedding, vs CosyVoice's frontend run by independent code (kaldi-native-fbank, ONNX Runtime)."""
    [out] = CampPlusEncoder.from_pretrained(FIXTURE).encode([golden["waveform"]], [True])
    torch.testing.assert_close(out[SPEAKER_EMBEDDING], golden["embedding"], atol=PIPELINE_ATOL, rtol=0)


def test_an_onnx_file_without_a_node_of_ours_is_refused(tmp_path):
    shutil.copy(FIXTURE / ONNX_FILE, tmp_path / ONNX_FILE)
    cfg = CampPlusConfig.from_dict(json.loads((FIXTURE / CONFIG_FILE).read_text()))
    deeper = dataclasses.replace(cfg, block_layers=(13, 24, 16))
    (tmp_path / CONFIG_FILE).write_text(json.dumps(deeper.to_dict()))
    with pytest.raises(ValueError, match="tdnnd13"):
        CampPlusEncoder.from_pretrained(tmp_path)
