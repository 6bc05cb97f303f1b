"""Dependency parsing with any spaCy pipeline, over the MT tokens, never re-tokenizing.

Each line becomes ``Doc(vocab, words=tokens)``; the pipeline runs through ``nlp.pipe`` with
``n_process`` workers. Components that cannot change the tree or the tags (NER, lemmatizer,
text categorisers, ...) are disabled for speed. A component that re-tokenizes (ginza's
``compound_splitter``, for one) would break the token alignment: it is disabled by default,
and any mismatch between the Doc's tokens and the line's tokens is an error.
"""

import importlib.metadata
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

import numpy as np

from .errors import InputError
from .tokenize import parser_view
from .word_tree import WordTree

#: components never needed for heads, labels and POS
DEFAULT_DISABLED = (
    "ner",
    "entity_ruler",
    "entity_linker",
    "lemmatizer",
    "trainable_lemmatizer",
    "textcat",
    "textcat_multilabel",
    "spancat",
    "span_finder",
    "compound_splitter",
    "bunsetu_recognizer",
)


def load_pipeline(name: str, disable: Sequence[str] = DEFAULT_DISABLED):
    """Load an installed spaCy pipeline by package name or path, without unneeded components."""
    import spacy

    nlp = spacy.load(name)
    to_disable = [c for c in disable if c in nlp.pipe_names]
    for component in to_disable:
        nlp.disable_pipe(component)
    if "parser" not in nlp.pipe_names and not any("parser" in c for c in nlp.pipe_names):
        raise ValueError(f"spaCy pipeline {name!r} has no dependency parser (components: {nlp.pipe_names})")
    return nlp


def pipeline_metadata(nlp) -> Dict[str, str]:
    """What the data-bin records about the parser, so that decoding can load the same one."""
    import spacy

    meta = nlp.meta
    return {
        "parser": "spacy",
        "spacy_version": spacy.__version__,
        "pipeline": f"{meta.get('lang', '')}_{meta.get('name', '')}",
        "pipeline_version": str(meta.get("version", "")),
        "components": ",".join(nlp.pipe_names),
    }


def spacy_pipeline_package_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return None


def parse_lines(
    nlp,
    lines: Iterable[List[str]],
    pos_column: str = "upos",
    workers: int = 1,
    batch_size: int = 256,
    path: str = "<input>",
) -> Iterator[WordTree]:
    """Parse pre-tokenized lines; yields one WordTree per line, in order.

    ``pos_column`` ``upos`` takes ``Token.pos_`` (universal tags), ``xpos`` ``Token.tag_``.
    """
    from spacy.tokens import Doc

    lines = list(lines)
    docs = (Doc(nlp.vocab, words=[parser_view(w) for w in tokens]) for tokens in lines)
    for line_no, (tokens, doc) in enumerate(
        zip(lines, nlp.pipe(docs, batch_size=batch_size, n_process=workers)), start=1
    ):
        yield doc_to_tree(doc, tokens, pos_column, path, line_no)


def doc_to_tree(doc, tokens: List[str], pos_column: str, path: str, line_no: int) -> WordTree:
    """A parsed Doc as a WordTree over the original tokens (roots point to themselves in spaCy)."""
    if len(doc) != len(tokens):
        raise InputError(
            path,
            line_no,
            f"the parser returned {len(doc)} tokens for a line of {len(tokens)}: a component "
            "re-tokenized; disable it with --parser-disable",
        )
    index = np.arange(len(doc))
    head_index = np.fromiter((t.head.i for t in doc), dtype=np.int64, count=len(doc))
    heads = np.where(head_index == index, 0, head_index + 1)
    if pos_column == "upos":
        pos = [t.pos_ or "X" for t in doc]
    else:
        pos = [t.tag_ or "_" for t in doc]
    labels = [t.dep_ or "dep" for t in doc]
    return WordTree(words=list(tokens), heads=heads, labels=labels, pos=pos)
