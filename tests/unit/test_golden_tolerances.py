"""The golden tests hold on any CPU and still catch a regression (tests/golden.py has the rule).

- Other CPU code paths: every golden test file (`grep -rl golden tests/unit`) runs again in a process of its own
  with PyTorch's, oneDNN's and MKL's kernels capped at AVX2, and at their plain (non-vector) code, as machines
  without AVX-512 run them (this machine's own path is the suite's run). Capping oneDNN at AVX2 moved VibeVoice's
  decode by 4.3e-5 here, forty times the 1e-6 it used to allow.
- The fixtures' own rounding: where our implementation runs in float64, the recorded float32 result is within half
  its tolerance of the exact one, so the other half is left to the CPU that runs the test.
- A broken layer (one weight 1 % off, at the first, the middle and the last weighted layer) fails each golden
  comparison whose tolerance tests/golden.py derives (VibeVoice's and DualCodec's in their own files).
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.golden import (BROKEN_LAYERS, assert_recorded_within_rounding, broken_layer, is_float32_close, layers_run,
                          num_layers)

ROOT = Path(__file__).resolve().parents[2]
# the kernels of each library capped at a code path other than this machine's best
CODE_PATHS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}


def golden_test_files() -> list[str]:
    this = Path(__file__).name
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "unit").glob("test_*.py")
                  if p.name != this and "golden" in p.read_text())


def test_the_golden_test_files_are_the_ones_with_fixtures():
    files = golden_test_files()
    assert "tests/unit/test_tontaube_vibevoice.py" in files and "tests/unit/test_qwen3_tts_codec.py" in files
    assert len(files) >= 19


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the capped code paths are x86's")
@pytest.mark.skipif(any(v in os.environ for path in CODE_PATHS.values() for v in path),
                    reason="already running under a capped code path")
@pytest.mark.parametrize("path", sorted(CODE_PATHS))
def test_the_golden_tests_pass_on_another_cpu_code_path(path):
    env = {**os.environ, **CODE_PATHS[path]}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                             *golden_test_files()], env=env, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout, result.stdout[-2000:]


# ---- each golden case: its model, what it computes, what the reference recorded, how deep it is ------------------

class Case:
    """One golden comparison: `run(model)` against `expected`, over `layers(model)`; `broken` the module whose
    layers a regression may break."""

    def __init__(self, model, run, expected, layers, broken=None) -> None:
        self.model, self.run, self.expected, self.layers = model, run, expected, layers
        self.broken = broken or (lambda m: m)

    def output(self) -> torch.Tensor:
        with torch.no_grad():
            return self.run(self.model)


def qwen3_codec() -> Case:
    from tests.unit.test_qwen3_tts_codec import CHECKPOINT, GOLDEN
    from backend_python.models.qwen3_tts.codec import Qwen3TTSCodec
    with np.load(GOLDEN) as data:
        codes, head = torch.from_numpy(data["codes"]), torch.from_numpy(data["audio_head"])
    return Case(Qwen3TTSCodec.from_pretrained(CHECKPOINT), lambda m: m.decode(codes)[:, :19200], head,
                lambda m: num_layers(m.decoder), lambda m: m.decoder)


def qwen3_logits() -> Case:
    from tests.unit.test_qwen3_tts_lm import FIXTURE, GOLDEN_CASES, logit_layers
    from backend_python.models.qwen3_tts import Qwen3TTSLM
    meta, golden = GOLDEN_CASES[0], np.load(FIXTURE / "golden.npz")
    lm = Qwen3TTSLM.from_pretrained(FIXTURE, language=meta["language"])

    def run(m):
        m.allocate_slots(1, 64)
        m.prefill(0, m.encode_prompt(meta["text"], meta["voice"]))
        return m._memory.logits[0].clone()
    return Case(lm, run, torch.from_numpy(golden["logits_0"][0]), logit_layers, lambda m: m.talker.model)


def qwen3_prompt_embeddings() -> Case:
    from tests.unit.test_qwen3_tts_lm import FIXTURE, GOLDEN_CASES, embedding_layers
    from backend_python.models.qwen3_tts import Qwen3TTSLM
    from backend_python.models.qwen3_tts.prompt import prompt_embeddings
    meta, golden = GOLDEN_CASES[0], np.load(FIXTURE / "golden.npz")
    return Case(Qwen3TTSLM.from_pretrained(FIXTURE, language=meta["language"]),
                lambda m: prompt_embeddings(m.config, m.talker, m.encode_prompt(meta["text"], meta["voice"]),
                                            m.device)[0],
                torch.from_numpy(golden["prefill_embeds_0"]), embedding_layers)


def qwen3_base_speaker() -> Case:
    from tests.unit.test_qwen3_tts_base import FIXTURE, MEL_LAYERS
    from backend_python.models.qwen3_tts.voice_encoder import Qwen3TTSVoiceEncoder
    golden = {k: torch.from_numpy(v) for k, v in np.load(FIXTURE / "golden.npz").items()}
    return Case(Qwen3TTSVoiceEncoder.from_pretrained(FIXTURE),
                lambda m: m.encode([golden["waveform"]], [True])[0]["speaker_embedding"],
                golden["speaker_embedding"], lambda m: num_layers(m.speaker_encoder) + MEL_LAYERS,
                lambda m: m.speaker_encoder)


def campplus() -> Case:
    from tests.unit.test_cosyvoice3_campplus import FIXTURE
    from backend_python.models.cosyvoice3.voice_encoder import CampPlusEncoder
    golden = {k: torch.from_numpy(v) for k, v in np.load(FIXTURE / "golden.npz").items()}
    feats = golden["fbank"] - golden["fbank"].mean(dim=0)
    return Case(CampPlusEncoder.from_pretrained(FIXTURE),
                lambda m: m.campplus(feats[None].to(next(m.campplus.parameters()).dtype),
                                     torch.tensor([feats.shape[0]]))[0],
                golden["embedding"], lambda m: num_layers(m.campplus), lambda m: m.campplus)


def higgs_codec() -> Case:
    from tests.unit.test_higgs_v3_golden import FIXTURE, fixture_codec
    return Case(fixture_codec(), lambda m: m.decode_raw(FIXTURE["codec_codes"][None])[0], FIXTURE["codec_audio"],
                num_layers)


def higgs_lm():
    from tests.unit.test_higgs_v3_golden import FIXTURE, fixture_config
    from backend_python.models.higgs_v3.lm import HiggsV3LM
    model = HiggsV3LM.from_config(fixture_config(), seed=3)
    model.load_state_dict(FIXTURE["state"], strict=False)
    return model, FIXTURE


def higgs_audio_embedding() -> Case:
    model, fixture = higgs_lm()
    return Case(model, lambda m: m.embed_audio(fixture["embed_ids"].T), fixture["embeds"], lambda m: 1,
                lambda m: m.audio_codebook_embeddings)


def higgs_audio_head() -> Case:
    model, fixture = higgs_lm()
    return Case(model, lambda m: m.audio_logits(fixture["hidden"]), fixture["audio_logits"],
                lambda m: num_layers(m.audio_decoder_proj.audio_lm_head), lambda m: m.audio_decoder_proj)


def voxtral_codec() -> Case:
    from tests.unit.test_voxtral_golden import FIXTURE_PATH, fixture_config
    from backend_python.models.voxtral.codec import VoxtralCodec
    fixture = torch.load(FIXTURE_PATH)
    return Case(VoxtralCodec.from_state(fixture_config(fixture["shape"]).codec, fixture["codec_state"]),
                lambda m: m.decode(fixture["codec_codes"]), fixture["audio"], num_layers)


def zonos_prefix() -> Case:
    from tests.unit.test_zonos_lm import FIXTURE
    from backend_python.models.zonos.config import ZonosConfig
    from backend_python.models.zonos.lm import ZonosLM
    from tools.make_zonos_fixture import EOS_ROW, draw_weights
    data = torch.load(FIXTURE, weights_only=False)
    weights = draw_weights(data["shapes"], data["seed"])
    weights[EOS_ROW][1024] = data["eos_row"]
    with torch.device("meta"):
        model = ZonosLM(ZonosConfig.from_dict(data["config"]), {"reference": data["speaker"]})
    model.load_state_dict(weights, strict=True, assign=True)
    return Case(model.eval(), lambda m: m.prefixes(m.encode_prompt(data["text"], "reference")),
                data["runs"]["1.0"]["prefix"], lambda m: num_layers(m.prefix_conditioner),
                lambda m: m.prefix_conditioner)


def zonos_speaker() -> Case:
    from tests.unit.test_zonos_speaker import FIXTURE, MEL_LAYERS
    from backend_python.models.zonos.speaker import SpeakerConfig, SpeakerEmbedding
    from tools.make_zonos_fixture import draw_speaker_weights, speaker_audio
    data = torch.load(FIXTURE, weights_only=False)
    with torch.device("meta"):
        model = SpeakerEmbedding(SpeakerConfig(in_planes=data["in_planes"]))
    model.load_state_dict(draw_speaker_weights(data["shapes"], data["seed"]), strict=True, assign=True)
    return Case(model.eval(), lambda m: m(speaker_audio().to(next(m.parameters()).dtype)), data["speaker"],
                lambda m: num_layers(m) + MEL_LAYERS)


CASES = {"qwen3-tts codec": qwen3_codec, "qwen3-tts logits": qwen3_logits,
         "qwen3-tts prompt embeddings": qwen3_prompt_embeddings, "qwen3-tts base speaker": qwen3_base_speaker,
         "campplus": campplus, "higgs codec": higgs_codec, "higgs audio embedding": higgs_audio_embedding,
         "higgs audio head": higgs_audio_head,
         "voxtral codec": voxtral_codec, "zonos prefix": zonos_prefix, "zonos speaker": zonos_speaker}
FLOAT64_CASES = ("qwen3-tts codec", "campplus", "higgs codec", "voxtral codec")  # Zonos' log-mel is float32


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request) -> Case:
    return CASES[request.param]()


def test_each_case_holds_as_its_golden_test_does(case):
    assert is_float32_close(case.output(), case.expected, case.layers(case.model))


@pytest.mark.parametrize("which", BROKEN_LAYERS)
def test_a_broken_layer_fails_each_golden_comparison(case, which):
    with broken_layer(layers_run(case.broken(case.model), case.output), which):
        broken = case.output()
    assert not is_float32_close(broken, case.expected, case.layers(case.model))


@pytest.mark.parametrize("name", FLOAT64_CASES)
def test_the_fixtures_own_rounding_leaves_room_for_another_cpu_s(name):
    case = CASES[name]()
    case.model.double()
    assert {p.dtype for p in case.model.parameters()} == {torch.float64}
    assert_recorded_within_rounding(case.expected, case.output(), case.layers(case.model))
