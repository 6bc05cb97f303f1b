"""Raw text through the task: ``fairseq-interactive`` and the hub parse each line as the data-bin was
parsed, and match rows to texts by sample id. A mixin of
:class:`~.syntax_translation.SyntaxTranslationTask`."""

import logging
from typing import Optional, Sequence

import torch
from torch import Tensor

from fairseq_syntax.data import provenance
from fairseq_syntax.data.target_syntax import NET_INPUT_KEY as TARGET_NET_INPUT_KEY
from fairseq_syntax.reference_scoring import is_reference_scorer
from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core.fileio import BOM, is_visible
from fairseq_syntax_core.oneline import one_line, quoted

logger = logging.getLogger("fairseq_syntax.tasks.syntax_translation")


class RawTextInference:
    """Interactive and hub decoding: texts kept by sample id, parsed online, empty lines translated empty."""

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """fairseq's, keeping each line's encoded text so that its parse comes from the text.

        ``fairseq-interactive`` calls this once per buffer of input lines and then decodes
        every batch of that buffer: the texts kept are this buffer's, by position (sample id).
        """
        tokens, texts = [], []
        before = getattr(self, "_interactive_lines", 0)
        specials = {self.source_dictionary[i] for i in range(self.source_dictionary.nspecial)}
        for line in lines:
            line = line.lstrip(BOM)
            if not is_visible(line):
                line = ""  # only spaces, control or zero-width characters: an empty line
            text = encode_fn(line)
            special = specials.intersection(text.split())
            if special:  # as preprocessing refuses them in a file: padding or an end of sentence mid-source
                raise UsageError(f"input line {before + len(tokens) + 1}: token {quoted(sorted(special)[0])} is one of "
                                 "fairseq's special symbols (<s> <pad> </s> <unk>) and would be read as that symbol, "
                                 "not as a word: escape it, or tokenize (--tokenizer moses escapes it)")
            tokens.append(self.source_dictionary.encode_line(text, add_if_not_exist=False).long())
            texts.append(text)
        self.remember_source_texts(tokens, texts)
        #: input lines read before this buffer (a refusal names the line: sample ids restart at each buffer)
        self.interactive_lines_before = getattr(self, "_interactive_lines", 0)
        self._interactive_lines = self.interactive_lines_before + len(tokens)
        return tokens, [t.numel() for t in tokens]

    def check_constraints(self, src_tokens: Sequence[Tensor], constraints: Optional[Tensor]) -> None:
        """``fairseq-interactive --constraints``: a line of constraints and no source (fairseq printed an empty
        translation) or a constraint with a word the target dictionary lacks (fairseq forced ``<unk>`` into the
        output) is refused, naming the input line. Rows are the buffer's lines in order."""
        if constraints is None:
            return
        from fairseq.token_generation_constraints import unpack_constraints

        unk, before = self.target_dictionary.unk(), getattr(self, "interactive_lines_before", 0)
        len_a, len_b = getattr(self, "generation_length_limits", (0.0, 200))
        for row, (tokens, packed) in enumerate(zip(src_tokens, constraints)):
            wanted = unpack_constraints(packed)
            where = f"input line {before + row + 1}"
            longest = int(len_a * int(tokens.ne(self.source_dictionary.pad()).sum()) + len_b)
            total = sum(int(c.numel()) for c in wanted)
            if wanted and total >= longest:  # fairseq's search would stop on a bare assert
                raise UsageError(f"{where}: constraints of {total} tokens do not fit the longest translation of "
                                 f"{longest} tokens (--max-len-a * source length + --max-len-b): raise those, or give "
                                 "fewer constraints")
            if wanted and int(tokens.ne(self.source_dictionary.pad()).sum()) <= 1:
                raise UsageError(f"{where}: {len(wanted)} constraint(s) after the tab and no source text before it: "
                                 "nothing to translate (give the source, a tab, then the constraints)")
            for number, constraint in enumerate(wanted, start=1):
                if constraint.numel() == 0 or bool(constraint.lt(self.target_dictionary.nspecial).any()):
                    what = ("is empty" if constraint.numel() == 0 else "holds a word the target dictionary lacks"
                            if bool(constraint.eq(unk).any()) else "holds a special symbol (<s>, <pad>, </s>)")
                    raise UsageError(f"{where}: constraint {number} {what}: fairseq would force it into the "
                                     "translation as <unk> or nothing (give words of the target vocabulary, "
                                     "tokenized as the data-bin)")

    def remember_source_texts(self, tokens: Sequence[Tensor], texts: Sequence[Optional[str]]) -> None:
        """Keep the encoded texts of the sources whose sample ids are their positions in ``tokens``.

        What :meth:`inference_step` parses for the row of sample id ``i`` (``fairseq-interactive``'s
        buffer, the list given to the hub's ``generate``); replaces what was kept.
        """
        self.source_texts.record(tokens, texts)
        self._inference_ids = None

    def set_inference_ids(self, ids: Tensor) -> None:
        """The sample ids of the rows of the next :meth:`inference_step`'s batch, whose sample lacks them.

        ``fairseq-interactive`` keeps them in its ``Batch.ids``: a wrapper of its ``make_batches``
        (:mod:`fairseq_syntax.compat`) hands them here. Used once.
        """
        self._inference_ids = ids

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        for model in models:
            self.request_inputs(model)
        if TARGET_NET_INPUT_KEY in sample["net_input"] and not is_reference_scorer(generator):
            # gold target syntax (collated for validation losses) is not an input at generation: the
            # model predicts it; the encoder would receive it as an unexpected keyword. Scoring a
            # reference (--score-reference) is teacher-forced: it reads the gold ones (..reference_scoring)
            sample = dict(sample)
            sample["net_input"] = {k: v for k, v in sample["net_input"].items() if k != TARGET_NET_INPUT_KEY}
        handed, self._inference_ids = getattr(self, "_inference_ids", None), None
        if self.syntax_requested and "src_syntax" not in sample["net_input"]:
            src_tokens = sample["net_input"]["src_tokens"]
            ids = sample.get("id")
            ids = handed if ids is None else ids  # the hub's batches carry them; fairseq-interactive's hands them
            ids = ids.tolist() if torch.is_tensor(ids) else ids
            texts = self.source_texts.texts_for(
                src_tokens, self.source_dictionary.pad(),
                ids if ids is not None and len(ids) == src_tokens.size(0) else None,
            )
            sample["net_input"]["src_syntax"] = self.online_parser().features_for(
                src_tokens, self.syntax_requested, texts
            )
        translations = super().inference_step(
            generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints
        )
        return self._empty_for_empty_sources(sample["net_input"]["src_tokens"], translations)

    def _empty_for_empty_sources(self, src_tokens, translations):
        """An empty source line (``</s>`` only: an empty line in fairseq-interactive) translates to ``""``.

        The model would otherwise invent a sentence for it. The hypothesis keeps fairseq's
        fields (tokens ``[</s>]``, score 0), so every printer and scorer handles it.
        """
        pad, eos = self.source_dictionary.pad(), self.target_dictionary.eos()
        empty = (src_tokens.ne(pad).sum(dim=1) <= 1).tolist()
        if not any(empty):
            return translations
        for row, is_empty in enumerate(empty):
            if is_empty and translations[row]:
                first = dict(translations[row][0])
                first["tokens"] = first["tokens"].new_tensor([eos])
                first["score"] = first["score"] * 0 if torch.is_tensor(first["score"]) else 0.0
                first["positional_scores"] = first["positional_scores"].new_zeros(1)
                if torch.is_tensor(first.get("alignment")) and first["alignment"].numel():
                    first["alignment"] = first["alignment"].new_zeros((0, 2))
                if torch.is_tensor(first.get("attention")) and first["attention"].dim() == 2:
                    first["attention"] = first["attention"][:, :1]  # (source, target): the </s> column
                translations[row] = [first]
        return translations

    def online_parser(self):
        """The parser and projection recorded in the data-bin, for raw-text batches."""
        if self._online_parser is None:
            from fairseq_syntax.data.online_parser import OnlineParser

            self._online_parser = OnlineParser(
                self.metadata, self.src_dict, self.label_dict, self.pos_dict,
                parser=self.cfg.syntax_parser, left_pad=self.cfg.left_pad_source,
                strict_phrase_structure=getattr(self.cfg, "strict_phrase_structure", False),
                trained_phrase_structure=(self.model_provenance or {}).get("phrase_structure"),
            )
            self._check_provenance(self._online_parser)
        return self._online_parser

    def _check_provenance(self, parser) -> None:
        """Warn when raw text is parsed otherwise than the model's training data was, naming both."""
        trained = getattr(self, "model_provenance", None)
        if not trained:
            return
        now = dict(self.data_provenance())
        meta = getattr(parser.nlp, "meta", {}) or {}
        override = self.cfg.syntax_parser
        now["parser"] = override or now["parser"]
        now["parser_version"] = meta.get("version", now["parser_version"])
        import spacy

        now["spacy_version"] = spacy.__version__
        # raw text always gets converted phrase structures: the online parser says so to models that use them
        now["phrase_structure"] = None
        now["bpe_codes_sha256"] = None  # compared with the dictionaries when the checkpoint was loaded
        notes = provenance.differences(trained, now)
        if override and trained.get("parser") not in (None, override):
            logger.info(f"--syntax-parser {one_line(override)} parses raw text on purpose; the model was trained "
                        f"on parses of {quoted(trained['parser'])}")
            notes = [n for n in notes if not n.startswith(("parser:", "parser_version:"))]
        if notes:
            logger.warning(
                "raw text is parsed and segmented differently from the model's training data ("
                + "; ".join(notes) + f"; data-bin {one_line(self.cfg.data)}): the model sees parses it was not trained on. "
                "Decode with the data-bin the model was trained on, install the parser version it used, "
                "or choose a parser on purpose with --syntax-parser"
            )
