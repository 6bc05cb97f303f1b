"""Training-only outputs of a model and the loss terms the criterion adds for them.

Two parts of one contract, both registered by the component's own module:

* An :class:`OutputComponent` reads the encoder's final states and returns a tensor the encoder
  puts in its output under :attr:`~OutputComponent.output_key` (``B x T x ...``, batch first);
  the model copies it into the ``extra`` dict of its forward output, with the source padding mask
  (``extra[SOURCE_PADDING_KEY]``). Outputs are computed for training and validation only: decoding
  asks for none. The target side writes its outputs into ``extra`` from the decoder.
* An :class:`AuxiliaryLoss` turns one such output (found in ``extra`` under its ``output_key``) and
  the batch into named loss terms. Its weights are options of the criterion: a dataclass of its own
  (``options``, with an optional ``check(self)``), composed into the config of
  ``label_smoothed_cross_entropy_with_auxiliary`` as component options are composed into the model's.
  The criterion adds every registered loss whose output the model returned, logs its terms under
  its ``prefix`` and reduces them with its :meth:`~AuxiliaryLoss.reduce_metrics`; it knows no loss
  by name.
"""

import abc
import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Set, Type

from torch import Tensor, nn

from fairseq_syntax.modules.syntactic_distance import NSD_MASK_KEY

from .base import ATTENTION_COMPONENTS, INPUT_COMPONENTS, BuildContext, EncoderBatch, register_options

__all__ = [
    "SOURCE_PADDING_KEY",
    "OutputComponent",
    "AuxiliaryLoss",
    "OUTPUT_COMPONENTS",
    "AUXILIARY_LOSSES",
    "LOSS_OPTION_CLASSES",
    "register_output",
    "register_loss",
    "extra_of",
]

#: ``extra`` key of the source padding mask (``[B x T]``, True at padding) beside the encoder's outputs (its
#: name since 0.2, when Ma et al. 2019's predictor was the only output)
SOURCE_PADDING_KEY = NSD_MASK_KEY


class OutputComponent(nn.Module, abc.ABC):
    """A head on the encoder's final states (``T x B x C``) whose output only a loss reads."""

    name: str = ""
    output_key: str = ""
    options: Optional[type] = None  # its options dataclass, composed into the model config

    @classmethod
    @abc.abstractmethod
    def build(cls, ctx: BuildContext) -> Optional["OutputComponent"]:
        """The component for these options (``ctx.model_dim`` is the encoder width), or None."""
        ...

    def inputs(self) -> Set[str]:
        """``src_syntax`` keys its loss reads (the task collates them)."""
        return set()

    @abc.abstractmethod
    def forward(self, states: Tensor, batch: EncoderBatch) -> Tensor:
        """The output for ``states`` (``T x B x C``), batch first."""
        ...


class AuxiliaryLoss(abc.ABC):
    """The loss terms of one training-only output.

    ``prefix`` names the logged values (``PREFIXterm``); ``part_prefix`` the weighted parts of the
    loss (:meth:`weighted`), as reported by gradient-balance measures.
    """

    output_key: str = ""
    prefix: str = ""
    part_prefix: str = ""
    options: Optional[type] = None  # its weights and settings: criterion options

    @abc.abstractmethod
    def terms(self, model: Any, net_output: Any, sample: Dict[str, Any], task: Any,
              settings: Any) -> Dict[str, Tensor]:
        """Unweighted sums over what counts (logged), and integer counts (``tokens``, ...)."""
        ...

    @abc.abstractmethod
    def weighted(self, terms: Mapping[str, Tensor], settings: Any) -> Dict[str, Tensor]:
        """The parts of the loss, weighted, by name (without ``part_prefix``); their sum is added."""
        ...

    @abc.abstractmethod
    def reduce_metrics(self, logging_outputs: List[Dict[str, Any]]) -> None:
        """Log the reduced values of ``PREFIX*`` entries (fairseq's ``metrics.log_scalar``)."""
        ...

    def source_inputs(self, settings: Any) -> Set[str]:
        """``src_syntax`` keys its options make it read beyond the model's ``syntax_inputs()``."""
        return set()

    def applies(self, extra: Mapping[str, Any]) -> bool:
        """Whether the model returned this loss's output."""
        value = extra.get(self.output_key)
        return bool(value) and value[0] is not None


OUTPUT_COMPONENTS: List[Type[OutputComponent]] = []
AUXILIARY_LOSSES: List[AuxiliaryLoss] = []
#: the criterion options of the registered losses, in registration order
LOSS_OPTION_CLASSES: List[type] = []


def register_output(cls: Type[OutputComponent]) -> Type[OutputComponent]:
    """Add an output component (its options join the model config)."""
    names = [c.name for c in INPUT_COMPONENTS + ATTENTION_COMPONENTS + OUTPUT_COMPONENTS]
    if not cls.name or cls.name in names or not cls.output_key:
        raise ValueError(f"output component {cls.__name__} needs a unique name and an output_key")
    if cls.options is not None:
        register_options(cls.options)
    OUTPUT_COMPONENTS.append(cls)
    return cls


def register_loss(loss: Type[AuxiliaryLoss]) -> Type[AuxiliaryLoss]:
    """Add an auxiliary loss (one instance); its options join the criterion's config.

    An option name another loss already uses is refused, so that no weight takes another's place.
    """
    if not loss.output_key or not loss.prefix or any(l.prefix == loss.prefix for l in AUXILIARY_LOSSES):
        raise ValueError(f"auxiliary loss {loss.__name__} needs an output_key and a unique prefix")
    options = loss.options
    if options is not None and options not in LOSS_OPTION_CLASSES:
        if not dataclasses.is_dataclass(options):
            raise TypeError(f"{options.__name__} must be a dataclass")
        taken = {f.name for c in LOSS_OPTION_CLASSES for f in dataclasses.fields(c)}
        clash = [f.name for f in dataclasses.fields(options) if f.name in taken]
        if clash:
            raise ValueError(f"criterion options {clash} of {options.__name__} are already defined")
        LOSS_OPTION_CLASSES.append(options)
    AUXILIARY_LOSSES.append(loss())
    return loss


def extra_of(net_output: Any) -> Dict[str, Any]:
    """The ``extra`` dict of a model's ``(decoder_out, extra)`` output (empty if there is none)."""
    extra = net_output[1] if isinstance(net_output, (tuple, list)) and len(net_output) > 1 else {}
    return extra if isinstance(extra, dict) else {}
