"""Encoder components of ``syntax_transformer`` (see :mod:`.base`); importing registers them all.

Registry order is application order: input components in :mod:`.inputs`; attention components
:mod:`.relative` (Shaw, dependency depth, structural), :mod:`.gps`, :mod:`.pascal`.
"""

from .base import (  # noqa: F401
    ATTENTION_COMPONENTS,
    INPUT_COMPONENTS,
    AttentionComponent,
    AttentionTerms,
    BuildContext,
    EncoderBatch,
    InputComponent,
    LayerTerm,
    register_attention,
    register_input,
)
from . import inputs, relative, gps, pascal  # noqa: F401,E402
