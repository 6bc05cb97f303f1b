"""Tokenization with sacremoses, configured exactly like fairseq's ``--tokenizer moses``.

fairseq's moses tokenizer (``fairseq/data/encoders/moses_tokenizer.py``) calls
``tokenize(x, aggressive_dash_splits=True, return_str=True, escape=True)`` by default, so
training data tokenized here and raw text tokenized by ``fairseq-interactive --tokenizer
moses`` give the same tokens. Escaped characters (``&amp;``, ``&apos;``, ...) stay escaped in
the MT tokens; the parser sees them unescaped (:func:`parser_view`), one word per token.
"""

import functools
from multiprocessing import Pool
from typing import List, Sequence

_MOSES_ESCAPES = {
    "&amp;": "&",
    "&#124;": "|",
    "&lt;": "<",
    "&gt;": ">",
    "&apos;": "'",
    "&quot;": '"',
    "&#91;": "[",
    "&#93;": "]",
}


def parser_view(token: str) -> str:
    """The form of an MT token that the parser sees: Moses' XML escapes undone."""
    if "&" not in token:
        return token
    for escaped, plain in _MOSES_ESCAPES.items():
        token = token.replace(escaped, plain)
    return token


@functools.lru_cache(maxsize=None)
def _moses(lang: str):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def tokenize_line(line: str, lang: str, pretokenized: bool = False, aggressive_dash_splits: bool = True,
                  escape: bool = True) -> List[str]:
    """Tokens of one line: whitespace split if ``pretokenized``, else Moses for ``lang`` (with the pipeline's
    settings unless told otherwise: a data-bin's ``syntax.json`` records them)."""
    if pretokenized:
        return line.split()
    return _moses(lang).tokenize(line.strip(), aggressive_dash_splits=aggressive_dash_splits, escape=escape)


def _tokenize_chunk(args) -> List[List[str]]:
    lines, lang, pretokenized = args
    return [tokenize_line(line, lang, pretokenized) for line in lines]


def tokenize_lines(
    lines: Sequence[str], lang: str, pretokenized: bool = False, workers: int = 1
) -> List[List[str]]:
    """Tokenize many lines, spread over ``workers`` processes (order preserved)."""
    if pretokenized or workers <= 1 or len(lines) < 2000:
        return _tokenize_chunk((lines, lang, pretokenized))
    size = (len(lines) + workers * 4 - 1) // (workers * 4)
    chunks = [(lines[i : i + size], lang, pretokenized) for i in range(0, len(lines), size)]
    with Pool(workers) as pool:
        return [tokens for part in pool.map(_tokenize_chunk, chunks) for tokens in part]
