"""The registered-voice store: names, atomic writes, the LRU bound, and another process's writes and deletes."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from backend_python.stub_common.request_inputs import RequestError
from backend_python.voice_registry import store as store_module
from backend_python.voice_registry.store import VoiceStore, VoiceStoreSettings, model_key
from protocol.voices import NAME_PATTERN, check_name

RATE = 16000


def make_voice(store: VoiceStore, name: str, f0: float = 140.0, transcript: str | None = "Hello there.",
               x_vector_only: bool = False):
    audio = np.sin(2 * np.pi * f0 * np.arange(RATE) / RATE).astype(np.float32) * 0.5
    tensors = {"speaker_embedding": np.full(8, f0, np.float32)}
    if not x_vector_only:
        tensors["ref_codes"] = np.arange(48, dtype=np.int64).reshape(3, 16) + int(f0)
    return store.new_voice(name, tensors, audio, RATE, None if x_vector_only else transcript, x_vector_only)


@pytest.fixture
def store(tmp_path) -> VoiceStore:
    return VoiceStore(tmp_path / "voices", max_cached=2)


@pytest.mark.parametrize("name", ["a", "Alice", "voice_1", "my.voice-2", "9", "x" * 64])
def test_valid_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", ".hidden", "-x", "_x", "a b", "a/b", "../x", "x" * 65, "é", "a\n"])
def test_bad_names_are_refused(name):
    with pytest.raises(RequestError) as refused:
        check_name(name)
    assert (refused.value.param, refused.value.code) == ("name", "bad_voice_name")


def test_a_preset_voice_name_is_refused():
    with pytest.raises(RequestError) as refused:
        check_name("tiny", presets=("tiny",))
    assert refused.value.code == "preset_voice_name"
    assert check_name("tiny2", presets=("tiny",)) == "tiny2"
    with pytest.raises(RequestError):  # in any case: the model takes `Ryan` for its speaker `ryan`
        check_name("Ryan", presets=("tiny", "ryan"))


def test_a_voice_round_trips_with_its_tensors_and_metadata(store):
    voice = store.add(make_voice(store, "alice"))
    got = VoiceStore(store.directory).get("alice")  # a fresh process's view: read from disk
    assert got == voice  # its metadata and fingerprint (the tensors compare below)
    for name, array in voice.tensors.items():
        np.testing.assert_array_equal(got.tensors[name], array)
        assert got.tensors[name].dtype == array.dtype
    assert got.metadata() == {"name": "alice", "transcript": "Hello there.", "x_vector_only": False,
                              "sample_rate": RATE, "duration_s": 1.0, "created": voice.created}
    assert set(got.lm_inputs()) == {"speaker_embedding", "ref_codes", "ref_text"}
    assert got.lm_inputs()["ref_text"][0] == b"Hello there."


def test_an_x_vector_voice_gives_no_transcript(store):
    voice = store.add(make_voice(store, "xv", x_vector_only=True))
    assert voice.transcript is None and set(voice.lm_inputs()) == {"speaker_embedding"}


def test_the_list_has_every_voice_by_name_without_tensors(store):
    for name in ("bob", "alice", "carol"):
        store.add(make_voice(store, name))
    listed = store.list()
    assert [v["name"] for v in listed] == ["alice", "bob", "carol"]
    assert all(set(v) == {"name", "transcript", "x_vector_only", "sample_rate", "duration_s", "created"}
               for v in listed)
    assert VoiceStore(store.directory.parent / "none").list() == []


def test_a_name_taken_by_another_voice_is_refused_and_the_same_voice_again_is_not(store):
    first = store.add(make_voice(store, "alice"))
    assert store.add(make_voice(store, "alice")).created == first.created  # the same reference: the stored voice
    with pytest.raises(RequestError) as refused:
        store.add(make_voice(store, "alice", f0=200.0))
    assert refused.value.code == "voice_exists"
    np.testing.assert_array_equal(store.get("alice").tensors["speaker_embedding"], first.tensors["speaker_embedding"])


def test_of_two_writers_of_one_name_exactly_one_wins(store):
    outcomes = []

    def register(f0):
        try:
            outcomes.append(store.add(make_voice(store, "race", f0=f0)).tensors["speaker_embedding"][0])
        except RequestError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=register, args=(f0,)) for f0 in (100.0, 200.0, 300.0, 400.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o != "voice_exists"]
    assert len(winners) == 1 and outcomes.count("voice_exists") == 3
    assert store.get("race").tensors["speaker_embedding"][0] == winners[0]


def test_voice_files_are_parsed_one_at_a_time(store, monkeypatch):
    """numpy parses .npy headers with `ast`, which CPython 3.11 cannot run in two threads at once (a concurrent
    registration failed with "AST constructor recursion depth mismatch"): reads and listings take turns."""
    for name in ("one", "two"):
        store.add(make_voice(store, name))
    load, inside, most = np.load, [0], [0]
    gate = threading.Lock()

    def counting_load(*args, **kwargs):
        with gate:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            threading.Event().wait(0.002)  # long enough for another thread to come in, were it let in
            return load(*args, **kwargs)
        finally:
            with gate:
                inside[0] -= 1

    def read(name: str) -> None:
        for _ in range(20):
            with open(store._path(name), "rb") as f:
                store_module._read(f, name)

    monkeypatch.setattr(store_module.np, "load", counting_load)
    readers = [threading.Thread(target=lambda: [store_module._read_listing(store._path("one")) for _ in range(20)])]
    readers += [threading.Thread(target=read, args=(name,)) for name in ("one", "two")]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    assert most[0] == 1


def test_a_write_that_fails_midway_leaves_no_voice_and_no_temporary_file(store, monkeypatch):
    def broken_link(source, target):
        raise OSError("disk gone")

    monkeypatch.setattr(store_module.os, "link", broken_link)
    with pytest.raises(OSError):
        store.add(make_voice(store, "alice"))
    assert store.get("alice") is None and list(store.directory.iterdir()) == []


def test_a_reader_sees_the_whole_file_or_nothing(store, monkeypatch):
    """The name appears only once the file is complete and synced: the link comes after the write."""
    seen = []
    real_link = store_module.os.link

    def checking_link(source, target):
        seen.append((Path(target).exists(), Path(source).stat().st_size, VoiceStore(store.directory).get("alice")))
        real_link(source, target)

    monkeypatch.setattr(store_module.os, "link", checking_link)
    voice = store.add(make_voice(store, "alice"))
    assert seen[0][0] is False and seen[0][1] > 0 and seen[0][2] is None
    assert VoiceStore(store.directory).get("alice").fingerprint == voice.fingerprint
    assert [p.name for p in store.directory.iterdir()] == ["alice.npz"]


def test_delete_removes_the_voice_and_an_unknown_one_is_refused(store):
    store.add(make_voice(store, "alice"))
    assert store.delete("alice")["name"] == "alice"
    assert store.get("alice") is None and store.list() == []
    with pytest.raises(RequestError) as refused:
        store.delete("alice")
    assert (refused.value.param, refused.value.code) == ("name", "voice_not_found")


def test_the_cache_is_bounded_and_drops_the_least_recently_used(store, monkeypatch):
    for name in ("a", "b", "c"):
        store.add(make_voice(VoiceStore(store.directory), name))
    reads = []
    real_read = store_module._read
    monkeypatch.setattr(store_module, "_read", lambda f, name: reads.append(name) or real_read(f, name))
    for name in ("a", "b", "a", "c", "a", "b"):
        assert store.get(name).name == name
    assert store.num_cached == 2
    assert reads == ["a", "b", "c", "b"]  # "a" stayed (used last before "c"), "b" went when "c" came


def test_another_process_writes_and_deletes_are_seen_at_the_next_lookup(store):
    """Servers sharing a data directory: this process's cached copy never hides what another did since."""
    store.add(make_voice(store, "alice", f0=140.0))
    assert store.get("alice").tensors["speaker_embedding"][0] == 140.0  # cached now

    def other_process(action: str) -> None:
        code = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
            from pathlib import Path
            from backend_python.voice_registry.store import VoiceStore
            from tests.unit.test_voice_store import make_voice
            store = VoiceStore(Path({str(store.directory)!r}))
            {action}
        """)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    other_process("store.delete('alice')")
    assert store.get("alice") is None
    other_process("store.add(make_voice(store, 'alice', f0=220.0))")
    assert store.get("alice").tensors["speaker_embedding"][0] == 220.0
    other_process("store.delete('alice'); store.add(make_voice(store, 'alice', f0=330.0))")
    assert store.get("alice").tensors["speaker_embedding"][0] == 330.0
    other_process("store.add(make_voice(store, 'bob'))")
    assert [v["name"] for v in store.list()] == ["alice", "bob"]


@pytest.mark.parametrize("damage", [b"not a zip", "truncated"])
def test_a_damaged_file_is_an_error_that_names_the_voice_is_listed_and_can_be_deleted(store, damage):
    store.add(make_voice(store, "whole"))
    data = (store.directory / "whole.npz").read_bytes()
    (store.directory / "broken.npz").write_bytes(data[:len(data) // 2] if damage == "truncated" else damage)
    with pytest.raises(ValueError, match="'broken' cannot be read"):
        store.get("broken")
    listed = {v["name"]: v for v in store.list()}
    assert set(listed) == {"broken", "whole"} and "damaged" in listed["broken"] and "damaged" not in listed["whole"]
    assert store.delete("broken")["name"] == "broken" and store.get("broken") is None


def test_settings_round_trip_and_the_default_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("VOXLANE_CACHE", str(tmp_path))
    settings = VoiceStoreSettings()
    assert settings.directory == tmp_path / "data" / "voices" / "qwen3-tts-tiny"
    custom = VoiceStoreSettings(model="qwen3-tts-tiny-base", data_dir=str(tmp_path / "d"), max_cached_voices=3)
    assert VoiceStoreSettings.from_parameters(custom.to_parameters()) == custom
    assert custom.directory == tmp_path / "d" / "voices" / "qwen3-tts-tiny-base"
    with pytest.raises(ValueError):
        VoiceStoreSettings(max_cached_voices=0)


def test_model_keys_are_directory_names():
    assert model_key("qwen3-tts-tiny-base") == "qwen3-tts-tiny-base"
    assert model_key("Qwen/Qwen3-TTS-12Hz-1.7B-Base") == "Qwen--Qwen3-TTS-12Hz-1.7B-Base"
    a, b = model_key("/models/a/ckpt"), model_key("/models/b/ckpt")
    assert a != b and a.startswith("ckpt-") and NAME_PATTERN.fullmatch(a)
    assert "/" not in model_key("./local dir")


def test_an_exported_voice_imports_into_another_store_as_it_was(store, tmp_path):
    voice = store.add(make_voice(store, "alice"))
    other = VoiceStore(tmp_path / "elsewhere")
    imported = other.import_file("alice", store.export("alice"))
    assert imported == voice and other.get("alice") == voice
    for name, array in voice.tensors.items():
        np.testing.assert_array_equal(other.get("alice").tensors[name], array)
    assert other.import_file("alice", store.export("alice")) == voice  # again: the same voice, no clash
    store.add(make_voice(store, "bob", f0=300.0))
    with pytest.raises(RequestError) as taken:
        other.import_file("alice", store.export("bob"))
    assert taken.value.code == "voice_exists"
    with pytest.raises(RequestError) as missing:
        store.export("nobody")
    assert missing.value.code == "voice_not_found"


@pytest.mark.parametrize("data", [b"not a zip", b""])
def test_a_bad_voice_file_is_refused_on_import(store, data):
    with pytest.raises(RequestError) as refused:
        store.import_file("alice", data)
    assert (refused.value.param, refused.value.code) == ("voice_file", "bad_voice_file")
    assert store.get("alice") is None


def _file(meta_changes: dict | None = None, **tensors) -> bytes:
    """A voice file as `export` writes it, with its metadata and tensors changed."""
    import io
    import json
    meta = {"name": "alice", "transcript": "Hello there.", "x_vector_only": False, "sample_rate": RATE,
            "duration_s": 1.0, "created": 1, "fingerprint": "0" * 64, **(meta_changes or {})}
    arrays = {"speaker_embedding": np.ones(8, np.float32), "ref_codes": np.zeros((3, 16), np.int64), **tensors}
    arrays = {k: v for k, v in arrays.items() if v is not None}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    return buffer.getvalue()


@pytest.mark.parametrize("data, says", [
    (lambda: _file({"transcript": 5}), "transcript"),
    (lambda: _file({"x_vector_only": "no"}), "x_vector_only"),
    (lambda: _file({"sample_rate": 16000.5}), "sample_rate"),
    (lambda: _file({"sample_rate": 10 ** 9}), "out of range"),
    (lambda: _file(speaker_embedding=np.ones(8, np.float64)), "speaker_embedding"),
    (lambda: _file(speaker_embedding=np.ones((2, 4), np.float32)), "speaker_embedding"),
    (lambda: _file(speaker_embedding=np.array([1.0, np.nan, 2.0], np.float32)), "finite"),
    (lambda: _file(speaker_embedding=np.ones(3, np.float32)[:0]), "speaker_embedding"),
    (lambda: _file(ref_codes=np.full((3, 16), -1, np.int64)), "ref_codes"),
    (lambda: _file(ref_codes=np.full((3, 16), 1 << 20, np.int64)), "ref_codes"),
    (lambda: _file(ref_codes=np.zeros((100_000, 16), np.int64)), "ref_codes"),  # 100k frames: past any minute of codes
    (lambda: _file(ref_codes=np.zeros((3, 16), np.int32)), "ref_codes"),
    (lambda: _file(speaker_embedding=np.zeros(10_000_000, np.float32)), "expands"),  # 40 MB of zeros in a 40 kB file
], ids=["int-transcript", "str-flag", "float-rate", "huge-rate", "float64-embedding", "2d-embedding",
        "nan-embedding", "empty-embedding", "negative-codes", "codes-past-2**16", "100k-frames", "int32-codes",
        "compression-bomb"])
def test_a_voice_file_that_breaks_the_rules_is_refused_on_import_naming_what_is_wrong(store, data, says):
    with pytest.raises(RequestError) as refused:
        store.import_file("alice", data())
    assert refused.value.code == "bad_voice_file" and says in str(refused.value) and "'alice'" in str(refused.value)
    assert store.get("alice") is None and store.list() == []


def test_a_voice_is_listed_under_its_files_name_not_its_metadatas(store):
    store.import_file("bob", _file({"name": "../../etc/passwd"}))
    assert [v["name"] for v in store.list()] == ["bob"]


def test_a_stored_file_that_breaks_the_rules_fails_at_use_as_the_servers_fault_naming_the_voice(store):
    store.directory.mkdir(parents=True)
    (store.directory / "carol.npz").write_bytes(_file({"transcript": 5}))
    with pytest.raises(ValueError, match="'carol'") as failed:
        store.get("carol")
    assert not isinstance(failed.value, RequestError)  # not the client's input: the router answers 500
    assert store.list() == [{"name": "carol", "damaged": store.list()[0]["damaged"]}]
