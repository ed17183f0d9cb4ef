"""Triton glue of the codec lanes (`codec`, `codec_urgent`: one model, two lanes)."""
