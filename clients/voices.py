"""Registered voices over Triton's gRPC, without the gateway (`voice_registry`; README, "Voice registry"), and
`voxlane voices register|list|delete`."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from protocol.admin import ADMIN_KEY_PARAMETER
from protocol.models import VOICE_REGISTRY
from protocol.reasons import Ended, EndReason
from protocol.tensors import REQUEST_INPUTS, scalar_array
from protocol.wire import decode_error


_UNREACHABLE = ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


class RegistryError(Exception):
    """The registry refused a call; `ended` holds its reason, the input at fault and a code."""

    def __init__(self, ended: Ended) -> None:
        super().__init__(ended.message)
        self.ended = ended


ADMIN_KEY_ENV = "VOXLANE_ADMIN_KEY"  # `voxlane voices`' key for register and delete, where --admin-key is not given


def register_voice(url: str, name: str, audio: np.ndarray, sample_rate: int, ref_text: str | None = None,
                   x_vector_only: bool | None = None, admin_key: str | None = None) -> dict:
    """Register `audio` ([n] float32 mono in [-1, 1] at `sample_rate`) as `name`: in context with its transcript
    `ref_text`, or from its speaker embedding alone with `x_vector_only`. The voice's metadata."""
    reference = {"ref_audio": audio, "ref_sample_rate": sample_rate, "ref_text": ref_text,
                 "x_vector_only": x_vector_only}
    return call_registry(url, "register", admin_key, name=name, **{k: v for k, v in reference.items() if v is not None})


def list_voices(url: str) -> list[dict]:
    return call_registry(url, "list")["data"]


def delete_voice(url: str, name: str, admin_key: str | None = None) -> dict:
    return call_registry(url, "delete", admin_key, name=name)


def call_registry(url: str, action: str, admin_key: str | None = None, timeout_s: float | None = None,
                  **values) -> dict:
    """One `voice_registry` request (`name` and the reference inputs by the router's table); its JSON answer, or
    RegistryError. `admin_key`: what a server given admin keys needs for register, delete and import (and model
    control, which the server's control key opens too: protocol/admin.py)."""
    inputs = [_input("action", _text(action))]
    for key, value in values.items():
        inputs.append(_input(key, _text(value) if key == "name" else scalar_array(key, value)))
    client = grpcclient.InferenceServerClient(url)
    try:
        result = client.infer(VOICE_REGISTRY, inputs, client_timeout=timeout_s,
                              parameters={ADMIN_KEY_PARAMETER: admin_key} if admin_key else None)
    except InferenceServerException as exc:
        if exc.status() in _UNREACHABLE:
            raise RegistryError(Ended(EndReason.LANE_DOWN, f"the server at {url} cannot be reached: {exc.message()}"))
        raise RegistryError(decode_error(exc.message() or str(exc))) from None
    finally:
        client.close()
    return json.loads(result.as_numpy("voices")[0])


def _text(value: str) -> np.ndarray:
    return np.array([value.encode("utf-8")], dtype=np.object_)


def _input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    datatype = "BYTES" if array.dtype == np.object_ else REQUEST_INPUTS[name].triton_type
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def add_voices_command(commands) -> dict:
    parser = commands.add_parser("voices", help="register, list or delete voices on a running server")
    parser.add_argument("--url", default="localhost:8001", help="the server's gRPC HOST:PORT")
    parser.add_argument("--admin-key", default=os.environ.get(ADMIN_KEY_ENV),
                        help=f"an admin key of the server, for register and delete where it has them "
                             f"(default: ${ADMIN_KEY_ENV})")
    actions = parser.add_subparsers(dest="action", required=True)
    register = actions.add_parser("register", help="register the voice of an audio file (WAV, FLAC or Ogg) as NAME")
    register.add_argument("name")
    register.add_argument("file", type=Path)
    register.add_argument("--transcript", default=None, help="what the file says (in-context cloning needs it)")
    register.add_argument("--x-vector-only", action="store_true", help="clone from its speaker embedding alone")
    actions.add_parser("list", help="the registered voices")
    delete = actions.add_parser("delete", help="delete the voice NAME")
    delete.add_argument("name")
    return {"voices": run_voices_command}


def run_voices_command(args: argparse.Namespace) -> int:
    """Prints the answer as JSON; a refusal as `voxlane: error: …` (exit status 1)."""
    try:
        if args.action == "register":
            answer = register_voice(args.url, args.name, *_read_audio(args.file), args.transcript,
                                    True if args.x_vector_only else None, args.admin_key)
        elif args.action == "list":
            answer = list_voices(args.url)
        else:
            answer = delete_voice(args.url, args.name, args.admin_key)
    except RegistryError as exc:
        print(f"voxlane: error: {exc} ({exc.ended.code or exc.ended.reason.value})", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    return 0


def _read_audio(path: Path) -> tuple[np.ndarray, int]:
    from audio.decoding import AudioFileError, decode_reference
    try:
        decoded = decode_reference(path.read_bytes())
    except (AudioFileError, OSError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return decoded.samples, decoded.sample_rate
