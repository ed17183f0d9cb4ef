"""perf_analyzer's libraries: found under their linked names, or a message naming what to install."""
from __future__ import annotations

import pytest

from clients.perf_analyzer import runtime
from clients.perf_analyzer.runtime import PerfAnalyzerError, link_libraries, perf_analyzer_env


def _site_with(tmp_path, *names):
    site = tmp_path / "site-packages"
    for name in names:
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x7fELF")
    return site


def test_the_servers_bundled_libraries_are_linked_under_the_names_the_binary_asks_for(tmp_path):
    site = _site_with(tmp_path, "nvidia_pytriton.libs/libb64-98cb6333.so.0d",
                      "nvidia_pytriton.libs/libcudart-09529672.so.12.6.77")
    links = link_libraries(tmp_path / "links", [site])
    assert (links / "libb64.so.0d").resolve() == (site / "nvidia_pytriton.libs/libb64-98cb6333.so.0d").resolve()
    assert (links / "libcudart.so.12").resolve().name == "libcudart-09529672.so.12.6.77"
    assert perf_analyzer_env(links)["LD_LIBRARY_PATH"].split(":")[0] == str(links)


def test_the_cuda_runtime_wheel_serves_when_the_server_wheel_lacks_it(tmp_path):
    site = _site_with(tmp_path, "nvidia_pytriton.libs/libb64-1.so.0d", "nvidia/cuda_runtime/lib/libcudart.so.12")
    links = link_libraries(tmp_path / "links", [site])
    assert (links / "libcudart.so.12").resolve() == (site / "nvidia/cuda_runtime/lib/libcudart.so.12").resolve()


def test_a_missing_library_names_the_package_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "_on_system", lambda soname: False)
    site = _site_with(tmp_path, "nvidia/cuda_runtime/lib/libcudart.so.12")
    with pytest.raises(PerfAnalyzerError, match=r"libb64\.so\.0d .*apt-get install libb64-0d"):
        link_libraries(tmp_path / "links", [site])


def test_a_library_the_system_has_needs_no_link(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "_on_system", lambda soname: soname == "libb64.so.0d")
    site = _site_with(tmp_path, "nvidia/cuda_runtime/lib/libcudart.so.12")
    links = link_libraries(tmp_path / "links", [site])
    assert not (links / "libb64.so.0d").exists() and (links / "libcudart.so.12").exists()


def test_the_wrapper_takes_the_binarys_place_once_and_again_after_a_reinstall(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "link_libraries", lambda link_dir=None: link_dir)
    bin_dir, link_dir = tmp_path / "bin", tmp_path / "libs"
    bin_dir.mkdir()
    link_dir.mkdir()
    (bin_dir / "perf_analyzer").write_bytes(b"\x7fELF the wheel's binary")
    script = runtime.install_wrapper(bin_dir, link_dir)
    assert (link_dir / "perf_analyzer").read_bytes() == b"\x7fELF the wheel's binary"
    text = script.read_text()
    assert text.startswith("#!/bin/sh") and str(link_dir) in text and f'exec "{link_dir / "perf_analyzer"}"' in text
    assert runtime.install_wrapper(bin_dir, link_dir).read_text() == text  # again: nothing moves
    (bin_dir / "perf_analyzer").write_bytes(b"\x7fELF a reinstalled binary")  # pip put the binary back
    runtime.install_wrapper(bin_dir, link_dir)
    assert (link_dir / "perf_analyzer").read_bytes() == b"\x7fELF a reinstalled binary"
    assert (bin_dir / "perf_analyzer").read_text() == text


def test_the_venvs_perf_analyzer_runs_as_installed():
    """`make install` runs `voxlane doctor`, which puts the wrapper in place: a user's plain `perf_analyzer` starts."""
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([str(Path(sys.executable).parent / "perf_analyzer"), "--version"], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and "Perf Analyzer Version" in done.stdout + done.stderr, done.stderr
