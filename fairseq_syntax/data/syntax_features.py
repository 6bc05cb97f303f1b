"""From a stored piece tree to the tensors a model consumes: the one derivation path.

Both the dataset (reading a ``data-bin``) and on-the-fly parsing at inference
(:mod:`fairseq_syntax.data.online_parser`) call :func:`batch_features` on the padded stored
streams of a whole batch (:func:`collate_trees`), so training and raw-text decoding cannot
drift apart, and the derivations run once per batch, vectorized, not once per sentence.
:func:`sentence_features` is the same derivation on one unpadded sentence.

The appended ``</s>``: fairseq appends EOS to every source line. Its syntax entry is
added here (:func:`append_eos`): it attaches to the line's **last root** (the sentence it
closes), with label and POS ``</s>`` of their dictionaries. It is thus a child of a root
(depth 1), in the last sentence of a multi-sentence line.

Features a model can ask for (``net_input["src_syntax"][name]``, each ``(B, T)`` and padded
exactly like ``src_tokens``):

``heads``     1-based head position in the line, 0 for a root (Duan et al. 2019 "parent position")
``parents``   0-based index of the head in the *padded* row; roots and padding point to themselves
``depth``     tree depth, root 0 (Omote et al. 2019, sec. 4); padding 0
``labels``    dependency-label ids (padding: the label dictionary's pad)
``pos``       POS ids (padding: the POS dictionary's pad)
``distance``  dependency syntactic distance d_D(i) = i - h(i) (Ma et al. 2019, eq. 4); a root's ``i`` is
              its position within its own parser sentence (the first position of its tree
              counts 1), the paper's ``i``: on a line of one sentence, the line position;
              padding 0
``distance_line``      d_D with ``i`` the position in the line (0.1-0.2's ``distance``), so the root
              of a second sentence on a line gets its line position
``distance_word``, ``distance_line_word``  the same over **words** (``--nsd-units word``): every
              piece of a word gets its word's d_D, counted in words (the paper parsed words);
              words are recovered from the ``<subword>`` arcs of the piece tree (:func:`trees.word_start`)
``distance_height``    d_S (Ma et al. 2019, eq. 1, Shen et al. 2018), from the ``phrase`` stream
``distance_depth``     d_G (eq. 1, Gomez-Rodriguez and Vilares 2018)
``distance_relative``  d_R (eq. 3)
``KEY_mask``  for each constituency key requested: True at the real pieces of a line that has
              a phrase structure (a line kept by ``--phrase-fallback`` has none: all False)

The constituency distances (:func:`fairseq_syntax_core.phrase_trees.constituency_distances`, per
source piece as the stored tree's leaves) need the batch's ``phrase`` merges
(:func:`collate_nodes`); ``</s>`` is no leaf of the tree and gets 0 in all three, as does
every piece of a line without a tree. ``</s>`` (and padding, and lines without a tree) carry
no gold distance: the NSD losses leave them out (``label_smoothed_cross_entropy_with_nsd``).

Pairwise quantities (relative depth, tree distance, root paths) are derived from these in
the model, batched, with :mod:`fairseq_syntax_core.trees`.
"""

from typing import Dict, Iterable, List, Optional, Sequence

import torch
from fairseq.data import data_utils
from torch import Tensor

from fairseq_syntax_core import phrase_trees, trees
from fairseq_syntax_core.vocabulary import DEPTH, HEADS, LABELS, PARENTS, POS, SUBWORD_LABEL  # noqa: F401
from fairseq_syntax_core.vocabulary import DEPTH_LEVEL_SIZES, PHRASE_HEIGHTS, PHRASE_LEVEL_SIZES, PHRASE_NODES

#: constituency distance keys -> their index in :func:`phrase_trees.constituency_distances`'s ``(d_S, d_G, d_R)``
CONSTITUENCY_FEATURES: Dict[str, int] = {"distance_height": 0, "distance_depth": 1, "distance_relative": 2}
DEPENDENCY_FEATURES = ("distance", "distance_line", "distance_word", "distance_line_word")
#: the features that need the ``phrase`` stream (the collater passes its merges)
PHRASE_FEATURES = tuple(CONSTITUENCY_FEATURES) + tuple(k + "_mask" for k in CONSTITUENCY_FEATURES)
#: the features derived from the token streams alone
FEATURES = (HEADS, PARENTS, DEPTH, LABELS, POS) + DEPENDENCY_FEATURES
#: every feature a model can ask for
ALL_FEATURES = FEATURES + PHRASE_FEATURES


def derivable_features(streams: Iterable[str]) -> "tuple[str, ...]":
    """The features a data-bin holding ``streams`` (registry names) can give: the constituency
    distances need the ``phrase`` stream, the others the token streams every data-bin holds."""
    return FEATURES + (PHRASE_FEATURES if "phrase" in set(streams) else ())


def append_eos(heads: Tensor, labels: Tensor, pos: Tensor, eos_label: int, eos_pos: int):
    """Stored per-piece streams plus the entry of the appended ``</s>`` (see module doc)."""
    roots = torch.nonzero(heads == 0).flatten()
    last_root = int(roots[-1]) + 1 if len(roots) else 0
    return (
        torch.cat([heads.long(), heads.new_tensor([last_root]).long()]),
        torch.cat([labels.long(), labels.new_tensor([eos_label]).long()]),
        torch.cat([pos.long(), pos.new_tensor([eos_pos]).long()]),
    )


def sentence_features(
    heads: Tensor, labels: Tensor, pos: Tensor, requested: Iterable[str], phrase: Optional[Tensor] = None,
    subword_label: int = -1,
) -> Dict[str, Tensor]:
    """Per-sentence features (1-D, one entry per source token including ``</s>``).

    ``heads``, ``labels``, ``pos`` already include the ``</s>`` entry (:func:`append_eos`);
    ``phrase`` is the line's ``(n - 1, 2)`` merges (for the constituency distances).
    ``parents`` is returned 0-based within the sentence; :func:`collate_features` shifts it.
    """
    real = torch.ones(1, heads.numel(), dtype=torch.bool)
    nodes = collate_nodes([phrase.view(-1, 2)], 0) if phrase is not None else (None, None)
    batch = batch_features(heads.long().view(1, -1), labels.long().view(1, -1), pos.long().view(1, -1), real, requested,
                           *nodes, subword_label=subword_label)
    return {name: value.squeeze(0) for name, value in batch.items()}


def batch_features(
    heads: Tensor, labels: Tensor, pos: Tensor, real: Tensor, requested: Iterable[str],
    phrase: Optional[Tensor] = None, phrase_mask: Optional[Tensor] = None, subword_label: int = -1,
) -> Dict[str, Tensor]:
    """The features ``requested`` of a padded batch, each ``(B, T)`` like the source.

    ``heads``, ``labels``, ``pos`` are the stored streams with the ``</s>`` entry, padded on
    either side (:func:`collate_trees`: heads 0, labels and POS their dictionaries' pad);
    ``real`` is True at the sentences' own positions. ``heads`` stay 1-based within their
    line; ``parents`` index the padded row (padding points to itself); ``depth`` and the
    distances are 0 at padding. The constituency distances need ``phrase (B, N, 2)`` and
    ``phrase_mask (B, N)``, the collated ``phrase`` stream (:func:`collate_nodes`); the word-level
    distances the id of the ``<subword>`` label (``-1``: none, every piece is a word).
    """
    requested = set(requested)
    unknown = requested - set(ALL_FEATURES)
    if unknown:
        raise KeyError(f"unknown syntax features {sorted(unknown)}; available: {ALL_FEATURES}")
    out: Dict[str, Tensor] = {}
    width = heads.size(1)
    columns = torch.arange(width, device=heads.device).unsqueeze(0)
    offset = (~real).long().cumprod(dim=1).sum(dim=1, keepdim=True)  # leading padding of each row
    if requested & ({"parents", "depth"} | set(DEPENDENCY_FEATURES)):
        parents = torch.where(real & (heads > 0), heads - 1 + offset, columns)
        if "parents" in requested:
            out["parents"] = parents
        if "depth" in requested:
            out["depth"] = trees.tree_depth(parents)
    if "heads" in requested:
        out["heads"] = heads
    if "labels" in requested:
        out["labels"] = labels
    if "pos" in requested:
        out["pos"] = pos
    if "distance_line" in requested:
        distance = trees.dependency_distance(heads, positions=columns - offset + 1)
        out["distance_line"] = torch.where(real, distance, torch.zeros_like(distance))
    if "distance" in requested:
        out["distance"] = sentence_root_distance(heads, parents, real, columns - offset + 1)
    if requested & {"distance_word", "distance_line_word"}:
        word_heads, word_positions = word_tree(heads, parents, labels, real, subword_label)
        if "distance_word" in requested:
            out["distance_word"] = sentence_root_distance(word_heads, parents, real, word_positions)
        if "distance_line_word" in requested:
            distance = trees.dependency_distance(word_heads, positions=word_positions)
            out["distance_line_word"] = torch.where(real, distance, torch.zeros_like(distance))
    wanted = [k for k in CONSTITUENCY_FEATURES if k in requested or k + "_mask" in requested]
    if wanted:
        if phrase is None or phrase_mask is None:
            raise KeyError(f"the constituency distances {wanted} need the batch's phrase stream")
        values, has_tree = padded_constituency_distances(phrase, phrase_mask, real, offset)
        for key in wanted:
            if key in requested:
                out[key] = values[CONSTITUENCY_FEATURES[key]]
            if key + "_mask" in requested:
                out[key + "_mask"] = has_tree
    return out


def sentence_root_distance(heads: Tensor, parents: Tensor, real: Tensor, positions: Tensor) -> Tensor:
    """d_D (eq. 4) with each root at its position within its own parser sentence; 0 at padding.

    A sentence is a root's tree (:func:`trees.root_index`); its first position counts 1, so a
    root of a second sentence on a line gets ``i - (start - 1)`` instead of its line position
    ``i``. Other tokens keep ``i - h(i)``. The appended ``</s>`` belongs to the last sentence.
    ``heads`` and ``positions`` are 1-based in the line: of pieces, or of the pieces' words.
    """
    root = trees.root_index(parents)  # (B, T), in the padded row
    big = torch.full_like(positions.expand_as(root), torch.iinfo(torch.long).max)
    start = big.scatter_reduce(1, root, torch.where(real, positions.expand_as(root), big), reduce="amin")
    own = positions.expand_as(root) - start.gather(1, root) + 1  # the root's position in its sentence
    distance = torch.where(heads > 0, positions - heads, own)
    return torch.where(real, distance, torch.zeros_like(distance))


def word_tree(heads: Tensor, parents: Tensor, labels: Tensor, real: Tensor, subword_label: int
              ) -> "tuple[Tensor, Tensor]":
    """Each piece's word as ``(word_heads, word_positions)``, ``(B, T)``: the 1-based position in the line
    of the piece's word, and of its word's head word (0 for a root word).

    Words are undone from the projection (docs/pipeline.md, "Projection onto BPE pieces"): a piece labelled
    ``<subword>`` belongs to the word of the piece it attaches to (:func:`trees.word_start`); a
    word's head is that of its first piece. ``</s>`` is a word of its own. Padding gets 0.
    """
    columns = torch.arange(heads.size(1), device=heads.device).unsqueeze(0).expand_as(heads)
    start = trees.word_start(parents, labels, subword_label) if subword_label >= 0 else columns
    first = (start == columns) & real
    position = first.long().cumsum(dim=1)  # word position of each first piece
    word_positions = position.gather(1, start)
    head_piece = parents.gather(1, start)  # the head of the word's first piece (roots: themselves)
    head_word = position.gather(1, start.gather(1, head_piece))
    is_root = heads.gather(1, start) == 0
    word_heads = torch.where(is_root | ~real, torch.zeros_like(head_word), head_word)
    return word_heads, torch.where(real, word_positions, torch.zeros_like(word_positions))


def padded_constituency_distances(
    phrase: Tensor, phrase_mask: Tensor, real: Tensor, offset: Tensor
) -> "tuple[Tensor, Tensor]":
    """``(d_S, d_G, d_R)`` (Ma et al. 2019, eqs. 1-3) per source piece, placed like the source, and ``has_tree``.

    ``real`` marks each row's pieces plus ``</s>`` (its last real position); ``offset`` is each
    row's leading padding. Leaf ``i`` of the stored tree is piece ``i``; ``</s>``, padding and
    the pieces of a line without a tree (``--phrase-fallback``) get 0. ``has_tree (B, T)`` is
    True at the pieces (not ``</s>``) of lines whose tree covers them (``n - 1`` merges).
    """
    n_leaves = (real.sum(dim=1) - 1).clamp(min=0)  # pieces without </s>
    phrase = phrase.to(real.device).long()
    phrase_mask = phrase_mask.to(real.device)
    d = torch.stack(phrase_trees.constituency_distances(phrase, phrase_mask, n_leaves))  # (3, B, L)
    width = real.size(1)
    leaf = torch.arange(width, device=real.device).unsqueeze(0) - offset  # (B, T): leaf index of each column
    is_piece = (leaf >= 0) & (leaf < n_leaves.unsqueeze(1))
    if d.size(-1) == 0:
        values = torch.zeros(3, *real.shape, dtype=torch.long, device=real.device)
    else:
        index = leaf.clamp(0, d.size(-1) - 1).unsqueeze(0).expand(3, -1, -1)
        values = torch.where(is_piece.unsqueeze(0), d.gather(2, index), torch.zeros_like(index))
    has_tree = is_piece & (phrase_mask.sum(dim=1) == (n_leaves - 1).clamp(min=0)).unsqueeze(1)
    return values, has_tree


def collate_trees(
    sentences: Sequence["tuple[Tensor, Tensor, Tensor]"], label_pad: int, pos_pad: int, left_pad: bool, length: int,
) -> "tuple[Tensor, Tensor, Tensor, Tensor]":
    """Stored ``(heads, labels, pos)`` of each sentence (``</s>`` entry included) padded into ``(B, length)``.

    Returns ``(heads, labels, pos, real)``, padded on the source's side: heads with 0, labels
    and POS with their dictionaries' pad; ``real`` marks the sentences' own positions.
    """
    def pad(values, value):
        return data_utils.collate_tokens(values, value, left_pad=left_pad, pad_to_length=length)

    heads = pad([s[0].long() for s in sentences], 0)
    labels = pad([s[1].long() for s in sentences], label_pad)
    pos = pad([s[2].long() for s in sentences], pos_pad)
    lengths = torch.tensor([s[0].numel() for s in sentences])
    columns = torch.arange(heads.size(1)).unsqueeze(0)
    start = (heads.size(1) - lengths).unsqueeze(1) if left_pad else torch.zeros_like(lengths).unsqueeze(1)
    real = (columns >= start) & (columns < start + lengths.unsqueeze(1))
    return heads, labels, pos, real


def collate_stored_trees(
    heads: Tensor, labels: Tensor, pos: Tensor, sizes: Tensor, eos_label: int, eos_pos: int,
    label_pad: int, pos_pad: int, left_pad: bool, length: int,
) -> "tuple[Tensor, Tensor, Tensor, Tensor]":
    """:func:`collate_trees` of :func:`append_eos` of every sentence, from a batch's rows read at once.

    ``heads``, ``labels``, ``pos`` are the stored streams of the batch's sentences concatenated
    (:func:`fairseq_syntax.data.row_gather.gather_rows`), ``sizes`` each sentence's piece count.
    Returns ``(heads, labels, pos, real)`` exactly as
    ``collate_trees([append_eos(h, l, p, eos_label, eos_pos) ...], label_pad, pos_pad, left_pad, length)``,
    without a Python loop over the sentences.
    """
    heads, labels, pos = (torch.as_tensor(v).long().reshape(-1) for v in (heads, labels, pos))
    sizes = torch.as_tensor(sizes).long().reshape(-1)
    bsz = sizes.numel()
    lengths = sizes + 1  # with </s>
    width = max(int(length), int(lengths.max()) if bsz else 0)
    row = torch.repeat_interleave(torch.arange(bsz), sizes)
    within = torch.arange(heads.numel()) - (torch.cumsum(sizes, 0) - sizes)[row]  # 0-based in the sentence
    first = (width - lengths) if left_pad else torch.zeros_like(lengths)  # each row's first real column
    column = first[row] + within
    # </s> attaches to the last root, 1-based (0: no root)
    root_position = torch.where(heads == 0, within + 1, torch.zeros_like(within))
    last_root = torch.zeros(bsz, dtype=torch.long).scatter_reduce(0, row, root_position, reduce="amax")
    eos_column = first + sizes
    rows = torch.arange(bsz)

    def place(values: Tensor, pad: int, eos: Tensor) -> Tensor:
        out = torch.full((bsz, width), pad, dtype=torch.long)
        out[row, column] = values
        out[rows, eos_column] = eos
        return out

    columns = torch.arange(width).unsqueeze(0)
    real = (columns >= first.unsqueeze(1)) & (columns < (first + lengths).unsqueeze(1))
    return (
        place(heads, 0, last_root),
        place(labels, label_pad, torch.full((bsz,), eos_label, dtype=torch.long)),
        place(pos, pos_pad, torch.full((bsz,), eos_pos, dtype=torch.long)),
        real,
    )


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


def add_host_schedules(syntax: Dict[str, object], padding_mask: Tensor) -> None:
    """Add to a batch's ``src_syntax`` (on the host) the slice sizes its level-wise recurrences need.

    * ``depth`` -> ``depth_level_sizes``: tokens per depth level (Xie et al. (2021)'s path LSTM);
    * ``phrase`` (the merges, with ``phrase_mask``) -> ``phrase_heights`` (each merge's height) and
      ``phrase_level_sizes`` (merges per height; Eriguchi et al. (2016)'s bottom-up tree-LSTM), the leaves of a row
      being its tokens but ``</s>``.

    Counting them here keeps the model's forward free of host-device syncs.
    """
    if DEPTH in syntax:
        syntax[DEPTH_LEVEL_SIZES] = trees.level_sizes_of(syntax[DEPTH], padding_mask)  # type: ignore[arg-type]
    mask = syntax.get(PHRASE_NODES + "_mask")
    if PHRASE_NODES in syntax and isinstance(mask, Tensor):
        n_leaves = ((~padding_mask).long().sum(dim=1) - 1).clamp(min=0)
        heights = phrase_trees.phrase_heights(syntax[PHRASE_NODES], mask, n_leaves)  # type: ignore[arg-type]
        syntax[PHRASE_HEIGHTS] = heights
        syntax[PHRASE_LEVEL_SIZES] = phrase_trees.merge_level_sizes(heights, mask)
