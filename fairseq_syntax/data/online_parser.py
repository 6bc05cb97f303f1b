"""Parsing raw source text at inference, exactly as ``fairseq-syntax-preprocess`` did.

``fairseq-interactive`` and the hub interface send batches of BPE ids with no side inputs.
The words are recovered from the pieces (subword-nmt's ``@@`` joins), parsed with the spaCy
pipeline recorded in the data-bin's ``syntax.json`` (or ``--syntax-parser``), projected onto
the same pieces with the recorded rule, and turned into features by the same functions the
dataset uses (:mod:`fairseq_syntax.data.syntax_features`).
"""

from typing import Dict, Iterable, Optional

import torch
from fairseq.data import Dictionary
from torch import Tensor

from .syntax_features import append_eos, collate_features, pad_values_for, sentence_features


class OnlineParser:
    def __init__(
        self,
        metadata: Dict,
        src_dict: Dictionary,
        label_dict: Dictionary,
        pos_dict: Dictionary,
        parser: Optional[str] = None,
        left_pad: bool = True,
    ) -> None:
        from fairseq_syntax_preprocess.parse import load_pipeline

        recorded = metadata.get("parser", {})
        name = parser or recorded.get("name")
        if not name:
            raise ValueError(
                "this data-bin was made from an external parse (syntax.json records no spaCy "
                "pipeline): give --syntax-parser NAME to parse raw text"
            )
        self.nlp = load_pipeline(name)
        self.pos_column = metadata.get("pos_column", "upos")
        self.rule = metadata.get("projection", {}).get("rule", "first")
        bpe = metadata.get("bpe", {})
        self.separator = None if bpe.get("name") == "none" else bpe.get("separator", "@@")
        self.src_dict, self.label_dict, self.pos_dict = src_dict, label_dict, pos_dict
        self.left_pad = left_pad

    def piece_trees(self, src_tokens: Tensor):
        """Piece-level trees (``WordTree`` over BPE pieces) for a padded batch of source ids."""
        from fairseq_syntax_preprocess.bpe import join_pieces
        from fairseq_syntax_preprocess.parse import parse_lines
        from fairseq_syntax_preprocess.projection import project

        special = {self.src_dict.pad(), self.src_dict.eos(), self.src_dict.bos()}
        pieces = [
            [self.src_dict[i] for i in row.tolist() if i not in special] for row in src_tokens.cpu()
        ]
        words = [join_pieces(p, self.separator) if self.separator else list(p) for p in pieces]
        trees = parse_lines(self.nlp, words, self.pos_column, workers=1, path="<input>")
        return [project(tree, p, self.rule) for tree, p in zip(trees, pieces)]

    def features_for(self, src_tokens: Tensor, requested: Iterable[str]) -> Dict[str, Tensor]:
        samples = []
        for tree in self.piece_trees(src_tokens):
            labels = torch.tensor([self.label_dict.index(x) for x in tree.labels], dtype=torch.long)
            pos = torch.tensor([self.pos_dict.index(x) for x in tree.pos], dtype=torch.long)
            heads, labels, pos = append_eos(
                torch.as_tensor(tree.heads, dtype=torch.long), labels, pos,
                self.label_dict.eos(), self.pos_dict.eos(),
            )
            samples.append(sentence_features(heads, labels, pos, requested))
        features = collate_features(
            samples, pad_values_for(self.label_dict.pad(), self.pos_dict.pad()),
            left_pad=self.left_pad, length=src_tokens.size(1),
        )
        return {k: v.to(src_tokens.device) for k, v in features.items()}
