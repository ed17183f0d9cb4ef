"""Orpheus's token ids: Llama-3's vocabulary, its control tokens, then 7 bands of 4096 audio tokens (frames.py
maps frames onto them). Torch-free: its checkpoint is recognised by the vocabulary they need."""

FRAME_TOKENS = 7  # LM tokens (and codec codebooks) per audio frame
CODES_PER_SLOT = 4096  # SNAC codebook size
TEXT_VOCAB_SIZE = 128256  # Llama-3's vocabulary; Orpheus's control tokens follow it
START_OF_SPEECH = TEXT_VOCAB_SIZE + 1  # 128257, last prompt token: audio follows
END_OF_SPEECH = TEXT_VOCAB_SIZE + 2  # 128258, the LM's stop token
START_OF_HUMAN = TEXT_VOCAB_SIZE + 3  # 128259, first prompt token
END_OF_HUMAN = TEXT_VOCAB_SIZE + 4  # 128260
START_OF_AI = TEXT_VOCAB_SIZE + 5  # 128261
END_OF_TEXT = 128009  # Llama-3's <|eot_id|>, closes the text
AUDIO_TOKEN_BASE = TEXT_VOCAB_SIZE + 10  # 128266, slot 0 code 0
MIN_VOCAB_SIZE = AUDIO_TOKEN_BASE + FRAME_TOKENS * CODES_PER_SLOT  # 156938 (the official vocab is 156940)
