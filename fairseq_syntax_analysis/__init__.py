"""Analyses of trained fairseq-syntax checkpoints (``fairseq-syntax-awsl``)."""
