"""tools/tontaube_refiner_prefix.py: why a TontaubeV1 refiner keeps no KV cache per stream. A continued chunk's
refiner sequence shares with the previous chunk's only its head (up to the earlier semantic codes: the new ones go
in before EOS), that head's RoPE positions move by K × the chunk's frames, and what is left to prefill grows with
the segment."""
from __future__ import annotations

import random

from backend_python.models.tontaube.config import ACOUSTIC_CODES, NUM_CODEBOOKS, SEMANTIC_CODES
from backend_python.models.tontaube.presets import TINY_IDS
from backend_python.models.tontaube.tiny import random_voice
from tools.tontaube_refiner_prefix import chunk_ends, hidden_difference, layout


def test_the_chunks_follow_the_family_s_plan():
    assert chunk_ends(5) == [5, 15, 35, 60, 85]


def test_only_the_head_is_shared_and_its_positions_move():
    ends = chunk_ends(12)
    rng = random.Random(1)
    semantic = [rng.randrange(SEMANTIC_CODES) for _ in range(ends[-1])]
    acoustic = [[rng.randrange(ACOUSTIC_CODES) for _ in range(ends[-1])] for _ in range(NUM_CODEBOOKS - 1)]
    text, voice = [rng.randrange(256) for _ in range(40)], random_voice(20, seed=1)
    early, late = (layout(TINY_IDS, voice, text, semantic, acoustic, ends, chunk) for chunk in (6, 12))
    for k in range(1, NUM_CODEBOOKS):
        row = late[f"cb{k}"]
        assert row["first_differing"] == {"previous": "EOS", "now": "cb0 code"}
        assert row["shared_head"] == (k + 1) * 20 + 40 + 1 + ends[10]  # prompt rows, text, PAD, earlier codes
        assert row["shared_head_position_moves"] == [k * (ends[11] - ends[10])]
        assert row["prefill_with_prefix_cache"] > early[f"cb{k}"]["prefill_with_prefix_cache"]
    assert hidden_difference(TINY_IDS, voice, text, semantic, acoustic, ends, 12) > 0
