"""Reading a system's translations: plain text, or ``fairseq-generate`` output.

A plain file holds one translation per line, in test-set order. ``fairseq-generate`` output is
recognised by its ``S-``/``H-``/``D-`` lines; its ``D-`` lines (``H-`` where there are none) are
taken in sentence-id order and BPE joints (``@@ ``) are removed. A ``D-`` line that fairseq-generate
already detokenized (``--tokenizer moses``: it differs from its ``H-`` line) is taken as it is;
the others are detokenized with Moses (``sacremoses``, the tokenizer of our pipeline) unless asked
not to. The decision is made line by line, so one damaged line cannot switch it for the whole
file. A file whose ids are not exactly ``0..n-1`` (an interrupted run, two runs concatenated) is
refused, and so is a log whose own ``T-`` lines (the targets fairseq-generate read) do not match
the references on most sentences: the log of another test set.
"""

import html
import logging
import os
import re
import unicodedata
from typing import Dict, List, Optional, Sequence

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.fileio import read_lines
from fairseq_syntax_core.oneline import one_line, quoted

__all__ = ["read_translations", "is_generate_output", "from_generate_output", "remove_bpe"]

logger = logging.getLogger(__name__)
_GENERATE_LINE = re.compile(r"^([SHDTP])-(\d+)\t")
_BPE = re.compile(r"(@@ )|(@@ ?$)")
#: a log whose T- lines differ from the references on more than this share is another test set's
MAX_TARGET_MISMATCH = 0.5
#: above this share of differing T- lines (but not above the maximum) a warning is printed
WARN_TARGET_MISMATCH = 0.1

#: the longest line scored (sacreBLEU's statistics take memory ~150x a line's length)
MAX_LINE_CHARS = 100_000


class TranslationFileError(InputError):
    """A translation file that cannot be read as what it claims to be (names file and line)."""


def remove_bpe(text: str) -> str:
    """subword-nmt's ``@@ `` joints removed (what ``--remove-bpe`` does)."""
    return _BPE.sub("", text)


def is_generate_output(lines: List[str]) -> bool:
    """True when the lines look like ``fairseq-generate`` output (``H-<id>\\t`` lines)."""
    return any(line.startswith("H-") and _GENERATE_LINE.match(line) for line in lines[:2000])


_UNK = re.compile(r"<<unk>>|<unk>")


def _comparable(text: str, target: bool = False) -> str:
    """A reference, or a ``T-`` line (``target``: BPE joints and Moses' escapes undone), NFKC-normalized
    with every kind of space removed."""
    if target:
        text = re.sub(r" ?@([-/,.:])@ ?", r"\1", remove_bpe(text))  # Moses' aggressive dash splits
        text = html.unescape(text)
    return re.sub(r"\s+|\u2581", "", unicodedata.normalize("NFKC", text))


def _same_sentence(target: str, reference: str) -> bool:
    """A ``T-`` line is its reference, an ``<unk>`` of a word-level vocabulary standing for any text."""
    pieces, ref = [_comparable(p, target=True) for p in _UNK.split(target)], _comparable(reference)
    if len(pieces) == 1:
        return pieces[0] == ref
    # a glob with "*" only: the first piece a prefix, the last a suffix, the others found leftmost
    # in order (linear; a regular expression of many ".*?" can backtrack for ever)
    first, *middle, last = pieces
    if len(ref) < len(first) + len(last) or not ref.startswith(first) or not ref.endswith(last):
        return False
    at, end = len(first), len(ref) - len(last)
    for piece in middle:
        found = ref.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def check_targets(targets: Dict[int, str], references: Sequence[str], path: str) -> None:
    """The log's ``T-`` lines against the references: refused when most differ (another test set)."""
    if not targets or len(targets) != len(references):
        return
    differ = [i for i, ref in enumerate(references) if not _same_sentence(targets.get(i, ""), ref)]
    share = len(differ) / len(references)
    if share > MAX_TARGET_MISMATCH:
        i = differ[0]
        raise TranslationFileError(
            path, None, f"its T- lines (the targets fairseq-generate read) differ from the reference on {len(differ)} "
            f"of {len(references)} sentences (e.g. sentence {i}: {targets.get(i, '')[:60]!r} against "
            f"{references[i][:60]!r}): the translations of another test set, or another order",
        )
    if share > WARN_TARGET_MISMATCH:
        logger.warning(f"{path}: its T- lines differ from the reference on {len(differ)} of {len(references)} "
                       f"sentences (e.g. sentence {differ[0]}); is it the same test set?")


def check_sources(logged: Dict[int, str], sources: Sequence[str], path: str, origin: str) -> None:
    """The log's ``S-`` lines (the sources fairseq-generate translated) against the data-bin's split given for
    buckets (``origin``): refused when one differs (another test set of as many sentences). Both are compared as
    :func:`_comparable` text: fairseq-generate prints its sources detokenized by ``--tokenizer``."""
    if not logged or len(logged) != len(sources):
        return
    differ = [i for i, src in enumerate(sources)
              if _comparable(logged.get(i, ""), target=True) != _comparable(src, target=True)]
    if differ:
        i = differ[0]
        raise TranslationFileError(
            path, None, f"its S- lines (the sources fairseq-generate translated) differ from {one_line(origin)} on "
            f"{len(differ)} of {len(sources)} sentences (e.g. sentence {i}: {logged.get(i, '')[:60]!r} against "
            f"{sources[i][:60]!r}): the translations of another split or data-bin (--data-bin, --split)",
        )


def from_generate_output(lines: List[str], path: str, lang: Optional[str], detokenize: bool = True,
                         references: Optional[Sequence[str]] = None, sources: Optional[Sequence[str]] = None,
                         origin: str = "the data-bin") -> List[str]:
    """The translations of ``fairseq-generate`` output, in sentence-id order (see the module docstring)."""
    best: Dict[str, Dict[int, str]] = {"D": {}, "H": {}, "T": {}, "S": {}}
    finished: set = set()  # ids whose block of lines has ended
    current = None
    for number, line in enumerate(lines, 1):
        m = _GENERATE_LINE.match(line)
        if not m:
            continue
        if len(m.group(2)) > 18:  # int() refuses over 4,300 digits; no test set has 10**18 sentences
            raise TranslationFileError(path, number, f"sentence id of {len(m.group(2))} digits: not a "
                                       "fairseq-generate sentence id")
        sid = int(m.group(2))
        if sid != current:
            # fairseq-generate prints all lines of a sentence together: an id seen again later
            # means two runs in one file
            if sid in finished:
                raise TranslationFileError(path, number, f"sentence id {sid} appears a second time, after other "
                                           "sentences: two fairseq-generate runs in one file?")
            if current is not None:
                finished.add(current)
            current = sid
        if m.group(1) not in best:
            continue
        kind = m.group(1)
        fields = line.rstrip("\n").split("\t")
        if kind in ("T", "S"):  # T-<id>, the target, S-<id>, the source: no score
            best[kind].setdefault(sid, fields[1])
            continue
        if len(fields) < 2:
            raise TranslationFileError(path, number, f"a {kind}- line without its score and text")
        text = fields[2] if len(fields) >= 3 else ""
        if sid not in best[kind]:  # with --nbest, the first hypothesis of an id is the best
            best[kind][sid] = text
    chosen = best["D"] or best["H"]
    ids = sorted(chosen)
    if ids != list(range(len(ids))):
        present = set(ids)
        missing = [i for i in range(len(ids)) if i not in present][:5]
        raise TranslationFileError(
            path, None, f"fairseq-generate output with sentence ids that are not 0..{len(ids) - 1} "
            f"(missing e.g. {missing}): an interrupted or concatenated run",
        )
    if not any(line.startswith("Generate ") for line in lines[-3:]):
        logger.warning(f"{path}: no 'Generate ...' summary at the end: fairseq-generate may have been "
                       "interrupted (its last line may be cut)")
    if references is not None:
        check_targets(best["T"], references, path)
    if sources is not None:
        check_sources(best["S"], sources, path, origin)
    texts = [remove_bpe(chosen[i]) for i in ids]
    if detokenize:
        from sacremoses import MosesDetokenizer

        detok = MosesDetokenizer(lang=lang or "en")
        # a D- line that differs from its H- line was detokenized by fairseq-generate's own
        # --tokenizer: take it as it is (detokenizing twice would change e.g. "&amp;")
        done = {i for i, text in best["D"].items() if remove_bpe(best["H"].get(i, text)) != remove_bpe(text)}
        texts = [t if i in done else detok.detokenize(t.split()) for i, t in zip(ids, texts)]
    return texts


def read_translations(path: str, lang: Optional[str] = None, detokenize: bool = True,
                      references: Optional[Sequence[str]] = None, sources: Optional[Sequence[str]] = None,
                      origin: str = "the data-bin") -> List[str]:
    """One translation per test sentence from ``path`` (plain text or ``fairseq-generate`` output).

    With ``references``, a ``fairseq-generate`` log's ``T-`` lines are checked against them; with ``sources``
    (read from ``origin``), its ``S-`` lines.
    """
    lines = read_lines(path, "translation file", MAX_LINE_CHARS)
    if is_generate_output(lines):
        if lines and not _ends_a_line(path):  # fairseq-generate (and the plugin's last line) end every line
            raise TranslationFileError(path, len(lines), "its last line ends without a newline: the file was cut "
                                       "in the middle of a line (an interrupted fairseq-generate, or a truncated copy)")
        return from_generate_output(lines, path, lang, detokenize, references, sources, origin)
    from fairseq_syntax_core.decoding_record import MARK

    if any(line.startswith(MARK) for line in lines):  # its log lines would be scored as translations
        raise TranslationFileError(path, None, f"is a fairseq-generate log (its {MARK} line) without H- lines: "
                                   "decoded with --quiet, which prints no translations? decode without --quiet")
    return lines


def decoding_of(path: str) -> Optional[Dict]:
    """What a ``fairseq-generate`` log says it decoded: its ``fairseq-syntax-decoded`` line
    (:mod:`fairseq_syntax_core.decoding_record`, wherever it is in the file), or None (plain text, older logs)."""
    from fairseq_syntax_core.decoding_record import FROM_REFERENCE_KEY, LINES_KEY, MARK, LinesDigest, parse_line

    mark = MARK.encode("utf-8")
    marked = []
    digest = LinesDigest()
    with open(path, "rb") as handle:
        for raw in handle:  # the whole log: lines appended after the record must not hide it
            if raw.startswith(mark):
                marked.append(raw.decode("utf-8", errors="replace"))
                if len(marked) > 100:
                    break
            else:  # LinesDigest counts only sentence lines, however they begin (a byte-order mark)
                digest.add(raw.decode("utf-8", errors="surrogateescape"))
    if len(marked) > 1:
        raise TranslationFileError(path, None, f"holds {len(marked)} {MARK} lines: two fairseq-generate runs in one "
                                   "file, or an edited one?")
    if not marked:
        return None
    record = parse_line(marked[0])
    if record is None:
        raise TranslationFileError(path, None, f"its {MARK} line is not what fairseq-generate writes (edited?)")
    if LINES_KEY in record and record[LINES_KEY] != digest.hexdigest():
        raise TranslationFileError(path, None, f"its sentence lines (S-, T-, H-, D-, P-) are not those its {MARK} line "
                                   "was written with: edited, cut, or put together from several logs; decode again")
    copied = record.get(FROM_REFERENCE_KEY)
    if copied:
        raise TranslationFileError(path, None, f"was decoded with {quoted(copied, 60)} (its {MARK} line): its "
                                   "hypotheses copy the reference, they are not translations; decode without it")
    return record


def _ends_a_line(path: str) -> bool:
    """Whether the file's last byte is a line end."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"
