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
fairseq-interactive (``SyntaxTranslationTask.check_applied_bpe``).
"""

import weakref
from typing import Dict, List, Optional, Tuple

import torch
from fairseq.hub_utils import GeneratorHubInterface

from fairseq_syntax_core.fileio import BOM


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

    def encode(self, sentence: str) -> torch.LongTensor:
        text = self.apply_bpe(self.tokenize(sentence.lstrip(BOM)))
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
        remember = getattr(self.task, "remember_source_texts", None)
        if remember is None:
            return super().generate(tokenized_sentences, *args, **kwargs)
        sources = list(tokenized_sentences)
        remember(sources, [self.text_of(ids) for ids in sources])
        try:
            return super().generate(tokenized_sentences, *args, **kwargs)
        finally:
            remember([], [])


def _ids_key(ids: torch.Tensor) -> bytes:
    return ids.detach().to("cpu", torch.int64).numpy().tobytes()


def load_hub(model_class, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
    """fairseq's hub loader for ``model_class``, returning a :class:`SyntaxHubInterface`."""
    from fairseq import hub_utils

    x = hub_utils.from_pretrained(
        model_name_or_path, checkpoint_file, data_name_or_path, archive_map=model_class.hub_models(), **kwargs
    )
    return SyntaxHubInterface(x["args"], x["task"], x["models"])
