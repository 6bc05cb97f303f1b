"""The ``syntax_translation`` task: fairseq's ``translation`` plus syntax side-files (source; target when parsed)."""

import argparse
import logging
import os
from typing import List, Optional, Set

from fairseq import utils
from fairseq.data import ConcatDataset, Dictionary, data_utils, indexed_dataset
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationTask

from fairseq_syntax.criterions.label_smoothed_cross_entropy_with_auxiliary import check_criterion
from fairseq_syntax.checkpoints import stored_criterion_problem, stored_settings, stored_types_problem
from fairseq_syntax.criterions.fed_back_validation import fed_back_logging, reduce_fed_back_metrics
from fairseq_syntax.data import provenance
from fairseq_syntax.data.data_bin_checks import (
    REMAKE, check_dictionary, nothing_left_message, oversized_message, check_epoch_paths, check_split, check_token_ids, read_metadata,
)
from fairseq_syntax.data.length_prior import load_length_prior
from fairseq_syntax.data.online_parser import SourceTexts
from fairseq_syntax.data.syntax_features import FEATURES, derivable_features
from fairseq_syntax.data.syntax_dataset import SideFileError, SyntaxLanguagePairDataset, check_streams
from fairseq_syntax.reference_scoring import check_reference_scoring
from fairseq_syntax.search_settings import check_probabilities, check_search
from fairseq_syntax.sequence_generator import generator_class_and_kwargs as length_prior_generator
from fairseq_syntax_core.databin import (
    LABEL,
    METADATA_FILE,
    PARSED_LANGS_KEY,
    POS,
    SOURCE,
    TARGET,
    dictionary_path,
    registry,
    stream_prefix,
)
from fairseq_syntax_core.checkpoint_loader import settings_size_problem
from fairseq_syntax_core import checkpoint_loader
from fairseq_syntax_core.errors import CheckpointError, DataBinError, UsageError
from fairseq_syntax_core.split_digests import check_split_files, combined_splits, records_digests
from fairseq_syntax_core.names import LANGUAGE, name_problem
from fairseq_syntax_core.oneline import one_line
from fairseq_syntax_core.shards import missing_shards

from .config import SyntaxTranslationConfig, _is_syntax_model, _missing, _set_arg, check_config  # noqa: F401
from .data_identity import DataIdentity
from .raw_text import RawTextInference

logger = logging.getLogger(__name__)





_DICTIONARY_NAMES = {LABEL.name: "label dictionary", POS.name: "POS dictionary"}


@register_task("syntax_translation", dataclass=SyntaxTranslationConfig)
class SyntaxTranslationTask(DataIdentity, RawTextInference, TranslationTask):
    """Translation whose batches carry the source dependency tree, as the model asks.

    The data directory is made by ``fairseq-syntax-preprocess``: fairseq's own binarized
    text plus ``SPLIT.SRC-TGT.SRC.{head,deplabel,pos}`` mmap datasets and their
    dictionaries. Models declare the features they consume (``model.syntax_inputs()``); the
    task puts exactly those in ``net_input["src_syntax"]``, so fairseq's own ``transformer``
    trains and decodes on the same data-bin with nothing extra in its input.
    """

    cfg: SyntaxTranslationConfig

    def __init__(self, cfg: SyntaxTranslationConfig, src_dict, tgt_dict, label_dict, pos_dict, metadata,
                 stream_dictionaries=None, target_stream_dictionaries=None):
        super().__init__(cfg, src_dict, tgt_dict)
        self.label_dict = label_dict
        self.pos_dict = pos_dict
        self.metadata = metadata
        #: the source streams this data-bin holds (registry names), and the symbol streams' dictionaries
        self.stream_names = list(metadata.get(PARSED_LANGS_KEY, {}).get(cfg.source_lang, []))
        self.stream_dictionaries = dict(stream_dictionaries or {LABEL.name: label_dict, POS.name: pos_dict})
        self.syntax_requested: Set[str] = set()
        #: the training-only outputs of the models built (``training_outputs()``), for the criterion's check
        self._training_outputs: Optional[Set[str]] = None
        self._model_names: List[str] = []
        #: the target streams this data-bin holds (``--target-parser``; empty: the target was not parsed),
        #: their dictionaries, and the target features the models asked for (``target_syntax_inputs()``)
        self.target_stream_names = list(metadata.get(PARSED_LANGS_KEY, {}).get(cfg.target_lang, [])) \
            if cfg.target_lang else []
        self.target_stream_dictionaries = dict(target_stream_dictionaries or {})
        self.target_requested: Set[str] = set()
        self._online_parser = None
        self.source_texts = SourceTexts()
        #: the provenance stored in the checkpoint the model was loaded from (None: trained here, or older),
        #: and that of every checkpoint loaded (an ensemble's)
        self.model_provenance = None
        self.loaded_provenances: List[Optional[dict]] = []
        #: the provenance in the task state of the checkpoint being loaded (read by load_state_dict), this
        #: data-bin's (computed once), and the warnings about unchecked checkpoints already given
        self._state_provenance = None
        self._data_provenance = None
        self._provenance_warned: Set[str] = set()
        self._shards_checked = False

    @classmethod
    def setup_task(cls, cfg: SyntaxTranslationConfig, **kwargs):
        check_config(cfg)
        data_path = utils.split_paths(cfg.data)[0]
        if not os.path.isdir(data_path):
            raise DataBinError(data_path, None, "is not a directory: expected a data-bin made by fairseq-syntax-preprocess")
        metadata = read_metadata(os.path.join(data_path, METADATA_FILE))
        # data-bin/shard0:data-bin/shard1:...: fairseq reads one per epoch with shard 0's dictionaries
        for warning in check_epoch_paths(utils.split_paths(cfg.data), metadata):
            logger.warning(warning)
        for flag, lang in (("--source-lang", cfg.source_lang), ("--target-lang", cfg.target_lang)):
            problem = None if lang is None else name_problem(LANGUAGE, lang)
            if problem is not None:  # the command line's, or a checkpoint's stored one (the hub): a file name part
                raise UsageError(f"{flag} (given, or stored in the checkpoint's settings): {problem}")
        if cfg.source_lang is None and cfg.target_lang is None and "source_lang" in metadata:
            cfg.source_lang, cfg.target_lang = metadata["source_lang"], metadata.get("target_lang")
        made = [metadata.get(k) for k in ("source_lang", "target_lang") if isinstance(metadata.get(k), str)]
        for flag, lang in (("--source-lang", cfg.source_lang), ("--target-lang", cfg.target_lang)):
            if lang is not None and made and lang not in made and \
                    not os.path.exists(os.path.join(data_path, f"dict.{lang}.txt")):
                where = f"stored in {one_line(checkpoint_loader.last_read)[:120]}'s settings" \
                    if checkpoint_loader.last_read else "stored in a checkpoint's settings"
                raise UsageError(f"{flag} {one_line(str(lang))[:20]} (given, or {where}): the data-bin "
                                 f"{one_line(data_path)[:120]} holds {' and '.join(made)} (its syntax.json)")
            if lang is not None:
                check_dictionary(os.path.join(data_path, f"dict.{lang}.txt"), "dictionary")
        task = TranslationTask.setup_task.__func__(TranslationTask, cfg, **kwargs)
        src = cfg.source_lang
        metadata_path = os.path.join(data_path, METADATA_FILE)
        if src not in metadata.get(PARSED_LANGS_KEY, {}):
            raise DataBinError(metadata_path, None, f"source language '{src}' was not parsed in this data-bin")
        dictionaries = cls._stream_dictionaries(data_path, src, metadata[PARSED_LANGS_KEY][src], SOURCE)
        label_dict, pos_dict = dictionaries[LABEL.name], dictionaries[POS.name]
        logger.info(f"[{src}] dependency labels: {len(label_dict)} types, POS: {len(pos_dict)} types")
        target_dictionaries = cls._target_dictionaries(data_path, metadata, cfg.target_lang)
        return cls(cfg, task.src_dict, task.tgt_dict, label_dict, pos_dict, metadata, dictionaries,
                   target_dictionaries)

    @staticmethod
    def _stream_dictionaries(data_path: str, lang: str, names, side):
        """The dictionaries of one side's listed streams, after checking that this version knows every
        stream of that side and that heads, labels and POS are among them."""
        metadata_path = os.path.join(data_path, METADATA_FILE)
        known = registry(side)
        what = "source" if side == SOURCE else "target"
        unknown = [n for n in names if n not in known]
        if unknown:
            raise DataBinError(metadata_path, None, f"lists {what} streams {unknown} that this version does not "
                               f"know (known: {sorted(known)}); {REMAKE}")
        missing = [n for n in (LABEL.name, POS.name, "head") if n not in names]
        if missing:
            raise DataBinError(metadata_path, None, f"the {what} streams lack {missing}; {REMAKE}")
        dictionaries = {}
        for name in names:
            stream = known[name]
            if stream.dictionary is None:
                continue
            path = dictionary_path(data_path, lang, stream)
            label = _DICTIONARY_NAMES.get(name, f"{name} dictionary")
            check_dictionary(path, label if side == SOURCE else "target " + label)
            dictionaries[name] = Dictionary.load(path)
        return dictionaries

    @staticmethod
    def _target_dictionaries(data_path: str, metadata, tgt: Optional[str]):
        """The target streams' dictionaries when the data-bin's target was parsed (``--target-parser``), else {}.

        The listed streams are checked as the source's: known to this version, and at least
        heads, labels and POS.
        """
        names = metadata.get(PARSED_LANGS_KEY, {}).get(tgt, []) if tgt else []
        if not names:
            return {}
        dictionaries = SyntaxTranslationTask._stream_dictionaries(data_path, tgt, names, TARGET)
        logger.info(f"[{tgt}] target dependency labels: {len(dictionaries[LABEL.name])} types, "
                    f"POS: {len(dictionaries[POS.name])} types")
        return dictionaries

    # ------------------------------------------------------------------ data
    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        check_config(self.cfg)
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        elif not self._shards_checked:  # training: on every shard of a sharded run? (once)
            self._shards_checked = True
            listed = [(path, self.metadata if k == 0 else read_metadata(os.path.join(path, METADATA_FILE)))
                      for k, path in enumerate(paths)]
            warning = missing_shards(listed)
            if warning:
                logger.warning(warning)
            recording = [path for path, meta in listed if records_digests(meta)]
            if recording and len(recording) < len(listed):  # shards of one release record alike
                stripped = next(path for path, meta in listed if not records_digests(meta))
                raise DataBinError(os.path.join(stripped, METADATA_FILE), None, "records no digests of its files, "
                                   f"but {recording[0]} among the same data paths does: its record was removed, or "
                                   "it is a data-bin of an earlier release; remake it with fairseq-syntax-preprocess")
        data_path = paths[(epoch - 1) % len(paths)]
        check_split(data_path, split, self.cfg.source_lang, self.cfg.target_lang)
        check_token_ids(data_path, split, self.cfg.source_lang, self.cfg.target_lang,
                        {self.cfg.source_lang: len(self.src_dict), self.cfg.target_lang: len(self.tgt_dict)})
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        pair = self.datasets[split]
        streams = {name: self._load_stream(data_path, split, name, combine) for name in self.stream_names}
        limits = {name: len(d) for name, d in self.stream_dictionaries.items()}
        try:
            check_streams(split, pair.src_sizes, streams, limits)
        except SideFileError as error:
            src, tgt = self.cfg.source_lang, self.cfg.target_lang
            raise DataBinError(
                stream_prefix(data_path, split, src, tgt, src, "{" + ",".join(self.stream_names) + "}"), None,
                f"{error}: the side-files do not match the source text (damaged, or from another run); {REMAKE}",
            ) from None
        target_streams = self._load_target_streams(data_path, split, pair, combine)
        # last: a damaged file is named by what is wrong with it above, a whole foreign one here
        meta = self.metadata if data_path == paths[0] else read_metadata(os.path.join(data_path, METADATA_FILE))
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        for name in combined_splits(data_path, split, src, tgt) if combine else [split]:
            check_split_files(data_path, meta, name, src, tgt)
        self.datasets[split] = SyntaxLanguagePairDataset(
            pair, streams, self.stream_dictionaries, self.syntax_requested,
            target_streams=target_streams, target_dictionaries=self.target_stream_dictionaries,
            target_requested=self.target_requested,
        )

    def _load_target_streams(self, data_path: str, split: str, pair, combine: bool):
        """The target's streams of a split, checked like the source's against the target text ({} if not parsed)."""
        if not self.target_stream_names or getattr(pair, "tgt", None) is None:
            return {}
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        streams = {name: self._load_stream(data_path, split, name, combine, lang=tgt)
                   for name in self.target_stream_names}
        limits = {name: len(d) for name, d in self.target_stream_dictionaries.items()}
        try:
            check_streams(split, pair.tgt_sizes, streams, limits, side="target")
        except SideFileError as error:
            raise DataBinError(
                stream_prefix(data_path, split, src, tgt, tgt, "{" + ",".join(self.target_stream_names) + "}"), None,
                f"{error}: the target side-files do not match the target text (damaged, or from another run); "
                f"{REMAKE}",
            ) from None
        return streams

    def _load_stream(self, data_path: str, split: str, stream: str, combine: bool, lang: Optional[str] = None):
        """One stream of language ``lang`` (default: the source) of a split, its shards concatenated."""
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        lang = lang or src
        shards = []
        for k in range(1000):
            split_k = split + (str(k) if k > 0 else "")
            found = None
            for a, b in ((src, tgt), (tgt, src)):
                prefix = stream_prefix(data_path, split_k, a, b, lang, stream)
                if indexed_dataset.dataset_exists(prefix, impl="mmap"):
                    found = prefix
                    break
            if found is None:
                if k == 0:
                    raise DataBinError(
                        stream_prefix(data_path, split, src, tgt, lang, stream) + ".bin", None,
                        "syntax side-file not found: the data-bin was not made by fairseq-syntax-preprocess, "
                        "or is incomplete",
                    )
                break
            shards.append(data_utils.load_indexed_dataset(found, None, "mmap"))
            if not combine:
                break
        if len(shards) > 1 and self.cfg.upsample_primary != 1:
            raise UsageError(f"--upsample-primary {self.cfg.upsample_primary} is not supported by --task "
                             f"syntax_translation when a split has several shards ({split}, {split}1, ...): "
                             "the side-files are not upsampled with the text")
        return shards[0] if len(shards) == 1 else ConcatDataset(shards)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        from fairseq.data import LanguagePairDataset

        self.check_constraints(src_tokens, constraints)
        # unshuffled: the sample ids are the sources' positions, which their kept texts go by
        return LanguagePairDataset(
            src_tokens, src_lengths, self.source_dictionary, tgt_dict=self.target_dictionary,
            constraints=constraints, left_pad_source=self.cfg.left_pad_source, shuffle=False,
        )

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        """fairseq's; sentences over the limits (not skipped) and a split left without a sentence are a UsageError
        naming the split and the limits (fairseq: a bare Exception, an ``IndexError``, a division by zero)."""
        try:
            kept = super().filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs)
        except Exception as error:  # noqa: BLE001 - fairseq's bare "Size of sample #N is invalid": one line
            if type(error) is not Exception or not str(error).startswith("Size of sample"):
                raise
            raise UsageError(oversized_message(self.datasets, dataset, indices, max_positions,
                                               getattr(self, "interactive_lines_before", None))) from None
        problem = nothing_left_message(self.datasets, dataset, len(indices), max_positions, self.cfg.train_subset) \
            if len(indices) and not len(kept) else None
        if problem is not None:
            raise UsageError(problem)
        return kept

    def get_batch_iterator(
        self, dataset, max_tokens=None, max_sentences=None, max_positions=None,
        ignore_invalid_inputs=False, required_batch_size_multiple=1, **kwargs,
    ):
        """fairseq's, except that only training rounds batches to a size multiple, and a limit of 0 is refused.

        fairseq main drops a last batch whose size is not a multiple of
        ``--required-batch-size-multiple`` (``data_utils.batch_by_size``): harmless for a
        shuffled train epoch, but it silently loses sentences of a valid or test set.
        """
        if not isinstance(required_batch_size_multiple, int) or required_batch_size_multiple < 1:
            raise UsageError(f"--required-batch-size-multiple {required_batch_size_multiple}: expected a positive "
                             "number of sentences (fairseq divides by it: the process would die on SIGFPE)")
        seed = kwargs.get("seed", 1)
        if isinstance(seed, int) and not 0 <= seed < 2 ** 32:
            raise UsageError(f"--seed {seed}: expected a number from 0 to 2**32 - 1 (NumPy's seeds)")
        for flag, value in (("--max-tokens", max_tokens), ("--batch-size", max_sentences)):
            if isinstance(value, int) and value < 1:  # fairseq reads 0 as "no limit"
                raise UsageError(f"{flag} {value}: expected a count >= 1 (left out: no limit)")
        if dataset is not self.datasets.get(self.cfg.train_subset) or self.loaded_provenances:
            required_batch_size_multiple = 1  # decoding or validating a checkpoint: every sentence, the train split's too
        return super().get_batch_iterator(
            dataset, max_tokens=max_tokens, max_sentences=max_sentences, max_positions=max_positions,
            ignore_invalid_inputs=ignore_invalid_inputs,
            required_batch_size_multiple=required_batch_size_multiple, **kwargs,
        )

    # ---------------------------------------------------------------- models
    def build_model(self, cfg, from_checkpoint=False):
        if from_checkpoint:
            # what the model was trained on (its args; fairseq's own models: the task state loaded just
            # before): its data-bin's files are compared now, its parser when it parses raw text (online_parser)
            stored, self._state_provenance = self._state_provenance, None
            self.model_provenance = provenance.kept(provenance.decode(getattr(cfg, provenance.ARG, None)), stored)
            self.loaded_provenances.append(self.model_provenance)
            self._check_data_bin(self.model_provenance, "the checkpoint")
        else:
            # fairseq-train loads a checkpoint's weights after this (resuming, --restore-file, --finetune-from-model)
            restored = provenance.restored_checkpoint(cfg)
            trained = provenance.of_checkpoint(restored) if restored else None
            if trained is not None:
                self._check_data_bin(trained, f"the checkpoint fairseq-train restores ({restored})")
                self._check_same_perturbation(trained, restored)
            if _is_syntax_model(cfg):
                _set_arg(cfg, provenance.ARG, provenance.encode(self.run_provenance()))
        settings = vars(cfg) if isinstance(cfg, argparse.Namespace) else {}
        problem = settings_size_problem(settings, "the model", ": no memory holds it (a typo?)", as_flags=True)
        if problem is not None:  # every model of the task (fairseq's own too), before it allocates
            raise UsageError(problem)
        check_probabilities(settings)
        with stored_settings(from_checkpoint):  # a refusal of stored settings names the checkpoint
            problem = stored_types_problem(settings) if from_checkpoint else None
            if problem is not None:
                raise UsageError(problem)
            model = super().build_model(cfg, from_checkpoint)
        # training needs the gold target syntax; decoding predicts it (a checkpoint decodes without it)
        self.request_inputs(model, require_target=not from_checkpoint)
        outputs = getattr(model, "training_outputs", None)
        self._training_outputs = (self._training_outputs or set()) | set(outputs() if callable(outputs) else ())
        self._model_names.append(str(getattr(cfg, "arch", None) or getattr(cfg, "_name", "the model")))
        return model

    def build_criterion(self, cfg, from_checkpoint: bool = False):
        """fairseq's; refuses auxiliary losses the models give no output for, and collates the inputs they read."""
        stored = from_checkpoint or bool(self.loaded_provenances)  # fairseq-validate: the checkpoint's criterion
        problem = stored_criterion_problem(cfg) if stored else None
        if problem is not None:
            raise CheckpointError(checkpoint_loader.last_read or "the checkpoint", None, problem)
        with stored_settings(stored, "criterion"):
            criterion = super().build_criterion(cfg, from_checkpoint) if from_checkpoint else super().build_criterion(cfg)
        check_criterion(criterion, str(getattr(cfg, "_name", None) or type(criterion).__name__),
                        self._training_outputs, self._model_names)
        if callable(getattr(criterion, "source_inputs", None)):  # read beyond the model's (--nsd-distance-key)
            self.request_inputs(argparse.Namespace(syntax_inputs=criterion.source_inputs))
        return criterion

    def request_inputs(self, model, require_target: bool = False) -> None:
        """Record the syntax features a model consumes (the union over an ensemble).

        Source: ``model.syntax_inputs()``. Target: ``model.target_syntax_inputs()`` (absent or
        empty: nothing is collated). With ``require_target`` (training) a model asking for
        target features on a data-bin whose target was not parsed is an error naming the
        data-bin; otherwise (a checkpoint loaded for decoding, which predicts target syntax)
        such a request is left out, and the gold features are collated only when the data-bin
        holds them (``fairseq-validate``; ``inference_step`` drops them from the generator's input).
        """
        self._request_target_inputs(model, require_target)
        inputs = getattr(model, "syntax_inputs", None)
        if callable(inputs):
            wanted = set(inputs())
            absent = wanted - set(derivable_features(self.stream_names)) - set(self.stream_names)
            if absent:
                raise DataBinError(
                    os.path.join(utils.split_paths(self.cfg.data)[0], METADATA_FILE), None,
                    f"the model needs the {', '.join(sorted(absent))} side-file, which this data-bin does not hold "
                    f"(it holds {', '.join(self.stream_names)}); {REMAKE}",
                )
            self.syntax_requested.update(wanted)

    @staticmethod
    def _target_wanted(model) -> Set[str]:
        """The target features ``model`` reads (``target_syntax_inputs()``; none for fairseq's own models)."""
        inputs = getattr(model, "target_syntax_inputs", None)
        return set(inputs() or ()) if callable(inputs) else set()

    def _request_target_inputs(self, model, require_target: bool) -> None:
        wanted = self._target_wanted(model)
        if not wanted:
            return
        data_path = utils.split_paths(self.cfg.data)[0]
        derivable = derivable_features(self.target_stream_names) if self.target_stream_names else FEATURES
        unknown = wanted - set(derivable)
        if unknown and (self.target_stream_names or require_target):
            raise DataBinError(
                os.path.join(data_path, METADATA_FILE), None,
                f"the model asks for target features {sorted(unknown)}, which the task does not derive from this "
                f"data-bin's target streams (it derives {', '.join(derivable)}); {REMAKE}",
            )
        if not self.target_stream_names:
            if not require_target:
                return
            raise self._target_not_parsed(wanted, "train")
        self.target_requested.update(wanted)

    def _target_not_parsed(self, wanted: Set[str], purpose: str) -> DataBinError:
        """The refusal of a model that needs gold target syntax (``wanted``) to ``purpose`` on this data-bin,
        whose target was not parsed."""
        tgt = self.cfg.target_lang
        return DataBinError(
            utils.split_paths(self.cfg.data)[0], None,
            f"the model needs gold target-side syntax ({', '.join(sorted(wanted))}) to {purpose}, but this data-bin's "
            f"target language '{tgt}' was not parsed ({METADATA_FILE} parsed_langs lists no '{tgt}'): remake it "
            f"with fairseq-syntax-preprocess --target-parser NAME (a spaCy pipeline for '{tgt}', e.g. "
            "fr_core_news_sm) or --target-external-parse conllu",
        )

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """fairseq's; a criterion that draws random numbers first learns which batch of the update this is
        (BlackOut's negatives: the same with N ranks as with ``--update-freq N``, and on resume)."""
        if hasattr(criterion, "begin_micro_batch"):
            criterion.begin_micro_batch(update_num)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        """fairseq's (``--eval-bleu`` included); a decoder that reads target distances is also scored
        with the distances generation feeds back (``nll_loss_fed``, :mod:`..criterions.fed_back_validation`).

        A checkpoint that reads gold target syntax, loaded onto a data-bin whose target was not parsed
        (``fairseq-validate``: loading it for decoding asks for none), is refused as training refuses it."""
        wanted = self._target_wanted(model)
        if wanted and not self.target_stream_names:
            raise self._target_not_parsed(wanted, "validate")
        loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        logging_output.update(fed_back_logging(model, criterion, sample))
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        reduce_fed_back_metrics(logging_outputs)

    # ------------------------------------------------------------- inference
    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        """fairseq's; with ``--length-prior``, Eriguchi et al. (2016)'s beam search (:mod:`fairseq_syntax.sequence_generator`).

        The table is the data-bin's (first data path), of the train split, whatever split is decoded.
        """
        check_search(args, len(self.target_dictionary), getattr(self.cfg, "length_prior_weight", 1.0))
        #: the longest translation's (a, b): --max-len-a * source length + --max-len-b (interactive constraints fit it)
        self.generation_length_limits = (float(getattr(args, "max_len_a", 0) or 0), int(getattr(args, "max_len_b", 200)))
        alignment = getattr(args, "print_alignment", None)
        if alignment == "hard" and not all(getattr(m, "hard_alignment", True) for m in models):
            raise UsageError("--print-alignment hard: tree2seq attends over phrases as well as words, so a hard "
                             "alignment has no word for some steps: give --print-alignment soft (cut to the words)")
        if getattr(args, "score_reference", False):  # teacher-forced: gold target distances, or a refusal
            check_reference_scoring(models, utils.split_paths(self.cfg.data)[0], self.cfg.target_lang,
                                    bool(self.target_stream_names))
        weight = getattr(self.cfg, "length_prior_weight", 1.0)
        if not getattr(self.cfg, "length_prior", False) and weight != 1.0:
            logger.warning(
                f"--length-prior-weight {weight} has no effect without --length-prior: "
                "decoding with fairseq's beam search"
            )
        if getattr(self.cfg, "length_prior", False) and not getattr(args, "score_reference", False):
            prior = load_length_prior(utils.split_paths(self.cfg.data)[0], self.cfg.source_lang, self.cfg.target_lang)
            seq_gen_cls, extra_gen_cls_kwargs = length_prior_generator(
                prior, getattr(self.cfg, "length_prior_weight", 1.0), args, seq_gen_cls, extra_gen_cls_kwargs
            )
        return super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs,
            prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
        )
