"""``tree2seq``: Eriguchi et al. (2016)'s tree-to-sequence attentional model on fairseq's LSTM decoder.

Encoder: :class:`.encoder.Tree2SeqEncoder` (sec. 3.1-3.2). Decoder: fairseq's ``LSTMDecoder``
(one layer, input feeding as sec. 3.3 and Luong et al. 2015) with Eriguchi et al. (2016)'s attention: the
score of a source unit is the **dot product** ``h_i . s_j`` (one softmax over the ``n + 1``
sequential and ``n - 1`` phrase units together), the context ``d_j`` joins the decoder state
in ``d~_j = tanh(W_d [d_j; s_j] + b_d)``, and ``p(y_j | ...) = softmax(W_s d~_j + b_s)``. fairseq's
``AttentionLayer`` scores with a learned projection ("general"); :class:`DotAttention` keeps
its output layer and drops the projection, as the paper's equation has none.

Options use fairseq's ``lstm`` names where they apply. The encoder and decoder hidden sizes
are one ``d`` (dot-product attention and the decoder's initial state need it).
"""

from typing import Dict, Optional, Set

from fairseq.models import FairseqEncoderDecoderModel, register_model
from fairseq.models.lstm import AttentionLayer, Embedding, Linear, LSTMDecoder
import torch
from torch import Tensor, nn

from fairseq_syntax_core.errors import UsageError

from .encoder import PHRASE, Tree2SeqEncoder, set_forget_bias


class DotAttention(AttentionLayer):
    """fairseq's attention layer with Eriguchi et al. (2016)'s dot-product score (no input projection) and a biased output layer.

    The scores and the context are batched matrix products: fairseq's layer multiplies the
    ``(S, B, d)`` memory by the weights elementwise at every target step, which keeps an
    ``S x B x d`` product per step for the backward pass, and tree2seq's memory is twice as
    long (words and phrases). Same values (``tests/test_tree2seq.py``).
    """

    def __init__(self, dim: int) -> None:
        super().__init__(dim, dim, dim, bias=False)
        self.input_proj = nn.Identity()
        self.output_proj = Linear(2 * dim, dim, bias=True)

    def forward(self, input: Tensor, source_hids: Tensor, encoder_padding_mask: Optional[Tensor]):
        memory = source_hids.transpose(0, 1)  # (B, S, d)
        scores = torch.bmm(memory, input.unsqueeze(2)).squeeze(2)  # (B, S): h_i . s_j
        if encoder_padding_mask is not None:
            scores = scores.float().masked_fill(encoder_padding_mask.t(), float("-inf")).type_as(scores)
        weights = torch.softmax(scores, dim=1)
        context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)  # d_j
        x = torch.tanh(self.output_proj(torch.cat((context, input), dim=1)))
        return x, weights.t()  # (S, B), as fairseq's layer returns them


@register_model("tree2seq")
class Tree2SeqModel(FairseqEncoderDecoderModel):
    """Eriguchi et al. (2016): a sequential + binary Tree-LSTM encoder and an attentional LSTM decoder."""

    #: its decoder attends over phrase nodes as well as words: no word-to-word hard alignment (soft is cut to words)
    hard_alignment = False

    @staticmethod
    def add_args(parser) -> None:
        parser.add_argument("--dropout", type=float, metavar="D", help="dropout probability")
        parser.add_argument("--encoder-embed-dim", type=int, metavar="N", help="source embedding dimension")
        parser.add_argument("--encoder-hidden-size", type=int, metavar="N",
                            help="d: the sequential LSTM, Tree-LSTM and attention size (paper: 256 or 512)")
        parser.add_argument("--encoder-dropout-in", type=float, metavar="D", help="dropout on source embeddings")
        parser.add_argument("--encoder-dropout-out", type=float, metavar="D", help="dropout on the encoder's units")
        parser.add_argument("--decoder-embed-dim", type=int, metavar="N", help="target embedding dimension")
        parser.add_argument("--decoder-hidden-size", type=int, metavar="N", help="decoder LSTM size (= d)")
        parser.add_argument("--decoder-out-embed-dim", type=int, metavar="N", help="size before the output layer")
        parser.add_argument("--decoder-dropout-in", type=float, metavar="D", help="dropout on target embeddings")
        parser.add_argument("--decoder-dropout-out", type=float, metavar="D", help="dropout on the decoder output")
        parser.add_argument("--share-decoder-input-output-embed", action="store_true",
                            help="tie the target embeddings and the output layer")
        parser.add_argument("--share-all-embeddings", action="store_true",
                            help="one embedding for source, target and output (needs a joined dictionary)")
        parser.add_argument("--no-sequential-encoder", action="store_true",
                            help="leaves are context-free Tree-LSTM units over the embeddings, no sequential LSTM "
                            "(Eriguchi et al. 2016, Table 5's ablation)")
        parser.add_argument("--forget-bias", type=float, metavar="B",
                            help="initial forget-gate bias of every LSTM and Tree-LSTM unit (paper sec. 4.2: 1.0)")

    @classmethod
    def build_model(cls, args, task):
        from .architectures import base_architecture

        base_architecture(args)
        check_args(args)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        encoder_embed = Embedding(len(src_dict), args.encoder_embed_dim, src_dict.pad())
        if args.share_all_embeddings:
            if src_dict != tgt_dict:
                raise UsageError("--share-all-embeddings needs a joined dictionary (fairseq-syntax-preprocess "
                                 "--joined-dictionary)")
            decoder_embed = encoder_embed
        else:
            decoder_embed = Embedding(len(tgt_dict), args.decoder_embed_dim, tgt_dict.pad())
        encoder = Tree2SeqEncoder(
            src_dict, encoder_embed, args.encoder_hidden_size, args.encoder_dropout_in, args.encoder_dropout_out,
            sequential=not args.no_sequential_encoder, forget_bias=args.forget_bias,
            left_pad=bool(getattr(getattr(task, "cfg", None), "left_pad_source", True)),
        )
        decoder = LSTMDecoder(
            tgt_dict, embed_dim=args.decoder_embed_dim, hidden_size=args.decoder_hidden_size,
            out_embed_dim=args.decoder_out_embed_dim, num_layers=1, dropout_in=args.decoder_dropout_in,
            dropout_out=args.decoder_dropout_out, attention=True, encoder_output_units=args.encoder_hidden_size,
            pretrained_embed=decoder_embed,
            share_input_output_embed=args.share_decoder_input_output_embed or args.share_all_embeddings,
            max_target_positions=getattr(args, "max_target_positions", int(1e5)),
        )
        decoder.attention = DotAttention(args.decoder_hidden_size)
        for layer in decoder.layers:
            set_forget_bias(layer.bias_ih, layer.bias_hh, args.forget_bias)
        return cls(encoder, decoder)

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor,
                src_syntax: Optional[Dict[str, Tensor]] = None):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, src_syntax=src_syntax)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out)

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        """fairseq's hub loader, returning a hub interface that parses the user's own text."""
        from fairseq_syntax.hub import load_hub

        return load_hub(cls, model_name_or_path, checkpoint_file, data_name_or_path, **kwargs)

    def syntax_inputs(self) -> Set[str]:
        """The batch entries the task must provide (``src_syntax``): the phrase structure."""
        return {PHRASE}

    def max_positions(self):
        return (self.encoder.max_positions(), self.decoder.max_positions())


def check_args(args) -> None:
    """Option values that would build a wrong model: an error naming the flag."""
    for flag in ("encoder_embed_dim", "encoder_hidden_size", "decoder_embed_dim", "decoder_hidden_size",
                 "decoder_out_embed_dim"):
        value = getattr(args, flag)
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"--{flag.replace('_', '-')} {value}: expected a positive size")
    for flag in ("dropout", "encoder_dropout_in", "encoder_dropout_out", "decoder_dropout_in", "decoder_dropout_out"):
        value = getattr(args, flag)
        if not 0.0 <= value < 1.0:
            raise UsageError(f"--{flag.replace('_', '-')} {value}: expected a probability in [0, 1)")
    if args.decoder_hidden_size != args.encoder_hidden_size:
        raise UsageError(f"--decoder-hidden-size {args.decoder_hidden_size} must equal --encoder-hidden-size "
                         f"{args.encoder_hidden_size}: the attention is a dot product of the two (Eriguchi et al. 2016, sec. 3.3) "
                         "and the decoder starts from the encoder's units")
    if args.share_all_embeddings and args.encoder_embed_dim != args.decoder_embed_dim:
        raise UsageError("--share-all-embeddings needs --encoder-embed-dim = --decoder-embed-dim")
    tied = args.share_decoder_input_output_embed or args.share_all_embeddings
    if tied and args.decoder_out_embed_dim != args.decoder_embed_dim:
        raise UsageError("tied output embeddings need --decoder-out-embed-dim = --decoder-embed-dim")
    if not (args.forget_bias == args.forget_bias) or abs(args.forget_bias) == float("inf"):
        raise UsageError(f"--forget-bias {args.forget_bias}: expected a finite number")
