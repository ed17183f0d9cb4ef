"""What the benchmark asks for: utterances with a text and a target duration."""
from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
DEFAULT_WORKLOAD = SHARED_DATA / "librispeech_pc_test_clean.tsv"
# `--workload NAME`: the shared workloads by name. `paragraphs`: 198 long-form requests of 12.6–68 s (median 33 s),
# where far more streams are alive at once than a step has rows
NAMED_WORKLOADS = {"short": DEFAULT_WORKLOAD, "paragraphs": SHARED_DATA / "librispeech_pc_paragraphs.tsv"}
# The synthetic workload mimics LibriSpeech-PC test-clean as we serve it: 4–10 s, median 6.2 s.
SYNTHETIC_MIN_S, SYNTHETIC_MEDIAN_S, SYNTHETIC_MAX_S = 4.0, 6.2, 10.0
SYNTHETIC_SIZE = 1000
WORDS = ("the quick voice of a streaming model reads every line aloud while listeners wait for "
         "audio to begin and never pause").split()
WORDS_PER_SECOND = 2.6


@dataclass(frozen=True)
class Utterance:
    utterance_id: str
    duration_s: float
    text: str


def load_workload(path: Path | str | None = None) -> tuple[list[Utterance], str]:
    """The utterances and where they came from: `path` (or a name of NAMED_WORKLOADS), else the shared TSV when
    present, else synthetic."""
    path = NAMED_WORKLOADS.get(str(path), path) if path is not None else None
    if path is None and DEFAULT_WORKLOAD.exists():
        path = DEFAULT_WORKLOAD
    if path is None:
        return synthetic_workload(), "synthetic"
    return read_tsv(Path(path)), str(path)


def read_tsv(path: Path) -> list[Utterance]:
    """Tab-separated with a header: utterance_id, duration_s, text (read in place)."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    missing = {"utterance_id", "duration_s", "text"} - set(rows[0] if rows else {})
    if missing:
        raise ValueError(f"workload {path} lacks columns {sorted(missing)} (or has no rows)")
    return [Utterance(r["utterance_id"], float(r["duration_s"]), r["text"].strip()) for r in rows]


def synthetic_workload(size: int = SYNTHETIC_SIZE, seed: int = 0) -> list[Utterance]:
    """Durations from a triangular law on [4, 10] s whose median is 6.2 s; text of matching length."""
    rng = random.Random(seed)
    mode = _triangular_mode_for_median(SYNTHETIC_MIN_S, SYNTHETIC_MEDIAN_S, SYNTHETIC_MAX_S)
    utterances = []
    for i in range(size):
        duration = round(rng.triangular(SYNTHETIC_MIN_S, SYNTHETIC_MAX_S, mode), 3)
        words = [rng.choice(WORDS) for _ in range(max(1, round(duration * WORDS_PER_SECOND)))]
        utterances.append(Utterance(f"synthetic-{i:04d}", duration, " ".join(words).capitalize() + "."))
    return utterances


def _triangular_mode_for_median(low: float, median: float, high: float) -> float:
    """The mode c of a triangular law on [low, high] whose median is `median` (below the midpoint, so c < median)."""
    # P(X > m) = (high - m)^2 / ((high - low)(high - c)) = 1/2 when m >= c
    return high - 2 * (high - median) ** 2 / (high - low)


def request_seconds(utterance: Utterance, scale: float = 1.0, cap_s: float | None = None) -> float:
    """The audio seconds to request for an utterance: its duration, scaled and capped (CPU smoke runs)."""
    seconds = utterance.duration_s * scale
    return min(seconds, cap_s) if cap_s else seconds
