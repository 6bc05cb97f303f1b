"""Gold target-side syntax of a batch, aligned with the decoder's inputs and with its targets.

A data-bin whose target language was parsed (``fairseq-syntax-preprocess --target-parser``)
holds the target's ``head``/``deplabel``/``pos``/``phrase`` streams. A model that consumes or
predicts target syntax declares the features it needs (``model.target_syntax_inputs()``, a
set of :data:`~fairseq_syntax.data.syntax_features.FEATURES` names, e.g. ``{"distance"}``);
the task then collates, for exactly those names, two ``(B, T_tgt)`` LongTensors per feature:

``sample["net_input"]["tgt_syntax"][name]`` (:data:`NET_INPUT_KEY`)
    aligned with ``sample["net_input"]["prev_output_tokens"]``: at each position, the gold
    value of the decoder *input* token there (the previous target token, teacher forcing).
    The leading ``</s>`` slot and padding hold 0.
``sample["target_syntax"][name]`` (:data:`SAMPLE_KEY`)
    aligned with ``sample["target"]``: the gold value of each target token. The final
    ``</s>`` and padding hold 0 (the criterion masks them: ``target != pad & target != eos``).

The values are those :func:`~fairseq_syntax.data.syntax_features.batch_features` derives for
the source, computed on the target streams with the same ``</s>`` entry appended
(:func:`~fairseq_syntax.data.syntax_features.append_eos`), so ``distance`` is Ma et al. (2019)'s
d_D(i) = i - h(i) counted in target pieces. Both views are then built from the same
per-sentence values (the ``</s>`` slot set to the sentinel 0) with fairseq's own
``data_utils.collate_tokens``, once as the target is collated and once with
``move_eos_to_beginning=True`` as ``prev_output_tokens`` is, so they are aligned under either
``--left-pad-target``. The one index-valued feature, ``parents``, indexes positions of its own
view's row (the input view's values are the target view's plus one: a token sits one position
later in ``prev_output_tokens``).
"""

from typing import Dict, Optional, Sequence, Set, Tuple

import torch
from fairseq.data import data_utils
from torch import Tensor

from .syntax_features import batch_features, collate_nodes

#: ``sample["net_input"][NET_INPUT_KEY]``: gold values aligned with ``prev_output_tokens``
NET_INPUT_KEY = "tgt_syntax"
#: ``sample[SAMPLE_KEY]``: gold values aligned with ``target``
SAMPLE_KEY = "target_syntax"
#: the value of the ``</s>`` slots and of padding in both views
SENTINEL = 0

__all__ = ["NET_INPUT_KEY", "SAMPLE_KEY", "SENTINEL", "collate_target_syntax", "align_target_features"]


def _last_real(real: Tensor) -> Tensor:
    """True at each row's last real position (the target's ``</s>``), for either padding side."""
    after = torch.zeros_like(real)
    after[:, :-1] = real[:, 1:]
    return real & ~after


def align_target_features(features: Dict[str, Tensor], real: Tensor, left_pad: bool) -> Tuple[Dict[str, Tensor], Dict[str, Tensor]]:
    """``(gold, inputs)``: each feature of a target-shaped batch as the two views of the module doc.

    ``features`` are ``(B, T)`` tensors laid out like ``sample["target"]`` (``</s>`` entry
    included), ``real`` marks the sentences' own positions. Returns the target-aligned and
    the ``prev_output_tokens``-aligned tensors, both ``(B, T)``.
    """
    width = real.size(1)
    lengths = real.sum(dim=1).tolist()
    eos_slot = _last_real(real)
    gold: Dict[str, Tensor] = {}
    inputs: Dict[str, Tensor] = {}
    for name, value in features.items():
        value = value.long().masked_fill(eos_slot, SENTINEL)
        # parents index their own row: a token sits one position later among the decoder inputs
        moved = torch.where(eos_slot, value, value + 1) if name == "parents" else value
        gold[name] = data_utils.collate_tokens(
            torch.split(value[real], lengths), SENTINEL, left_pad=left_pad, pad_to_length=width,
        )
        inputs[name] = data_utils.collate_tokens(
            torch.split(moved[real], lengths), SENTINEL, eos_idx=SENTINEL, left_pad=left_pad,
            move_eos_to_beginning=True, pad_to_length=width,
        )
    return gold, inputs


def collate_target_syntax(
    trees: "tuple[Tensor, Tensor, Tensor, Tensor]", requested: Set[str], left_pad: bool,
    phrases: Optional[Sequence[Tensor]] = None, subword_label: int = -1,
) -> Tuple[Dict[str, Tensor], Dict[str, Tensor]]:
    """``(gold, inputs)`` of a batch: the target-aligned and ``prev_output_tokens``-aligned features.

    ``trees`` are the stored target ``(heads, labels, pos, real)`` with the ``</s>`` entry, in
    batch order and laid out like ``sample["target"]`` (:func:`.syntax_features.collate_trees`
    or :func:`.syntax_features.collate_stored_trees`); ``left_pad`` is the dataset's ``left_pad_target``;
    ``phrases`` the target's ``phrase`` merges (for the constituency distances),
    ``subword_label`` the id of ``<subword>`` (word-level distances).
    """
    heads, labels, pos, real = trees
    phrase = collate_nodes(phrases, 0) if phrases is not None else ()
    features = batch_features(heads, labels, pos, real, requested, *phrase, subword_label=subword_label)
    return align_target_features(features, real, left_pad)
