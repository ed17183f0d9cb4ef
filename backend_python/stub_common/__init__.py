"""What several Triton models share: config parameters and lane settings, the request parser, the chunk channel, metrics, the test-only fault hook."""
