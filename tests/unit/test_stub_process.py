"""Finding a sibling model's stub process in /proc and noticing its death (a fake /proc tree)."""
from __future__ import annotations

import tempfile
from pathlib import Path

from backend_python.stub_common import unloads
from backend_python.vox_ensemble.stub_process import StubWatch, find_stub, is_alive

SERVER = 100


def add_process(proc: Path, pid: int, parent: int, cmdline: str, state: str = "S") -> None:
    entry = proc / str(pid)
    entry.mkdir()
    (entry / "stat").write_bytes(f"{pid} (triton_python_b) {state} {parent} 1 1".encode())
    (entry / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode())


def fake_proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "self").mkdir()  # not a pid: skipped
    add_process(proc, 201, SERVER, "/x/triton_python_backend_stub /run/codec/1/model.py 1")
    add_process(proc, 202, SERVER, "/x/triton_python_backend_stub /run/speechlm_lm/1/model.py 1")
    add_process(proc, 303, 999, "/x/triton_python_backend_stub /other/speechlm_lm/1/model.py 1")  # another server
    return proc


def test_finds_the_stub_of_this_servers_model(tmp_path):
    proc = fake_proc(tmp_path)
    assert find_stub("speechlm_lm", SERVER, proc) == 202
    assert find_stub("codec", SERVER, proc) == 201
    assert find_stub("codec_urgent", SERVER, proc) is None


def test_a_zombie_or_missing_process_is_dead(tmp_path):
    proc = fake_proc(tmp_path)
    assert is_alive(202, proc)
    add_process(proc, 204, SERVER, "stub", state="Z")
    assert not is_alive(204, proc) and not is_alive(999999, proc)


def test_watch_reports_a_death_once_and_finds_the_reloaded_stub(tmp_path):
    proc = fake_proc(tmp_path)
    watch = StubWatch("speechlm_lm", SERVER, proc)
    assert not watch.is_dead() and not watch.is_dead()  # found, then alive
    for name in ("stat", "cmdline"):
        (proc / "202" / name).unlink()
    (proc / "202").rmdir()
    assert watch.is_dead()
    add_process(proc, 205, SERVER, "/x/triton_python_backend_stub /run/speechlm_lm/1/model.py 1")
    assert not watch.is_dead() and not watch.is_dead()  # the new stub is found and alive


def test_a_stub_replaced_by_a_live_one_is_no_death(tmp_path):
    """An operator's reload starts the new stub before the old one exits: the watch moves to it."""
    proc = fake_proc(tmp_path)
    watch = StubWatch("speechlm_lm", SERVER, proc)
    assert not watch.is_dead()
    add_process(proc, 206, SERVER, "/x/triton_python_backend_stub /run/speechlm_lm/1/model.py 1")
    (proc / "202" / "stat").write_bytes(f"202 (triton_python_b) Z {SERVER} 1 1".encode())  # the old one exits
    assert not watch.is_dead() and not watch.is_dead()
    (proc / "206" / "stat").write_bytes(f"206 (triton_python_b) Z {SERVER} 1 1".encode())
    assert watch.is_dead()  # the new one's death is seen


def test_a_stub_that_triton_unloaded_is_no_death(tmp_path, monkeypatch):
    """At the server's shutdown (or an operator's unload) a lane's stub exits after its finalize marked it: the
    watch must not take that for a death (it would reload the lane); a stub gone without the mark died."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    proc = fake_proc(tmp_path)
    codec, lm = StubWatch("codec", SERVER, proc), StubWatch("speechlm_lm", SERVER, proc)
    assert not codec.is_dead() and not lm.is_dead()
    unloads.mark_unloaded(pid=201, server_pid=SERVER)  # the codec lane's finalize
    for pid in (201, 202):
        (proc / str(pid) / "stat").write_bytes(f"{pid} (triton_python_b) Z {SERVER} 1 1".encode())
    assert not codec.is_dead()  # unloaded
    assert lm.is_dead()  # killed
    assert not unloads.was_unloaded(201, SERVER)  # the watch took the mark
    add_process(proc, 207, SERVER, "/x/triton_python_backend_stub /run/codec/1/model.py 1")
    assert not codec.is_dead()  # loaded again: watched
    (proc / "207" / "stat").write_bytes(f"207 (triton_python_b) Z {SERVER} 1 1".encode())
    assert codec.is_dead()  # and its death is one
