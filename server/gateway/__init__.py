"""An OpenAI-compatible speech gateway in front of one or more VoxLane Triton servers.

`POST /v1/audio/speech` streams PCM or WAV (raw, or as server-sent events) chunk by chunk as
Triton's gRPC stream delivers it; new streams go to the server with the fewest live streams.
"""
