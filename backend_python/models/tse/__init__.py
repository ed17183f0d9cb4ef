"""tse: streaming target-speaker extraction as a serving shape (an interleaved LM that listens while it speaks)."""
