"""Higgs Audio v3 (Boson AI's design on a Qwen3-4B backbone): 8 delayed codebooks per step from one fused head
(`HiggsV3LM`), the Higgs audio tokenizer's decoder as the codec (`HiggsTokenizerCodec`) and its encoder for voice
cloning in context (`HiggsVoiceEncoder`)."""
