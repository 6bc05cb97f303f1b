"""``syntax_transformer``: fairseq's (legacy, argparse) Transformer with the syntax components.

Options: :mod:`.config`; encoder and its components: :mod:`.encoder`, :mod:`.components`;
presets (one per paper and size): :mod:`.architectures`.
"""

from typing import Dict, Optional, Set

from torch import Tensor

from fairseq.models import register_model
from fairseq.models.transformer import TransformerConfig, TransformerModel
from fairseq.tasks import FairseqTask

from fairseq_syntax_core import checkpoint_loader
from fairseq_syntax_core.checkpoint_loader import state_dict_mismatch
from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core.oneline import one_line
from fairseq_syntax_core.vocabulary import SUBWORD_LABEL


from .components.auxiliary import SOURCE_PADDING_KEY
from .config import ModelOptionError, add_syntax_args
from .decoder import SyntaxTransformerDecoder
from .encoder import SyntaxTransformerEncoder, encoder_model_dim, with_encoder_dim

__all__ = ["ModelOptionError", "SyntaxTransformerDecoder", "SyntaxTransformerModel", "record_syntax_vocab"]

#: parameters sized by the data-bin's dictionaries (words, labels, POS): a mismatch there is another data-bin
_VOCABULARY_PARAMETERS = ("embed_tokens", "output_projection", "input_components.features", "path_encoder.label")


@register_model("syntax_transformer")
class SyntaxTransformerModel(TransformerModel):
    """fairseq's Transformer whose encoder has the syntax components the options turn on.

    The model consumes ``net_input["src_syntax"]``, the side inputs :meth:`syntax_inputs` lists.
    """

    @classmethod
    def add_args(cls, parser) -> None:
        super().add_args(parser)
        add_syntax_args(parser)  # no defaults: the architecture fills them (fairseq convention)

    @classmethod
    def build_model(cls, args, task):
        """fairseq's, with a bad option value reported in one line (no traceback) by the error hook."""
        try:
            return cls._build_model(args, task)
        except ValueError as error:
            raise ModelOptionError(str(error)) from None

    @classmethod
    def _build_model(cls, args, task):
        from .architectures import syntax_base_architecture

        syntax_base_architecture(args)  # fills and checks the options (check_model_sizes too)
        record_syntax_vocab(args, task)
        model = super().build_model(args, task)
        needs, target = model.syntax_inputs(), model.target_syntax_inputs()  # target: Ma et al. 2019, secs. 3.1-3.3
        if (needs or target) and isinstance(task, FairseqTask) and getattr(task, "label_dict", None) is None:
            # fairseq's own tasks give no src_syntax: the first forward would fail, deep in the encoder
            # (code that builds with a stand-in task and passes src_syntax itself is not refused)
            raise ValueError(_task_problem(args, task, needs, target))
        return model

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return SyntaxTransformerEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        # the encoder-decoder attention reads encoder states of the encoder width
        cfg = with_encoder_dim(args, encoder_model_dim(args))
        return SyntaxTransformerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's, with a checkpoint that does not fit this data-bin reported as such."""
        try:
            return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        except RuntimeError as error:
            mismatch = state_dict_mismatch(error)
            if mismatch is None:
                raise
            lines = [line.strip() for line in str(error).splitlines()]
            vocabulary = [line for line in lines if line.startswith("size mismatch for")
                          and any(part in line for part in _VOCABULARY_PARAMETERS)]
            if vocabulary and all(not line.startswith(("Missing", "Unexpected")) for line in lines):
                where = f"{one_line(checkpoint_loader.last_read)}: " if checkpoint_loader.last_read else ""
                raise UsageError(
                    f"{where}the checkpoint does not fit this data-bin: its dictionaries (words, labels or POS) have "
                    f"other sizes ({one_line(vocabulary[0][:200])}). Decode with the data-bin it was trained on"
                ) from None
            raise UsageError(mismatch) from None

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        """fairseq's hub loader, returning a hub interface that parses the user's own text."""
        from fairseq_syntax.hub import load_hub

        return load_hub(cls, model_name_or_path, checkpoint_file, data_name_or_path, **kwargs)

    def syntax_inputs(self) -> Set[str]:
        """Side inputs (keys of ``net_input['src_syntax']``) this model consumes."""
        return self.encoder.syntax_inputs()

    def target_syntax_inputs(self) -> Set[str]:
        """Target-side keys (``net_input['tgt_syntax']`` and ``sample['target_syntax']``) this model reads or
        predicts: ``{"distance"}`` with any target-side NSD option on, else empty (Ma et al. 2019, secs. 3.1-3.3)."""
        return self.decoder.target_syntax_inputs()

    def training_outputs(self) -> Set[str]:
        """The ``extra`` keys of the outputs only training losses read (the encoder's output components',
        the decoder components': ``tgt_nsd_logits`` with ``--nsd-target-predict``)."""
        return set(self.encoder.output_keys()) | self.decoder.training_outputs()

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Tensor,
        prev_output_tokens: Tensor,
        return_all_hiddens: bool = True,
        features_only: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        src_syntax: Optional[Dict[str, Tensor]] = None,
        tgt_syntax: Optional[Dict[str, Tensor]] = None,
    ):
        """fairseq's forward; returns ``(decoder_out, extra)``.

        ``extra`` also holds the encoder's output components' outputs (``--nsd-predict``: eq. 11
        logits under ``"src_nsd_logits"``, ``[B x T x (2D+1)]``) and, with any, the source padding mask
        under ``"src_nsd_padding_mask"`` (``[B x T]``), for the criterion's auxiliary losses.
        ``tgt_syntax``: the decoder input's gold distances (target-side NSD, see :mod:`.decoder`);
        with ``--nsd-target-predict`` ``extra["tgt_nsd_logits"]`` holds the decoder's eq. 11 logits.
        """
        encoder_out = self.encoder(
            src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens, src_syntax=src_syntax
        )
        decoder_out = self.decoder(
            prev_output_tokens,
            encoder_out=encoder_out,
            features_only=features_only,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
            tgt_syntax=tgt_syntax,
        )
        outputs = [key for key in self.encoder.output_keys() if len(encoder_out.get(key, [])) > 0]
        for key in outputs:  # the output components' (--nsd-predict), for the criterion's losses
            decoder_out[1][key] = encoder_out[key]
        if outputs:
            decoder_out[1][SOURCE_PADDING_KEY] = encoder_out["encoder_padding_mask"]
        return decoder_out


def record_syntax_vocab(args, task) -> None:
    """Record the label/POS dictionary sizes and special ids of the task in ``args``.

    Kept in the checkpoint's args like fairseq's other derived settings, so a model reloaded
    with a task that has no dictionaries still builds; a syntax_translation task overrides them.
    """
    labels = getattr(task, "label_dict", None)
    if labels is not None:
        args.syntax_num_labels = len(labels)
        args.syntax_label_pad = labels.pad()
        args.syntax_label_eos = labels.eos()
        # PASCAL recovers words from the <subword> arcs of the piece trees (-1: none)
        args.syntax_subword_label = labels.indices.get(SUBWORD_LABEL, -1)
    pos = getattr(task, "pos_dict", None)
    if pos is not None:
        args.syntax_num_pos = len(pos)
        args.syntax_pos_pad = pos.pad()


def _task_problem(args, task, needs, target) -> str:
    """The line for a syntax model built by a task that gives no syntax: the task as built (a checkpoint's own,
    named with its file when one was just read, as the hub and fairseq-generate build it)."""
    from fairseq_syntax_core import checkpoint_loader
    from fairseq_syntax_core.oneline import one_line

    name = getattr(getattr(task, "cfg", None), "_name", None) or type(task).__name__
    what = (f"reads the source syntax ({', '.join(sorted(needs))})" if needs else
            f"reads or predicts the target syntax ({', '.join(sorted(target))})")
    read = checkpoint_loader.last_read
    got = f"the checkpoint's settings name --task {one_line(str(name))}" if read else f"got --task {one_line(str(name))}"
    return (f"{one_line(read) + ': ' if read else ''}--arch {one_line(str(getattr(args, 'arch', 'syntax_transformer')))}"
            f" {what}, which only --task syntax_translation provides ({got})")
