"""Shared test set-up: CPU settings that keep random-weight models fast."""
import torch

torch.set_flush_denormal(True)  # denormals made random-weight models ~10x slower on CPU
torch.set_num_threads(1)  # several processes share 2 cores; threads contend
