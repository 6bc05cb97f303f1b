"""Scorers registered with fairseq (``--scoring NAME`` in ``fairseq-generate``)."""

from . import ribes  # noqa: F401
