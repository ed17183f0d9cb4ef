"""The Triton model names: the repository's folders, and what clients and BLS calls name."""
from __future__ import annotations

ROUTER = "vox_ensemble"  # the decoupled BLS router: the public streaming model
LM = "speechlm_lm"  # the LM lane
CODEC = "codec"  # the background codec lane
CODEC_URGENT = "codec_urgent"  # the urgent codec lane
VOICE_ENCODER = "voice_encoder"  # reference audio -> the tensors of a voice to clone (the router calls it first)
REFINER = "refiner"  # a cascade's background refinement lane: a chunk's other codebooks from its first
REFINER_URGENT = "refiner_urgent"  # the urgent refinement lane: a first chunk's (or a late one's) refinement
REFINER_MODELS = (REFINER, REFINER_URGENT)  # loaded only for a cascade (`voxlane serve`)
LANE_MODELS = (LM, CODEC, CODEC_URGENT, VOICE_ENCODER, *REFINER_MODELS)  # every model behind the router
VOICE_REGISTRY = "voice_registry"  # registered voices: register, list, delete (not a lane: no GPU, no torch)
