"""BPE with subword-nmt: learn joint codes, apply them, and map pieces back to words.

The separator is subword-nmt's (and fairseq's ``--bpe subword_nmt``) default ``@@``: a piece
that ends with it continues into the next piece of the same word.
"""

import io
from multiprocessing import Pool
from typing import Iterable, List, Optional, Sequence

import numpy as np

SEPARATOR = "@@"


def learn_codes(token_lines: Iterable[List[str]], num_symbols: int, out_path: str, min_frequency: int = 2) -> int:
    """Learn ``num_symbols`` merge operations on the given tokenized lines (both sides for joint codes); returns
    how many it learned (0: too little text, where subword-nmt itself fails on an empty pair count)."""
    from subword_nmt.learn_bpe import learn_bpe

    text = io.StringIO("".join(" ".join(tokens) + "\n" for tokens in token_lines))
    with open(out_path, "w", encoding="utf-8") as out:
        try:
            learn_bpe(text, out, num_symbols, min_frequency=min_frequency)
        except ValueError:  # max() of no pair statistics: no merge to learn
            return 0
    with open(out_path, encoding="utf-8") as handle:
        return sum(1 for line in handle if not line.startswith("#version:"))


_worker_bpe = None


def _init_worker(codes_path: str) -> None:
    global _worker_bpe
    from subword_nmt.apply_bpe import BPE

    with open(codes_path, encoding="utf-8") as codes:
        _worker_bpe = BPE(codes, separator=SEPARATOR)


def _segment_chunk(lines: List[List[str]]) -> List[List[str]]:
    return [_worker_bpe.segment_tokens(tokens) for tokens in lines]


def apply_codes(token_lines: Sequence[List[str]], codes_path: str, workers: int = 1) -> List[List[str]]:
    """Segment every token of every line into BPE pieces."""
    if workers <= 1 or len(token_lines) < 2000:
        _init_worker(codes_path)
        return _segment_chunk(list(token_lines))
    size = (len(token_lines) + workers * 4 - 1) // (workers * 4)
    chunks = [list(token_lines[i : i + size]) for i in range(0, len(token_lines), size)]
    with Pool(workers, initializer=_init_worker, initargs=(codes_path,)) as pool:
        return [pieces for part in pool.map(_segment_chunk, chunks) for pieces in part]


def word_index_of_pieces(pieces: Sequence[str], separator: Optional[str] = SEPARATOR) -> np.ndarray:
    """0-based index of the word each piece belongs to (a piece after one ending in ``@@`` continues it)."""
    continues = np.fromiter((p.endswith(separator) for p in pieces), dtype=bool, count=len(pieces))
    starts_word = np.ones(len(pieces), dtype=bool)
    starts_word[1:] = ~continues[:-1]
    return np.cumsum(starts_word) - 1


def join_pieces(pieces: Sequence[str], separator: str = SEPARATOR) -> List[str]:
    """The words that a sequence of pieces spells (inverse of segmentation)."""
    return " ".join(pieces).replace(separator + " ", "").split()
