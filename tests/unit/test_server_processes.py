"""Finding tritonserver's stub processes for the model watch: by pid while they run, by a scan of /proc when one
ended or was replaced (server/procstats.py ServerProcesses), in a fake /proc tree."""
from __future__ import annotations

import shutil
from pathlib import Path

from server.procstats import ServerProcesses, server_processes

SERVER = 100
STUB = "/x/triton_python_backend_stub"


def add_process(proc: Path, pid: int, parent: int, argv: str, started: int, state: str = "S") -> None:
    entry = proc / str(pid)
    entry.mkdir(exist_ok=True)
    rest = " ".join(["0"] * 15)  # fields 7..21 of stat; the start time is field 22
    (entry / "stat").write_text(f"{pid} (a (b) c) {state} {parent} 1 1 {rest} {started} 0")
    (entry / "cmdline").write_bytes(argv.replace(" ", "\0").encode())


def fake_proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    add_process(proc, SERVER, 1, "/x/tritonserver --model-repository=/run", started=10)
    add_process(proc, 201, SERVER, f"{STUB} /run/vox_ensemble/1/model.py 1", started=20)
    add_process(proc, 202, SERVER, f"{STUB} /run/voice_registry/1/model.py 1", started=21)
    add_process(proc, 303, 999, f"{STUB} /other/vox_ensemble/1/model.py 1", started=22)  # another server's
    return proc


def test_the_stubs_are_found_by_a_scan_then_by_their_pids(tmp_path):
    proc = fake_proc(tmp_path)
    find = ServerProcesses(SERVER, ("vox_ensemble", "voice_registry"), proc)
    expected = {"tritonserver": SERVER, "vox_ensemble": 201, "voice_registry": 202}
    assert find() == expected == server_processes(SERVER, proc)
    add_process(proc, 204, SERVER, f"{STUB} /run/codec/1/model.py 1", started=30)  # nothing watched changed
    assert find() == find() == expected and find.num_scans == 1


def test_a_stub_that_died_is_looked_for_again(tmp_path):
    proc = fake_proc(tmp_path)
    find = ServerProcesses(SERVER, ("vox_ensemble", "voice_registry"), proc)
    find()
    add_process(proc, 201, SERVER, "", started=20, state="Z")  # dead, not yet reaped: no command line
    assert "vox_ensemble" not in find() and find.num_scans == 2
    assert "vox_ensemble" not in find() and find.num_scans == 3  # a watched model not found: every round
    add_process(proc, 205, SERVER, f"{STUB} /run/vox_ensemble/1/model.py 1", started=40)  # reloaded
    assert find()["vox_ensemble"] == 205
    shutil.rmtree(proc / "202")  # reaped
    assert "voice_registry" not in find()


def test_a_pid_taken_by_another_process_is_not_the_stub(tmp_path):
    proc = fake_proc(tmp_path)
    find = ServerProcesses(SERVER, ("vox_ensemble",), proc)
    find()
    add_process(proc, 201, SERVER, "/bin/sleep 60", started=50)  # its pid, now another child of the server
    assert "vox_ensemble" not in find()
    add_process(proc, 201, SERVER, f"{STUB} /run/vox_ensemble/1/model.py 1", started=60)  # a new stub, same pid
    assert find()["vox_ensemble"] == 201 and find.num_scans == 3


def test_a_stub_no_longer_the_servers_child_is_not_its_stub(tmp_path):
    proc = fake_proc(tmp_path)
    find = ServerProcesses(SERVER, ("vox_ensemble",), proc)
    find()
    add_process(proc, 201, 1, f"{STUB} /run/vox_ensemble/1/model.py 1", started=20)  # the same process, reparented
    assert "vox_ensemble" not in find()


def test_the_server_is_named_even_once_it_ended(tmp_path):
    proc = fake_proc(tmp_path)
    find = ServerProcesses(SERVER, ("vox_ensemble",), proc)
    shutil.rmtree(proc / str(SERVER))
    assert find()["tritonserver"] == SERVER == server_processes(SERVER, proc)["tritonserver"]
