"""What ties a model to its data-bin: the provenance a checkpoint records (dictionaries' and BPE codes'
hashes, parser) and the checks at every load and every raw-text decode (:mod:`..data.provenance`).
A mixin of :class:`~.syntax_translation.SyntaxTranslationTask`."""

import logging
import os

from fairseq import utils

from fairseq_syntax import resume_settings
from fairseq_syntax.data import provenance
from fairseq_syntax_core import checkpoint_loader
from fairseq_syntax_core.errors import CheckpointError, DataBinError, InputError, UsageError
from fairseq_syntax_core.fileio import check_bpe_codes
from fairseq_syntax_core.oneline import one_line, quoted

from .config import _missing

logger = logging.getLogger("fairseq_syntax.tasks.syntax_translation")


class DataIdentity:
    """Provenance in the task's state, and refusals of another data-bin's dictionaries or BPE codes."""

    def data_provenance(self):
        """Dictionaries' and BPE codes' hashes, parser, its version and projection rule of this data-bin
        (:mod:`..data.provenance`; the first data path: every other shares its dictionaries)."""
        if self._data_provenance is None:
            self._data_provenance = provenance.of_data_bin(utils.split_paths(self.cfg.data)[0], self.metadata)
        return self._data_provenance

    def run_provenance(self):
        """:meth:`data_provenance` and the direction this task translates: what a checkpoint records."""
        return dict(self.data_provenance(), **{provenance.DIRECTION: [self.cfg.source_lang, self.cfg.target_lang]})

    def state_dict(self):
        """fairseq's task state, plus this run's provenance: checkpoints of every model record it
        (fairseq's own models take no extra args)."""
        state = dict(super().state_dict())
        state[provenance.ARG] = provenance.encode(self.run_provenance())
        # what the run carries (resume_settings.resume_error): its identifier (record refuses a best checkpoint of
        # another run), the update counts where it restarted (--reset-optimizer, --reset-dataloader) or forgot its
        # best value (--reset-meters), the weights it started from, the seeds it trained under, and the checkpoint
        # not its own last it was resumed from
        state.update(resume_settings.carried_now())
        stalled = resume_settings.current_stalled()
        if stalled is not None:  # fairseq's --patience count, given back to it on resume
            state[resume_settings.STALLED_KEY] = stalled
        return state

    def load_state_dict(self, state_dict):
        """fairseq's; keeps the checkpoint's provenance for the :meth:`build_model` that follows."""
        state_dict = dict(state_dict)
        self._state_provenance = provenance.decode(state_dict.pop(provenance.ARG, None))
        for key in (*resume_settings.COUNT_KEYS, *resume_settings.TEXT_KEYS, resume_settings.STALLED_KEY):
            state_dict.pop(key, None)
        super().load_state_dict(state_dict)

    def _check_data_bin(self, trained, what: str) -> None:
        """Refuse (``--allow-other-data-bin``: warn) a checkpoint whose data-bin's dictionaries, BPE codes or
        projection rule differ from this one's, naming them; warn once when the checkpoint records no hashes."""
        data_path = utils.split_paths(self.cfg.data)[0]
        if (trained or {}).get(provenance.DAMAGED):  # present and not a record: edited, not an earlier release
            path = checkpoint_loader.last_read if what == "the checkpoint" and checkpoint_loader.last_read else what
            message = (f"its stored {provenance.ARG} (cfg.model, task_state) is not a record of the data it was "
                       "trained on (edited?), so the data-bin cannot be checked against it")
            self._refuse_unless_allowed(CheckpointError(path, None, f"{message}; use an intact checkpoint, or give "
                                                                    "--allow-other-data-bin to go on"), message)
            return
        direction, now = (trained or {}).get(provenance.DIRECTION), [self.cfg.source_lang, self.cfg.target_lang]
        made = [self.metadata.get("source_lang"), self.metadata.get("target_lang")]
        if direction is None and trained is not None and None not in made and made != now \
                and "direction" not in self._provenance_warned:  # an earlier release's checkpoint: no direction
            self._provenance_warned.add("direction")
            logger.warning(f"{what} records no direction (made by an earlier release of fairseq-syntax); "
                           f"{data_path} was made for {one_line(made[0])[:20]} -> {one_line(made[1])[:20]} and you "
                           f"decode {one_line(str(now[0]))[:20]} -> {one_line(str(now[1]))[:20]}: is that the "
                           "direction it was trained in?")
        if direction is not None and direction != now:  # a joined dictionary reads either way without a word
            message = (f"{what} translates {one_line(direction[0])[:20]} -> {one_line(direction[1])[:20]}, not "
                       f"{one_line(str(now[0]))[:20]} -> {one_line(str(now[1]))[:20]} as asked (--source-lang, "
                       "--target-lang, or the data-bin's syntax.json)")
            self._refuse_unless_allowed(DataBinError(
                data_path, None, f"{message}; decode in the direction it was trained, or give --allow-other-data-bin "
                                 "to go on"), message)
        missing = provenance.unchecked(trained, self.data_provenance())
        if missing is not None and missing not in self._provenance_warned:
            self._provenance_warned.add(missing)
            logger.warning(f"{what} {missing} (made by an earlier release of fairseq-syntax): cannot check that "
                           f"{data_path} holds the files it was trained with; use the data-bin it was trained on")
        rule, ours = (trained or {}).get("projection"), self.data_provenance().get("projection")
        if isinstance(rule, str) and ours is not None and rule != ours:  # subword features derived another way
            message = (f"its projection rule {quoted(ours, 40)} (syntax.json) is not the {quoted(rule, 40)} {what} "
                       "was trained with: the model would read the subwords' parse features derived another way")
            self._refuse_unless_allowed(DataBinError(
                data_path, None, f"{message}; use a data-bin made with --projection {one_line(rule)[:40]}, or give "
                                 "--allow-other-data-bin to go on"), message)
        if (trained or {}).get(provenance.DIGESTS) is True and self.data_provenance().get(provenance.DIGESTS) is False:
            message = (f"records no digests of its splits' files, but the data-bin {what} was "
                       "trained on recorded them: its record was removed (or it is a data-bin of an earlier "
                       "release), so side-files copied in from another data-bin cannot be detected")
            self._refuse_unless_allowed(DataBinError(
                os.path.join(data_path, "syntax.json"), None, f"{message}; use a data-bin made by "
                "fairseq-syntax-preprocess of this release, or give --allow-other-data-bin to go on"), message)
        column, ours = (trained or {}).get("pos_column"), self.data_provenance().get("pos_column")
        if isinstance(column, str) and ours is not None and column != ours:  # POS ids of another tagset
            message = (f"its POS tags are the {quoted(ours, 20)} column (syntax.json's pos_column), {what} was "
                       f"trained on the {quoted(column, 20)} column: raw text would be tagged with another tagset")
            self._refuse_unless_allowed(DataBinError(
                data_path, None, f"{message}; use a data-bin made with --pos-column {one_line(column)[:20]}, or "
                                 "give --allow-other-data-bin to go on"), message)
        source, ours = (trained or {}).get("phrase_structure"), self.data_provenance().get("phrase_structure")
        if isinstance(source, str) and ours is not None and source != ours:  # trees of another shape
            message = (f"its phrase structures come from {quoted(ours, 40)} (syntax.json), {what} was trained on "
                       f"phrase structures from {quoted(source, 40)}: models reading them see trees of another shape")
            self._refuse_unless_allowed(DataBinError(
                data_path, None, f"{message}; use a data-bin made as it was (--constituency-parse), or give "
                                 "--allow-other-data-bin to go on"), message)
        differing = provenance.differing_files(trained or {}, self.data_provenance())
        if not differing:
            return
        message = (f"{', '.join(differing)} {'differs' if len(differing) == 1 else 'differ'} from the data-bin "
                   f"{what} was trained on: the model's ids would stand for other words or pieces")
        self._refuse_unless_allowed(DataBinError(
            data_path, None, f"{message}; use that data-bin (or one made with --dictdir from it), "
                             "or give --allow-other-data-bin to go on"), message)

    def _check_same_perturbation(self, trained, path: str) -> None:
        """A run restored onto a data-bin whose parses were perturbed otherwise than those it trained on (its
        checkpoints would record only the new ones): refused (``--allow-other-data-bin``: a warning)."""
        if not trained or trained.get(provenance.DAMAGED):
            return
        before, now = trained.get(provenance.PERTURBATION), self.data_provenance().get(provenance.PERTURBATION)
        if before == now:
            return
        def shown(p):
            return "clean parses" if p is None else f"parses perturbed with p = {quoted(p.get('p'), 20)}" \
                if isinstance(p, dict) else quoted(p, 40)
        message = (f"{one_line(path)[:160]} trained on {shown(before)}, and this data-bin has {shown(now)}: the run "
                   "would mix them and its checkpoints record only the new ones")
        self._refuse_unless_allowed(DataBinError(
            utils.split_paths(self.cfg.data)[0], None, f"{message}; train on the data-bin it trained on (or start a "
                                                        "new run), or give --allow-other-data-bin to go on"), message)

    def _refuse_unless_allowed(self, error: Exception, message: str) -> None:
        """Raise ``error``; with ``--allow-other-data-bin``, warn with ``message`` instead."""
        if not getattr(self.cfg, "allow_other_data_bin", False):
            raise error
        where = f"{error.path}: " if getattr(error, "path", None) else ""
        logger.warning(f"{where}{message}; going on (--allow-other-data-bin)")

    def build_bpe(self, args):
        """fairseq's, after :meth:`check_applied_bpe` (fairseq-interactive and -generate call it)."""
        self.check_applied_bpe(args)
        return super().build_bpe(args)

    def check_applied_bpe(self, bpe_cfg) -> None:
        """The subword-nmt codes file of ``bpe_cfg`` (``--bpe-codes``; the hub's ``bpe_codes=``): checked
        as codes before subword-nmt reads it, and compared with the codes each loaded model was trained
        with when it segments raw text (refused, naming the file and both hashes; ``--allow-other-data-bin``:
        a warning). With a split of the data-bin loaded (fairseq-generate) the codes only take the separator
        off the output: they are not compared."""
        name = bpe_cfg if isinstance(bpe_cfg, str) else getattr(bpe_cfg, "_name", None) or getattr(bpe_cfg, "bpe", None)
        if name is None and not self.datasets:  # raw text left whole: a model of BPE pieces sees <unk>s
            self._check_unsegmented()
            return
        recorded = self.metadata.get("bpe") if isinstance(self.metadata.get("bpe"), dict) else {}
        data_path = utils.split_paths(self.cfg.data)[0]
        if name is not None and name != "subword_nmt" and recorded.get("name") == "subword_nmt":
            message = (f"--bpe {one_line(str(name))[:40]}: the data-bin's text was segmented by subword-nmt (its "
                       "syntax.json), so the model knows its pieces only")
            self._refuse_unless_allowed(UsageError(
                f"{message}; give --bpe subword_nmt --bpe-codes {one_line(data_path)}/bpe.codes, or "
                "--allow-other-data-bin to go on"), message)
            return
        separator, ours = getattr(bpe_cfg, "bpe_separator", None), recorded.get("separator")
        if name == "subword_nmt" and isinstance(separator, str) and isinstance(ours, str) and separator != ours:
            message = (f"--bpe-separator {one_line(separator)[:20]}: the data-bin's pieces end in "
                       f"{one_line(ours)[:20]} (its syntax.json): segmented or joined so, the model would see other "
                       "pieces and the output would keep them")
            self._refuse_unless_allowed(UsageError(
                f"{message}; leave --bpe-separator out (fairseq's default, {one_line(ours)[:20]}), or give "
                "--allow-other-data-bin to go on"), message)
        if name != "subword_nmt" or _missing(bpe_cfg, "bpe_codes"):  # fairseq names a missing --bpe-codes
            return
        path = getattr(bpe_cfg, "bpe_codes", None)
        if not isinstance(path, str) or not path or "://" in path:  # None: fairseq's error; a URL: fetched
            return
        check_bpe_codes(path, "--bpe-codes: the bpe.codes of the data-bin the model was trained on")
        if self.datasets:
            return
        for trained in self.loaded_provenances:
            difference = provenance.applied_codes_difference(trained, path)
            if difference is not None:
                message = (f"these BPE codes ({difference}) are not those the model was trained with: it would "
                           "get other pieces than it learned")
                self._refuse_unless_allowed(InputError(
                    path, None, f"{message}; apply the codes of the data-bin it was trained on (--bpe-codes), "
                                "or give --allow-other-data-bin to go on"), message)
                return

    def build_tokenizer(self, args):
        """fairseq's, after :meth:`check_applied_tokenizer` (fairseq-interactive calls it)."""
        self.check_applied_tokenizer(args)
        return super().build_tokenizer(args)

    def check_applied_tokenizer(self, tokenizer_cfg) -> None:
        """Warn once when raw text is tokenized otherwise than the data-bin's text was (its syntax.json
        ``tokenizer``: Moses, with or without aggressive dash splits and escaping): the BPE and the parser would
        see other words. With a split loaded (fairseq-generate) the tokenizer only detokenizes the output."""
        recorded = self.metadata.get("tokenizer") if isinstance(self.metadata.get("tokenizer"), dict) else {}
        if self.datasets or recorded.get("name") != "moses" or getattr(self, "_tokenizer_warned", False):
            return
        name = tokenizer_cfg if isinstance(tokenizer_cfg, str) else \
            getattr(tokenizer_cfg, "_name", None) or getattr(tokenizer_cfg, "tokenizer", None)
        langs = f"--source-lang {one_line(str(self.cfg.source_lang))} --target-lang {one_line(str(self.cfg.target_lang))}"
        if name is None:
            note = f"no --tokenizer is given: raw text reaches BPE and the parser split at spaces alone; give " \
                   f"--tokenizer moses {langs}"
        elif name != "moses":
            note = f"--tokenizer {one_line(str(name))[:40]} is given: give --tokenizer moses {langs}"
        else:
            flags = [(flag, "moses_aggressive_dash_splits" if key == "moses_no_dash_splits" else "moses_escape")
                     for flag, key in (("--moses-no-dash-splits", "moses_no_dash_splits"),
                                       ("--moses-no-escape", "moses_no_escape"))
                     if bool(getattr(tokenizer_cfg, key, False)) == bool(recorded.get(
                         "moses_aggressive_dash_splits" if key == "moses_no_dash_splits" else "moses_escape", True))]
            notes = [f"{'drop' if recorded.get(k, True) else 'give'} {flag} (the hub, or a checkpoint's stored "
                     f"tokenizer: {flag[2:].replace('-', '_')}={not recorded.get(k, True)}; {k} was "
                     f"{recorded.get(k, True)})" for flag, k in flags]
            tokenizer_langs = (getattr(tokenizer_cfg, "source_lang", None), getattr(tokenizer_cfg, "target_lang", None))
            if tokenizer_langs != (self.cfg.source_lang, self.cfg.target_lang):
                notes.append(f"its languages are {one_line(str(tokenizer_langs[0]))[:20]} and "
                             f"{one_line(str(tokenizer_langs[1]))[:20]}, not the task's: give {langs} (the hub: "
                             "source_lang=, target_lang=)")
            if not notes:
                return
            note = "; ".join(notes)
        self._tokenizer_warned = True
        logger.warning(f"the data-bin's text was tokenized by Moses (its syntax.json) and {note}: the model would "
                       "see other words than it was trained on")

    def _check_unsegmented(self) -> None:
        """Warn once when raw text comes without ``--bpe`` to a model trained on BPE pieces: unless the input
        is already segmented with the data-bin's codes, the model sees whole words (mostly ``<unk>``)."""
        for trained in self.loaded_provenances:
            recorded = (trained or {}).get("bpe_codes_sha256")
            if recorded not in (None, provenance.NO_BPE):
                logger.warning(
                    "the model was trained on BPE pieces and no --bpe is given: unless the input is already "
                    "segmented with the bpe.codes of the data-bin it was trained on, it reaches the model as whole "
                    "words (mostly <unk>); give --bpe subword_nmt --bpe-codes DATA-BIN/bpe.codes")
                return
