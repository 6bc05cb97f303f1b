"""fairseq's hub interface for syntax models: the task parses the user's own text.

``GeneratorHubInterface.sample``/``translate`` encode each sentence (tokenize, BPE,
dictionary ids) and hand ``generate`` only the ids. :class:`SyntaxHubInterface` also keeps
the tokenized, BPE-segmented text of every tensor its ``encode`` returns (by that tensor
object, while it lives), and ``generate`` hands the task the texts of exactly the tensors it
was given, by their positions, which are the sample ids of its batches
(``sample["id"]``). The task thus parses what ``fairseq-syntax-preprocess`` would have parsed
(see :mod:`fairseq_syntax.data.online_parser`), and two sentences with the same ids but
different texts keep their own parses. ``SyntaxTransformerModel.from_pretrained`` and
``Tree2SeqModel.from_pretrained`` return it. Tensors not made by ``encode`` (ids you encoded
yourself, a 2-D tensor's rows) are parsed from words rebuilt from the ids, with a warning.

The BPE codes the hub applies (``bpe_codes=``) are checked by the task before fairseq's
``GeneratorHubInterface`` builds the segmenter: codes that are not subword-nmt's, or not those
the model was trained with, are refused (``allow_other_data_bin=True``: a warning), as in
fairseq-interactive (``SyntaxTranslationTask.check_applied_bpe``). A ``tokenizer=`` or ``bpe=`` the caller
gives replaces the checkpoint's stored section whole (fairseq would keep its name, files and languages:
:func:`fairseq_syntax.checkpoints.caller_segmenters`), and a Moses tokenizer speaks the task's languages unless the
caller gives ``source_lang=``/``target_lang=``.
"""

import argparse
import os
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
from fairseq.hub_utils import GeneratorHubInterface

from fairseq_syntax.checkpoints import CALLER_ONLY_TASK_SETTINGS
from fairseq_syntax.search_settings import check_search
from fairseq_syntax_core.errors import CheckpointError, UsageError
from fairseq_syntax_core.oneline import quoted
from fairseq_syntax_core.fileio import BOM, is_visible


class SyntaxHubInterface(GeneratorHubInterface):
    def __init__(self, cfg, task, models) -> None:
        check_applied_bpe = getattr(task, "check_applied_bpe", None)  # fairseq's __init__ builds the BPE
        if check_applied_bpe is not None:
            check_applied_bpe(getattr(cfg, "bpe", None))
            task.check_applied_tokenizer(getattr(cfg, "tokenizer", None))  # fairseq's __init__ builds it
        super().__init__(cfg, task, models)
        #: id(tensor) -> (weak reference to that tensor, its encoded text, its ids then), for the tensors
        #: encode returned; a tensor changed in place since then no longer matches its text
        self._texts: Dict[int, Tuple[weakref.ref, str, bytes]] = {}
        self._batched_ids: List[int] = []

    def encode(self, sentence: str) -> torch.LongTensor:
        if not any(is_visible(token) for token in sentence.split()):  # as fairseq-interactive: an empty line
            sentence = ""
        text = self.apply_bpe(self.tokenize(sentence.lstrip(BOM)))
        vocab = getattr(getattr(self, "task", None), "source_dictionary", None)
        special = {vocab[i] for i in range(vocab.nspecial)}.intersection(text.split()) if vocab is not None else ()
        if special:  # as preprocessing and fairseq-interactive refuse them
            raise UsageError(f"token {quoted(sorted(special)[0])} of the sentence is one of fairseq's special symbols "
                             "(<s> <pad> </s> <unk>) and would be read as that symbol, not as a word: escape it, or "
                             "tokenize (tokenizer='moses' escapes it)")
        ids = self.binarize(text)
        key = id(ids)
        texts = self._texts

        def forget(ref: weakref.ref) -> None:
            if texts.get(key, (None,))[0] is ref:
                del texts[key]

        texts[key] = (weakref.ref(ids, forget), text, _ids_key(ids))
        return ids

    def text_of(self, ids: torch.Tensor) -> Optional[str]:
        """The encoded text of a tensor :meth:`encode` returned (that very object), else None."""
        entry = self._texts.get(id(ids))
        if entry is None or entry[0]() is not ids or entry[2] != _ids_key(ids):
            return None
        return entry[1]

    def generate(self, tokenized_sentences, *args, **kwargs) -> List[List[Dict[str, torch.Tensor]]]:
        """fairseq's, the task parsing each sentence's own text (sample id = position in the list)."""
        if torch.is_tensor(tokenized_sentences) and tokenized_sentences.dim() == 1:
            return self.generate([tokenized_sentences], *args, **kwargs)[0]
        check_hub_generation(kwargs)
        if kwargs.get("print_alignment") and not all(getattr(m, "hard_alignment", True) for m in self.models):
            raise UsageError(f"print_alignment={quoted(kwargs['print_alignment'], 20)}: tree2seq attends over phrases "
                             "as well as words, and the hub cannot cut its attention to the words; use "
                             "fairseq-generate --print-alignment soft")
        remember = getattr(self.task, "remember_source_texts", None)
        if remember is None:
            return super().generate(tokenized_sentences, *args, **kwargs)
        sources = list(tokenized_sentences)
        remember(sources, [self.text_of(ids) for ids in sources])
        self._batched_ids: List[int] = []
        try:
            outputs = super().generate(tokenized_sentences, *args, **kwargs)
        finally:
            remember([], [])
        if len(outputs) != len(sources):  # fairseq's list closes up over skipped sentences: rows would shift
            skipped = sorted(set(range(len(sources))) - set(self._batched_ids))
            raise UsageError(
                f"sentences {', '.join(map(str, skipped[:10]))}{', ...' if len(skipped) > 10 else ''} of the "
                f"{len(sources)} were skipped (skip_invalid_size_inputs: longer than the model's positions), and "
                "fairseq's outputs would not line up with the sentences: translate the others without them")
        return outputs

    def _build_batches(self, tokens, skip_invalid_size_inputs: bool):
        """fairseq's batches, their sample ids noted (:meth:`generate` names the sentences skipped)."""
        for batch in super()._build_batches(tokens, skip_invalid_size_inputs):
            self._batched_ids.extend(int(i) for i in batch["id"].tolist())
            yield batch


def check_hub_generation(given: Dict[str, Any]) -> None:
    """Generation keywords the hub's ``translate``/``sample``/``generate`` have no use for, refused as
    fairseq-interactive refuses them (fairseq ignored ``prefix_size``, and failed on the others deep inside)."""
    if isinstance(given.get("prefix_size"), int) and given["prefix_size"] > 0:
        raise UsageError(f"prefix_size={given['prefix_size']}: the hub has no reference to take a prefix from: leave "
                         "it out")
    if given.get("score_reference"):
        raise UsageError("score_reference: the hub translates sentences and has no reference to score; use "
                         "fairseq-generate --score-reference on a data-bin split")
    if given.get("constraints") is not None:
        raise UsageError("constraints: the hub passes no constraints to the search; use fairseq-interactive "
                         "--constraints (SOURCE<tab>CONSTRAINT lines)")
    if "print_alignment" in given and given["print_alignment"] not in (None, "hard", "soft"):
        raise UsageError(f"print_alignment={quoted(given['print_alignment'], 20)}: expected 'hard' or 'soft'")


def _ids_key(ids: torch.Tensor) -> bytes:
    return ids.detach().to("cpu", torch.int64).numpy().tobytes()


#: settings a checkpoint stores that only the caller may give (the checkpoint's own are dropped): a spaCy pipeline
#: folder to load, leave to decode on a data-bin the model was not trained on, a file of replacements for unknown
#: words (stored languages are checked as language codes by the task)
CALLER_ONLY = {**CALLER_ONLY_TASK_SETTINGS, "replace_unk": None}
#: the stored segmenter settings that are not files or URLs (those the caller must give)
BPE_NOT_FILES = ("_name", "bpe", "bpe_separator", "bpe_codes", "sentencepiece_enable_sampling", "sentencepiece_alpha")
#: the files fairseq's hub takes as BPE codes from the model's own folder
FOLDER_CODES = ("code", "bpecodes")


def load_hub(model_class, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
    """fairseq's hub loader for ``model_class``, returning a :class:`SyntaxHubInterface`."""
    from fairseq import hub_utils

    check_local_folders(model_name_or_path, data_name_or_path, kwargs)
    for key, default in CALLER_ONLY.items():  # never the checkpoint's stored value
        kwargs.setdefault(key, default)
    x = hub_utils.from_pretrained(  # no archive names: fairseq's (plain Transformers) would be downloaded
        model_name_or_path, checkpoint_file, data_name_or_path, archive_map={}, **kwargs
    )
    stored = getattr(getattr(x["args"], "bpe", None), "bpe_codes", None)
    folder = [os.path.join(model_name_or_path, name) for name in FOLDER_CODES]
    if isinstance(stored, str) and stored and stored != kwargs.get("bpe_codes") and stored not in folder:
        # a path the checkpoint's settings name: never opened (nor its first line quoted) unless the caller names it
        raise CheckpointError(os.path.join(model_name_or_path, checkpoint_file), None,
                              f"its settings name BPE codes (cfg.bpe.bpe_codes {quoted(stored, 60)}) that the caller "
                              "did not give: give bpe='subword_nmt', bpe_codes= the bpe.codes of the data-bin it was "
                              "trained on")
    path = os.path.join(model_name_or_path, checkpoint_file)
    bpe = getattr(x["args"], "bpe", None)
    if bpe is not None and "bpe" not in kwargs:  # a stored segmenter's files or URLs, opened or fetched (a caller's
        for key in bpe:                           # bpe= replaces the stored section whole: checkpoints.caller_segmenters)
            value = bpe.get(key)
            if key not in BPE_NOT_FILES and key not in kwargs and isinstance(value, str) and value:
                raise CheckpointError(path, None, f"its settings name a file or URL for the segmenter (cfg.bpe.{key} "
                                                  f"{quoted(value, 60)}) that the caller did not give: the hub would "
                                                  "open it; give the segmenter's files yourself")
    check_stored_generation(x["args"], x["task"], kwargs, path)
    task_languages(x["args"], x["task"], kwargs)
    try:
        return SyntaxHubInterface(x["args"], x["task"], x["models"])
    except UsageError as error:  # the segmenter: the caller's, or the checkpoint's stored one
        flag = str(error).split(" ", 1)[0].lstrip("-").replace("-", "_")
        if flag not in ("bpe", "bpe_separator") or flag in kwargs:
            raise
        raise CheckpointError(path, None, f"its stored settings (cfg.bpe.{flag}, which the caller did not give): "
                                          f"{error}") from None


def check_local_folders(model_name_or_path: Any, data_name_or_path: Any, kwargs: Dict[str, Any]) -> None:
    """The hub loads from folders only: fairseq's hub extracts a tar archive without checking its members' paths
    (they may point out of the folder) and then replaces the user's archive by the extracted folder, and it
    downloads names and URLs."""
    folders = [("model_name_or_path", model_name_or_path)]
    if isinstance(data_name_or_path, str) and data_name_or_path.startswith("."):  # fairseq: inside the model folder
        if isinstance(model_name_or_path, (str, os.PathLike)):
            folders.append(("data_name_or_path", os.path.join(model_name_or_path, data_name_or_path)))
    else:
        folders.append(("data_name_or_path", data_name_or_path))
    for name, value in folders:
        if not isinstance(value, (str, os.PathLike)) or not os.path.isdir(value):
            raise UsageError(f"{name} {quoted(str(value), 80)}: expected a folder (the hub of fairseq-syntax opens no "
                             "archives, names or URLs: fairseq's would extract an archive without checking where its "
                             "files go, then replace the archive by the folder); extract it yourself and give the folder")
    if "is_vocoder" in kwargs:
        raise UsageError("is_vocoder: the syntax models translate text; they are not vocoders")


def task_languages(cfg: Any, task: Any, given: Dict[str, Any]) -> None:
    """A Moses tokenizer's languages are the task's unless the caller gives them (fairseq's defaults are English
    for both, a checkpoint's stored ones may be any)."""
    tokenizer = getattr(cfg, "tokenizer", None)
    task_cfg = getattr(task, "cfg", None)
    if tokenizer is None or task_cfg is None or tokenizer.get("_name") != "moses":
        return
    for key in ("source_lang", "target_lang"):
        if key not in given and key in tokenizer and getattr(task_cfg, key, None) is not None:
            tokenizer[key] = getattr(task_cfg, key)


def check_stored_generation(cfg: Any, task: Any, given: Dict[str, Any], path: str) -> None:
    """The generation settings the hub decodes with (the checkpoint's, the caller's keywords over them; the task's
    ``length_prior_weight`` too), checked as the task checks flags: a refusal whose setting the checkpoint stored
    names the checkpoint (the caller gave no such flag); one the caller gave is the caller's."""
    generation = getattr(cfg, "generation", None)
    if generation is None:
        return
    try:
        settings = {key: generation.get(key) for key in generation}
    except Exception:  # noqa: BLE001 - an unresolvable interpolation: fairseq's own loader said so already
        return
    nested = {k: v for value in given.values() if isinstance(value, dict) for k, v in value.items()}
    given = {**nested, **given}  # generation_args={"beam": 5} and the like: the caller's too
    settings.update({key: value for key, value in given.items() if key in settings})
    dictionary = getattr(task, "target_dictionary", None)
    weight = given.get("length_prior_weight", getattr(getattr(task, "cfg", None), "length_prior_weight", 1.0))
    try:
        check_search(argparse.Namespace(**settings), len(dictionary) if dictionary is not None else None, weight)
    except UsageError as error:
        flag = getattr(error, "setting", None)
        if flag is None or flag in given:
            raise
        section = "task" if flag == "length_prior_weight" else "generation"
        raise CheckpointError(path, None, f"its stored {section} settings (cfg.{section}): {error}") from None
