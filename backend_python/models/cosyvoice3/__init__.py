"""CosyVoice 3 (Fun-CosyVoice3-0.5B): a Qwen2 speech LM (25 Hz speech tokens, `lm.py`) and a flow-matching codec
(speech tokens -> mel -> waveform) conditioned on a speaker embedding; `family.py` is what the registry reads."""
