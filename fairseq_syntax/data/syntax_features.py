"""From a stored piece tree to the tensors a model consumes: the one derivation path.

Both the dataset (reading a ``data-bin``) and on-the-fly parsing at inference
(:mod:`fairseq_syntax.data.online_parser`) call :func:`sentence_features` then
:func:`collate_features`, so training and raw-text decoding cannot drift apart.

The appended ``</s>``: fairseq appends EOS to every source line. Its syntax entry is
added here (:func:`append_eos`): it attaches to the line's **last root** (the sentence it
closes), with label and POS ``</s>`` of their dictionaries. It is thus a child of a root
(depth 1), in the last sentence of a multi-sentence line.

Features a model can ask for (``net_input["src_syntax"][name]``, each ``(B, T)`` and padded
exactly like ``src_tokens``):

``heads``     1-based head position in the line, 0 for a root (paper 003 "parent position")
``parents``   0-based index of the head in the *padded* row; roots and padding point to themselves
``depth``     tree depth, root 0 (paper 000 sec. 4); padding 0
``labels``    dependency-label ids (padding: the label dictionary's pad)
``pos``       POS ids (padding: the POS dictionary's pad)
``distance``  dependency syntactic distance d_D(i) = i - h(i) (paper 002 eq. 4); padding 0

Pairwise quantities (relative depth, tree distance, root paths) are derived from these in
the model, batched, with :mod:`fairseq_syntax_core.trees`.
"""

from typing import Dict, Iterable, List, Optional, Sequence

import torch
from fairseq.data import data_utils
from torch import Tensor

from fairseq_syntax_core import trees

FEATURES = ("heads", "parents", "depth", "labels", "pos", "distance")


def append_eos(heads: Tensor, labels: Tensor, pos: Tensor, eos_label: int, eos_pos: int):
    """Stored per-piece streams plus the entry of the appended ``</s>`` (see module doc)."""
    roots = torch.nonzero(heads == 0).flatten()
    last_root = int(roots[-1]) + 1 if len(roots) else 0
    return (
        torch.cat([heads.long(), heads.new_tensor([last_root]).long()]),
        torch.cat([labels.long(), labels.new_tensor([eos_label]).long()]),
        torch.cat([pos.long(), pos.new_tensor([eos_pos]).long()]),
    )


def sentence_features(heads: Tensor, labels: Tensor, pos: Tensor, requested: Iterable[str]) -> Dict[str, Tensor]:
    """Per-sentence features (1-D, one entry per source token including ``</s>``).

    ``heads``, ``labels``, ``pos`` already include the ``</s>`` entry (:func:`append_eos`).
    ``parents`` is returned 0-based within the sentence; :func:`collate_features` shifts it.
    """
    requested = set(requested)
    unknown = requested - set(FEATURES)
    if unknown:
        raise KeyError(f"unknown syntax features {sorted(unknown)}; available: {FEATURES}")
    out: Dict[str, Tensor] = {}
    parents = None
    if requested & {"parents", "depth"}:
        parents = trees.parents_from_heads(heads)
    if "heads" in requested:
        out["heads"] = heads
    if "parents" in requested:
        out["parents"] = parents
    if "depth" in requested:
        out["depth"] = trees.tree_depth(parents.unsqueeze(0)).squeeze(0)
    if "labels" in requested:
        out["labels"] = labels
    if "pos" in requested:
        out["pos"] = pos
    if "distance" in requested:
        out["distance"] = trees.dependency_distance(heads)
    return out


def collate_features(
    samples: Sequence[Dict[str, Tensor]],
    pad_values: Dict[str, int],
    left_pad: bool,
    length: int,
) -> Dict[str, Tensor]:
    """Pad per-sentence features into ``(B, length)`` tensors, on the same side as the source.

    ``parents`` is shifted by each row's padding offset so that it indexes the padded row;
    its padding positions point to themselves.
    """
    if not samples:
        return {}
    out: Dict[str, Tensor] = {}
    for name in samples[0]:
        values = [s[name] for s in samples]
        out[name] = data_utils.collate_tokens(
            values, pad_values.get(name, 0), left_pad=left_pad, pad_to_length=length
        )
        if name == "parents":
            lengths = torch.tensor([v.numel() for v in values])
            width = out[name].size(1)
            offset = (width - lengths) if left_pad else torch.zeros_like(lengths)
            positions = torch.arange(width).unsqueeze(0)
            real = (positions >= offset.unsqueeze(1)) & (positions < (offset + lengths).unsqueeze(1))
            out[name] = torch.where(real, out[name] + offset.unsqueeze(1), positions)
    return out


def pad_values_for(label_pad: int, pos_pad: int) -> Dict[str, int]:
    return {"labels": label_pad, "pos": pos_pad}


def collate_nodes(values: Sequence[Tensor], pad: int) -> "tuple[Tensor, Tensor]":
    """A node-level stream (``(nodes, width)`` per sentence, lengths of its own) as ``(B, N, width)`` plus a mask.

    Rows are right-padded with ``pad`` to the batch's largest node count ``N`` (at least 1);
    the mask ``(B, N)`` is True at real nodes. Nodes are not source positions, so they are
    not padded like the source. A 1-D value per sentence gives ``(B, N)``.
    """
    values = [v.long() for v in values]
    flat = not values or values[0].dim() == 1
    width = 1 if flat else values[0].size(1)
    values = [v.reshape(v.size(0), width) for v in values]
    lengths = torch.tensor([v.size(0) for v in values], dtype=torch.long)
    nodes = max(int(lengths.max()) if len(values) else 0, 1)
    out = data_utils.collate_tokens([v.reshape(-1) for v in values], pad, left_pad=False, pad_to_length=nodes * width)
    mask = torch.arange(nodes).unsqueeze(0) < lengths.unsqueeze(1)
    out = out.view(len(values), nodes, width)
    return (out.squeeze(-1) if flat else out), mask
