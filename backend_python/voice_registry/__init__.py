"""Registered voices (issue 17): a voice's encoded reference stored once under the server's data directory and
used by name. `store.py` is torch- and Triton-free (numpy only); `model.py` is the `voice_registry` Triton model."""
