"""The CUDA-graph runners every family shares: a frame's buffers and batch buckets (`buffers`), capture
(`capture`), the two-stage frame (`frame`: a backbone step, then a code predictor or depth decoder), the one-stage
step (`step`: Orpheus, Zonos, and the speech-token LMs CosyVoice 3 and FlashTTS), prefill (`prefill`), and the
codec's windows (`codec`) and streaming states (`codec_stream`)."""
