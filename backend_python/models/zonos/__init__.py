"""Zonos-v0.1 (Zyphra), transformer variant: a prefix-conditioned transformer over 9 delayed DAC codebooks
(44.1 kHz, ~86 frames/s), with classifier-free guidance. `family.py` is what the registry reads."""
