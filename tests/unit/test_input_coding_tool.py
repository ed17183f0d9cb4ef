"""tools/input_coding.py: the encoder lane's cost of input chunks, as references against `encode_codes`, runs on a
tiny preset and reports per stream count both times and that the codes agree."""
from __future__ import annotations

from tools import input_coding


def test_it_times_both_paths_and_the_codes_agree(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VOXLANE_CACHE", str(tmp_path))
    assert input_coding.main(["--streams", "1", "3", "--repeats", "1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[0] for row in rows] == ["1", "3"]
    assert all(float(row[1]) > 0 and float(row[2]) > 0 and float(row[4]) == 1.0 for row in rows), rows
