"""tritonserver's environment (server/triton_launch.server_env): malloc's fixed thresholds by default, an
operator's GLIBC_TUNABLES instead, and VOXLANE_TRITON_ENV's pairs for the server only."""
from __future__ import annotations

from pathlib import Path

import pytest

from server.triton_launch import MALLOC_TUNABLES, TritonInstall, server_env

INSTALL = TritonInstall(Path("/nonexistent/pytriton/tritonserver"))


def test_server_gets_fixed_malloc_thresholds_unless_the_operator_set_tunables(monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("VOXLANE_TRITON_ENV", raising=False)
    env = server_env(INSTALL)
    assert env["GLIBC_TUNABLES"] == MALLOC_TUNABLES and Path(env["BASH_ENV"]).read_text().count("unset GLIBC_TUNABLES")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    env = server_env(INSTALL)
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2" and "BASH_ENV" not in env  # theirs, for the stubs too


def test_voxlane_triton_env_sets_pairs_for_the_server_only(monkeypatch):
    monkeypatch.setenv("VOXLANE_TRITON_ENV", "LD_PRELOAD=/x/libjemalloc.so.2 MALLOC_CONF=background_thread:true")
    env = server_env(INSTALL)
    assert env["LD_PRELOAD"] == "/x/libjemalloc.so.2" and env["MALLOC_CONF"] == "background_thread:true"
    monkeypatch.setenv("VOXLANE_TRITON_ENV", "LD_PRELOAD")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        server_env(INSTALL)
