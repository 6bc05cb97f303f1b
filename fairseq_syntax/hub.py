"""fairseq's hub interface for syntax models: the task parses the user's own text.

``GeneratorHubInterface.sample``/``translate`` encode each sentence (tokenize, BPE,
dictionary ids) and hand the task only the ids. :class:`SyntaxHubInterface` also keeps the
tokenized, BPE-segmented text of every sentence it encodes, so that the task parses exactly
what ``fairseq-syntax-preprocess`` would have parsed (see
:mod:`fairseq_syntax.data.online_parser`). ``SyntaxTransformerModel.from_pretrained`` returns it.
Calling ``generate`` with ids you encoded yourself skips that: those rows are parsed from
words rebuilt from the ids, with a warning.
"""

import torch
from fairseq.hub_utils import GeneratorHubInterface

from fairseq_syntax_preprocess.fileio import BOM


class SyntaxHubInterface(GeneratorHubInterface):
    def encode(self, sentence: str) -> torch.LongTensor:
        text = self.apply_bpe(self.tokenize(sentence.lstrip(BOM)))
        ids = self.binarize(text)
        remember = getattr(self.task, "remember_source_text", None)
        if remember is not None:
            remember(ids, text)
        return ids
