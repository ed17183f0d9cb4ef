"""Triton glue of `voice_registry` (not decoupled: one request, one response): register, list and delete voices.

Inputs, each [1] but `ref_audio` [-1]: `action` BYTES (`register`, `list`, `delete`, `export` or `import`),
`name` BYTES (all but list), for register the reference inputs of `vox_ensemble` (`ref_audio`, `ref_sample_rate`,
`ref_text`, `x_vector_only`), checked by the same code (reference_inputs.py), and for import `voice_file` BYTES:
a voice's file as another server's export answered it (the gateway copies voices to a server that lacks them). A register calls `voice_encoder` by BLS (one
request, one response; the request the router builds for an inline reference, so the stored tensors are the
ones an inline reference would reach the LM with) and stores its answer (store.py). Output `voices` BYTES [1]:
JSON, the voice's metadata (register, delete, import; export adds `file`, the base64 of the voice's file) or
`{"object": "list", "data": [...], "presets": [...]}` (list: the registered voices, and the model's preset voices as
the LM lane names them; `presets` is absent while the LM lane does not answer).

A name that holds another voice is refused (`voice_exists`: delete it first); registering the same reference
under the same name again answers the stored voice, so a gateway that registers on every server, some of them
sharing one data directory, gets the same answer from each. Errors are `Ended` values in the wire form.
"""
from __future__ import annotations

import base64
import json
import logging

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.stub_common.encoder_client import VoiceEncoderClient
from backend_python.stub_common.logs import configure_stub_logging
from backend_python.stub_common.params import model_parameters
from backend_python.stub_common.reference_inputs import ReferenceAudio, ReferenceLimits, parse_reference
from backend_python.stub_common.request_inputs import RequestError
from backend_python.voice_registry.store import Voice, VoiceStore, VoiceStoreSettings, fingerprint
from protocol.voices import check_name
from protocol.admin import ADMIN_KEY_PARAMETER, WRITE_ACTIONS, is_admin
from protocol.models import LM, VOICE_ENCODER
from protocol.quoting import quoted
from protocol.reasons import Ended, EndReason
from protocol.tensors import LIST_VOICES, REFERENCE_INPUTS, REFERENCE_TENSORS, VOICES_OUTPUT
from protocol.wire import encode_error

log = logging.getLogger("voxlane.voice_registry")
# the inputs each action takes; export and import copy a voice between servers (the gateway's sync)
ACTIONS = {"register": ("name", *REFERENCE_INPUTS), "list": (), "delete": ("name",), "export": ("name",),
           "import": ("name", "voice_file")}


class VoiceRegistryModel:
    def initialize(self, args: dict) -> None:
        configure_stub_logging()
        params = model_parameters(args)
        self.settings = VoiceStoreSettings.from_parameters(params)
        self.limits = ReferenceLimits.from_parameters(params)
        self.store = VoiceStore.from_settings(self.settings)
        # where set (`voxlane serve` with admin keys): writes need one of these keys (protocol/admin.py)
        self.admin_key_hashes = tuple(h for h in params.get("admin_key_sha256", "").split(",") if h)
        self.encoder = VoiceEncoderClient(_NoHealing())
        self.lm_voices = LMVoices()
        self._presets: tuple[str, ...] | None = None  # read at the first register: it imports the model registry

    def execute(self, requests: list) -> list:
        return [self._respond(request) for request in requests]

    def _respond(self, request):
        def get(name: str):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return None if tensor is None else tensor.as_numpy()
        try:
            answer = self._run(get, {t.name() for t in request.inputs()}, lambda: _parameters(request))
        except RequestError as exc:
            return _error(exc.ended)
        except (OSError, ValueError) as exc:  # the data directory (a full disk, a damaged file)
            log.error("voice registry failed: %s", exc)
            return _error(Ended(EndReason.INTERNAL, f"voice registry failed: {exc}"))
        if isinstance(answer, Ended):
            return _error(answer)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("voices", np.array([json.dumps(answer).encode("utf-8")], dtype=np.object_))])

    def _run(self, get, names: set[str], parameters) -> dict | Ended:
        action = _action(get, names)
        if action in WRITE_ACTIONS and self.admin_key_hashes and \
                not is_admin(parameters().get(ADMIN_KEY_PARAMETER), self.admin_key_hashes):
            raise RequestError(f"{action} needs an admin key of this server (the request parameter "
                               f"'{ADMIN_KEY_PARAMETER}'; the gateway sends its own)", param=ADMIN_KEY_PARAMETER,
                               code="admin_key_required")
        if action == "list":
            return self._list()
        name = _text(get, "name", required=True)
        if action == "delete":
            return {**self.store.delete(name), "deleted": True}
        if action == "export":
            return self._export(name)
        if action == "import":
            return self.store.import_file(check_name(name, self._preset_voices()), _file(get)).metadata()
        answer = self._register(check_name(name, self._preset_voices()), get)
        return answer if isinstance(answer, Ended) else answer.metadata()

    def _list(self) -> dict:
        """The registered voices (`data`), and the model's preset voices (`presets`) once the LM lane has named them
        (absent until it answers: the registered voices never wait on the LM)."""
        answer = {"object": "list", "data": self.store.list()}
        presets = self.lm_voices.names()
        return answer if presets is None else {**answer, "presets": list(presets)}

    def _export(self, name: str) -> dict:
        """The voice and its file (base64), which another server's `import` takes as `voice_file`."""
        voice = self.store.get(name)
        if voice is None:
            raise self.store.not_found(name)
        return {**voice.metadata(), "file": base64.b64encode(self.store.export(name)).decode("ascii")}

    def _register(self, name: str, get) -> Voice | Ended:
        reference = parse_reference(get, self.limits)
        if reference is None:
            raise RequestError("registering a voice needs 'ref_audio' (mono PCM in [-1, 1]) and 'ref_sample_rate'",
                               param="ref_audio", code="missing_ref_audio")
        existing = self.store.get(name)
        if existing is not None and existing.fingerprint == _fingerprint(reference):
            return existing  # registered before, from this reference: nothing to encode
        if existing is not None:
            raise self.store.exists(name)
        tensors = self._encode(reference)
        if isinstance(tensors, Ended):
            return tensors
        return self.store.add(self.store.new_voice(name, tensors, reference.audio, reference.sample_rate,
                                                   reference.text, reference.x_vector_only))

    def _encode(self, reference: ReferenceAudio) -> dict[str, np.ndarray] | Ended:
        tensors = self.encoder.encode(reference, {})
        if isinstance(tensors, Ended):
            return tensors
        return {t.name(): t.as_numpy() for t in tensors if t.name() in REFERENCE_TENSORS}

    def _preset_voices(self) -> tuple[str, ...]:
        if self._presets is None:
            from backend_python.models import registry  # torch: only once something is registered
            self._presets = registry.preset_voices(registry.resolve(self.settings.model))
        return self._presets


class LMVoices:
    """The LM lane's preset voice names, asked once (a `list_voices` control request over BLS) and kept: they are
    the served model's and change only with it. The registry itself never loads the model (no torch to list)."""

    def __init__(self) -> None:
        self._names: tuple[str, ...] | None = None
        self._held: list = []  # answered BLS iterators stay alive (vox_ensemble/graveyard.py says why); one or two

    def names(self) -> tuple[str, ...] | None:
        """The names, or None while the LM lane does not answer (loading, down)."""
        if self._names is None:
            self._names = self._ask()
        return self._names

    def _ask(self) -> tuple[str, ...] | None:
        request = pb_utils.InferenceRequest(model_name=LM, requested_output_names=[VOICES_OUTPUT], inputs=[
            pb_utils.Tensor(LIST_VOICES, np.array([True], dtype=np.bool_))])
        try:
            responses = request.exec(decoupled=True)
        except Exception as exc:  # whatever the LM lane's state, the listing answers the registered voices
            log.warning("could not ask the LM lane for its voices: %s", exc)
            return None
        self._held.append(responses)
        names = None
        for response in responses:
            if response.has_error():
                log.warning("the LM lane did not list its voices: %s", response.error().message())
                continue
            tensor = pb_utils.get_output_tensor_by_name(response, VOICES_OUTPUT)
            if tensor is not None:
                names = tuple(json.loads(bytes(tensor.as_numpy().reshape(-1)[0])))
        return names


class _NoHealing:
    """The lane health `VoiceEncoderClient` asks: the registry takes no lane out and reloads none (the router
    does, for the streams it serves); a dead encoder is a 503 here, to be retried."""

    def unavailable(self, model: str) -> None:
        return None

    def generation(self, model: str) -> int:
        return 0

    def on_dead(self, model: str, message: str, generation: int | None = None) -> Ended:
        return Ended(EndReason.LANE_DOWN, f"the {VOICE_ENCODER} lane is down ({message}); retry")


def _parameters(request) -> dict:
    """The request's parameters (Triton hands them over as JSON); {} where none or unreadable."""
    try:
        parameters = json.loads(request.parameters() or "{}")
    except (AttributeError, ValueError):
        return {}
    return parameters if isinstance(parameters, dict) else {}


def _action(get, names: set[str]) -> str:
    action = _text(get, "action", required=True)
    if action not in ACTIONS:
        raise RequestError(f"input 'action' must be one of {', '.join(ACTIONS)}, got {quoted(action)}",
                           param="action", code="unknown_action")
    extra = sorted(names - {"action", *ACTIONS[action]})
    if extra:
        raise RequestError(f"action {action!r} takes no input {quoted(extra[0])}", param=extra[0])
    return action


def _text(get, name: str, required: bool = False) -> str | None:
    array = get(name)
    if array is None:
        if required:
            raise RequestError(f"missing input {name!r}", param=name)
        return None
    if array.size != 1:
        raise RequestError(f"input '{name}' must hold exactly one value, got shape {list(array.shape)}", param=name)
    value = array.reshape(-1)[0]
    try:
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)
    except UnicodeDecodeError as exc:
        raise RequestError(f"input '{name}' is not valid UTF-8 (byte {exc.start})", param=name) from None


def _file(get) -> bytes:
    array = get("voice_file")
    if array is None:
        raise RequestError("import needs 'voice_file': a voice's file, as export answers it", param="voice_file")
    if array.size != 1:
        raise RequestError(f"input 'voice_file' must hold exactly one value, got shape {list(array.shape)}",
                           param="voice_file")
    return bytes(array.reshape(-1)[0])


def _fingerprint(reference: ReferenceAudio) -> str:
    return fingerprint(reference.audio, reference.sample_rate, reference.text, reference.x_vector_only)


def _error(ended: Ended):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(encode_error(ended)))
