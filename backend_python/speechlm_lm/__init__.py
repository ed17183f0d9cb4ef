"""Triton glue of the LM lane (`speechlm_lm`): the model and its sinks."""
