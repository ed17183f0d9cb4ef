"""Voxtral-TTS (Mistral): a Ministral-shaped backbone, a flow-matching acoustic head per frame, and the Voxtral codec."""
