"""Eriguchi et al. (2016)'s length prior p(len(y) | len(x)) (sec. 4.3): the table, its smoothing and its file.

Pure numpy and JSON, shared by the pipeline (which stores the table in the data-bin,
``fairseq-syntax-preprocess``) and the plugin (which estimates it for older data-bins and
decodes with it: :mod:`fairseq_syntax.data.length_prior`, :mod:`fairseq_syntax.sequence_generator`).
See :class:`LengthPrior` for the units, the smoothing and the back-off.
"""

import json
import logging
import os
from typing import Dict, Iterable, Optional, Sequence, Tuple

import numpy as np

from .databin import LENGTH_PRIOR_FILE
from .errors import DataBinError
from .jsonfile import read_json_file

logger = logging.getLogger(__name__)

FORMAT = "fairseq-syntax length prior"
VERSION = 1
#: the paper's cap on generated lengths ("We allow the decoder to generate up to 100 words")
PAPER_MAX_LENGTH = 100
TRAIN = "train"

UNIT = "BPE pieces without </s> (fairseq's binarized sizes minus one)"
SMOOTHING = "add-one over target lengths 1..max_target_length: p(t|s) = (c(s,t) + 1) / (N(s) + max_target_length)"
BACKOFF = ("an unseen source length takes the counts of the nearest seen source length "
           "(equally near shorter and longer ones: both summed)")


class LengthPrior:
    """Counts ``c(s, t)`` of (source length, target length) in pieces, and the smoothed log p(t | s).

    ``counts`` maps ``(s, t)`` to a positive count, ``1 <= t <= max_target_length``.
    """

    def __init__(self, counts: Dict[Tuple[int, int], int], max_target_length: int,
                 source_lang: Optional[str] = None, target_lang: Optional[str] = None,
                 splits: Sequence[str] = (), lines: Optional[int] = None, skipped_empty_targets: int = 0) -> None:
        if not counts:
            raise ValueError("no training pair to estimate the length prior from")
        if max_target_length < 1:
            raise ValueError(f"max_target_length must be >= 1, got {max_target_length}")
        for (s, t), c in counts.items():
            if s < 0 or not 1 <= t <= max_target_length or c < 1:
                raise ValueError(f"count {c} of (source {s}, target {t}) outside the table "
                                 f"(target lengths 1..{max_target_length}, counts >= 1)")
        self.counts = dict(counts)
        self.max_target_length = int(max_target_length)
        self.source_lang, self.target_lang = source_lang, target_lang
        self.splits = list(splits)
        self.pairs = int(sum(self.counts.values()))
        self.lines = self.pairs + skipped_empty_targets if lines is None else int(lines)
        self.skipped_empty_targets = int(skipped_empty_targets)
        self._table: Optional[np.ndarray] = None

    # ------------------------------------------------------------ estimate
    @classmethod
    def from_lengths(cls, source_lengths: Iterable[int], target_lengths: Iterable[int],
                     max_target_length: Optional[int] = None, **kwargs) -> "LengthPrior":
        """The table of these pairs (lengths in pieces without ``</s>``).

        ``max_target_length`` defaults to ``max(100, longest target)``; a longer target is an error.
        """
        src = np.asarray(list(source_lengths), dtype=np.int64)
        tgt = np.asarray(list(target_lengths), dtype=np.int64)
        if src.shape != tgt.shape:
            raise ValueError(f"{src.size} source lengths for {tgt.size} target lengths")
        if src.size and (src.min() < 0 or tgt.min() < 0):
            raise ValueError("negative length")
        longest = int(tgt.max()) if tgt.size else 0
        if max_target_length is None:
            max_target_length = max(PAPER_MAX_LENGTH, longest)
        elif longest > max_target_length:
            raise ValueError(f"a target of {longest} pieces is longer than max_target_length {max_target_length}")
        keep = tgt >= 1
        pairs, n = np.unique(np.stack([src[keep], tgt[keep]], axis=1), axis=0, return_counts=True)
        counts = {(int(s), int(t)): int(c) for (s, t), c in zip(pairs, n)}
        return cls(counts, max_target_length, lines=int(src.size), skipped_empty_targets=int((~keep).sum()),
                   **kwargs)

    # ------------------------------------------------------------- lookup
    @property
    def longest_source(self) -> int:
        return max(s for s, _ in self.counts)

    def log_prob_table(self) -> np.ndarray:
        """``table[s, t] = log p(t | s)`` for ``s = 0..longest_source``, ``t = 0..L + 1``.

        Columns ``0`` and ``L + 1`` hold the out-of-support value ``log(1 / (N(s) + L))``;
        unseen rows are backed off (module docstring). Every entry is finite.
        """
        if self._table is None:
            big_s, big_l = self.longest_source, self.max_target_length
            seen = np.zeros((big_s + 1, big_l + 1), dtype=np.float64)
            for (s, t), c in self.counts.items():
                seen[s, t] = c
            rows = np.flatnonzero(seen.sum(axis=1) > 0)
            counts = np.empty_like(seen)
            for s in range(big_s + 1):
                at = np.searchsorted(rows, s)
                if at < len(rows) and rows[at] == s:
                    counts[s] = seen[s]
                    continue
                below = rows[at - 1] if at > 0 else None
                above = rows[at]  # s < longest_source, which is seen: a longer seen length exists
                if below is None or above - s < s - below:
                    counts[s] = seen[above]
                elif s - below < above - s:
                    counts[s] = seen[below]
                else:
                    counts[s] = seen[below] + seen[above]
            total = counts[:, 1:].sum(axis=1, keepdims=True)
            table = np.empty((big_s + 1, big_l + 2), dtype=np.float64)
            table[:, 1:big_l + 1] = np.log(counts[:, 1:] + 1.0) - np.log(total + big_l)
            table[:, 0] = table[:, big_l + 1] = -np.log(total[:, 0] + big_l)
            self._table = table
        return self._table

    def log_prob(self, source_length: int, target_length: int) -> float:
        """``log p(target_length | source_length)`` (natural log), finite for any pair of integers."""
        table = self.log_prob_table()
        s = min(max(int(source_length), 0), table.shape[0] - 1)
        t = min(max(int(target_length), 0), table.shape[1] - 1)
        return float(table[s, t])

    # ----------------------------------------------------------------- file
    def to_json(self) -> Dict:
        return {
            "format": FORMAT, "version": VERSION,
            "source_lang": self.source_lang, "target_lang": self.target_lang,
            "splits": self.splits, "lines": self.lines, "pairs": self.pairs,
            "skipped_empty_targets": self.skipped_empty_targets,
            "max_target_length": self.max_target_length,
            "unit": UNIT, "smoothing": SMOOTHING, "backoff": BACKOFF,
            "counts": [[s, t, c] for (s, t), c in sorted(self.counts.items())],
        }

    @classmethod
    def from_json(cls, data: Dict) -> "LengthPrior":
        """The table of :meth:`to_json`; ``ValueError`` saying what is wrong."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} (no \"format\": \"{FORMAT}\")")
        version = data.get("version")
        if not isinstance(version, int) or version > VERSION:
            raise ValueError(f"version {version!r}: this fairseq-syntax reads version {VERSION}")
        length = data.get("max_target_length")
        rows = data.get("counts")
        if not _is_int(length) or not isinstance(rows, list):
            raise ValueError("max_target_length (an integer) and counts (a list) expected")
        counts: Dict[Tuple[int, int], int] = {}
        for row in rows:
            if not (isinstance(row, list) and len(row) == 3 and all(_is_int(v) for v in row)):
                raise ValueError(f"a count must be [source length, target length, count], got {row!r}")
            if not all(0 <= v <= MAX_COUNT for v in row):  # a float64 table holds them exactly
                raise ValueError(f"a count row holds a value outside 0..{MAX_COUNT} (lengths and counts of lines)")
            if (row[0], row[1]) in counts:
                raise ValueError(f"the pair ({row[0]}, {row[1]}) is counted twice")
            counts[(row[0], row[1])] = row[2]
        lines, skipped = data.get("lines"), data.get("skipped_empty_targets", 0)
        if not _is_int(lines) or not _is_int(skipped) or not 0 <= lines <= MAX_COUNT or not 0 <= skipped <= MAX_COUNT:
            raise ValueError(f"lines and skipped_empty_targets must be counts in 0..{MAX_COUNT}")
        longest_source = max((src for src, _t in counts), default=0)
        if longest_source > MAX_SOURCE_LENGTH:
            # the table has a row per source length up to the longest: a forged one would allocate without bound
            raise ValueError(f"source length {longest_source} is over {MAX_SOURCE_LENGTH} tokens, longer than any "
                             "line the pipeline counts")
        prior = cls(counts, length, data.get("source_lang"), data.get("target_lang"), data.get("splits") or [],
                    lines, skipped)
        longest = max(t for _s, t in counts)
        if length != max(PAPER_MAX_LENGTH, longest):
            # the pipeline always stores max(100, longest target); another value changes every smoothed
            # probability (and a huge one would allocate a table of that width)
            raise ValueError(f"max_target_length {length} is not max({PAPER_MAX_LENGTH}, longest counted target "
                             f"{longest}) = {max(PAPER_MAX_LENGTH, longest)}")
        if data.get("pairs") != prior.pairs or prior.lines != prior.pairs + prior.skipped_empty_targets:
            raise ValueError(f"pairs {data.get('pairs')!r}, lines {lines} and skipped_empty_targets {skipped} "
                             f"do not add up with the counts ({prior.pairs} pairs)")
        return prior


#: the longest source line (tokens) a length table may count: the table has one row per source length
MAX_SOURCE_LENGTH = 100_000
#: the largest count (a line count) a stored table may hold: exact in float64, far beyond any corpus
MAX_COUNT = 10 ** 15


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def length_prior_path(data_path: str, src: str, tgt: str) -> str:
    return os.path.join(data_path, LENGTH_PRIOR_FILE.format(src=src, tgt=tgt))


def read_length_prior(path: str, src: Optional[str] = None, tgt: Optional[str] = None) -> LengthPrior:
    """The table stored at ``path``, checked (``DataBinError`` naming the file)."""
    remake = "delete it (the task then estimates the table from the train split) or re-run fairseq-syntax-preprocess"
    data = read_json_file(path, DataBinError, remake)
    try:
        prior = LengthPrior.from_json(data)
    except ValueError as error:
        raise DataBinError(path, None, f"is not a valid length prior: {error}; {remake}") from None
    for name, want, have in (("source", src, prior.source_lang), ("target", tgt, prior.target_lang)):
        if want is not None and have != want:
            raise DataBinError(path, None, f"is the table of {name} language {have!r}, not {want!r}; {remake}")
    return prior


def table_text(prior: LengthPrior) -> str:
    """The stored form of the table: one line of JSON (written atomically by the caller)."""
    return json.dumps(prior.to_json(), indent=None, separators=(",", ":")) + "\n"
