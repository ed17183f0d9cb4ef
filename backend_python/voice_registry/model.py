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

It also loads and unloads models (`load_model`, `unload_model`, `name` the model's; answered `{"object": "model",
"name", "ready"}`): `voxlane serve` unloads the LM through it before a stop, and an operator may, where Triton's own
repository API is closed (a server with keys or on a network: no key is put on tritonserver's command line). They
need an admin key or the server's control key (protocol/admin.py), unless the server has neither (its repository
API is open then too).

A name that holds another voice is refused (`voice_exists`: delete it first); registering the same reference
under the same name again answers the stored voice, so a gateway that registers on every server, some of them
sharing one data directory, gets the same answer from each. Errors are `Ended` values in the wire form.
"""
from __future__ import annotations

import base64
import collections
import json
import logging
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.stub_common import unloads
from backend_python.stub_common.encoder_client import VoiceEncoderClient
from backend_python.stub_common.logs import configure_stub_logging
from backend_python.stub_common.params import model_parameters
from backend_python.stub_common.reference_inputs import ReferenceAudio, ReferenceLimits, parse_reference
from backend_python.stub_common.request_inputs import RequestError, control_character
from backend_python.stub_common.responses import error_response
from backend_python.voice_registry.store import Voice, VoiceStore, VoiceStoreSettings, fingerprint
from protocol.voices import VoiceSpec, check_name
from protocol.admin import ADMIN_KEY_PARAMETER, CONTROL_ACTIONS, CONTROL_KEY_FILE, WRITE_ACTIONS, is_admin, key_hash
from protocol.models import LM, VOICE_ENCODER
from protocol.quoting import quoted
from protocol.reasons import Ended, EndReason
from protocol.tensors import FORGET_VOICE, LIST_VOICES, REFERENCE_INPUTS, REFERENCE_TENSORS, VOICES_OUTPUT

log = logging.getLogger("voxlane.voice_registry")
# the inputs each action takes; export and import copy a voice between servers (the gateway's sync)
ACTIONS = {"register": ("name", *REFERENCE_INPUTS), "list": (), "delete": ("name",), "export": ("name",),
           "import": ("name", "voice_file"), "load_model": ("name",), "unload_model": ("name",)}


class VoiceRegistryModel:
    def initialize(self, args: dict) -> None:
        configure_stub_logging()
        params = model_parameters(args)
        self.settings = VoiceStoreSettings.from_parameters(params)
        self.limits = ReferenceLimits.from_parameters(params)
        self.store = VoiceStore.from_settings(self.settings)
        # where set (`voxlane serve` with admin keys): writes need one of these keys (protocol/admin.py)
        self.admin_key_hashes = tuple(h for h in params.get("admin_key_sha256", "").split(",") if h)
        # model control: those keys, and the server's own control key (`voxlane serve` writes it to a file only its
        # user reads); with neither, model control is as open as Triton's repository API then is
        self.control_key_hashes = self.admin_key_hashes + _file_key_hash(params.get(CONTROL_KEY_FILE, ""))
        # the served repository (this model's folder is in it): model control names only the models it holds
        self.repository = Path(args["model_repository"]).parent if args.get("model_repository") else None
        self.encoder = VoiceEncoderClient(_NoHealing())
        self.lm_voices = LMVoices()
        self._presets: tuple[str, ...] | None = None  # read at the first register: it imports the model registry
        self._voice_spec: VoiceSpec | None = None  # asked of the encoder lane at the first register or import

    def execute(self, requests: list) -> list:
        return [self._respond(request) for request in requests]

    def finalize(self) -> None:
        unloads.mark_unloaded()  # an unload, not a death, for the router's watch of this model

    def _respond(self, request):
        def get(name: str):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return None if tensor is None else tensor.as_numpy()
        try:
            answer = self._run(get, {t.name() for t in request.inputs()}, lambda: _parameters(request))
        except RequestError as exc:
            return error_response(exc.ended)
        except (OSError, ValueError) as exc:  # the data directory (a full disk, a damaged file)
            log.error("voice registry failed: %s", exc)
            return error_response(Ended(EndReason.INTERNAL, f"voice registry failed: {exc}"))
        if isinstance(answer, Ended):
            return error_response(answer)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("voices", np.array([json.dumps(answer).encode("utf-8")], dtype=np.object_))])

    def _run(self, get, names: set[str], parameters) -> dict | Ended:
        action = _action(get, names)
        _check_key(action, parameters, self.admin_key_hashes, self.control_key_hashes)
        if action in CONTROL_ACTIONS:
            return _control_model(action, _text(get, "name", required=True), self.repository)
        if action == "list":
            return self._list()
        name = _text(get, "name", required=True)
        if action == "delete":
            return self._delete(name)
        if action == "export":
            return self._export(name)
        if action == "import":
            return self._import(check_name(name, self._preset_voices()), _file(get))
        answer = self._register(check_name(name, self._preset_voices()), get)
        return answer if isinstance(answer, Ended) else answer.metadata()

    def _list(self) -> dict:
        """The registered voices (`data`), and the model's preset voices (`presets`) once the LM lane has named them
        (absent until it answers: the registered voices never wait on the LM)."""
        answer = {"object": "list", "data": self.store.list()}
        presets = self.lm_voices.names()
        return answer if presets is None else {**answer, "presets": list(presets)}

    def _delete(self, name: str) -> dict:
        """Remove the voice, then tell the LM lane, which drops what it cached of it (its prompt prefixes)."""
        try:
            voice = self.store.get(name)
        except (ValueError, OSError):  # a damaged file goes too; nothing of it could reach the LM
            voice = None
        answer = {**self.store.delete(name), "deleted": True}
        if voice is not None:
            self.lm_voices.forget(voice)
        return answer

    def _export(self, name: str) -> dict:
        """The voice and its file (base64), which another server's `import` takes as `voice_file`."""
        voice = self.store.get(name)
        if voice is None:
            raise self.store.not_found(name)
        return {**voice.metadata(), "file": base64.b64encode(self.store.export(name)).decode("ascii")}

    def _import(self, name: str, data: bytes) -> dict | Ended:
        """Another server's voice, refused before it is stored where the served model could not speak it."""
        spec = self._spec()
        if isinstance(spec, Ended):
            return spec

        def check(voice: Voice) -> None:
            _check_transcript(voice.transcript, self.limits)
            spec.check(voice.tensors, voice.transcript, voice.x_vector_only, param="voice_file")
        return self.store.import_file(name, data, check).metadata()

    def _spec(self) -> VoiceSpec | Ended:
        """What the served model's voices hold, asked of its encoder lane once."""
        if self._voice_spec is None:
            answer = self.encoder.voice_spec()
            if isinstance(answer, Ended):
                return answer
            self._voice_spec = answer
        return self._voice_spec

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
        tensors, spec = self._encode(reference), self._spec()
        if isinstance(tensors, Ended) or isinstance(spec, Ended):
            return tensors if isinstance(tensors, Ended) else spec
        spec.check(tensors, reference.text, reference.x_vector_only, param="ref_audio")
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
        # answered BLS iterators stay alive (vox_ensemble/graveyard.py says why): one is freed 16 calls later
        self._held: collections.deque = collections.deque(maxlen=16)

    def names(self) -> tuple[str, ...] | None:
        """The names, or None while the LM lane does not answer (loading, down)."""
        if self._names is None:
            self._names = self._ask()
        return self._names

    def forget(self, voice: Voice) -> None:
        """Tell the LM lane a registered voice was deleted (a `forget_voice` control request with its tensors): it
        drops what it cached of the voice. Best effort: an LM lane that does not answer keeps its entries, which
        no request can reach by another voice (they are keyed by the voice's content) and its LRU ages out."""
        inputs = [pb_utils.Tensor(FORGET_VOICE, np.array([True], dtype=np.bool_))]
        inputs += [pb_utils.Tensor(name, array) for name, array in voice.lm_inputs().items()]
        for response in self._call(inputs, []) or ():
            if response.has_error():
                log.warning("the LM lane did not forget voice %s: %s", quoted(voice.name), response.error().message())

    def _ask(self) -> tuple[str, ...] | None:
        responses = self._call([pb_utils.Tensor(LIST_VOICES, np.array([True], dtype=np.bool_))], [VOICES_OUTPUT])
        names = None
        for response in responses or ():
            if response.has_error():
                log.warning("the LM lane did not list its voices: %s", response.error().message())
                continue
            tensor = pb_utils.get_output_tensor_by_name(response, VOICES_OUTPUT)
            if tensor is not None:
                names = tuple(json.loads(bytes(tensor.as_numpy().reshape(-1)[0])))
        return names

    def _call(self, inputs: list, outputs: list[str]):
        """One control request to the LM lane -> its responses, or None where it could not be asked."""
        request = pb_utils.InferenceRequest(model_name=LM, requested_output_names=outputs, inputs=inputs)
        try:
            responses = request.exec(decoupled=True)
        except Exception as exc:  # whatever the LM lane's state, the registry answers its own part
            log.warning("could not reach the LM lane: %s", exc)
            return None
        self._held.append(responses)
        return responses


class _NoHealing:
    """The lane health `VoiceEncoderClient` asks: the registry takes no lane out and reloads none (the router
    does, for the streams it serves); a dead encoder is a 503 here, to be retried."""

    def unavailable(self, model: str) -> None:
        return None

    def generation(self, model: str) -> int:
        return 0

    def on_dead(self, model: str, message: str, generation: int | None = None) -> Ended:
        return Ended(EndReason.LANE_DOWN, f"the {VOICE_ENCODER} lane is down ({message}); retry")


def _check_key(action: str, parameters, admin_hashes: tuple[str, ...], control_hashes: tuple[str, ...]) -> None:
    """Refuse a write without an admin key, and model control without an admin or the control key, where set."""
    hashes = control_hashes if action in CONTROL_ACTIONS else admin_hashes if action in WRITE_ACTIONS else ()
    if hashes and not is_admin(parameters().get(ADMIN_KEY_PARAMETER), hashes):
        what = "an admin key of this server, or its control key" if action in CONTROL_ACTIONS else \
            "an admin key of this server"
        raise RequestError(f"{action} needs {what} (the request parameter '{ADMIN_KEY_PARAMETER}'; the gateway "
                           "sends its own)", param=ADMIN_KEY_PARAMETER, code="admin_key_required")


def _control_model(action: str, model: str, repository: Path | None) -> dict:
    """Load or unload `model` through the Python backend's model control (the load returns once it is done).

    Only a model of this server's repository is asked for: in Triton 2.51 a load or unload that fails sends its
    error to the stub in shared memory the server frees as it answers, and the stub that reads it may die of a
    segmentation fault (with the request in flight, tritonserver aborts as the registry is reloaded). A name the
    repository does not hold is the failure any client can cause; it is refused here, before Triton sees it."""
    if repository is not None and model not in repository_models(repository):
        raise RequestError(f"{action} {quoted(model)} failed: this server's repository has no model of that name "
                           f"(it has {', '.join(map(quoted, repository_models(repository)))})", param="name",
                           code="model_control_failed")
    try:
        (pb_utils.load_model if action == "load_model" else pb_utils.unload_model)(model)
    except pb_utils.TritonModelException as exc:
        raise RequestError(f"{action} {quoted(model)} failed: {exc}", param="name", code="model_control_failed") \
            from None
    return {"object": "model", "name": model, "ready": bool(pb_utils.is_model_ready(model))}


def repository_models(repository: Path) -> tuple[str, ...]:
    """The models of a Triton repository: its folders with a `config.pbtxt` (read on each call: an operator may add
    one to a server in explicit model control mode)."""
    try:
        return tuple(sorted(entry.name for entry in repository.iterdir() if (entry / "config.pbtxt").is_file()))
    except OSError:
        return ()


def _file_key_hash(path: str) -> tuple[str, ...]:
    """The SHA-256 of the key in `path` (one line), or () where no file is named."""
    if not path:
        return ()
    with open(path, encoding="utf-8") as f:
        return (key_hash(f.read().strip()),)


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


def _check_transcript(transcript: str | None, limits: ReferenceLimits) -> None:
    """An imported voice's transcript follows the rules of `ref_text` (reference_inputs.py)."""
    if transcript is None:
        return
    if (bad := control_character(transcript)) is not None:
        raise RequestError(f"the voice's transcript contains control character U+{ord(bad):04X}",
                           param="voice_file", code="bad_voice_file")
    if len(transcript) > limits.max_ref_text_chars:
        raise RequestError(f"the voice's transcript has {len(transcript)} characters; the limit is "
                           f"{limits.max_ref_text_chars}", param="voice_file", code="bad_voice_file")


def _fingerprint(reference: ReferenceAudio) -> str:
    return fingerprint(reference.audio, reference.sample_rate, reference.text, reference.x_vector_only)
