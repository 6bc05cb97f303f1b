"""Eriguchi et al. 2016: tree-to-sequence attentional NMT, ``--arch tree2seq``."""

from . import architectures  # noqa: F401  (registers the model and its architectures)
