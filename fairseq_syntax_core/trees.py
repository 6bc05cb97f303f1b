"""Dependency-tree derivations used by every syntax-aware encoder.

Every tree quantity the project feeds into a model is derived here, with
batched, vectorised torch code (no Python loop runs over tokens or batch
items; the only loops are over ``O(log T)`` pointer-jumping rounds or over
tree-depth levels).

Conventions
-----------
Stored (per-sentence) form, ``heads``: ``LongTensor (..., T)``.
    ``heads[i]`` is the **1-based** position of the head of token ``i`` inside
    the same line, and ``0`` marks a root.  This is the CoNLL-U ``HEAD``
    column and is exactly the "parent position" feature of Duan et al. (2019)
    (Duan et al., Table I).  A line may contain **several roots** (the parser
    split the source line into several sentences); each root is depth 0 of
    its own tree, and every derivation below treats the trees independently
    (see each function for what "different trees" yields).

Batched form, ``parents``: ``LongTensor (B, T)`` (any leading shape ``(..., T)``
    is accepted and flattened internally).
    ``parents[b, i]`` is the **0-based** index, in the same row, of the head
    of token ``i``; a root points to itself.  Padding positions must also
    point to themselves, so they behave as isolated one-node trees (depth 0,
    their own root); callers mask them.  Rows may be left- or right-padded:
    nothing here assumes where the padding is.  ``parents`` is assumed to be a
    forest (no cycles); use :func:`validate_heads` on the stored form first.

Depth: root depth 0 (Omote et al. 2019, sec. 4); Duan et al. (2019) counts
    the root as depth 1 (:func:`duan_tree_depth`).

The EOS token that fairseq appends to the source is **not** handled here: the
dataset appends its entry before any derivation (it attaches to the line's last
root, see ``fairseq_syntax/data/syntax_features.py``).  Subword expansion
(Duan et al. 2019, sec. III.D: first piece inherits, later pieces attach to it) is done
by the pipeline (``preprocess/projection.py``); this module sees piece-level
trees as plain trees.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "TreeError",
    "validate_heads",
    "parents_from_heads",
    "tree_depth",
    "root_index",
    "relative_depth",
    "duan_tree_depth",
    "dependency_distance",
    "ancestor_matrix",
    "tree_distance",
    "root_paths",
    "structural_relative_position",
    "level_sizes_of",
    "word_start",
]


class TreeError(ValueError):
    """Raised when a head sequence does not describe a dependency forest."""


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #


def _n_rounds(T: int) -> int:
    """ceil(log2 T) + 1 pointer-jumping rounds (2**rounds >= T > max depth)."""
    return max(T - 1, 0).bit_length() + 1


def _flatten(parents: Tensor) -> Tuple[Tensor, torch.Size]:
    if not isinstance(parents, Tensor):
        raise TypeError(f"parents must be a torch.Tensor, got {type(parents).__name__}")
    if parents.dim() < 1:
        raise ValueError("parents must have at least one dimension (..., T)")
    shape = parents.shape
    n = 1
    for d in shape[:-1]:
        n *= int(d)
    return parents.reshape(n, shape[-1]).long(), shape


def _jump(parents2d: Tensor) -> Tuple[Tensor, Tensor]:
    """Pointer jumping on a (N, T) forest: returns (depth, root)."""
    ptr = parents2d
    T = ptr.size(-1)
    idx = torch.arange(T, device=ptr.device)
    dist = (ptr != idx).long()
    for _ in range(_n_rounds(T)):
        dist = dist + dist.gather(-1, ptr)
        ptr = ptr.gather(-1, ptr)
    return dist, ptr


# --------------------------------------------------------------------------- #
# validation / conversion
# --------------------------------------------------------------------------- #


def _py(x):
    """numpy scalar -> plain Python value (for readable error messages)."""
    return x.item() if isinstance(x, np.generic) else x


def _int_mask(arr: np.ndarray) -> np.ndarray:
    """Error path only: element-wise "is an integer-valued number" for object arrays."""

    def ok(x) -> bool:
        if isinstance(x, (bool, np.bool_)):
            return False
        try:
            f = float(x)
        except (TypeError, ValueError):
            return False
        return bool(np.isfinite(f) and f == int(f))

    return np.frompyfunc(ok, 1, 1)(arr).astype(bool)


def validate_heads(heads: Union[Sequence[int], np.ndarray, Tensor]) -> None:
    """Check that 1-D stored ``heads`` (1-based, 0 = root) form a dependency forest.

    Raises :class:`TreeError` naming the first offending token (0-based index
    and 1-based position) for: non-integer values, negative or ``> T`` heads, a
    token that is its own head, no root at all, and cycles (a token on the
    cycle and the cycle's members are named).  Several roots are allowed (one
    tree per parser sentence in the line).  An empty sequence is accepted.

    Cycle detection is vectorised pointer jumping over a virtual node 0 (the
    root index of Ma et al. 2019, eq. 4), ``ceil(log2(T+1)) + 1`` rounds.
    """
    if isinstance(heads, Tensor):
        arr = heads.detach().cpu().numpy()
    else:
        try:
            arr = np.asarray(heads)
        except Exception as e:  # ragged input etc.
            raise TreeError(f"heads cannot be read as a 1-D array: {e}") from e
    if arr.ndim != 1:
        raise TreeError(f"heads must be 1-D (one sentence/line), got shape {tuple(arr.shape)}")
    T = int(arr.shape[0])
    if T == 0:
        return

    kind = arr.dtype.kind
    if kind == "b":
        raise TreeError("heads must be integers, got booleans")
    if kind in "iu":
        vals = arr.astype(np.int64)
    else:
        if kind == "f":
            good = np.isfinite(arr) & (np.floor(arr) == arr)
        else:  # object / string arrays
            good = _int_mask(arr.astype(object))
        if not good.all():
            i = int(np.flatnonzero(~good)[0])
            raise TreeError(
                f"token at index {i} (position {i + 1}) has head {_py(arr[i])!r}: "
                f"expected an integer in [0, {T}] (0 = root)"
            )
        fvals = arr.astype(np.float64)
        # clamp before the integer cast so huge values are reported, not wrapped
        vals = np.clip(fvals, -1, T + 1).astype(np.int64)

    bad = (vals < 0) | (vals > T)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "negative" if vals[i] < 0 else f"out of range (> T = {T})"
        raise TreeError(
            f"token at index {i} (position {i + 1}) has head {_py(arr[i])!r}, which is {what}: "
            f"expected an integer in [0, {T}] (0 = root)"
        )

    pos = np.arange(1, T + 1)
    selfh = vals == pos
    if selfh.any():
        i = int(np.flatnonzero(selfh)[0])
        raise TreeError(
            f"token at index {i} (position {i + 1}) is its own head (head = {int(vals[i])}): "
            f"expected 0 (root) or the position of another token in [1, {T}]"
        )

    if not (vals == 0).any():
        raise TreeError(
            f"no root: no token has head 0 among the {T} tokens "
            f"(expected at least one root; heads = {vals.tolist()})"
        )

    # Functional graph on nodes 0..T, node 0 = virtual root (self loop).
    nxt = np.concatenate([[0], vals])
    ptr = nxt.copy()
    orbit_min = np.arange(T + 1)
    for _ in range(_n_rounds(T + 1)):
        orbit_min = np.minimum(orbit_min, orbit_min[ptr])
        ptr = ptr[ptr]
    # ptr = f^(2^R)(x) with 2^R > T: a node is on a cycle iff it is in the image
    # of f^(2^R) and is not the virtual root.
    if (ptr[1:] != 0).any():
        on_cycle = np.zeros(T + 1, dtype=bool)
        on_cycle[ptr] = True
        on_cycle[0] = False
        first = int(np.flatnonzero(on_cycle)[0])  # 1-based position
        members = np.flatnonzero(on_cycle & (orbit_min == orbit_min[first]))
        chain = ", ".join(f"head({int(m)})={int(nxt[m])}" for m in members)
        raise TreeError(
            f"cycle: token at index {first - 1} (position {first}) is on a head cycle "
            f"through positions {members.tolist()} ({chain}); expected every token to reach a root "
            f"(head 0)"
        )


def parents_from_heads(heads: Tensor) -> Tensor:
    """Stored form -> batched form.

    ``heads (..., T)`` (1-based, 0 = root) -> ``parents (..., T)`` 0-based with
    every root pointing to itself (``parents[i] = heads[i] - 1``, or ``i`` when
    ``heads[i] == 0``).  Several roots give several self-pointing nodes.
    """
    heads = torch.as_tensor(heads).long()
    T = heads.size(-1)
    idx = torch.arange(T, device=heads.device).expand_as(heads)
    return torch.where(heads == 0, idx, heads - 1)


# --------------------------------------------------------------------------- #
# depths
# --------------------------------------------------------------------------- #


def tree_depth(parents: Tensor) -> Tensor:
    """Depth of each token, root depth 0 (Omote et al. 2019, sec. 4, ``depth(n)`` in eq. 16).

    ``parents (B, T)`` (or any ``(..., T)``) -> ``LongTensor`` of the same shape.
    Pointer jumping, ``ceil(log2 T) + 1`` rounds.  Each root of a multi-root
    line is depth 0 of its own tree; self-pointing padding gets 0.
    """
    p, shape = _flatten(parents)
    depth, _ = _jump(p)
    return depth.reshape(shape)


def root_index(parents: Tensor) -> Tensor:
    """0-based index of the root of each token's tree (same shape as ``parents``).

    Two tokens of a row belong to the same (parser) sentence iff their
    ``root_index`` values are equal.  Self-pointing padding is its own root.
    """
    p, shape = _flatten(parents)
    _, root = _jump(p)
    return root.reshape(shape)


def relative_depth(depth: Tensor) -> Tensor:
    """Pairwise relative depth, Omote et al. 2019, eq. 16: ``dist_ij = depth(n_j) - depth(n_i)``.

    ``depth (B, T)`` -> ``(B, T, T)`` with ``out[b, i, j] = depth[b, j] - depth[b, i]``
    (row i = query word, column j = key word, as in Omote et al. 2019, Table 1).  The
    formula is applied to all pairs, including tokens of different trees of a
    multi-root line (each root being depth 0); callers mask across sentences
    with :func:`root_index` if they need to.
    """
    return depth.unsqueeze(-2) - depth.unsqueeze(-1)


def duan_tree_depth(parents: Tensor) -> Tensor:
    """Duan et al. 2019, Table I "tree depth": :func:`tree_depth` + 1 (the root counts as 1).

    E.g. "It is a good thing for people ." -> ``[2, 1, 3, 3, 2, 4, 3, 2]``.
    Self-pointing padding gets 1 (callers mask it).
    """
    return tree_depth(parents) + 1


def dependency_distance(heads: Tensor, positions: Optional[Tensor] = None) -> Tensor:
    """Dependency NSD of Ma et al. 2019, eq. 4: ``d_D(w_i) = i - h(i)``, root index 0.

    Works on the **stored** form ``heads (..., T)`` (1-based, 0 = root).  By
    default ``i`` is ``1..T`` along the last dimension, so batched rows must be
    unpadded or right-padded (left padding would shift ``i``); otherwise pass
    ``positions`` (broadcastable to ``heads``), the 1-based position of every
    token within its line.  A root gets ``d_D = i - 0 = i`` (eq. 4 literally;
    with several roots in a line each gets its own line position).  Values can
    be negative (head to the right).  Padding values are meaningless; mask them.
    """
    heads = torch.as_tensor(heads).long()
    if positions is None:
        positions = torch.arange(1, heads.size(-1) + 1, device=heads.device)
    return torch.as_tensor(positions, device=heads.device).long() - heads


# --------------------------------------------------------------------------- #
# pairwise structure
# --------------------------------------------------------------------------- #


def _max_depth(depth: Tensor) -> int:
    return int(depth.max().item()) if depth.numel() > 0 else 0


def ancestor_matrix(parents: Tensor, depth: Optional[Tensor] = None) -> Tensor:
    """``BoolTensor (B, T, T)``: ``[b, i, j]`` iff ``j`` is ``i`` or an ancestor of ``i``.

    The transitive closure of "is the parent of" plus the identity, by repeated squaring:
    after ``k`` boolean matrix products ``R <- R R`` every ancestor up to ``2^k`` levels up is
    in, so ``ceil(log2 T)`` products (a number known from the shape, no host sync) reach the
    root; roots are fixed points, so each row of the result is the root-to-token chain of paper
    001 sec. 3.2.  Tokens of different trees are never related; self-pointing padding only has
    itself.  ``depth`` is accepted for compatibility and not needed.
    """
    p, shape = _flatten(parents)
    N, T = p.shape
    reach = torch.zeros(N, T, T, dtype=torch.float32, device=p.device)
    reach.scatter_(-1, torch.arange(T, device=p.device).expand(N, T).unsqueeze(-1), 1.0)
    reach.scatter_(-1, p.long().unsqueeze(-1), 1.0)
    # 0/1 products with counts <= T are exact in float32 (also under TF32); no autocast to fp16
    with torch.autocast(device_type=p.device.type, enabled=False):
        for _ in range(max(T - 1, 1).bit_length()):
            reach = (torch.bmm(reach, reach) > 0).to(torch.float32)
    return (reach > 0).reshape(*shape, T)


def tree_distance(parents: Tensor) -> Tensor:
    """Path length (edges) between tokens: ``depth_i + depth_j - 2 depth(LCA(i, j))``.

    ``parents (B, T)`` -> ``LongTensor (B, T, T)``, symmetric, zero diagonal.
    Tokens in different trees (different roots of a multi-root line, or
    padding) get ``-1``.  (Tree path length is the distance of Wang et al.
    2019b cited in Xie et al. 2021, sec. 2.)  ``depth(LCA) + 1`` equals the number of
    common ancestors-or-self, obtained as ``A @ A^T`` of the ancestor matrix.
    """
    p, shape = _flatten(parents)
    depth = tree_depth(p)
    anc = ancestor_matrix(p, depth).to(torch.float32)
    # 0/1 inputs with fp32 accumulation are exact (also under TF32); keep autocast
    # from dropping the counts to fp16.
    with torch.autocast(device_type=p.device.type, enabled=False):
        common = torch.matmul(anc, anc.transpose(-1, -2)).round().long()  # (N, T, T)
    dist = depth.unsqueeze(-1) + depth.unsqueeze(-2) - 2 * (common - 1)
    dist = torch.where(common > 0, dist, torch.full_like(dist, -1))
    T = shape[-1]
    return dist.reshape(*shape, T)


def root_paths(parents: Tensor, labels: Tensor, pad: int) -> Tuple[Tensor, Tensor]:
    """Root-to-word dependency-label paths of Xie et al. 2021, sec. 3.2.

    For token ``i`` the path is ``[label(root), ..., label(parent(i)), label(i)]``
    (``p_i = {label_0, ..., label_n}``; e.g. John = [root, conj, cc]), where
    ``labels (B, T)`` holds each token's own dependency-label id (the root's
    label being the ``root`` label id).  Returns

    * ``paths``: ``LongTensor (B, T, Dmax + 1)``, right-padded with ``pad``,
      ``Dmax`` the largest depth in the batch;
    * ``lengths``: ``LongTensor (B, T)`` = depth + 1.

    In a multi-root line each path starts at the root of the token's own tree.
    Self-pointing padding gets a length-1 path of its own label; mask it.
    """
    p, shape = _flatten(parents)
    lab = torch.as_tensor(labels, device=p.device).long().reshape(p.shape)
    N, T = p.shape
    depth, _ = _jump(p)
    D = _max_depth(depth) + 1
    paths = torch.full((N, T, D + 1), pad, dtype=torch.long, device=p.device)
    trash = torch.full_like(depth, D)  # extra column absorbing writes beyond the path
    cur = torch.arange(T, device=p.device).expand(N, T).contiguous()
    for s in range(D):  # s-th ancestor of every token sits at slot depth - s
        slot = depth - s
        slot = torch.where(slot >= 0, slot, trash)
        paths.scatter_(-1, slot.unsqueeze(-1), lab.gather(-1, cur).unsqueeze(-1))
        cur = p.gather(-1, cur)
    paths = paths[..., :D]
    return paths.reshape(*shape, D), (depth + 1).reshape(shape)


def structural_relative_position(
    parents: Tensor, depth: Optional[Tensor] = None, off_path: str = "depth-sum"
) -> Tensor:
    """Relative structural position of Wang et al. (2019b, EMNLP), sec. 2.2.

    Wang et al. take the absolute structural position of a word as its
    distance to the origin of the dependency tree (the main verb, i.e. the
    root): ``abs(x_i) = depth_i`` (:func:`tree_depth`). The relative
    structural position of query ``i`` and key ``j`` is

    * ``abs(x_i) - abs(x_j)`` when ``i`` and ``j`` lie on one root path
      (``j`` is ``i``, an ancestor of ``i``, or a descendant of ``i``:
      :func:`ancestor_matrix` or its transpose);
    * otherwise (``off_path``), signed by the sequential direction (positive
      when the key precedes the query):

      - ``"depth-sum"`` (default, our reading of Wang et al.):
        ``sign(i - j) * (abs(x_i) + abs(x_j))``, the path through the origin;
      - ``"tree-path"`` (Xie et al. (2021)'s description of Wang et al.: "the length of
        the shortest path between two nodes"): ``sign(i - j) * tree_distance(i, j)``
        (:func:`tree_distance`; the path through the lowest common ancestor).
        Tokens of different trees, which have no tree path, keep the depth sum.

      Wang et al.'s own text could not be checked here; both are offered.

    All values are "query minus key". ``parents (B, T)`` -> ``LongTensor (B, T, T)``
    (``out[b, i, j]``, row = query). Positions are those of the padded row,
    so left padding does not change a sentence's block. Tokens of different
    trees of a multi-root line are never on one root path: they get the
    signed sum of their depths (each in its own tree); self-pointing padding
    is treated the same way (mask it). ``depth`` (from :func:`tree_depth`)
    may be passed to avoid recomputing it. Clip and bucket with
    :func:`fairseq_syntax.modules.relative_attention.relative_bucket`.
    """
    p, shape = _flatten(parents)
    if depth is None:
        depth = tree_depth(p)
    else:
        depth = torch.as_tensor(depth, device=p.device).long().reshape(p.shape)
    N, T = p.shape
    anc = ancestor_matrix(p, depth)  # [n, i, j]: j is i or an ancestor of i
    on_path = anc | anc.transpose(-1, -2)
    d_i = depth.unsqueeze(-1)
    d_j = depth.unsqueeze(-2)
    idx = torch.arange(T, device=p.device)
    direction = torch.sign(idx.unsqueeze(-1) - idx.unsqueeze(-2))  # (T, T): sign(i - j)
    if off_path == "depth-sum":
        across = d_i + d_j
    elif off_path == "tree-path":
        dist = tree_distance(p)
        across = torch.where(dist >= 0, dist, d_i + d_j)
    else:
        raise ValueError(f"off_path must be 'depth-sum' or 'tree-path', got {off_path!r}")
    out = torch.where(on_path, d_i - d_j, direction * across)
    return out.reshape(*shape, T)


def word_start(parents: Tensor, labels: Tensor, subword_label: int) -> Tensor:
    """Index of the first piece of each piece's word (same shape as ``parents``).

    Undoes the projection onto BPE pieces (docs/pipeline.md, "Projection onto BPE
    pieces"): a piece whose label is ``subword_label`` (the reserved
    ``<subword>`` label id) belongs to the word of the piece it attaches to.
    Works for both projection rules (``first``: later pieces attach to the
    first piece; ``chain``: to the previous piece) by pointer jumping over the
    ``<subword>`` arcs, ``ceil(log2 T) + 1`` rounds. Every other piece (first
    pieces, ``</s>``, padding) starts its own word. Indices are in the padded
    row, like ``parents``.
    """
    p, shape = _flatten(parents)
    lab = torch.as_tensor(labels, device=p.device).long().reshape(p.shape)
    T = p.size(-1)
    idx = torch.arange(T, device=p.device).expand_as(p)
    ptr = torch.where(lab == int(subword_label), p, idx)
    for _ in range(_n_rounds(T)):
        ptr = ptr.gather(-1, ptr)
    return ptr.reshape(shape)


def level_sizes_of(depth: Tensor, padding_mask: Optional[Tensor] = None) -> Tuple[int, ...]:
    """Tokens per slot of a ``(B, T)`` batch, slot 0 the padding and slot ``L + 1`` depth ``L``.

    What the path encoder's level-wise recurrence slices by. The collater computes it on the
    host (``src_syntax["depth_level_sizes"]``), so that the GPU never waits for it.
    """
    level = depth.long().reshape(-1)
    if padding_mask is not None:
        level = level.masked_fill(padding_mask.reshape(-1), -1)
    return tuple(int(c) for c in torch.bincount(level + 1, minlength=1).tolist())
