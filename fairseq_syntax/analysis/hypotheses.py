"""Reading a system's translations: plain text, or ``fairseq-generate`` output.

A plain file holds one translation per line, in test-set order. ``fairseq-generate`` output is
recognised by its ``S-``/``H-``/``D-`` lines; its ``D-`` lines (``H-`` where there are none) are
taken in sentence-id order and BPE joints (``@@ ``) are removed. Where fairseq-generate already
detokenized them (``--tokenizer moses``: its ``D-`` lines differ from the ``H-`` lines) they are
taken as they are; otherwise the text is detokenized with Moses (``sacremoses``, the tokenizer of
our pipeline) unless asked not to. A file whose ids are
not exactly ``0..n-1`` (an interrupted run, two runs concatenated) is refused.
"""

import logging
import re
from typing import Dict, List, Optional

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_preprocess.fileio import read_lines

__all__ = ["read_translations", "is_generate_output", "from_generate_output", "remove_bpe"]

logger = logging.getLogger(__name__)
_GENERATE_LINE = re.compile(r"^([SHDTP])-(\d+)\t")
_BPE = re.compile(r"(@@ )|(@@ ?$)")


class TranslationFileError(InputError):
    """A translation file that cannot be read as what it claims to be (names file and line)."""


def remove_bpe(text: str) -> str:
    """subword-nmt's ``@@ `` joints removed (what ``--remove-bpe`` does)."""
    return _BPE.sub("", text)


def is_generate_output(lines: List[str]) -> bool:
    """True when the lines look like ``fairseq-generate`` output (``H-<id>\\t`` lines)."""
    return any(line.startswith("H-") and _GENERATE_LINE.match(line) for line in lines[:2000])


def from_generate_output(lines: List[str], path: str, lang: Optional[str], detokenize: bool = True) -> List[str]:
    """The translations of ``fairseq-generate`` output, in sentence-id order (see the module docstring)."""
    best: Dict[str, Dict[int, str]] = {"D": {}, "H": {}}
    finished: set = set()  # ids whose block of lines has ended
    current = None
    for number, line in enumerate(lines, 1):
        m = _GENERATE_LINE.match(line)
        if not m:
            continue
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
        if len(fields) < 2:
            raise TranslationFileError(path, number, f"a {kind}- line without its score and text")
        text = fields[2] if len(fields) >= 3 else ""
        if sid not in best[kind]:  # with --nbest, the first hypothesis of an id is the best
            best[kind][sid] = text
    chosen = best["D"] or best["H"]
    # D- lines that differ from their H- lines were detokenized by fairseq-generate's own
    # --tokenizer: take them as they are (detokenizing twice would change e.g. "&amp;")
    already = bool(best["D"]) and any(remove_bpe(best["H"].get(i, text)) != remove_bpe(text)
                                      for i, text in best["D"].items())
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
    texts = [remove_bpe(chosen[i]) for i in ids]
    if detokenize and not already:
        from sacremoses import MosesDetokenizer

        detok = MosesDetokenizer(lang=lang or "en")
        texts = [detok.detokenize(t.split()) for t in texts]
    return texts


def read_translations(path: str, lang: Optional[str] = None, detokenize: bool = True) -> List[str]:
    """One translation per test sentence from ``path`` (plain text or ``fairseq-generate`` output)."""
    lines = read_lines(path, "translation file")
    if is_generate_output(lines):
        return from_generate_output(lines, path, lang, detokenize)
    return lines
