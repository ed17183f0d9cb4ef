"""Audio as a client asked for it: output rates (soxr) and formats (PyAV), chunk by chunk.

Torch-free and Triton-free: the gateway and the router both encode with it. PyAV and soxr are
imported only when an encoder or resampler is made.
"""
