"""One name per concept, for every package: the features a model reads and the labels the pipeline writes.

Stored streams (``head``, ``deplabel``, ``pos``, ``phrase``: :data:`fairseq_syntax_core.databin.STREAMS`)
are what a data-bin holds; features (below) are what a batch gives a model, derived from them by
``fairseq_syntax/data/syntax_features.py``. Two features from one stream keep distinct names:
``heads`` is the stored 1-based head position (0 for a root), ``parents`` the 0-based index in the
padded row (a root points to itself).
"""

#: the label of a piece attached to its word's first (or previous) piece (docs/pipeline.md, "Projection onto BPE pieces")
SUBWORD_LABEL = "<subword>"

#: features of a batch (keys of ``net_input["src_syntax"]``)
HEADS = "heads"  # 1-based head positions, 0 for a root (Duan et al. (2019)'s "parent position")
PARENTS = "parents"  # 0-based head indices in the padded row; a root points to itself
DEPTH = "depth"  # tree depth, root 0 (Omote et al. 2019)
# tokens per depth level of a batch, padding first: a tuple of host ints made by the collater
# (level-wise recurrences slice by them without asking the GPU; see level_sizes in syntactic_position)
DEPTH_LEVEL_SIZES = "depth_level_sizes"
# the phrase structure's merges (node stream ``phrase``) and their order for a bottom-up tree-LSTM: each
# merge's height (0 for padding merges), and merges per height as host ints, made by the collater
PHRASE_NODES = "phrase"
PHRASE_HEIGHTS = "phrase_heights"
PHRASE_LEVEL_SIZES = "phrase_level_sizes"
LABELS = "labels"  # dependency-label ids
POS = "pos"  # POS-tag ids
