"""A fairseq ``LanguagePairDataset`` plus the syntax streams of the same split (source, and target when parsed)."""

import logging
from typing import Dict, List, Optional, Set

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, Dictionary, LanguagePairDataset

from fairseq_syntax_core.databin import HEAD, LABEL, NODE, PHRASE, POS, STREAMS, TOKEN
from fairseq_syntax_core.errors import UserError
from fairseq_syntax_core.stream_checks import check_ids_below

from .row_gather import gather_rows
from .syntax_features import SUBWORD_LABEL, ALL_FEATURES, add_host_schedules, PHRASE_FEATURES, batch_features, collate_nodes, collate_stored_trees
from .target_syntax import NET_INPUT_KEY, SAMPLE_KEY, collate_target_syntax

logger = logging.getLogger(__name__)


class SideFileError(UserError, ValueError):
    """Side-files that do not match their source text."""


def check_streams(split: str, src_sizes: np.ndarray, streams: Dict[str, object], limits: Dict[str, int],
                  side: str = "source") -> None:
    """Vectorized load-time checks of every loaded stream, by its registry entry.

    ``src_sizes`` are the sizes of the text the streams describe (the source, or the target
    with ``side="target"``, which errors then name). Token streams must hold ``n`` items for a
    line of ``n`` pieces plus ``</s>``; node
    streams have their own lengths, ``width`` values a node; a binary-tree stream holds
    ``n - 1`` nodes or none (a line without a tree). Then each stream's validator, and for symbol streams the
    id range of their dictionary (``limits``). The error names the split and the (0-based)
    sentence index.
    """
    n = len(src_sizes)
    for name, data in streams.items():
        stream = STREAMS[name]
        if len(data) != n:
            raise SideFileError(f"split {split!r}: the {name} side-file has {len(data)} sentences, the {side} {n}")
        sizes = np.asarray(data.sizes, dtype=np.int64)
        if stream.granularity == TOKEN:
            bad = np.flatnonzero(sizes + 1 != src_sizes)
            if len(bad):
                i = int(bad[0])
                raise SideFileError(
                    f"split {split!r}, sentence {i}: the {name} side-file has {sizes[i]} entries "
                    f"for a {side} of {src_sizes[i] - 1} tokens (+ </s>); {len(bad)} sentences differ"
                )
        elif stream.binary_tree:
            internal = np.maximum(src_sizes - 2, 0) * stream.width  # n pieces: n - 1 merges
            bad = np.flatnonzero((sizes != internal) & (sizes != 0))
            if len(bad):
                i = int(bad[0])
                raise SideFileError(
                    f"split {split!r}, sentence {i}: the {name} side-file has {sizes[i] // stream.width} nodes "
                    f"for a {side} of {src_sizes[i] - 1} tokens (a binary tree over n tokens has n - 1, "
                    f"a line without a tree none); {len(bad)} sentences differ"
                )
        checks = [stream.validator] if stream.validator is not None else []
        if name in limits:
            checks.append(lambda flat, sz, limit=limits[name]: check_ids_below(flat, sz, limit))
        if checks:
            flat = _flat(data)
            for check in checks:
                problem = check(flat, sizes)
                if problem is not None:
                    raise SideFileError(f"split {split!r}, sentence {problem[0]}: the {name} side-file: {problem[1]}")


def _flat(dataset) -> np.ndarray:
    buffer = getattr(dataset, "_bin_buffer", None)
    index = getattr(dataset, "_index", None)
    if buffer is not None and index is not None:
        return np.frombuffer(buffer, dtype=index.dtype).astype(np.int64)
    return np.concatenate([dataset[i].numpy() for i in range(len(dataset))]).astype(np.int64)


class SyntaxLanguagePairDataset(BaseWrapperDataset):
    """Adds ``net_input["src_syntax"]``: the features in ``requested``; and the target's, as asked.

    ``streams`` maps registry names to the split's indexed datasets, ``dictionaries`` the
    symbol streams to their dictionaries. Token features are derived from the ``head``,
    ``deplabel`` and ``pos`` streams (:mod:`.syntax_features`) and padded like the source;
    a requested node stream comes as its own ``(B, N)`` tensor and ``NAME_mask``.
    ``requested`` is shared with the task, which fills it from the models it builds, so a
    model receives only the side inputs it consumes (nothing for fairseq's ``transformer``).

    Target side (a data-bin made with ``--target-parser``): ``target_streams`` and
    ``target_dictionaries`` are the target's, ``target_requested`` the features models asked
    for (``model.target_syntax_inputs()``, shared with the task like ``requested``). When it is
    not empty, batches carry ``net_input["tgt_syntax"]`` and ``target_syntax``
    (:mod:`.target_syntax`); when it is empty nothing of the target's streams is read.
    """

    def __init__(
        self,
        dataset: LanguagePairDataset,
        streams: Dict[str, object],
        dictionaries: Dict[str, Dictionary],
        requested: Set[str],
        target_streams: Optional[Dict[str, object]] = None,
        target_dictionaries: Optional[Dict[str, Dictionary]] = None,
        target_requested: Optional[Set[str]] = None,
    ) -> None:
        super().__init__(dataset)
        self.streams = streams
        self.dictionaries = dictionaries
        self.requested = requested
        self.node_streams = [n for n in streams if STREAMS[n].granularity == NODE]
        self.target_streams = target_streams or {}
        self.target_dictionaries = target_dictionaries or {}
        self.target_requested = target_requested if target_requested is not None else set()

    def __getattr__(self, name):
        # LanguagePairDataset attributes (src, tgt, left_pad_source, buckets, ...)
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def _pad(self, name: str) -> int:
        return self.dictionaries[name].pad() if name in self.dictionaries else 0

    def __getitem__(self, index: int) -> Dict:
        item = self.dataset[index]
        if self.target_requested and item.get("target") is not None:
            item["tgt_syntax"] = self._target_item(index)
            if self.target_requested & set(PHRASE_FEATURES):  # target constituency distances: the merges
                values = self.target_streams[PHRASE.name][index].long()
                item["tgt_phrase"] = values.view(-1, STREAMS[PHRASE.name].width)
        if not self.requested:
            return item
        token_keys = self.requested - set(self.node_streams)
        absent = token_keys - set(ALL_FEATURES)
        if absent:
            raise SideFileError(
                f"the model needs the {', '.join(sorted(absent))} side-file, which this data-bin does not hold "
                f"(it holds {', '.join(self.streams)}): remake the data-bin with this version of fairseq-syntax-preprocess"
            )
        # the row to read: the collater reads the batch's stored streams at once and derives the features
        # (so an item belongs to this dataset's side-files: batches are never mixed across datasets)
        item["src_syntax"] = index if token_keys else None
        item["src_nodes"] = {
            n: self._node_values(n, index) for n in self.node_streams if n in self.requested
        }
        if token_keys & set(PHRASE_FEATURES):  # the constituency distances are derived from the merges
            if PHRASE.name not in self.streams:
                raise SideFileError(
                    f"the model needs the {PHRASE.name} side-file for the constituency distances (--nsd-distance), "
                    f"which this data-bin does not hold (it holds {', '.join(self.streams)}): remake the data-bin "
                    "with this version of fairseq-syntax-preprocess"
                )
            item["src_phrase"] = self._node_values(PHRASE.name, index)
        return item

    def _target_item(self, index: int) -> int:
        """The row of the target's stored streams to read (the collater reads them per batch)."""
        if not self.target_streams:
            raise SideFileError(
                "the model asks for target-side syntax, which this data-bin does not hold: remake it with "
                "fairseq-syntax-preprocess --target-parser NAME"
            )
        return index

    def _stored_trees(self, streams: Dict[str, object], dictionaries: Dict[str, Dictionary], ids: np.ndarray,
                      left_pad: bool, length: int):
        """The stored ``(heads, labels, pos)`` of rows ``ids``, ``</s>`` entries appended, padded to ``(B, length)``.

        One vectorized read per stream (:func:`gather_rows`), not one per sentence.
        """
        heads, sizes = gather_rows(streams[HEAD.name], ids)
        labels, label_sizes = gather_rows(streams[LABEL.name], ids)
        pos, pos_sizes = gather_rows(streams[POS.name], ids)
        if not (np.array_equal(sizes, label_sizes) and np.array_equal(sizes, pos_sizes)):
            bad = int(ids[np.nonzero((sizes != label_sizes) | (sizes != pos_sizes))[0][0]])
            raise SideFileError(
                f"sentence {bad}: the {HEAD.name}, {LABEL.name} and {POS.name} side-files disagree on its length"
            )
        return collate_stored_trees(
            torch.from_numpy(heads), torch.from_numpy(labels), torch.from_numpy(pos), torch.from_numpy(sizes),
            dictionaries[LABEL.name].eos(), dictionaries[POS.name].eos(),
            dictionaries[LABEL.name].pad(), dictionaries[POS.name].pad(), left_pad=left_pad, length=length,
        )

    def _node_values(self, name: str, index: int) -> torch.Tensor:
        """A node stream's item: ``(nodes,)``, or ``(nodes, width)`` when a node holds several values."""
        values, width = self.streams[name][index].long(), STREAMS[name].width
        return values.view(-1, width) if width > 1 else values

    def collater(self, samples: List[Dict], pad_to_length: Optional[Dict[str, int]] = None) -> Dict:
        batch = self.dataset.collater(samples, pad_to_length=pad_to_length)
        if not samples or not batch or ("src_syntax" not in samples[0] and "tgt_syntax" not in samples[0]):
            return batch  # a model that asks for nothing: fairseq's batch, untouched
        by_id = {s["id"]: s for s in samples}
        ordered = [by_id[int(i)] for i in batch["id"]]
        if "tgt_syntax" in samples[0] and batch.get("target") is not None:
            trees = self._stored_trees(
                self.target_streams, self.target_dictionaries, np.array([s["tgt_syntax"] for s in ordered]),
                left_pad=self.dataset.left_pad_target, length=batch["target"].size(1),
            )
            batch[SAMPLE_KEY], batch["net_input"][NET_INPUT_KEY] = collate_target_syntax(
                trees, self.target_requested, left_pad=self.dataset.left_pad_target,
                phrases=[s["tgt_phrase"] for s in ordered] if "tgt_phrase" in ordered[0] else None,
                subword_label=self.target_dictionaries[LABEL.name].indices.get(SUBWORD_LABEL, -1),
            )
        if "src_syntax" not in samples[0]:
            return batch
        syntax: Dict[str, torch.Tensor] = {}
        token_keys = self.requested - set(self.node_streams)
        if ordered[0]["src_syntax"] is not None and token_keys:
            heads, labels, pos, real = self._stored_trees(
                self.streams, self.dictionaries, np.array([s["src_syntax"] for s in ordered]),
                left_pad=self.dataset.left_pad_source, length=batch["net_input"]["src_tokens"].size(1),
            )
            phrase = collate_nodes([s["src_phrase"] for s in ordered], 0) if "src_phrase" in ordered[0] else ()
            subword = self.dictionaries[LABEL.name].indices.get(SUBWORD_LABEL, -1)
            syntax = batch_features(heads, labels, pos, real, token_keys, *phrase, subword_label=subword)
        for name in ordered[0].get("src_nodes", {}):
            values, mask = collate_nodes([s["src_nodes"][name] for s in ordered], self._pad(name))
            syntax[name], syntax[name + "_mask"] = values, mask
        # host ints for the level-wise recurrences (Xie et al. (2021)'s path LSTM, Eriguchi et al. (2016)'s tree-LSTM)
        add_host_schedules(syntax, batch["net_input"]["src_tokens"].eq(self.dataset.src_dict.pad()))
        batch["net_input"]["src_syntax"] = syntax
        return batch

    def num_tokens_vec(self, indices):
        return self.dataset.num_tokens_vec(indices)
