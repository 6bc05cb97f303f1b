"""The two kinds of encoder component, and the registry the encoder builds them from.

* An :class:`InputComponent` acts on the encoder input (``forward_embedding``). In the
  ``embedding`` stage it changes or widens the word embedding and says how many dimensions
  it adds, from the options alone (:meth:`~InputComponent.added_width`, summed by the encoder
  and by the architecture while the command line is parsed); in the ``positions`` stage it replaces
  fairseq's positional embedding ``PE(i)`` (at most one such component); in the ``position``
  stage it adds a term to ``x = embed + PE(i)``. Order: the registry's.
* An :class:`AttentionComponent` acts on encoder self-attention. :meth:`~AttentionComponent.prepare`
  computes its per-batch tensors once per encoder forward; each layer it acts in owns a
  :class:`LayerTerm` (that layer's parameters, if any) that turns them into
  :class:`AttentionTerms`: relative buckets and tables, an additive logit term, a
  multiplicative score scale.

Every component declares the ``src_syntax`` keys it reads (:meth:`inputs`); the model's
``syntax_inputs()`` is their union. Its options are a dataclass of its own (``options``, fields
made with :func:`~..options.opt`, with ``check``/``check_sizes`` methods), composed into
:class:`~fairseq_syntax.models.syntax_transformer.config.SyntaxModelConfig`. A new idea is one
module under ``components/`` (imported by the package on its own) that registers its class with
:func:`register_input` or :func:`register_attention`, and a preset row.
"""

import abc
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple, Type

import torch
from torch import Tensor, nn

from fairseq_syntax.modules.relative_attention import RelativeEmbedding, RelativeInputs

__all__ = [
    "BuildContext",
    "EncoderBatch",
    "AttentionTerms",
    "LayerTerm",
    "InputComponent",
    "AttentionComponent",
    "INPUT_COMPONENTS",
    "ATTENTION_COMPONENTS",
    "register_input",
    "register_attention",
    "register_options",
    "OPTION_CLASSES",
]


@dataclass
class BuildContext:
    """What a component may need at build time besides its options.

    ``vocab``: the sizes and special ids of the task's label/POS dictionaries recorded in the
    model's args (``syntax_num_labels``, ``syntax_label_pad``, ...); ``word_dim``: the word
    embedding width; ``model_dim``: the encoder width (known after the embedding stage);
    ``has_positions``: whether fairseq's positional embedding is on.
    """

    cfg: Any  # SyntaxModelConfig
    word_dim: int
    model_dim: int
    num_layers: int
    num_heads: int
    max_source_positions: int
    scale_embedding: bool
    has_positions: bool
    vocab: Dict[str, Optional[int]] = field(default_factory=dict)

    def require_vocab(self, names: Tuple[str, ...], who: str) -> Dict[str, int]:
        missing = [n for n in names if self.vocab.get(n) is None]
        if missing:
            raise ValueError(
                f"{who} needs the label/POS dictionaries of the syntax_translation task "
                "(SyntaxTransformerModel.build_model records their sizes)"
            )
        return {n: int(self.vocab[n]) for n in names}  # type: ignore[arg-type]


class EncoderBatch:
    """The source of one encoder forward: tokens, padding mask and ``src_syntax``, with checked access."""

    def __init__(self, src_tokens: Tensor, src_syntax: Optional[Dict[str, Tensor]], padding_idx: int) -> None:
        self.src_tokens = src_tokens
        self.src_syntax = src_syntax
        self.padding_mask = src_tokens.eq(padding_idx)

    def get(self, key: str, who: str) -> Tensor:
        """``src_syntax[key]`` as a LongTensor like ``src_tokens``, with a clear error if absent or misshapen."""
        value = self.src_syntax.get(key) if self.src_syntax is not None else None
        if value is None:
            raise ValueError(
                f"{who} needs the source feature {key!r}: pass src_syntax={{{key!r}: LongTensor(B, T)}} "
                "(net_input['src_syntax']; the syntax_translation task adds what model.syntax_inputs() lists)"
            )
        if value.shape != self.src_tokens.shape:
            raise ValueError(
                f"src_syntax[{key!r}] has shape {tuple(value.shape)}, expected {tuple(self.src_tokens.shape)}"
            )
        return value.to(device=self.src_tokens.device, dtype=torch.long)


@dataclass
class AttentionTerms:
    """What one layer's self-attention adds: relative (table, buckets), an additive term, a scale."""

    relative: RelativeInputs = field(default_factory=list)
    attn_bias: Optional[Tensor] = None
    logit_scale: Optional[Tensor] = None

    def add(self, other: "AttentionTerms") -> None:
        self.relative.extend(other.relative)
        if other.attn_bias is not None:
            self.attn_bias = other.attn_bias if self.attn_bias is None else self.attn_bias + other.attn_bias
        if other.logit_scale is not None:
            self.logit_scale = (
                other.logit_scale if self.logit_scale is None else self.logit_scale * other.logit_scale
            )


class LayerTerm(nn.Module, abc.ABC):
    """One attention component's part in one layer: its parameters there, and :meth:`term`."""

    @abc.abstractmethod
    def term(self, prepared: Any) -> AttentionTerms:
        ...


class RelativeTableTerm(RelativeEmbedding):
    """A layer's own relative key/value tables (Shaw et al.), used with the component's buckets."""

    def term(self, prepared: Optional[Tensor]) -> AttentionTerms:
        return AttentionTerms(relative=[(self, prepared)])


class InputComponent(nn.Module, abc.ABC):
    """A change to the encoder input; ``stage`` ``embedding`` or ``position`` (see module doc)."""

    name: str = ""
    stage: str = "embedding"
    options: Optional[type] = None  # its options dataclass (see module doc)

    @classmethod
    @abc.abstractmethod
    def build(cls, ctx: BuildContext) -> Optional["InputComponent"]:
        """The component for these options, or None when they leave it off."""
        ...

    def inputs(self) -> Set[str]:
        return set()

    @classmethod
    def added_width(cls, cfg: Any) -> int:
        """Dimensions this component adds to the encoder width (embedding stage), from the options ``cfg``
        alone: the architecture needs the width while fairseq parses the command line."""
        return 0

    @abc.abstractmethod
    def forward(self, x: Tensor, batch: EncoderBatch) -> Tensor:
        """``embedding``: the new embedding from ``x``; ``positions``: the new ``PE(i)`` from fairseq's
        ``x``; ``position``: ``x`` plus this component's term."""
        ...


class AttentionComponent(nn.Module, abc.ABC):
    """A change to encoder self-attention: per-batch tensors once, terms per layer."""

    name: str = ""
    options: Optional[type] = None  # its options dataclass (see module doc)

    @classmethod
    @abc.abstractmethod
    def build(cls, ctx: BuildContext) -> Optional["AttentionComponent"]:
        ...

    def inputs(self) -> Set[str]:
        return set()

    @abc.abstractmethod
    def layers(self) -> Tuple[int, ...]:
        """The 0-based encoder layers this component acts in."""
        ...

    @abc.abstractmethod
    def layer_term(self, layer_idx: int, embed_dim: int, num_heads: int) -> LayerTerm:
        """The module the layer ``layer_idx`` holds for this component."""
        ...

    def prepare(self, batch: EncoderBatch) -> Any:
        """The per-batch tensors shared by every layer (computed once per encoder forward)."""
        return None


STAGES = ("embedding", "positions", "position")
INPUT_COMPONENTS: List[Type[InputComponent]] = []
ATTENTION_COMPONENTS: List[Type[AttentionComponent]] = []
#: the options dataclasses composed into ``SyntaxModelConfig``, in registration order
OPTION_CLASSES: List[type] = []


def register_options(options: type) -> type:
    """Add an options dataclass to the model config (components register theirs with themselves).

    Its fields become ``syntax_transformer`` options (``--field-name``); a name used by another
    options class is refused, so that no option silently takes another's place.
    """
    if options in OPTION_CLASSES:
        return options
    if not dataclasses.is_dataclass(options):
        raise TypeError(f"{options.__name__} must be a dataclass (fields made with options.opt)")
    taken = {f.name: c.__name__ for c in OPTION_CLASSES for f in dataclasses.fields(c)}
    clash = [f.name for f in dataclasses.fields(options) if f.name in taken]
    if clash:
        raise ValueError(f"options {clash} of {options.__name__} are already defined by {taken[clash[0]]}")
    OPTION_CLASSES.append(options)
    return options


def _register_component_options(cls) -> None:
    if cls.options is not None:
        register_options(cls.options)


def register_input(cls: Type[InputComponent]) -> Type[InputComponent]:
    """Add an input component to the registry (applied in registration order, per stage)."""
    if not cls.name or any(c.name == cls.name for c in INPUT_COMPONENTS + ATTENTION_COMPONENTS):
        raise ValueError(f"input component {cls.__name__} needs a unique name, got {cls.name!r}")
    if cls.stage not in STAGES:
        raise ValueError(f"input component {cls.name}: stage must be one of {STAGES}")
    _register_component_options(cls)
    INPUT_COMPONENTS.append(cls)
    return cls


def register_attention(cls: Type[AttentionComponent]) -> Type[AttentionComponent]:
    """Add an attention component to the registry."""
    if not cls.name or any(c.name == cls.name for c in INPUT_COMPONENTS + ATTENTION_COMPONENTS):
        raise ValueError(f"attention component {cls.__name__} needs a unique name, got {cls.name!r}")
    _register_component_options(cls)
    ATTENTION_COMPONENTS.append(cls)
    return cls
