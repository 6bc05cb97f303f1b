"""One split of a ``fairseq-syntax-preprocess`` run (train, valid, test, valid1, ...) as its stages fill it."""

from typing import List, Optional

from .word_tree import WordTree


class Split:
    """One split: its lines, tokens, word trees and pieces as the stages fill them."""

    def __init__(self, name: str, prefix: str, src: str, tgt: str) -> None:
        self.name, self.prefix = name, prefix
        self.src_path, self.tgt_path = f"{prefix}.{src}", f"{prefix}.{tgt}"
        self.src_tokens: List[List[str]] = []
        self.tgt_tokens: List[List[str]] = []
        self.trees: List[WordTree] = []
        self.src_pieces: List[List[str]] = []
        self.tgt_trees: List[WordTree] = []  # with --target-parser / --target-external-parse
        self.tgt_pieces: List[List[str]] = []
        self.skipped_lines: List[int] = []
        self.phrase_fallback_lines: List[int] = []  # 1-based lines of the input file
        self.unfiltered_src_tokens: Optional[List[List[str]]] = None  # with --max-len-action skip
        self.unfiltered_tgt_tokens: Optional[List[List[str]]] = None

    def line_of(self, index: int) -> int:
        """The 1-based line of the input file that kept sentence ``index`` comes from."""
        for skipped in self.skipped_lines:  # ascending
            if skipped <= index + 1:
                index += 1
        return index + 1
