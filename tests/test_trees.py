"""Tests for fairseq_syntax_core.trees (every tree derivation of the project)."""

import random
import re

import numpy as np
import pytest
import torch

from fairseq_syntax_core.trees import (
    TreeError,
    ancestor_matrix,
    dependency_distance,
    duan_tree_depth,
    parents_from_heads,
    relative_depth,
    root_index,
    root_paths,
    tree_depth,
    tree_distance,
    validate_heads,
)

# Paper 000 Figure 2: "My father bought a red car ." (bought is the root;
# father, car and "." depend on bought; My on father; a and red on car).
OMOTE_WORDS = ["My", "father", "bought", "a", "red", "car", "."]
OMOTE_HEADS = [2, 3, 0, 6, 6, 3, 3]

# Paper 000 Table 1, copied from the paper text: row i, column j = dist_ij.
OMOTE_TABLE1 = [
    [0, -1, -2, 0, 0, -1, -1],
    [1, 0, -1, 1, 1, 0, 0],
    [2, 1, 0, 2, 2, 1, 1],
    [0, -1, -2, 0, 0, -1, -1],
    [0, -1, -2, 0, 0, -1, -1],
    [1, 0, -1, 1, 1, 0, 0],
    [1, 0, -1, 1, 1, 0, 0],
]

# Two parser sentences in one line: "A b . C d ." (b and d are the roots).
MULTI_HEADS = [2, 0, 2, 5, 0, 5]


def _parents(heads):
    return parents_from_heads(torch.tensor([heads]))


# --------------------------------------------------------------------------- #
# paper tables
# --------------------------------------------------------------------------- #


def test_omote_table1_relative_depths():
    validate_heads(OMOTE_HEADS)
    parents = _parents(OMOTE_HEADS)
    depth = tree_depth(parents)
    assert depth.tolist() == [[2, 1, 0, 2, 2, 1, 1]]
    rel = relative_depth(depth)
    assert rel.shape == (1, 7, 7)
    assert rel[0].tolist() == OMOTE_TABLE1
    # The worked example of the paper: dist_{1,3} = depth(bought) - depth(My) = -2.
    assert rel[0, 0, 2].item() == -2


def test_duan_table1_features():
    # Paper 003 Table I.
    words = ["It", "is", "a", "good", "thing", "for", "people", "."]
    heads = torch.tensor([2, 0, 5, 5, 2, 7, 5, 2])
    validate_heads(heads)
    table_parent_position = [2, 0, 5, 5, 2, 7, 5, 2]
    table_tree_depth = [2, 1, 3, 3, 2, 4, 3, 2]
    assert len(words) == heads.numel()
    assert heads.tolist() == table_parent_position  # the stored form is Table I's parent position
    assert duan_tree_depth(parents_from_heads(heads)).tolist() == table_tree_depth
    # batched form too
    assert duan_tree_depth(parents_from_heads(heads[None])).tolist() == [table_tree_depth]
    assert tree_depth(parents_from_heads(heads)).tolist() == [d - 1 for d in table_tree_depth]


# --------------------------------------------------------------------------- #
# hand-checked derivations
# --------------------------------------------------------------------------- #


def test_parents_from_heads():
    assert parents_from_heads(torch.tensor(OMOTE_HEADS)).tolist() == [1, 2, 2, 5, 5, 2, 2]
    assert parents_from_heads(torch.tensor([MULTI_HEADS])).tolist() == [[1, 1, 1, 4, 4, 4]]


def test_dependency_distance_by_hand():
    # d_D(i) = i - h(i), 1-based i, root head 0 (paper 002 eq. 4).
    heads = torch.tensor(OMOTE_HEADS)
    expected = [1 - 2, 2 - 3, 3 - 0, 4 - 6, 5 - 6, 6 - 3, 7 - 3]
    assert expected == [-1, -1, 3, -2, -1, 3, 4]
    assert dependency_distance(heads).tolist() == expected
    # batched, right-padded (padding value irrelevant, masked by callers)
    batch = torch.tensor([OMOTE_HEADS, [2, 0, 2, 0, 0, 0, 0]])
    out = dependency_distance(batch)
    assert out[0].tolist() == expected
    assert out[1, :3].tolist() == [-1, 2, 1]
    # left-padded row with explicit 1-based positions
    left = torch.tensor([[0, 0] + [2, 0, 2]])
    pos = torch.tensor([[0, 0, 1, 2, 3]])
    assert dependency_distance(left, positions=pos)[0, 2:].tolist() == [-1, 2, 1]
    # multi-root: each root gets its own line position
    assert dependency_distance(torch.tensor(MULTI_HEADS)).tolist() == [-1, 2, 1, -1, 5, 1]


def test_root_paths_labelled_tree():
    # Paper 001 Figure 1 style: "Tom and John go to school together", labels
    # chosen so that John = [root, conj, cc] and school = [root, obl].
    vocab = {"<pad>": 0, "root": 1, "conj": 2, "cc": 3, "obl": 4, "case": 5, "advmod": 6}
    words = ["Tom", "and", "John", "go", "to", "school", "together"]
    heads = [4, 3, 1, 0, 6, 4, 4]
    labs = ["conj", "cc", "cc", "root", "case", "obl", "advmod"]
    validate_heads(heads)
    parents = _parents(heads)
    labels = torch.tensor([[vocab[x] for x in labs]])
    paths, lengths = root_paths(parents, labels, pad=vocab["<pad>"])
    inv = {v: k for k, v in vocab.items()}

    def path(w):
        i = words.index(w)
        return [inv[x] for x in paths[0, i, : lengths[0, i]].tolist()]

    assert path("John") == ["root", "conj", "cc"]
    assert path("school") == ["root", "obl"]
    assert path("go") == ["root"]
    assert path("to") == ["root", "obl", "case"]
    assert path("and") == ["root", "conj", "cc", "cc"]
    assert paths.shape == (1, 7, 4)  # Dmax = 3
    assert lengths.tolist() == [(tree_depth(parents) + 1).tolist()[0]]
    # right padding with pad
    i = words.index("school")
    assert paths[0, i].tolist() == [1, 4, 0, 0]


def test_tree_distance_by_hand():
    parents = _parents(OMOTE_HEADS)
    dist = tree_distance(parents)[0]
    assert torch.equal(dist, dist.T)
    assert dist.diagonal().tolist() == [0] * 7
    w = OMOTE_WORDS.index
    assert dist[w("My"), w("red")].item() == 4  # My-father-bought-car-red
    assert dist[w("My"), w("father")].item() == 1
    assert dist[w("a"), w("red")].item() == 2
    assert dist[w("bought"), w(".")].item() == 1
    assert dist[w("My"), w(".")].item() == 3
    assert dist[w("father"), w("car")].item() == 2
    expected = [
        [0, 1, 2, 4, 4, 3, 3],
        [1, 0, 1, 3, 3, 2, 2],
        [2, 1, 0, 2, 2, 1, 1],
        [4, 3, 2, 0, 2, 1, 3],  # a-car-bought-. = 3
        [4, 3, 2, 2, 0, 1, 3],
        [3, 2, 1, 1, 1, 0, 2],  # car-bought-. = 2
        [3, 2, 1, 3, 3, 2, 0],
    ]
    assert dist.tolist() == expected


def test_ancestor_matrix_by_hand():
    anc = ancestor_matrix(_parents(OMOTE_HEADS))[0]
    assert anc.dtype == torch.bool
    # My: itself, father, bought
    assert torch.nonzero(anc[0]).flatten().tolist() == [0, 1, 2]
    # red: itself, car, bought
    assert torch.nonzero(anc[4]).flatten().tolist() == [2, 4, 5]
    assert torch.nonzero(anc[2]).flatten().tolist() == [2]


def test_multi_root_line():
    validate_heads(MULTI_HEADS)
    parents = _parents(MULTI_HEADS)
    assert tree_depth(parents).tolist() == [[1, 0, 1, 1, 0, 1]]
    assert root_index(parents).tolist() == [[1, 1, 1, 4, 4, 4]]
    assert duan_tree_depth(parents).tolist() == [[2, 1, 2, 2, 1, 2]]
    dist = tree_distance(parents)[0]
    same = torch.tensor([0, 0, 0, 1, 1, 1])
    cross = same[:, None] != same[None, :]
    assert (dist[cross] == -1).all()
    assert dist[:3, :3].tolist() == [[0, 1, 2], [1, 0, 1], [2, 1, 0]]
    assert dist[3:, 3:].tolist() == [[0, 1, 2], [1, 0, 1], [2, 1, 0]]
    anc = ancestor_matrix(parents)[0]
    assert not anc[cross].any()
    paths, lengths = root_paths(parents, torch.tensor([[7, 1, 8, 7, 1, 8]]), pad=0)
    assert lengths.tolist() == [[2, 1, 2, 2, 1, 2]]
    assert paths[0].tolist() == [[1, 7], [1, 0], [1, 8], [1, 7], [1, 0], [1, 8]]


def _pad_left(parents_row, total):
    """Left-pad a 0-based parents row to `total`; padding points to itself."""
    n = len(parents_row)
    off = total - n
    return list(range(off)) + [p + off for p in parents_row], off


def test_left_padding_matches_alone():
    sents = [OMOTE_HEADS, MULTI_HEADS, [0], [3, 3, 0, 3]]
    labels = [[random.Random(k).randrange(1, 9) for _ in h] for k, h in enumerate(sents)]
    T = max(len(h) for h in sents) + 2
    rows, lrows, offs = [], [], []
    for h, lab in zip(sents, labels):
        p = parents_from_heads(torch.tensor(h)).tolist()
        row, off = _pad_left(p, T)
        rows.append(row)
        lrows.append([0] * off + lab)
        offs.append(off)
    batch = torch.tensor(rows)
    lbatch = torch.tensor(lrows)
    B_depth = tree_depth(batch)
    B_root = root_index(batch)
    B_rel = relative_depth(B_depth)
    B_anc = ancestor_matrix(batch)
    B_dist = tree_distance(batch)
    B_paths, B_len = root_paths(batch, lbatch, pad=-5)
    # padding: depth 0, own root, isolated
    for b, off in enumerate(offs):
        assert B_depth[b, :off].tolist() == [0] * off
        assert B_root[b, :off].tolist() == list(range(off))
        assert (B_dist[b, :off, off:] == -1).all()
    for b, (h, lab, off) in enumerate(zip(sents, labels, offs)):
        p = parents_from_heads(torch.tensor([h]))
        s = slice(off, None)
        assert torch.equal(B_depth[b, s], tree_depth(p)[0])
        assert torch.equal(B_root[b, s] - off, root_index(p)[0])
        assert torch.equal(B_rel[b, s, s], relative_depth(tree_depth(p))[0])
        assert torch.equal(B_anc[b, s, s], ancestor_matrix(p)[0])
        assert torch.equal(B_dist[b, s, s], tree_distance(p)[0])
        paths, lengths = root_paths(p, torch.tensor([lab]), pad=-5)
        assert torch.equal(B_len[b, s], lengths[0])
        D = paths.size(-1)
        assert torch.equal(B_paths[b, s, :D], paths[0])
        assert (B_paths[b, s, D:] == -5).all()
        # dependency distance with explicit positions on the left-padded stored form
        hpad = torch.tensor([[0] * off + h])
        pos = torch.tensor([[0] * off + list(range(1, len(h) + 1))])
        assert torch.equal(
            dependency_distance(hpad, positions=pos)[0, s], dependency_distance(torch.tensor(h))
        )


# --------------------------------------------------------------------------- #
# validation
# --------------------------------------------------------------------------- #


def test_validate_heads_accepts_valid():
    validate_heads(OMOTE_HEADS)
    validate_heads(np.array(MULTI_HEADS))
    validate_heads(torch.tensor(MULTI_HEADS))
    validate_heads(np.array([2.0, 0.0]))
    validate_heads([0])
    validate_heads([])


@pytest.mark.parametrize(
    "heads, pattern",
    [
        ([2, 3, 1], r"no root"),
        ([0, 3, 4, 2], r"cycle: token at index 1 \(position 2\).*positions \[2, 3, 4\]"),
        ([0, 3, 2, 3], r"cycle: token at index 1 \(position 2\).*positions \[2, 3\]"),
        ([0, 1, 5, 3, 4], r"cycle: token at index 2 \(position 3\).*positions \[3, 4, 5\]"),
        ([0, 2, 1], r"token at index 1 \(position 2\) is its own head"),
        ([0, 4, 1], r"token at index 1 \(position 2\) has head 4, which is out of range \(> T = 3\)"),
        ([0, -1, 1], r"token at index 1 \(position 2\) has head -1, which is negative"),
        ([0, 1.5, 1], r"token at index 1 \(position 2\) has head 1\.5"),
        (["0", "x", "1"], r"token at index 1 \(position 2\) has head 'x'"),
        ([[0, 1]], r"1-D"),
        ([True, False], r"booleans"),
    ],
)
def test_validate_heads_errors(heads, pattern):
    with pytest.raises(TreeError, match=pattern):
        validate_heads(heads)


def test_validate_heads_cycle_with_multi_root_and_tensor():
    # one good sentence, one cyclic one (tokens 4 <-> 5), tensor input
    with pytest.raises(TreeError) as e:
        validate_heads(torch.tensor([0, 1, 0, 5, 4, 4]))
    msg = str(e.value)
    assert "position 4" in msg and "head(4)=5" in msg and "head(5)=4" in msg
    assert isinstance(e.value, ValueError)


# --------------------------------------------------------------------------- #
# randomized comparison with a plain Python reference
# --------------------------------------------------------------------------- #


def _random_heads(rng, n):
    """Random forest in stored form (several roots sometimes)."""
    order = list(range(1, n + 1))
    rng.shuffle(order)
    heads = [0] * (n + 1)
    n_roots = 1 if rng.random() < 0.6 else rng.randint(1, max(1, n // 3))
    for k, tok in enumerate(order):
        if k < n_roots:
            heads[tok] = 0
        else:
            heads[tok] = order[rng.randrange(k)]  # attach to an earlier-placed token
    return heads[1:]


def _ref(parents):
    T = len(parents)

    def chain(i):
        c = [i]
        while parents[c[-1]] != c[-1]:
            c.append(parents[c[-1]])
        return c

    chains = [chain(i) for i in range(T)]
    depth = [len(c) - 1 for c in chains]
    anc = [[j in chains[i] for j in range(T)] for i in range(T)]
    dist = [[-1] * T for _ in range(T)]
    for i in range(T):
        for j in range(T):
            common = [k for k in chains[i] if k in chains[j]]
            if common:
                lca = common[0]
                dist[i][j] = depth[i] + depth[j] - 2 * depth[lca]
    roots = [c[-1] for c in chains]
    return depth, anc, dist, roots


def test_random_trees_against_reference():
    rng = random.Random(1234)
    for trial in range(40):
        B = rng.randint(1, 4)
        T = rng.randint(1, 24)
        rows, labrows = [], []
        for _ in range(B):
            n = rng.randint(1, T)
            heads = _random_heads(rng, n)
            validate_heads(heads)
            p = parents_from_heads(torch.tensor(heads)).tolist()
            off = rng.randint(0, T - n)  # padding on both sides
            row = list(range(off)) + [x + off for x in p] + list(range(off + n, T))
            rows.append(row)
            labrows.append([rng.randrange(1, 50) for _ in range(T)])
        parents = torch.tensor(rows)
        labels = torch.tensor(labrows)
        depth = tree_depth(parents)
        anc = ancestor_matrix(parents)
        dist = tree_distance(parents)
        roots = root_index(parents)
        paths, lengths = root_paths(parents, labels, pad=0)
        assert torch.equal(dist, dist.transpose(1, 2))
        for b in range(B):
            r_depth, r_anc, r_dist, r_roots = _ref(rows[b])
            assert depth[b].tolist() == r_depth
            assert anc[b].tolist() == r_anc
            assert dist[b].tolist() == r_dist
            assert roots[b].tolist() == r_roots
            assert lengths[b].tolist() == [d + 1 for d in r_depth]
            for i in range(T):
                c = [i]
                while rows[b][c[-1]] != c[-1]:
                    c.append(rows[b][c[-1]])
                want = [labrows[b][k] for k in reversed(c)]
                got = paths[b, i].tolist()
                assert got[: len(want)] == want
                assert all(x == 0 for x in got[len(want):])


def test_random_cycles_detected():
    rng = random.Random(99)
    for _ in range(50):
        n = rng.randint(2, 30)
        heads = _random_heads(rng, n)
        # build a cycle among k non-root tokens
        k = rng.randint(2, n) if n >= 2 else 2
        toks = rng.sample(range(1, n + 1), k)
        for a, b in zip(toks, toks[1:] + toks[:1]):
            heads[a - 1] = b
        has_root = any(h == 0 for h in heads)
        with pytest.raises(TreeError) as e:
            validate_heads(heads)
        msg = str(e.value)
        if has_root:
            m = re.search(r"position (\d+)\) is on a head cycle", msg)
            assert m, msg
            pos = int(m.group(1))
            # following heads from pos returns to pos
            cur, seen = heads[pos - 1], 0
            while cur != pos and cur != 0 and seen <= n:
                cur, seen = heads[cur - 1], seen + 1
            assert cur == pos
        else:
            assert "no root" in msg


def test_empty_and_single():
    empty = torch.zeros(2, 0, dtype=torch.long)
    assert tree_depth(empty).shape == (2, 0)
    assert tree_distance(empty).shape == (2, 0, 0)
    assert ancestor_matrix(empty).shape == (2, 0, 0)
    paths, lengths = root_paths(empty, empty, pad=0)
    assert paths.shape[:2] == (2, 0) and lengths.shape == (2, 0)
    single = torch.zeros(1, 1, dtype=torch.long)
    assert tree_depth(single).tolist() == [[0]]
    assert tree_distance(single).tolist() == [[[0]]]
