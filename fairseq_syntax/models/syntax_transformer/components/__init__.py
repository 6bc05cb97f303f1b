"""Components of ``syntax_transformer`` (see :mod:`.base`, :mod:`.decoder_side`); importing registers them all.

Registry order is application order: input components in :mod:`.inputs`; attention components
:mod:`.relative` (Shaw, dependency depth, structural), :mod:`.gps`, :mod:`.pascal`; output
components and their losses (:mod:`.auxiliary`) in :mod:`.nsd_prediction`; decoder components
in :mod:`.target_nsd`. Every other
module of this package is imported after them, in name order: a new component is one module
dropped here (with its options dataclass and a preset row in :mod:`..architectures`).
"""

import importlib
import pkgutil

from .base import (  # noqa: F401
    ATTENTION_COMPONENTS,
    INPUT_COMPONENTS,
    OPTION_CLASSES,
    AttentionComponent,
    AttentionTerms,
    BuildContext,
    EncoderBatch,
    InputComponent,
    LayerTerm,
    register_attention,
    register_input,
    register_options,
)
from .auxiliary import (  # noqa: F401
    AUXILIARY_LOSSES,
    LOSS_OPTION_CLASSES,
    OUTPUT_COMPONENTS,
    AuxiliaryLoss,
    OutputComponent,
    register_loss,
    register_output,
)
from .decoder_side import DECODER_COMPONENTS, DecoderComponent, register_decoder  # noqa: F401
from . import nsd, inputs, relative, gps, pascal, nsd_prediction, target_nsd  # noqa: F401,E402

_BUILT_IN = {"base", "auxiliary", "decoder_side", "nsd", "inputs", "relative", "gps", "pascal", "nsd_prediction",
             "target_nsd"}
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in _BUILT_IN and not _module.startswith("_"):
        importlib.import_module(f"{__name__}.{_module}")
