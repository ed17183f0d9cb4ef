"""The BLS router (`vox_ensemble`), split by role: model.py is the Triton model; relay.py runs one stream."""
