"""Eriguchi et al. 2016, section 4.3: the target-length prior p(len(y) | len(x)).

The paper's beam search scores a finished candidate ``log p(y | x) + log p(len(y) | len(x))``,
the conditional length distribution "computed in advance following the statistics collected"
on the training pairs. This module estimates that table, stores it in the data-bin and reads
it back; :mod:`fairseq_syntax.sequence_generator` adds it to the hypotheses.

**Units.** Lengths are counted in the pieces the model reads and emits (BPE pieces), **without
the ``</s>``** that fairseq appends: a binarized line of fairseq size ``n`` (sizes include
``</s>``) has length ``n - 1``; a source row of a batch has as length its tokens that are
neither padding nor ``</s>``; a hypothesis finished at beam step ``k`` (``k`` pieces, then
``</s>``) has length ``k``.

**Estimate.** ``c(s, t)`` counts the train pairs (every shard: ``train``, ``train1``, ... of
the data-bin, one table for all) with source length ``s`` and target length ``t``. With
``L = max(100, longest train target)`` (the paper lets the decoder "generate up to 100 words";
the generator never emits more than ``L`` pieces), add-one smoothing over ``T = {1, ..., L}``::

    p(t | s) = (c(s, t) + 1) / (N(s) + L),        N(s) = sum over t in T of c(s, t)

so a pair never seen in training has ``1 / (N(s) + L)``, never zero. Train pairs with an empty
target (``t = 0``, outside ``T``) are not counted (the file says how many).

**Back-off.** A source length never seen in training (``N(s) = 0``) takes the counts of the
nearest seen source length; when a shorter and a longer one are equally near, the counts of
both are summed. Source lengths beyond the longest training source thus use the longest.

**Outside the support** (``t < 1``, only reachable with ``--min-len 0``; ``t > L``, which the
generator does not emit): ``log(1 / (N(s) + L))``, the value of an unseen length.

**Storage.** ``LENGTH_PRIOR_FILE`` (``length_prior.SRC-TGT.json``) in the data-bin, written
atomically by :func:`write_length_prior` (the pipeline calls it once the train split is
binarized)::

    {"format": "fairseq-syntax length prior", "version": 1,
     "source_lang": "en", "target_lang": "de", "splits": ["train"], "lines": 29000,
     "pairs": 29000, "skipped_empty_targets": 0, "max_target_length": 100,
     "unit": ..., "smoothing": ..., "backoff": ...,         (the rules above, for people)
     "counts": [[s, t, c(s, t)], ...]}                       (non-zero counts, sorted)

The raw counts are stored and the smoothing applied on load, so the file is the statistic
itself. A data-bin made before the table existed gets it estimated from its train split on
the fly (:func:`load_length_prior`, with an info log); one without a train split is an error.
Whatever split is decoded, the table is the train split's.
"""

import logging
import os
from typing import List, Optional, Tuple

import numpy as np

from fairseq_syntax_core.databin import LENGTH_PRIOR_FILE
from fairseq_syntax_core.errors import DataBinError
from fairseq_syntax_core.length_prior import (  # noqa: F401  (the table itself lives in the shared core)
    TRAIN, LengthPrior, length_prior_path, read_length_prior, table_text,
)

logger = logging.getLogger(__name__)


def train_shards(data_path: str, src: str, tgt: str) -> List[Tuple[str, str, str]]:
    """``(shard, source prefix, target prefix)`` of ``train``, ``train1``, ... as fairseq finds them
    (either pair order; the first missing shard after ``train`` ends the list). Empty: no train split."""
    shards = []
    k = 0
    while True:
        shard = TRAIN + (str(k) if k > 0 else "")
        found = None
        for a, b in ((src, tgt), (tgt, src)):
            prefix = os.path.join(data_path, f"{shard}.{a}-{b}.")
            if os.path.isfile(prefix + src + ".idx"):
                found = (shard, prefix + src, prefix + tgt)
                break
        if found is None:
            return shards
        shards.append(found)
        k += 1


def _sizes(prefix: str) -> np.ndarray:
    """fairseq's sizes (pieces + ``</s>``) of a binarized mmap dataset, checked."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    from .data_bin_checks import check_indexed_dataset

    check_indexed_dataset(prefix)
    index = MMapIndexedDataset.Index(prefix + ".idx")
    sizes = np.array(index.sizes, dtype=np.int64)
    del index
    return sizes


def estimate_length_prior(data_path: str, src: str, tgt: str,
                          max_target_length: Optional[int] = None) -> LengthPrior:
    """The table of the data-bin's train split (every shard), from the binarized sizes."""
    shards = train_shards(data_path, src, tgt)
    if not shards:
        raise DataBinError(
            os.path.join(data_path, f"{TRAIN}.{src}-{tgt}.{src}.idx"), None,
            f"not found: the length prior is estimated on the train split, and this data-bin has none "
            f"(and no {LENGTH_PRIOR_FILE.format(src=src, tgt=tgt)}); decode with the data-bin the model was trained on",
        )
    source, target = [], []
    for _shard, src_prefix, tgt_prefix in shards:
        if not os.path.isfile(tgt_prefix + ".idx"):
            raise DataBinError(tgt_prefix + ".idx", None, f"not found, but {os.path.basename(src_prefix)}.idx is: "
                               "the train split lacks its target side; re-run fairseq-syntax-preprocess")
        s, t = _sizes(src_prefix), _sizes(tgt_prefix)
        if len(s) != len(t):
            raise DataBinError(tgt_prefix + ".idx", None, f"holds {len(t)} lines, {os.path.basename(src_prefix)}.idx "
                               f"{len(s)}: the two sides of the pair do not match; re-run fairseq-syntax-preprocess")
        source.append(s - 1)
        target.append(t - 1)
    source_lengths, target_lengths = np.concatenate(source), np.concatenate(target)
    if not (target_lengths >= 1).any():
        raise DataBinError(shards[0][2] + ".idx", None,
                           "holds no non-empty target line to estimate the length prior from")
    return LengthPrior.from_lengths(source_lengths, target_lengths, max_target_length, source_lang=src,
                                    target_lang=tgt, splits=[shard for shard, _a, _b in shards])


def write_length_prior(destdir: str, src: str, tgt: str) -> str:
    """Estimate the table on ``destdir``'s train split and write it there atomically; returns its path.

    Call it once the train split is binarized (``DataBinError`` when there is none).
    """
    from fairseq_syntax_core.fileio import atomic_write

    prior = estimate_length_prior(destdir, src, tgt)
    path = length_prior_path(destdir, src, tgt)
    atomic_write(path, [table_text(prior)])
    return path


def load_length_prior(data_path: str, src: str, tgt: str) -> LengthPrior:
    """The data-bin's stored table; estimated from its train split when there is none (older data-bins)."""
    path = length_prior_path(data_path, src, tgt)
    shards = train_shards(data_path, src, tgt)
    if os.path.isfile(path):
        prior = read_length_prior(path, src, tgt)
        if shards:  # a table of another run's train split would pass every other check
            lines = sum(len(_sizes(prefix)) for _shard, prefix, _t in shards)
            remake = ("it belongs to another run; delete it (the task then estimates the table from the train split) "
                      "or re-run fairseq-syntax-preprocess")
            if lines != prior.lines:
                raise DataBinError(path, None, f"counts {prior.lines} train lines, the data-bin's train split holds "
                                   f"{lines}: {remake}")
            # the same number of lines is not the same table (the same corpus with other BPE codes has other
            # lengths): the counts are cheap to redo from the sizes, so compare them all
            here = estimate_length_prior(data_path, src, tgt)
            if here.counts != prior.counts or here.max_target_length != prior.max_target_length:
                differ = sorted(set(here.counts.items()) ^ set(prior.counts.items()))
                what = (f"counts (source {differ[0][0][0]}, target {differ[0][0][1]}) pieces differently from the "
                        f"data-bin's train split" if differ else
                        f"has target lengths 1..{prior.max_target_length}, the data-bin's train split "
                        f"1..{here.max_target_length}")
                raise DataBinError(path, None, f"{what}: {remake}")
        logger.info(f"length prior: {path} ({prior.pairs} train pairs, target lengths 1..{prior.max_target_length})")
        return prior
    prior = estimate_length_prior(data_path, src, tgt)
    logger.info(f"length prior: {os.path.basename(path)} is not in {data_path} (a data-bin made before it was "
                f"stored): estimated from the train split's sizes ({', '.join(prior.splits)}: {prior.pairs} pairs, "
                f"target lengths 1..{prior.max_target_length})")
    return prior
