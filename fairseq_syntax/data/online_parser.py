"""Parsing raw source text at inference, exactly as ``fairseq-syntax-preprocess`` did.

``fairseq-interactive`` and the hub interface hand the task batches of source ids with no
side inputs. The parse must come from the text the user gave, not from the ids: a piece
missing from the dictionary is ``<unk>`` there and has lost its ``@@``, so words rebuilt from
ids can differ from the words preprocessing parsed (one unknown word becomes several
``<unk>`` words, one a second root), and the same checkpoint would translate the same
sentence differently in ``fairseq-generate`` and ``fairseq-interactive``.

So the task keeps, for each line it encodes (``get_interactive_tokens_and_lengths`` for
``fairseq-interactive``, :class:`~fairseq_syntax.hub.SyntaxHubInterface` for the hub), the
tokenized and BPE-segmented text beside its ids (:class:`SourceTexts`). ``fairseq-interactive``
then batches the ids in length order and calls ``inference_step`` with ids only: each row
is matched back to its text by its ids, first in first out among equal rows (batches come in
the order of the dataset's stable length sort, so equal rows keep their input order). The
words are the text's pieces joined (subword-nmt's ``@@``), parsed with the spaCy pipeline
recorded in the data-bin's ``syntax.json`` (or ``--syntax-parser``), projected onto exactly
those pieces with the recorded rule, and turned into features by the functions the dataset
uses (:mod:`fairseq_syntax.data.syntax_features`); the phrase structure is converted from
the parse (:func:`fairseq_syntax_core.phrase.from_dependency`) as preprocessing does by
default. A model trained on imported brackets thus sees converted trees on raw text: a
warning names the difference, and ``--strict-phrase-structure`` refuses instead (there is no
constituency parser to run here). A row with no text (a caller that bypasses
both entry points) falls back to words rebuilt from the ids, with a warning.
"""

import logging
from collections import OrderedDict, deque
from typing import Dict, Iterable, List, Optional, Sequence

import torch
from fairseq.data import Dictionary
from fairseq.tokenizer import tokenize_line
from torch import Tensor

from fairseq_syntax_core.databin import NODE, PHRASE, PHRASE_FROM_DEPENDENCY, PHRASE_STRUCTURE_KEY, STREAMS

from .syntax_features import SUBWORD_LABEL, PHRASE_FEATURES, append_eos, batch_features, collate_nodes, collate_trees

logger = logging.getLogger(__name__)


class SourceTexts:
    """Encoded source text by its ids: what inference parses instead of dictionary symbols."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._texts: "OrderedDict[bytes, deque]" = OrderedDict()
        self._count = 0

    @staticmethod
    def key(ids: Tensor) -> bytes:
        return ids.detach().to("cpu", torch.int64).numpy().tobytes()

    def clear(self) -> None:
        self._texts.clear()
        self._count = 0

    def add(self, ids: Tensor, text: str) -> None:
        self._texts.setdefault(self.key(ids), deque()).append(text)
        self._count += 1
        while self._count > self.capacity:  # texts encoded but never decoded
            _, oldest = self._texts.popitem(last=False)
            self._count -= len(oldest)

    def take(self, src_tokens: Tensor, pad: int) -> List[Optional[str]]:
        """The text of each row of a padded batch (None where none was kept), removing it."""
        texts: List[Optional[str]] = []
        for row in src_tokens.detach().cpu():
            queue = self._texts.get(self.key(row[row.ne(pad)]))
            if queue:
                texts.append(queue.popleft())
                self._count -= 1
            else:
                texts.append(None)
        return texts


class OnlineParser:
    def __init__(
        self,
        metadata: Dict,
        src_dict: Dictionary,
        label_dict: Dictionary,
        pos_dict: Dictionary,
        parser: Optional[str] = None,
        left_pad: bool = True,
        strict_phrase_structure: bool = False,
        trained_phrase_structure: Optional[str] = None,
    ) -> None:
        from fairseq_syntax_core.errors import UsageError
        from fairseq_syntax_preprocess.parse import load_pipeline

        recorded = metadata.get("parser", {})
        name = parser or recorded.get("name")
        if not name:
            raise UsageError(
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
        self._warned = False
        # what the model was trained on (its checkpoint), else what the data-bin given now holds
        self.phrase_source = trained_phrase_structure or (metadata.get(PHRASE_STRUCTURE_KEY) or {}).get(
            "source", PHRASE_FROM_DEPENDENCY)
        self.strict_phrase_structure = strict_phrase_structure
        self._warned_phrase = False

    def pieces_of(self, src_tokens: Tensor, texts: Sequence[Optional[str]]) -> List[List[str]]:
        """Each row's pieces: from its text where kept, else rebuilt from its ids (warned)."""
        special = {self.src_dict.pad(), self.src_dict.eos(), self.src_dict.bos()}
        pieces = []
        for row, text in zip(src_tokens.cpu(), texts):
            if text is not None:
                pieces.append(tokenize_line(text))
                continue
            if not self._warned:
                logger.warning(
                    "parsing source rows rebuilt from dictionary ids (no raw text was kept for them): "
                    "a piece missing from the dictionary is <unk> there, and the parse can differ from "
                    "preprocessing's. fairseq-interactive and SyntaxTransformerModel.from_pretrained keep the text"
                )
                self._warned = True
            pieces.append([self.src_dict[i] for i in row.tolist() if i not in special])
        return pieces

    def piece_trees(self, pieces: Sequence[List[str]]):
        """Piece-level trees (``WordTree`` over BPE pieces) for lines of pieces."""
        from fairseq_syntax_preprocess.bpe import join_pieces
        from fairseq_syntax_preprocess.parse import parse_lines
        from fairseq_syntax_preprocess.projection import project

        words = [join_pieces(p, self.separator) if self.separator else list(p) for p in pieces]
        trees = parse_lines(self.nlp, words, self.pos_column, workers=1, path="<input>")
        return [project(tree, p, self.rule) for tree, p in zip(trees, pieces)]

    def features_for(
        self, src_tokens: Tensor, requested: Iterable[str], texts: Optional[Sequence[Optional[str]]] = None
    ) -> Dict[str, Tensor]:
        """``src_syntax`` for a padded batch of source ids whose rows have the given texts."""
        texts = texts if texts is not None else [None] * src_tokens.size(0)
        node_names = sorted(n for n in requested if n in STREAMS and STREAMS[n].granularity == NODE)
        token_requested = set(requested) - set(node_names)
        needs_phrase = bool(token_requested & set(PHRASE_FEATURES))  # constituency distances (paper 002)
        if needs_phrase and PHRASE.name not in node_names:
            node_names.append(PHRASE.name)
        if node_names:
            self._check_phrase_source()
        samples = []
        nodes: Dict[str, List[Tensor]] = {name: [] for name in node_names}
        for tree in self.piece_trees(self.pieces_of(src_tokens, texts)):
            for name in node_names:
                stream = STREAMS[name]
                values = torch.as_tensor(getattr(tree, stream.field), dtype=torch.long)
                nodes[name].append(values.reshape(-1, stream.width) if stream.width > 1 else values.reshape(-1))
            labels = torch.tensor([self.label_dict.index(x) for x in tree.labels], dtype=torch.long)
            pos = torch.tensor([self.pos_dict.index(x) for x in tree.pos], dtype=torch.long)
            heads, labels, pos = append_eos(
                torch.as_tensor(tree.heads, dtype=torch.long), labels, pos,
                self.label_dict.eos(), self.pos_dict.eos(),
            )
            samples.append((heads, labels, pos))
        features: Dict[str, Tensor] = {}
        if token_requested:
            heads, labels, pos, real = collate_trees(
                samples, self.label_dict.pad(), self.pos_dict.pad(), left_pad=self.left_pad, length=src_tokens.size(1)
            )
            phrase = collate_nodes(nodes[PHRASE.name], 0) if needs_phrase else ()
            subword = self.label_dict.indices.get(SUBWORD_LABEL, -1)
            features = batch_features(heads, labels, pos, real, token_requested, *phrase, subword_label=subword)
        for name, values in nodes.items():
            if name in requested:
                features[name], features[name + "_mask"] = collate_nodes(values, 0)
        return {k: v.to(src_tokens.device) for k, v in features.items()}

    def _check_phrase_source(self) -> None:
        """Raw text gets converted phrase structures: say so when the data-bin had imported ones."""
        if self.phrase_source == PHRASE_FROM_DEPENDENCY or self._warned_phrase:
            return
        from fairseq_syntax_core.errors import UsageError

        message = (f"the model was trained on phrase structures from {self.phrase_source!r} brackets (syntax.json), "
                   "but raw text has no constituency parser here: its phrase structures are converted from the "
                   f"dependency parse ({PHRASE_FROM_DEPENDENCY}), trees of another shape than in training")
        if self.strict_phrase_structure:
            raise UsageError(message + "; --strict-phrase-structure refuses: decode a data-bin made with "
                             "--constituency-parse instead (fairseq-generate)")
        logger.warning(message + " (--strict-phrase-structure refuses instead)")
        self._warned_phrase = True
