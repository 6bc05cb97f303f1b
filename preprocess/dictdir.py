"""``--dictdir DIR``: the dictionaries and BPE codes of a ``--dict-only`` run (or any data-bin of ours), reused.

``fairseq-syntax-preprocess --dict-only`` learns everything that gives ids their meaning on the
train set (or a sample of it) and writes only that: ``dict.SRC.txt``, ``dict.TGT.txt``,
``bpe.codes``, ``dict.SRC.{deplabel,pos}.txt`` (and the target's with ``--target-parser``),
and a ``syntax.json`` marked :data:`DICT_ONLY_KEY`. :func:`apply_dictdir` turns ``--dictdir``
into the per-file flags (``--srcdict``, ``--tgtdict``, ``--bpe-codes`` or ``--no-bpe``,
``--labeldict``, ``--posdict``, ``--target-labeldict``, ``--target-posdict``), after checking
that the folder was made for the same languages, tokenizer (Moses or ``--pretokenized``), parser
and POS column.
"""

import hashlib
import logging
import os
from typing import Dict, Optional

from fairseq_syntax_core.databin import (
    LABEL, METADATA_FILE, PARSED_LANGS_KEY, POS, STREAMS, codes_file, dictionary_path,
)
from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core.names import FILE_NAME, name_problem
from fairseq_syntax_core.oneline import quoted

from .destdir import our_metadata

#: ``syntax.json`` key of a ``--dict-only`` output: where the dictionaries were learned
logger = logging.getLogger("fairseq_syntax.preprocess")

DICT_ONLY_KEY = "dict_only"
#: the flags ``--dictdir`` sets, which may not be given beside it
_FLAGS = ("srcdict", "tgtdict", "bpe_codes", "labeldict", "posdict", "target_labeldict", "target_posdict")


def _same_file_content(a: str, b: str) -> bool:
    try:
        with open(a, "rb") as first, open(b, "rb") as second:
            return first.read() == second.read()
    except OSError:
        return False


def _parser_name(meta: Optional[Dict]) -> Optional[str]:
    return (meta or {}).get("name")


def file_digests(folder: str, names) -> Dict[str, str]:
    """{name: SHA-256 of its bytes} of the files ``names`` in ``folder`` (what a ``--dict-only`` run records)."""
    digests = {}
    for name in sorted(names):
        with open(os.path.join(folder, name), "rb") as handle:
            digests[name] = hashlib.sha256(handle.read()).hexdigest()
    return digests


def _check_digests(folder: str, record: Optional[Dict], where: str) -> None:
    """Each file a ``--dict-only`` run wrote is still the one it wrote (dictionaries and codes belong together:
    codes of another run leave most pieces <unk>); folders made before the record say nothing."""
    recorded = (record or {}).get("sha256") if isinstance(record, dict) else None
    if not isinstance(recorded, dict):
        return
    for name, digest in recorded.items():
        if not isinstance(name, str) or name_problem(FILE_NAME, name) is not None:
            raise UsageError(f"--dictdir {folder}: {where} names {quoted(name, 40)}, not a file of the folder (edited?)")
        path = os.path.join(folder, name)
        now = file_digests(folder, [name]).get(name) if os.path.isfile(path) else None
        if now != digest:
            raise UsageError(f"--dictdir {folder}: {name} is not the file the --dict-only run wrote ({where} records "
                             f"its SHA-256): the dictionaries and codes of one run belong together; make the folder "
                             "again, or copy the whole folder")


def apply_dictdir(args) -> None:
    """Fill the dictionary flags of ``args`` from ``args.dictdir`` (nothing without it); UsageError on a mismatch."""
    folder = args.dictdir
    if not folder:
        return
    given = ["--" + flag.replace("_", "-") for flag in _FLAGS if getattr(args, flag)]
    if given or args.bpe_symbols:
        raise UsageError(f"--dictdir gives the dictionaries and BPE codes: drop {', '.join(given or ['--bpe-symbols'])}")
    if not os.path.isdir(folder):
        raise UsageError(f"--dictdir {folder}: not a directory; name the folder of a fairseq-syntax-preprocess "
                         "--dict-only run (or a data-bin it made)")
    meta = our_metadata(os.path.join(folder, METADATA_FILE))
    if meta is None:
        what = ("is not one fairseq-syntax-preprocess wrote (unreadable, truncated or another tool's JSON)"
                if os.path.exists(os.path.join(folder, METADATA_FILE)) else "is missing")
        raise UsageError(f"--dictdir {folder}: its {METADATA_FILE} {what}; make the folder with "
                         "fairseq-syntax-preprocess --dict-only (or name a data-bin it made)")
    src, tgt = args.source_lang, args.target_lang
    where = os.path.join(folder, METADATA_FILE)
    if (meta.get("source_lang"), meta.get("target_lang")) != (src, tgt):
        raise UsageError(f"--dictdir {folder} was made for {meta.get('source_lang')}-{meta.get('target_lang')}, "
                         f"not {src}-{tgt} ({where})")
    if meta.get("pos_column") != args.pos_column:
        raise UsageError(f"--dictdir {folder} holds --pos-column {quoted(meta.get('pos_column'))} tags, not "
                         f"{args.pos_column} ({where})")
    tokenizer = (meta.get("tokenizer") or {}).get("name")
    wanted_tokenizer = "none" if args.pretokenized else "moses"
    if tokenizer and tokenizer != wanted_tokenizer:
        # a word list learned on Moses tokens gives whitespace tokens other ids (and the reverse)
        raise UsageError(f"--dictdir {folder} was learned on "
                         f"{'whitespace tokens (--pretokenized)' if tokenizer == 'none' else 'Moses tokens'}, "
                         f"but this run {'keeps whitespace tokens (--pretokenized)' if args.pretokenized else 'tokenizes with Moses'}: "
                         f"{'add' if tokenizer == 'none' else 'drop'} --pretokenized ({where})")
    parsed = meta.get(PARSED_LANGS_KEY, {})
    for flag, wanted, external, record in (
            ("--parser", args.parser, args.external_parse, meta.get("parser")),
            ("--target-parser", args.target_parser, args.target_external_parse,
             (meta.get("target_parse") or {}).get("parser"))):
        recorded = _parser_name(record)
        if isinstance(record, dict) and record and (recorded is None) != (external is not None) \
                and (wanted or external):  # spaCy's labels against an external parse's: the same parser's or not
            made = f"{flag} {quoted(recorded)}" if recorded else "an external parse"
            now = "an external parse" if external else f"{flag} {wanted}"
            logger.warning(f"--dictdir {folder}: its label and POS dictionaries come from {made}, this run parses "
                           f"with {now}: unless both are one parser's labels and tags, most become <unk> (the "
                           "summary counts them)")
        if wanted and recorded and wanted != recorded:
            raise UsageError(f"--dictdir {folder}: its label and POS dictionaries come from {flag} {recorded}, "
                             f"not {wanted} ({where})")
    args.srcdict = os.path.join(folder, f"dict.{src}.txt")
    tgtdict = os.path.join(folder, f"dict.{tgt}.txt")
    if args.joined_dictionary:
        # one dictionary for both sides: the folder's two must be that one, or target words become <unk>
        if not _same_file_content(args.srcdict, tgtdict):
            raise UsageError(f"--dictdir {folder} has separate {src} and {tgt} dictionaries (made without "
                             f"--joined-dictionary): drop --joined-dictionary, or make the folder with it")
    else:
        args.tgtdict = tgtdict
    if meta.get("bpe", {}).get("name", "none") == "none":
        args.no_bpe = True
    else:
        args.bpe_codes = os.path.join(folder, codes_file(meta, where))  # by the name syntax.json records
    args.labeldict = dictionary_path(folder, src, STREAMS[LABEL.name])
    args.posdict = dictionary_path(folder, src, STREAMS[POS.name])
    if args.target_parser or args.target_external_parse:
        if tgt not in parsed:
            raise UsageError(f"--dictdir {folder} has no target label/POS dictionaries: make it with "
                             "--dict-only --target-parser too")
        args.target_labeldict = dictionary_path(folder, tgt, STREAMS[LABEL.name])
        args.target_posdict = dictionary_path(folder, tgt, STREAMS[POS.name])
    _check_digests(folder, meta.get(DICT_ONLY_KEY), where)  # last: the checks above say more of a mismatch
