"""Triton glue of the voice encoder lane (`voice_encoder`): reference audio -> the tensors of a voice to clone.

The router calls it (one request, one response) before a cloning request reaches the LM, so the LM's loop
never runs an encoder. Dynamic batching hands `execute` the queued references at once; their lengths differ,
so they go to `VoiceEncoder.encode` as one list. Inputs per request: `ref_audio` FP32 [1, n] (mono, in
[-1, 1]), `ref_sample_rate` INT32 [1, 1] (resampled here with soxr to the encoder's rate), `x_vector_only`
BOOL [1, 1] (optional). Outputs: the encoder's `reference_tensors`, named by protocol.tensors.REFERENCE_TENSORS
and cast to its types: `speaker_embedding` FP32 [1, D] and, for in-context cloning, `ref_codes` INT64
[1, frames, K]. A malformed request, or one whose encode raises, gets its own error; the others of the batch
still encode.

The lane is in every repository, whatever the model: for a model without a voice encoder it loads without
one and answers every request with `bad_input` code `reference_unsupported`, which the router passes on. Where
the model's name or config.json tells that already (its family's description: `clones`, read by
models/families.py `clones_voices`), the lane imports neither torch nor the model: 0.1 s of CPU at start
instead of 1.4, and ~40 MB resident instead of ~290 (on the CPU).
"""
from __future__ import annotations

import logging

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.models.families import clones_voices
from backend_python.stub_common import unloads
from backend_python.stub_common.heap import HeapTrimmer, bound_onednn_cache
from backend_python.stub_common.params import LaneSettings, model_parameters, set_up_lane
from backend_python.stub_common.reference_inputs import ReferenceAudio, ReferenceLimits, parse_reference, resample
from backend_python.stub_common.request_inputs import RequestError
from backend_python.stub_common.responses import error_response
from protocol.reasons import Ended, EndReason
from protocol.tensors import INPUT_CHUNK_PARAMETER, REFERENCE_TENSORS, VOICE_SPEC

log = logging.getLogger("voxlane.voice_encoder")


class VoiceEncoderModel:
    def initialize(self, args: dict) -> None:
        self.unsupported = None
        model = LaneSettings.from_parameters(model_parameters(args)).model
        if clones_voices(model) is False:  # known without loading it: no torch, no model
            self.unsupported = _unsupported(model)
            return
        bound_onednn_cache()  # each reference length is a new shape (backend_python/stub_common/heap.py)
        setup = set_up_lane(args)  # the lane's MPS share first, then torch
        from backend_python.models import registry
        self.limits = ReferenceLimits.from_parameters(setup.params)
        self.encoder = registry.load_voice_encoder(setup.spec, device=setup.device, dtype=setup.lane.dtype)
        if self.encoder is None:
            self.unsupported = _unsupported(setup.lane.model)
            return
        check_declared(self.encoder.reference_tensors)
        self.encoder.eval()
        self._heap = HeapTrimmer()  # a longer reference leaves its peak in the heap: give it back
        self._heap.start()

    def execute(self, requests: list) -> list:
        if self.unsupported is not None:
            return [error_response(self.unsupported) for _ in requests]
        if any(is_flagged(request.parameters(), VOICE_SPEC) for request in requests):
            return [self._spec_response() if is_flagged(request.parameters(), VOICE_SPEC) else
                    self.execute([request])[0] for request in requests]
        is_chunk = [is_flagged(request.parameters(), INPUT_CHUNK_PARAMETER) for request in requests]
        parsed = [self._reference(request, chunk) for request, chunk in zip(requests, is_chunk)]
        encoded = {}
        for chunks, run in ((False, self._encode), (True, self._code)):  # references, then input chunks
            indexes = [i for i, item in enumerate(parsed) if isinstance(item, ReferenceAudio) and is_chunk[i] == chunks]
            encoded.update(zip(indexes, _isolated([parsed[i] for i in indexes], run)))
        self._heap.on_batch()
        return [_response(encoded.get(i, item)) for i, item in enumerate(parsed)]

    def _spec_response(self):
        """What this model's voices hold (protocol.voices.VoiceSpec), for the registry's checks."""
        spec = self.encoder.voice_spec().to_json()
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor(VOICE_SPEC, np.array([[spec.encode("utf-8")]], dtype=np.object_))])

    def finalize(self) -> None:
        unloads.mark_unloaded()  # an unload, not a death, for the router's watch of this lane
        if self.unsupported is None:
            self._heap.stop()

    def _reference(self, request, is_chunk: bool) -> ReferenceAudio | Ended:
        def get(name: str):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return None if tensor is None else tensor.as_numpy()
        if is_chunk:  # the router checked it as pieces came: short, maybe silent
            return input_chunk(get)
        try:
            reference = parse_reference(get, self.limits, needs_text=False)
        except RequestError as exc:
            return exc.ended
        if reference is None:
            return Ended(EndReason.REFUSED_BAD_INPUT, "missing input 'ref_audio'", param="ref_audio")
        return reference

    def _encode(self, references: list[ReferenceAudio]) -> list[dict[str, np.ndarray]]:
        import torch
        audio = self._at_encoder_rate(references)
        with torch.inference_mode():
            results = self.encoder.encode(audio, [r.x_vector_only for r in references])
        return [{name: _as_output(name, tensor) for name, tensor in result.items()} for result in results]

    def _code(self, chunks: list[ReferenceAudio]) -> list[dict[str, np.ndarray]]:
        """Input chunks' codes (`ref_codes` alone: no speaker embedding), batched by the encoder."""
        import torch
        audio = self._at_encoder_rate(chunks)
        with torch.inference_mode():
            codes = self.encoder.encode_codes(audio)
        return [{"ref_codes": _as_output("ref_codes", c)} for c in codes]

    def _at_encoder_rate(self, items: list[ReferenceAudio]) -> list:
        import torch
        rate = self.encoder.sample_rate
        return [torch.from_numpy(np.ascontiguousarray(resample(r.audio, r.sample_rate, rate))).to(self.encoder.device)
                for r in items]  # [n_i] float32 at the encoder's rate


def _isolated(items: list[ReferenceAudio], run) -> list:
    """`run(items)`'s results, or each item's Ended where its encode raises (the others still encode): one bad
    reference or chunk must not fail the batch. A ValueError is the encoder refusing that item (bad input, e.g.
    x-vector only where the family clones in context only), anything else its failure."""
    if not items:
        return []
    try:
        return run(items)
    except Exception as exc:
        if len(items) == 1:
            return [_encode_failure(exc)]
    return [_isolated([item], run)[0] for item in items]


def is_flagged(parameters: str | None, name: str) -> bool:
    """Whether a request's parameters (Triton's JSON) set `name` true."""
    import json
    try:
        return bool(json.loads(parameters or "{}").get(name))
    except (ValueError, AttributeError):
        return False


def input_chunk(get) -> ReferenceAudio | Ended:
    """A stream's input chunk (audio-in sessions): coded whole (`ref_codes`), without a reference's length and
    level checks; the router checked its samples as they came (vox_ensemble/audio_sessions.py)."""
    audio, rate = get("ref_audio"), get("ref_sample_rate")
    if audio is None or rate is None:
        return Ended(EndReason.INTERNAL, "an input chunk needs 'ref_audio' and 'ref_sample_rate'")
    return ReferenceAudio(np.array(audio, dtype=np.float32).reshape(-1), int(rate.reshape(-1)[0]), None, False)


def _unsupported(model: str) -> Ended:
    return Ended(EndReason.REFUSED_BAD_INPUT, f"model {model!r} cannot take reference audio (it has no voice "
                 "encoder: it clones no voice); send no 'ref_audio'", param="ref_audio", code="reference_unsupported")


def _encode_failure(exc: Exception) -> Ended:
    if isinstance(exc, ValueError):
        return Ended(EndReason.REFUSED_BAD_INPUT, f"the voice encoder refused the reference: {exc}", param="ref_audio")
    log.error("voice encoder failed: %s", exc)
    return Ended(EndReason.INTERNAL, f"voice encoder failed: {exc}")


def check_declared(reference_tensors: dict) -> None:
    """Refuse at load an encoder whose tensors the configs of `voice_encoder` and `speechlm_lm` do not declare."""
    unknown = sorted(set(reference_tensors) - set(REFERENCE_TENSORS))
    if unknown:
        raise ValueError(f"the voice encoder returns {unknown}, which voice_encoder and speechlm_lm do not declare "
                         f"({sorted(REFERENCE_TENSORS)}): add them to protocol.tensors.REFERENCE_TENSORS and both "
                         "config.pbtxt files")


def _as_output(name: str, tensor) -> np.ndarray:
    """One encoder tensor as its output's type (bfloat16 has no numpy type: through float32)."""
    tensor = tensor.detach().cpu()
    if tensor.is_floating_point():
        tensor = tensor.float()
    return tensor.numpy().astype(REFERENCE_TENSORS[name].dtype, copy=False)


def _response(result: dict[str, np.ndarray] | Ended):
    if isinstance(result, Ended):
        return error_response(result)
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor(name, array[None]) for name, array in result.items()])


