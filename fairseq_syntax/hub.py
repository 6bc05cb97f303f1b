"""fairseq's hub interface for syntax models: the task parses the user's own text.

``GeneratorHubInterface.sample``/``translate`` encode each sentence (tokenize, BPE,
dictionary ids) and hand the task only the ids. :class:`SyntaxHubInterface` also keeps the
tokenized, BPE-segmented text of every sentence it encodes, so that the task parses exactly
what ``fairseq-syntax-preprocess`` would have parsed (see
:mod:`fairseq_syntax.data.online_parser`). ``SyntaxTransformerModel.from_pretrained`` and ``Tree2SeqModel.from_pretrained`` return it.
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


def load_hub(model_class, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
    """fairseq's hub loader for ``model_class``, returning a :class:`SyntaxHubInterface`."""
    from fairseq import hub_utils

    x = hub_utils.from_pretrained(
        model_name_or_path, checkpoint_file, data_name_or_path, archive_map=model_class.hub_models(), **kwargs
    )
    return SyntaxHubInterface(x["args"], x["task"], x["models"])
