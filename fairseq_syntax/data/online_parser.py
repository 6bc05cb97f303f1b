"""Parsing raw source text at inference, exactly as ``fairseq-syntax-preprocess`` did.

``fairseq-interactive`` and the hub interface hand the task batches of source ids with no
side inputs. The parse must come from the text the user gave, not from the ids: a piece
missing from the dictionary is ``<unk>`` there and has lost its ``@@``, so words rebuilt from
ids can differ from the words preprocessing parsed (one unknown word becomes several
``<unk>`` words, one a second root), and the same checkpoint would translate the same
sentence differently in ``fairseq-generate`` and ``fairseq-interactive``.

So the task keeps, for each source it will decode, the tokenized and BPE-segmented text beside
its ids, by its sample id (:class:`SourceTexts`): the position of the line in
``fairseq-interactive``'s buffer (``get_interactive_tokens_and_lengths``), or of the tensor in
the list given to the hub's ``generate`` (:class:`~fairseq_syntax.hub.SyntaxHubInterface`), which
is the id the inference dataset gives that row. The hub's batches carry these ids
(``sample["id"]``); ``fairseq-interactive`` keeps them in its ``Batch.ids`` and calls
``inference_step`` with ids only, so a wrapper of its ``make_batches``
(:mod:`fairseq_syntax.compat`) hands each batch's ids to the task first. A row takes the text
of its own sample id, and only when its ids equal the ids stored with that text: rows with
equal ids but different texts (``The ЖЖЖ runs .`` and ``The Ж Ж Ж runs .``, both ``<unk>``
three times) cannot swap their parses (a batch without ids gets the text of its ids only
where all kept sources with those ids share one text). The words are the text's pieces
joined (subword-nmt's ``@@``), parsed with the spaCy pipeline recorded in the data-bin's
``syntax.json`` (or ``--syntax-parser``), projected onto exactly those pieces with the
recorded rule, and turned into features by the functions the dataset uses
(:mod:`fairseq_syntax.data.syntax_features`); the phrase structure is converted from the
parse (:func:`fairseq_syntax_core.phrase.from_dependency`) as preprocessing does by default. The
pipeline ``syntax.json`` names is loaded only as an installed package, never from a folder
(a data-bin from elsewhere could name one with code in it); ``--syntax-parser`` may name a folder.
A model trained on imported brackets thus sees converted trees on raw text: a warning names
the difference, and ``--strict-phrase-structure`` refuses instead (there is no constituency
parser to run here). A row with no text (a caller that bypasses both entry points, or whose
ids are not those kept for its sample id) falls back to words rebuilt from the ids, with a
warning.
"""

import logging
from typing import Any, Dict, Iterable, List, Optional, Sequence

import torch
from fairseq.data import Dictionary
from fairseq.tokenizer import tokenize_line
from torch import Tensor

from fairseq_syntax_core.oneline import one_line
from fairseq_syntax_core.databin import (
    METADATA_FILE, NODE, PHRASE, PHRASE_FROM_DEPENDENCY, PHRASE_STRUCTURE_KEY, STREAMS,
)

from .syntax_features import SUBWORD_LABEL, PHRASE_FEATURES, add_host_schedules, append_eos, batch_features, collate_nodes, collate_trees

logger = logging.getLogger(__name__)


class SourceTexts:
    """The encoded text of each source of one inference run, by its sample id, beside its ids."""

    def __init__(self) -> None:
        self._entries: List[Optional[tuple]] = []  # sample id -> (ids as bytes, text) or None

    @staticmethod
    def key(ids: Tensor) -> bytes:
        return ids.detach().to("cpu", torch.int64).numpy().tobytes()

    def clear(self) -> None:
        self._entries = []

    def record(self, tokens: Sequence[Tensor], texts: Sequence[Optional[str]]) -> None:
        """Replace what is kept: sample id ``i`` is ``tokens[i]``, whose text is ``texts[i]`` (None: none)."""
        self._entries = [None if text is None else (self.key(ids), text) for ids, text in zip(tokens, texts)]

    def texts_for(
        self, src_tokens: Tensor, pad: int, sample_ids: Optional[Sequence[int]]
    ) -> List[Optional[str]]:
        """The text of each row of a padded batch: that of its sample id, if its ids are the ids stored with it.

        A row whose ids differ from its id's (a caller that numbers rows otherwise) gets None,
        with a warning. Without sample ids, a row gets a text only when every kept source with
        its ids has that same text: equal ids of different texts are never guessed between.
        """
        rows = [self.key(row[row.ne(pad)]) for row in src_tokens.detach().cpu()]
        if sample_ids is None:
            by_key: Dict[bytes, set] = {}
            for entry in self._entries:
                if entry is not None:
                    by_key.setdefault(entry[0], set()).add(entry[1])
            return [next(iter(by_key[k])) if len(by_key.get(k, ())) == 1 else None for k in rows]
        texts: List[Optional[str]] = []
        mismatched = 0
        for key, index in zip(rows, sample_ids):
            entry = self._entries[index] if 0 <= index < len(self._entries) else None
            if entry is not None and entry[0] != key:
                mismatched += 1
                entry = None
            texts.append(None if entry is None else entry[1])
        if mismatched:
            logger.warning(
                f"{mismatched} source row(s) of this batch differ from the text kept for their sample id: "
                "parsing them from dictionary ids instead"
            )
        return texts


def recorded_pipeline_check(nlp: Any, recorded: Dict, given: bool) -> None:
    """The pipeline that parses raw text against the one ``syntax.json`` records (``pipeline``, its
    ``pipeline_version``): the one its ``parser.name`` loads must be that pipeline (else the record was edited);
    another version, or the caller's ``--syntax-parser`` naming another pipeline, parses otherwise than the
    training data was parsed (a warning)."""
    from fairseq_syntax_core.errors import UsageError

    meta = getattr(nlp, "meta", {}) or {}
    loaded = (f"{meta.get('lang', '')}_{meta.get('name', '')}", str(meta.get("version", "")))
    expected = (recorded.get("pipeline"), recorded.get("pipeline_version"))
    if not isinstance(expected[0], str) or not expected[0]:
        return  # an external parse: nothing recorded to compare
    shown = f"{one_line(loaded[0])[:60]} {one_line(loaded[1])[:20]}"
    if loaded[0] != expected[0]:
        if not given:
            raise UsageError(f"{METADATA_FILE}'s parser.name loads the spaCy pipeline {shown}, and the same record "
                             f"says the data-bin was parsed by {one_line(expected[0])[:60]}: an edited {METADATA_FILE}? "
                             "give --syntax-parser NAME_OR_FOLDER")
        logger.warning(f"--syntax-parser loads the spaCy pipeline {shown}; the data-bin was parsed by "
                       f"{one_line(expected[0])[:60]} ({METADATA_FILE}): the model sees other parses than it was "
                       "trained on")
    elif isinstance(expected[1], str) and expected[1] and loaded[1] != expected[1]:
        logger.warning(f"the spaCy pipeline {shown} parses raw text; the data-bin was parsed by its version "
                       f"{one_line(expected[1])[:20]} ({METADATA_FILE}): its parses may differ from the training data's")


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

        if parser:  # the command line may name a folder
            self.nlp = load_pipeline(parser, flag="--syntax-parser", lang=metadata.get("source_lang"))
        else:  # syntax.json only an installed package (fairseq_syntax_core.names.PIPELINE, checked on reading)
            name = metadata.get("parser", {}).get("name")
            if not name:
                raise UsageError(
                    f"{METADATA_FILE} records no installed spaCy pipeline (the data-bin was made from an external "
                    "parse, or with --parser FOLDER): give --syntax-parser NAME_OR_FOLDER to parse raw text"
                )
            self.nlp = load_pipeline(name, flag=f"{METADATA_FILE}'s parser.name", package_only=True,
                                     lang=metadata.get("source_lang"))
        recorded_pipeline_check(self.nlp, metadata.get("parser", {}), bool(parser))
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
        needs_phrase = bool(token_requested & set(PHRASE_FEATURES))  # constituency distances (Ma et al. 2019)
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
        add_host_schedules(features, src_tokens.eq(self.src_dict.pad()).cpu())  # as the collater does
        return {k: v.to(src_tokens.device) if isinstance(v, Tensor) else v for k, v in features.items()}

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
