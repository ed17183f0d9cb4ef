"""A TontaubeV1 model (models/tontaube/predictor.py) against the reference's math on tiny random weights: the
reference runs transformers-layout Qwen3 weights (vLLM's `Qwen3Model`) at its front-prompt positions, then
`AudioTokenHead` (fc1 -> Mish -> fc2); here that is transformers' own `Qwen3Model` given the same weights and
`position_ids`, and a head written as the reference writes it. The full shape's parameter counts are the ones the
reference states for its four models."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.layers.random_init import init_random_weights
from backend_python.models.tontaube.positions import rope_positions
from backend_python.models.tontaube.predictor import Predictor
from backend_python.models.tontaube.presets import TINY_IDS, tiny, tontaube_2_9b

IDS = TINY_IDS


def predictor(codebook: int, seed: int = 3) -> Predictor:
    model = Predictor(tiny().predictors[codebook])
    init_random_weights(model, seed)
    with torch.no_grad():  # biases too, so that the head's are not all zero
        model.audio_head.fc1.bias.normal_(0, 1, generator=torch.Generator().manual_seed(seed))
        model.audio_head.fc2.bias.normal_(0, 1, generator=torch.Generator().manual_seed(seed + 1))
    return model.eval()


def reference_logits(model: Predictor, ids: list[int], positions: list[int]) -> torch.Tensor:
    """transformers' Qwen3 at the given positions, then fc2(Mish(fc1(h))): [T, head_size]."""
    from transformers import Qwen3Config, Qwen3Model
    c = model.config
    reference = Qwen3Model(Qwen3Config(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        max_position_embeddings=c.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta}))
    state = {k.removeprefix("model."): v for k, v in model.state_dict().items() if k.startswith("model.")}
    reference.load_state_dict(state, strict=True)
    with torch.no_grad():
        hidden = reference.eval()(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions])
                                  ).last_hidden_state[0]
        head = model.audio_head
        return torch.nn.functional.linear(torch.nn.Mish()(torch.nn.functional.linear(
            hidden, head.fc1.weight, head.fc1.bias)), head.fc2.weight, head.fc2.bias)


def semantic_prompt() -> list[int]:
    return ([IDS.code(0, c) for c in (5, 9, 300, 16000)] + [ord(ch) for ch in "Hi there"] + [IDS.text_marker]
            + [ord(ch) for ch in " again."] + [IDS.pad] + [IDS.code(0, c) for c in (7, 8, 9)])


def refiner_prompt() -> list[int]:
    return ([IDS.code(0, c) for c in (5, 9, 300)] + [IDS.code(1, c) for c in (1, 2, 4000)]
            + [ord(ch) for ch in "Hi."] + [IDS.pad] + [IDS.code(0, c) for c in (7, 8, 9, 10)] + [IDS.eos, IDS.pad]
            + [IDS.code(1, 33)])


@pytest.mark.parametrize("codebook, ids", [(0, semantic_prompt()), (1, refiner_prompt())])
def test_the_prefill_and_each_cached_step_give_the_reference_s_logits(codebook, ids):
    model = predictor(codebook)
    written = [IDS.code(codebook, c) for c in (11, 12, 13)]
    run = model.start(64)
    got = [run.prefill(ids, IDS)]
    got += [run.step(token) for token in written]
    positions = run.positions.prefill + [run.positions.decoded(t, 4096) for t in range(len(written))]
    expected = reference_logits(model, ids + written, positions)[len(ids) - 1:]
    torch.testing.assert_close(torch.stack(got), expected, atol=1e-4, rtol=1e-4)
    assert got[0].shape == (model.config.head_size,)


def test_positions_reach_the_attention_not_the_token_places():
    """The same tokens at other positions (a plain 0..n-1) give other logits: the scheme is applied."""
    model, ids = predictor(0), semantic_prompt()
    plain = reference_logits(model, ids, list(range(len(ids))))[-1]
    scheme = reference_logits(model, ids, rope_positions(ids, IDS, 0, 4096).prefill)[-1]
    assert not torch.allclose(plain, scheme, atol=1e-3)
    torch.testing.assert_close(model.start(64).prefill(ids, IDS), scheme, atol=1e-4, rtol=1e-4)


def test_the_full_shape_has_the_reference_s_parameter_counts():
    """1,829,116,930 + 448,960,512 + 327,307,264 + 268,577,792 = 2,873,962,498 stored parameters."""
    with torch.device("meta"):
        counts = [sum(p.numel() for p in Predictor(c).parameters()) for c in tontaube_2_9b().predictors]
    assert counts == [1_829_116_930, 448_960_512, 327_307_264, 268_577_792]
