"""The decoder's kind of component: target-side ideas, and the registry the decoder builds them from.

A :class:`DecoderComponent` owns one idea on the target side (Ma et al. (2019)'s target
distances are :mod:`.target_nsd`). The decoder knows none by name; it calls the hooks in this
order on every forward:

* :meth:`~DecoderComponent.training_inputs` (training only, full forward): may replace
  ``tgt_syntax`` before the pass (scheduled sampling of fed-back inputs);
* :meth:`~DecoderComponent.prepare`: the per-forward state, e.g. the input of each decoder
  position, from ``tgt_syntax`` or, at generation, from the incremental state;
* :meth:`~DecoderComponent.embed`: acts on the scaled word embedding (it may widen it: the width
  it adds is :meth:`~DecoderComponent.added_width`, from the options alone, summed by
  :func:`decoder_model_dim`) and returns a term added with fairseq's positional embedding;
* :meth:`~DecoderComponent.outputs`: reads the final states, writes its entries into ``extra``
  (those only training losses read are :meth:`~DecoderComponent.output_keys`, the criterion's
  auxiliary losses find them there, :mod:`.auxiliary`).

The modules holding its parameters are registered on the decoder under the names
:meth:`~DecoderComponent.modules` gives, so that parameter names are the component's choice (the
target distances keep ``decoder.nsd_*``, the names of every release) and the decoder's
``reorder_incremental_state`` reaches a module that keeps per-hypothesis state. The component
itself is plain Python: it holds no parameters of its own.
"""

import abc
from typing import Any, Dict, List, Optional, Set, Tuple, Type

from torch import Tensor, nn

from .base import ATTENTION_COMPONENTS, INPUT_COMPONENTS, register_options

__all__ = [
    "DecoderBuildContext",
    "DecoderComponent",
    "DECODER_COMPONENTS",
    "register_decoder",
    "decoder_model_dim",
    "decoder_component",
]


class DecoderBuildContext:
    """What a decoder component may read at build time: the options, the widths, the decoder's flags."""

    def __init__(self, cfg: Any, word_dim: int, model_dim: int, output_dim: int, scale_embedding: bool) -> None:
        self.cfg = cfg  # SyntaxModelConfig
        self.word_dim = word_dim
        self.model_dim = model_dim  # the decoder layers' width
        self.output_dim = output_dim  # the width of the final states the output layer reads
        self.scale_embedding = scale_embedding


class DecoderComponent(abc.ABC):
    """One target-side idea; every hook but :meth:`build` has a do-nothing default."""

    name: str = ""
    options: Optional[type] = None  # its options dataclass, composed into the model config

    @classmethod
    @abc.abstractmethod
    def build(cls, ctx: DecoderBuildContext) -> Optional["DecoderComponent"]:
        """The component for these options, or None when they leave it off."""
        ...

    @classmethod
    def added_width(cls, cfg: Any) -> int:
        """Dimensions it adds to the decoder width, from the options alone (read while arguments are parsed)."""
        return 0

    def modules(self) -> Dict[str, Optional[nn.Module]]:
        """The modules holding its parameters or state, by the name the decoder registers each under."""
        return {}

    def target_inputs(self) -> Set[str]:
        """``tgt_syntax`` / ``target_syntax`` keys it reads or predicts (the task collates exactly these)."""
        return set()

    def output_keys(self) -> Set[str]:
        """``extra`` keys of the outputs only training losses read."""
        return set()

    def training_inputs(self, decoder: Any, prev_output_tokens: Tensor, encoder_out: Any,
                        tgt_syntax: Optional[Dict[str, Tensor]]) -> Optional[Dict[str, Tensor]]:
        """``tgt_syntax`` for a training forward (full pass); unchanged by default."""
        return tgt_syntax

    def prepare(self, decoder: Any, prev_output_tokens: Tensor, incremental_state: Optional[Dict[str, Any]],
                tgt_syntax: Optional[Dict[str, Tensor]]) -> Any:
        """Its per-forward state (``prev_output_tokens`` whole, before fairseq keeps the last step)."""
        return None

    def embed(self, x: Tensor, prepared: Any, padding_mask: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        """The new embedding from the scaled word embedding ``x`` (``B x T x C``), and a term added with
        fairseq's positional embedding (or None)."""
        return x, None

    def outputs(self, decoder: Any, states: Tensor, full_tokens: Tensor, incremental_state: Optional[Dict[str, Any]],
                prepared: Any, extra: Dict[str, Any]) -> None:
        """Read the final states (``B x T x C``) and write its entries into ``extra``."""
        return None


DECODER_COMPONENTS: List[Type[DecoderComponent]] = []


def register_decoder(cls: Type[DecoderComponent]) -> Type[DecoderComponent]:
    """Add a decoder component to the registry (applied in registration order); its options join the model config."""
    names = [c.name for c in INPUT_COMPONENTS + ATTENTION_COMPONENTS + DECODER_COMPONENTS]
    if not cls.name or cls.name in names:
        raise ValueError(f"decoder component {cls.__name__} needs a unique name, got {cls.name!r}")
    if cls.options is not None:
        register_options(cls.options)
    DECODER_COMPONENTS.append(cls)
    return cls


def decoder_model_dim(cfg: Any, word_dim: int) -> int:
    """The decoder layers' width: the word width plus what every registered decoder component adds."""
    return word_dim + sum(component.added_width(cfg) for component in DECODER_COMPONENTS)


def decoder_component(model: Any, kind: type) -> Optional[Any]:
    """The decoder component of class ``kind`` that ``model`` (or a decoder) holds, or None."""
    decoder = getattr(model, "decoder", model)
    for component in getattr(decoder, "target_components", ()):
        if isinstance(component, kind):
            return component
    return None
