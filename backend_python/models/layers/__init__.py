"""The floor the model families share: decoder blocks over a static KV cache (`decoder.py`),
batched per-row sampling (`sampling.py`) and deterministic random init (`random_init.py`).

Nothing here knows a family; a family builds its stacks from these blocks and never imports
another family.
"""
