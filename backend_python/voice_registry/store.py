"""Registered voices on disk: one file per voice, written atomically, read through a bounded LRU cache.

A voice is what `voice_encoder` made of a reference (protocol.tensors.REFERENCE_TENSORS, without the batch
dimension) and its metadata, in one `.npz` (the metadata as JSON in its member `meta`), at
`<data_dir>/voices/<model key>/<name>.npz`: the model key keeps a voice beside the model that encoded it.
A file is written once and never changed in place: a register writes a hidden temporary file and links it to
its name (an exclusive create: of two processes registering one name, one wins and the other is told it
exists); a delete unlinks it. So a reader sees a whole voice or none, and several processes (the router and
`voice_registry` of one server, and every server given the same `--data-dir`) share one directory: each
lookup checks the open file's inode, mtime and size against the cached copy, so another process's new
voice, re-registration or delete is seen at the next lookup.

Torch- and Triton-free (numpy only).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import time
import uuid
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

import numpy as np

from backend_python.paths import default_data_dir
from backend_python.stub_common.params import LaneSettings
from protocol.errors import RequestError
from protocol.quoting import quoted
from protocol.settings import read_settings
from protocol.tensors import REFERENCE_TENSORS
from protocol.voices import NAME_PATTERN

SUFFIX = ".npz"
_DAMAGED = (ValueError, OSError, KeyError, EOFError, RecursionError, zipfile.BadZipFile)  # reading a damaged file
META = "meta"  # the npz member holding the metadata (JSON, UTF-8 bytes as uint8)


@dataclass(frozen=True)
class VoiceStoreSettings:
    """Where a server keeps its registered voices, and how many it holds in memory. Parameters of
    `vox_ensemble` (which looks voices up) and `voice_registry` (which writes them); `voxlane serve` renders them."""

    model: str = LaneSettings.model  # the served model: its voices live apart from another model's
    data_dir: str = ""  # "" : $VOXLANE_CACHE/data (`voxlane serve --data-dir`)
    max_cached_voices: int = 64  # voices each process keeps decoded in memory (least recently used go)

    def __post_init__(self) -> None:
        if not self.model or self.max_cached_voices < 1:
            raise ValueError(f"inconsistent voice store settings: {self}")

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> "VoiceStoreSettings":
        """From a model's config.pbtxt parameters; absent keys keep the defaults."""
        return read_settings(cls, params, ignore_unknown=True)

    def to_parameters(self) -> dict[str, str]:
        return {f.name: str(getattr(self, f.name)) for f in fields(self)}

    @property
    def directory(self) -> Path:
        """The served model's voices: `<data_dir>/voices/<model key>`."""
        return Path(self.data_dir or default_data_dir()).expanduser() / "voices" / model_key(self.model)


def model_key(model: str) -> str:
    """A directory name for a `--model` value: a preset or Hugging Face id as it is ('/' as '--'), a checkpoint
    directory by its name and a hash of its resolved path."""
    if not model.startswith((".", "/", "~")) and NAME_PATTERN.fullmatch(key := model.replace("/", "--")):
        return key
    path = str(Path(model).expanduser().resolve())
    return f"{Path(path).name or 'model'}-{hashlib.sha256(path.encode()).hexdigest()[:12]}"


def fingerprint(audio: np.ndarray, sample_rate: int, transcript: str | None, x_vector_only: bool) -> str:
    """What a reference is, as sent: the same fingerprint means the same voice (a repeated register is no clash)."""
    digest = hashlib.sha256(np.ascontiguousarray(audio, dtype=np.float32).tobytes())
    digest.update(json.dumps([int(sample_rate), transcript, bool(x_vector_only)]).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class Voice:
    """One registered voice: the encoder's tensors and what it was made from."""

    name: str
    # REFERENCE_TENSORS by name, without the batch dimension
    tensors: dict[str, np.ndarray] = field(repr=False, compare=False)
    transcript: str | None  # `ref_text` for in-context cloning; None with `x_vector_only`
    x_vector_only: bool
    sample_rate: int  # of the reference as sent
    duration_s: float  # of the reference
    created: int  # Unix seconds
    fingerprint: str

    def metadata(self) -> dict:
        """The voice as `voice_registry` and the gateway answer it (no tensors)."""
        return {"name": self.name, "transcript": self.transcript, "x_vector_only": self.x_vector_only,
                "sample_rate": self.sample_rate, "duration_s": round(self.duration_s, 3), "created": self.created}

    def lm_inputs(self) -> dict[str, np.ndarray]:
        """The LM's reference inputs, as `VoiceEncoderClient.encode` gives them: the tensors and, in context,
        `ref_text` [1] BYTES."""
        inputs = dict(self.tensors)
        if self.transcript is not None:
            inputs["ref_text"] = np.array([self.transcript.encode("utf-8")], dtype=np.object_)
        return inputs


class VoiceStore:
    def __init__(self, directory: Path, max_cached: int = VoiceStoreSettings.max_cached_voices,
                 clock=time.time) -> None:
        self.directory = Path(directory)
        self.max_cached = max_cached
        self._clock = clock
        self._cache: OrderedDict[str, tuple[tuple, Voice]] = OrderedDict()  # name -> (file identity, voice)
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: VoiceStoreSettings) -> "VoiceStore":
        return cls(settings.directory, settings.max_cached_voices)

    def get(self, name: str) -> Voice | None:
        """The voice registered as `name` (as on disk now), or None."""
        if not NAME_PATTERN.fullmatch(name):
            return None
        try:
            with open(self._path(name), "rb") as f:
                return self._cached_or_read(name, f)
        except FileNotFoundError:
            with self._lock:
                self._cache.pop(name, None)
            return None

    def add(self, voice: Voice) -> Voice:
        """Register `voice`; the voice already registered under its name when that one has the same fingerprint.
        A RequestError (`voice_exists`) when the name holds another voice."""
        return self._link(voice, _encoded(voice))

    def export(self, name: str) -> bytes:
        """The file of the voice `name`, as `import_file` takes it (another server's copy of the voice)."""
        if not NAME_PATTERN.fullmatch(name):
            raise self.not_found(name)
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            raise self.not_found(name) from None

    def import_file(self, name: str, data: bytes, check: Callable[[Voice], None] = lambda voice: None) -> Voice:
        """Register the voice another store exported as `name` (checked as a lookup reads it, then by `check`, which
        raises what is wrong with it for the served model), as `add` does."""
        try:
            voice = _read(io.BytesIO(data), name)
        except ValueError as exc:
            raise RequestError(str(exc), param="voice_file", code="bad_voice_file") from None
        if not voice.tensors:
            raise RequestError(f"the voice file of {quoted(name)} holds none of {sorted(REFERENCE_TENSORS)}",
                               param="voice_file", code="bad_voice_file")
        check(voice)
        return self._link(voice, data)

    def _link(self, voice: Voice, data: bytes) -> Voice:
        """Write `data`, the file of `voice`, under its name: to a synced temporary file linked to the name."""
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.directory / f".{voice.name}.{uuid.uuid4().hex}.tmp"
        try:
            _write(temporary, data)
            os.link(temporary, self._path(voice.name))  # exclusive: fails when the name is taken
        except FileExistsError:
            return self._existing(voice)
        finally:
            temporary.unlink(missing_ok=True)
        _sync_directory(self.directory)
        return voice

    def delete(self, name: str) -> dict:
        """Remove the voice `name` and answer its metadata (a damaged file goes too); a RequestError
        (`voice_not_found`) when there is none."""
        path = self._path(name) if NAME_PATTERN.fullmatch(name) else None
        try:
            if path is None:
                raise FileNotFoundError(name)
            meta = _read_listing(path)
            path.unlink()
        except FileNotFoundError:
            raise self.not_found(name) from None
        with self._lock:
            self._cache.pop(name, None)
        _sync_directory(self.directory)
        return meta

    def list(self) -> list[dict]:
        """Every registered voice's metadata, by name (read from each file's `meta` alone)."""
        voices = []
        for path in sorted(self.directory.glob("*" + SUFFIX)) if self.directory.is_dir() else ():
            try:
                voices.append(_read_listing(path))
            except FileNotFoundError:  # deleted meanwhile
                continue
        return voices

    def new_voice(self, name: str, tensors: dict[str, np.ndarray], audio: np.ndarray, sample_rate: int,
                  transcript: str | None, x_vector_only: bool) -> Voice:
        """A voice made from `tensors`, the encoder's answer for the reference (`audio` at `sample_rate`)."""
        unknown = sorted(set(tensors) - set(REFERENCE_TENSORS))
        if unknown:
            raise ValueError(f"not reference tensors: {unknown}")
        return Voice(name, {k: np.ascontiguousarray(v, dtype=REFERENCE_TENSORS[k].dtype) for k, v in tensors.items()},
                     transcript, x_vector_only, int(sample_rate), audio.size / sample_rate, int(self._clock()),
                     fingerprint(audio, sample_rate, transcript, x_vector_only))

    @staticmethod
    def not_found(name: str) -> RequestError:
        return RequestError(f"no voice named {quoted(name)} is registered", param="name", code="voice_not_found")

    @staticmethod
    def exists(name: str) -> RequestError:
        return RequestError(f"a voice named {quoted(name)} is already registered (from another reference): "
                            "delete it first, or choose another name", param="name", code="voice_exists")

    def _existing(self, voice: Voice) -> Voice:
        existing = self.get(voice.name)
        if existing is not None and existing.fingerprint == voice.fingerprint:
            return existing
        raise self.exists(voice.name)

    def _cached_or_read(self, name: str, f) -> Voice:
        status = os.fstat(f.fileno())
        identity = (status.st_ino, status.st_mtime_ns, status.st_size)
        with self._lock:
            hit = self._cache.get(name)
            if hit is not None and hit[0] == identity:
                self._cache.move_to_end(name)
                return hit[1]
        voice = _read(f, name)
        with self._lock:
            self._cache[name] = (identity, voice)
            self._cache.move_to_end(name)
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        return voice

    @property
    def num_cached(self) -> int:
        return len(self._cache)

    def _path(self, name: str) -> Path:
        return self.directory / (name + SUFFIX)


def _encoded(voice: Voice) -> bytes:
    """The voice's file: its tensors and its metadata (JSON, as uint8) in one npz."""
    meta = {**voice.metadata(), "duration_s": voice.duration_s, "fingerprint": voice.fingerprint}
    buffer = io.BytesIO()
    np.savez(buffer, **voice.tensors, **{META: np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)})
    return buffer.getvalue()


def _write(path: Path, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())  # the data is on disk before the name points at it


# what a voice file may hold: a reference of at most a minute, encoded by any family here (codes of at most 64
# codebooks below 2**16, at most ~4k frames; an embedding of at most 8k values), and nothing that expands more
# than a real file does (a member 8 MiB at most, and at most 200 times its compressed size)
MAX_MEMBER_BYTES = 8 << 20
MAX_META_BYTES = 64 << 10  # its metadata: a transcript of at most 2,000 characters and a few fields fill ~8 kB
MAX_EXPANSION = 200
MAX_EMBEDDING = 8192
MAX_CODE_FRAMES, MAX_CODEBOOKS, MAX_CODE = 4096, 64, 1 << 16
_META_TYPES = {"transcript": (str, type(None)), "x_vector_only": (bool,), "sample_rate": (int,),
               "duration_s": (int, float), "created": (int,), "fingerprint": (str,)}


# numpy reads each .npy header with `ast.literal_eval`, and CPython 3.11's AST constructor keeps its recursion depth
# per interpreter: two threads parsing at once could fail one with "SystemError: AST constructor recursion depth
# mismatch" (CPython gh-106905), which a concurrent registration met. Voice files are read one at a time.
_NPZ_READ_LOCK = threading.Lock()


def _read(f, name: str) -> Voice:
    """The voice in file `f`, stored as `name`; ValueError naming the voice and what is wrong with the file."""
    try:
        with _NPZ_READ_LOCK, np.load(f, allow_pickle=False) as npz:
            _check_members(npz)
            meta = _checked_metadata(_metadata(npz))
            tensors = {key: _checked_tensor(key, np.array(npz[key])) for key in npz.files if key in REFERENCE_TENSORS}
    except _DAMAGED as exc:
        raise ValueError(f"the registered voice {quoted(name)} cannot be read: {exc}") from None
    return Voice(name, tensors, meta["transcript"], meta["x_vector_only"], meta["sample_rate"],
                 float(meta["duration_s"]), meta["created"], meta["fingerprint"])


def _check_members(npz) -> None:
    """Sizes from the zip's directory, before anything is decompressed: no member may expand like a bomb."""
    for info in npz.zip.infolist():
        if info.filename == META + ".npy" and info.file_size > MAX_META_BYTES:
            raise ValueError(f"its metadata holds {info.file_size} bytes (at most {MAX_META_BYTES})")
        if info.file_size > MAX_MEMBER_BYTES or info.file_size > MAX_EXPANSION * max(info.compress_size, 1) + 4096:
            raise ValueError(f"its member {quoted(info.filename)} expands to {info.file_size} bytes from "
                             f"{info.compress_size} (at most {MAX_MEMBER_BYTES}, and {MAX_EXPANSION}x)")


def _checked_metadata(meta: object) -> dict:
    if not isinstance(meta, dict):
        raise ValueError("its metadata is not a JSON object")
    for key, types in _META_TYPES.items():
        value = meta.get(key)
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise ValueError(f"its metadata {quoted(key)} must be {' or '.join(t.__name__ for t in types)}, "
                             f"got {quoted(value)}")
    if not 1000 <= meta["sample_rate"] <= 384_000 or not 0 <= meta["duration_s"] <= 3600:
        raise ValueError(f"its metadata sample_rate {meta['sample_rate']} or duration_s {meta['duration_s']} "
                         "is out of range")
    return meta


def _checked_tensor(key: str, array: np.ndarray) -> np.ndarray:
    spec = REFERENCE_TENSORS[key]
    if array.dtype != spec.dtype or array.ndim != len(spec.shape):
        raise ValueError(f"its {key} must be {np.dtype(spec.dtype).name} with {len(spec.shape)} dimensions, got "
                         f"{array.dtype.name} of shape {list(array.shape)}")
    if key == "speaker_embedding" and not (0 < array.size <= MAX_EMBEDDING and np.isfinite(array).all()):
        raise ValueError(f"its speaker_embedding must hold 1 to {MAX_EMBEDDING} finite values, got {array.size}")
    if key == "ref_codes":
        frames, codebooks = array.shape
        if not (0 < frames <= MAX_CODE_FRAMES and 0 < codebooks <= MAX_CODEBOOKS):
            raise ValueError(f"its ref_codes must be [1..{MAX_CODE_FRAMES} frames, 1..{MAX_CODEBOOKS} codebooks], "
                             f"got {list(array.shape)}")
        if array.min() < 0 or array.max() >= MAX_CODE:
            raise ValueError(f"its ref_codes must lie in [0, {MAX_CODE}), got {array.min()}..{array.max()}")
    return array


def _read_listing(path: Path) -> dict:
    """A voice's public metadata from its file's `meta` alone; a damaged file is listed with what is wrong."""
    try:
        with _NPZ_READ_LOCK, np.load(path, allow_pickle=False) as npz:
            _check_members(npz)
            return _public(_checked_metadata(_metadata(npz)), path.name[:-len(SUFFIX)])
    except FileNotFoundError:
        raise
    except _DAMAGED as exc:
        return {"name": path.name[:-len(SUFFIX)], "damaged": f"{type(exc).__name__}: {exc}"}


def _metadata(npz) -> dict:
    return json.loads(bytes(npz[META]).decode("utf-8"))


def _public(meta: dict, name: str) -> dict:
    """What a listing shows; the name is the file's (the name it is stored under), never what its metadata says."""
    public = {key: round(value, 3) if key == "duration_s" else meta[key] for key, value in meta.items()
              if key in _META_TYPES and key != "fingerprint"}
    return {"name": name, **public}


def _sync_directory(directory: Path) -> None:
    """Make a link or unlink durable (a crash right after it keeps it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
