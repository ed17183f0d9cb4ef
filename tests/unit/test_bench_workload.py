"""The workload: the shared TSV read in place, or a synthetic one with the same length distribution."""
import statistics

import pytest

from clients.bench.workload import load_workload, read_tsv, request_seconds, synthetic_workload


def test_synthetic_workload_lengths_match_librispeech_test_clean():
    durations = [u.duration_s for u in synthetic_workload()]
    assert 4.0 <= min(durations) and max(durations) <= 10.0
    assert statistics.median(durations) == pytest.approx(6.2, abs=0.15)
    assert synthetic_workload() == synthetic_workload()


def test_read_tsv_and_explicit_path(tmp_path):
    path = tmp_path / "w.tsv"
    path.write_text('utterance_id\tduration_s\ttext\na-1\t4.5\tHello "there".\nb-2\t7.0\tBye.\n')
    utterances, source = load_workload(path)
    assert source == str(path)
    assert [(u.utterance_id, u.duration_s, u.text) for u in utterances] == [("a-1", 4.5, 'Hello "there".'),
                                                                          ("b-2", 7.0, "Bye.")]


def test_tsv_without_the_columns_is_refused(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("id\tseconds\nx\t1\n")
    with pytest.raises(ValueError, match="lacks columns"):
        read_tsv(path)


def test_request_seconds_scales_and_caps():
    u = synthetic_workload(1)[0]
    assert request_seconds(u) == u.duration_s
    assert request_seconds(u, scale=0.5) == pytest.approx(u.duration_s / 2)
    assert request_seconds(u, cap_s=1.2) == 1.2
