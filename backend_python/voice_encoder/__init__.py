"""Triton glue of the voice encoder lane (`voice_encoder`): reference audio in, a voice to clone out."""
