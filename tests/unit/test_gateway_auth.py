"""API and admin keys (server/gateway/auth.py) and where tritonserver listens (triton_launch.Exposure), without a
server: who passes, what each refusal says, where keys are read from, and the flags tritonserver gets."""
from __future__ import annotations

import pytest

from server.gateway.auth import ADMIN_KEYS_ENV, API_KEYS_ENV, Keys, is_open_path, read_keys
from server.triton_launch import ADMIN_KEY_HEADER, Exposure

KEYS = Keys(api=frozenset({"user-key-1"}), admin=frozenset({"admin-key-1"}))


@pytest.mark.parametrize("keys, header, admin, outcome", [
    (Keys(), None, True, None),  # no key configured: open
    (KEYS, None, False, (401, "missing_api_key")),
    (KEYS, "Basic dXNlcjpwYXNz", False, (401, "missing_api_key")),
    (KEYS, "Bearer user-key-2", False, (401, "invalid_api_key")),
    (KEYS, "Bearer user-key-1", False, None),
    (KEYS, "bearer  user-key-1 ", False, None),
    (KEYS, "Bearer admin-key-1", False, None),  # an admin key passes where an API key does
    (KEYS, "Bearer user-key-1", True, (403, "admin_key_required")),
    (KEYS, "Bearer admin-key-1", True, None),
    (KEYS, "Bearer nobody-key", True, (401, "invalid_api_key")),
    (Keys(api=frozenset({"user-key-1"})), "Bearer user-key-1", True, None),  # no admin keys: writes take an API key
])
def test_who_passes_and_what_a_refusal_says(keys, header, admin, outcome):
    refused = keys.check(header, needs_admin=admin)
    assert (None if refused is None else (refused.status, refused.code)) == outcome


def test_keys_never_show_in_a_repr():
    assert "user-key-1" not in repr(KEYS) and "admin-key-1" not in repr(KEYS)


def test_keys_come_from_flags_files_and_the_environment_in_that_order(tmp_path, monkeypatch):
    path = tmp_path / "keys"
    path.write_text("# the team's keys\nfile-key-1\n\n  file-key-2  \nflag-key-1\n")
    monkeypatch.setenv(API_KEYS_ENV, "env-key-01, file-key-1")
    assert read_keys(["flag-key-1"], [str(path)], API_KEYS_ENV) == ("flag-key-1", "file-key-1", "file-key-2",
                                                                    "env-key-01")
    monkeypatch.delenv(ADMIN_KEYS_ENV, raising=False)
    assert read_keys([], [], ADMIN_KEYS_ENV) == ()
    with pytest.raises(ValueError, match="at least 8"):
        read_keys(["short"], [], ADMIN_KEYS_ENV)
    with pytest.raises(OSError):
        read_keys([], [str(tmp_path / "missing")], ADMIN_KEYS_ENV)


def test_probes_scrapes_and_the_playground_page_are_open():
    assert all(map(is_open_path, ["/health", "/metrics", "/", "/playground/playground.js"]))
    assert not any(map(is_open_path, ["/v1/models", "/v1/audio/speech", "/v1/audio/voices", "/healthz"]))


def test_tritonserver_listens_on_loopback_and_closes_its_repository_api_once_exposed_or_keyed():
    local = Exposure().flags()
    assert "--grpc-address=127.0.0.1" in local and "--http-address=127.0.0.1" in local
    assert not any("restricted" in f for f in local)  # local tools may load and unload

    closed = f"model-repository,shared-memory,trace,logging:{ADMIN_KEY_HEADER}=\n"  # no request can send it
    for exposure in (Exposure(admin_key="admin-key-1"), Exposure(host="0.0.0.0")):
        flags = exposure.flags()
        assert f"--http-restricted-api={closed}" in flags and f"--grpc-restricted-protocol={closed}" in flags
        assert not any("admin-key-1" in flag for flag in flags)  # no key on the command line
    exposed = Exposure(host="0.0.0.0")
    assert exposed.local_host == "127.0.0.1" and "--grpc-address=0.0.0.0" in exposed.flags()
    assert "admin-key-1" not in repr(Exposure(admin_key="admin-key-1"))


def test_voxlane_serve_hands_its_keys_to_the_gateway_and_the_first_admin_key_to_triton(monkeypatch):
    import argparse

    from server.cli import _add_serve, _fleet_config

    monkeypatch.delenv(API_KEYS_ENV, raising=False)
    monkeypatch.setenv(ADMIN_KEYS_ENV, "admin-key-2")
    parser = argparse.ArgumentParser()
    _add_serve(parser)
    config = _fleet_config(parser.parse_args(["--triton-host", "0.0.0.0", "--admin-key", "admin-key-1",
                                              "--api-key", "user-key-1", "--gateway-port", "9000"]))
    assert config.server.exposure == Exposure("0.0.0.0", "admin-key-1")
    assert config.gateway_keys == Keys(api=frozenset({"user-key-1"}), admin=frozenset({"admin-key-1", "admin-key-2"}))
    assert config.gateway_keys.env() == {API_KEYS_ENV: "user-key-1", ADMIN_KEYS_ENV: "admin-key-1,admin-key-2"}
