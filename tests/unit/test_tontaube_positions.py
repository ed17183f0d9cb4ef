"""TontaubeV1's RoPE positions (models/tontaube/positions.py) against the reference model's: the cases of its own
position tests (craitech/tontaube `tests/test_vllm_positions.py`, the same ids) and worked layouts whose positions
were computed by the reference's `_compute_prefill_positions` (+ its offset of 25): the semantic model with a
voice prompt and a text of two segments, a refiner, and a refiner whose next code skips an audio marker's place."""
from __future__ import annotations

from backend_python.models.tontaube.config import TokenIds
from backend_python.models.tontaube.positions import rope_positions

DC, PAD, EOS, TM, AM = 151665, 151643, 151662, 151663, 151664  # the reference tests' ids
IDS = TokenIds(dc_base=DC, pad=PAD, eos=EOS, text_marker=TM, audio_marker=AM)
MAX = 40960


def code(codebook: int, value: int = 0) -> int:
    return IDS.code(codebook, value)


def test_an_ordinary_prefill_ends_one_before_the_first_decoded_token():
    positions = rope_positions([100, 101, 102, PAD], IDS, 0, MAX)
    assert positions.prefill == [29, 30, 31, 28]
    assert positions.first_decoded == 29 and positions.decoded(1, MAX) == 30


def test_the_semantic_model_s_text_and_codes_share_positions_and_markers_are_realigned():
    ids = [code(0, 1)] * 3 + [100, 101, TM, 102, PAD] + [code(0, 7)] * 4 + [AM]
    positions = rope_positions(ids, IDS, 0, MAX)
    assert positions.prefill == [7, 8, 9, 10, 11, 37, 38, 9, 10, 11, 12, 13, 37]
    assert positions.first_decoded == 38


def test_a_refiner_s_rows_sit_on_the_semantic_row_s_positions():
    ids = [code(0), code(0), code(1), code(1), 100, 101, 102, PAD] + [code(0, 3)] * 4 + [EOS, PAD]
    positions = rope_positions(ids, IDS, 1, MAX)
    assert positions.prefill == [37, 38, 37, 38, 39, 40, 41, 38, 39, 40, 41, 42, 43, 38]
    assert positions.first_decoded == 39


def test_a_refiner_s_next_code_skips_the_place_of_an_audio_marker():
    ids = ([code(0)] * 2 + [code(1)] * 2 + [code(2)] * 2 + [100, TM, 32, 101]
           + [PAD, code(0), code(0), AM, code(0), code(0), code(0), EOS]
           + [PAD] + [code(1)] * 5 + [PAD, code(2), code(2)])
    raw = [1, 2, 1, 2, 1, 2, 3, 29, 30, 31, 2, 3, 4, 29, 30, 31, 32, 33, 2, 3, 4, 30, 31, 32, 2, 3, 4]
    positions = rope_positions(ids, IDS, 2, MAX)
    assert positions.prefill == [p - 3 + 25 for p in raw]  # the reference's shift: -3 (a gap of 25)
    assert positions.first_decoded == 52  # = the third semantic code's place (raw 30) - 3 + 25


def test_a_long_prompt_before_a_short_continuation_stays_at_or_above_zero_and_apart():
    ids = [code(0, 5)] * 750 + [100, TM, 101, PAD] + [code(0, 6)] * 13 + [AM]
    positions = rope_positions(ids, IDS, 0, MAX).prefill
    assert min(positions) >= 0 and len(set(positions[:10])) == 10
    assert positions[-1] == len(ids) - 1 + 25


def test_the_clamp_keeps_positions_inside_the_table():
    ids = [100] * 60 + [PAD]
    assert max(rope_positions(ids, IDS, 0, 64).prefill) == 63
