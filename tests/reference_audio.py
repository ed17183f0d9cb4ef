"""A deterministic stand-in for a voice recording, synthesised in the test (no audio files are committed)."""
from clients.reference_clip import voiced

__all__ = ["voiced"]
