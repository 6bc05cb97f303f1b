"""The tree-based encoder of Eriguchi et al. 2016, sec. 3.1: a sequential LSTM whose units are the leaves of a binary Tree-LSTM.

For a source line of ``n`` pieces plus fairseq's ``</s>``:

* the sequential LSTM (sec. 2.1) runs over all ``n + 1`` tokens; its units ``(h_i, c_i)`` of
  the ``n`` pieces are the tree's leaf units ("when initializing the leaf units of the
  tree-based encoder, we employ the sequential LSTM units"). ``nn.LSTM`` returns only the last
  memory cell, so the cells of every step are recomputed from its own weights and outputs:
  the gates of every step at once, then the linear cell recurrence ``c_t = f_t c_{t-1} + i_t u_t``
  as a parallel prefix scan (:func:`linear_recurrence`: ``ceil(log2 T)`` elementwise steps over
  the whole batch, no loop over time steps);
* the ``n - 1`` phrase nodes come from the binary Tree-LSTM, one tree level per step
  (:class:`fairseq_syntax.modules.tree_lstm.BinaryTreeLSTM`);
* the decoder starts from another Tree-LSTM unit over the last sequential unit (at ``</s>``)
  and the root phrase unit (sec. 3.2);
* attention (sec. 3.3) sees the ``n + 1`` sequential states and the ``n - 1`` phrase states
  together, as one memory ``(T + N, B, d)`` with one padding mask.

A line without a tree (no merge although ``n > 1``: the ``--phrase-fallback`` of the
pipeline) has a zero root unit and attends to its leaves only; a one-piece line's root is its
leaf. ``--no-sequential-encoder`` (the ablation of Table 5) gives the leaves the units of the
original Tree-LSTM instead: an LSTM unit over the word embedding alone (Tai et al.: no
children), ``c = i * u``, ``h = o * tanh(c)``, context-free; the ``</s>`` unit then plays the
last sequential state.

The encoder works in right-padded order internally (fairseq's ``LSTMEncoder`` does the same):
with ``--left-pad-source`` the rows are shifted first, so leaf ``i`` sits at column ``i``.
"""

from typing import Dict, Optional, Tuple

import torch
from fairseq import utils
from fairseq.models import FairseqEncoder
from fairseq.modules import FairseqDropout
from torch import Tensor, nn
from torch.nn import functional as F

from fairseq_syntax.modules.tree_lstm import BinaryTreeLSTM, BinaryTreeLSTMCell
from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core.vocabulary import PHRASE_HEIGHTS, PHRASE_LEVEL_SIZES, PHRASE_NODES

PHRASE, PHRASE_MASK = PHRASE_NODES, PHRASE_NODES + "_mask"

EncoderOut = Tuple[Tensor, Tensor, Tensor, Tensor]


def linear_recurrence(decay: Tensor, inputs: Tensor) -> Tensor:
    """All ``c_t = decay_t * c_{t-1} + inputs_t`` (``c_{-1} = 0``) along dim 1, by a log-depth scan.

    Hillis-Steele prefix scan of the affine maps ``c -> a c + b``: after the round with
    offset ``s`` each position holds the composition of the ``2s`` maps ending there, so
    ``ceil(log2 T)`` rounds of elementwise operations over ``(B, T, d)`` give every ``c_t``,
    equal to the sequential recurrence up to float rounding.
    """
    a, b = decay, inputs
    T, offset = b.size(1), 1
    while offset < T:  # ceil(log2 T) rounds, each over all time steps at once
        b = b + a * F.pad(b[:, :-offset], (0, 0, offset, 0))  # maps before the start are c -> 0
        a = a * F.pad(a[:, :-offset], (0, 0, offset, 0))
        offset *= 2
    return b


def set_forget_bias(lstm_bias_ih: Tensor, lstm_bias_hh: Tensor, value: float) -> None:
    """PyTorch LSTM gates are (i, f, g, o): the forget gate's total bias ``b_ih + b_hh`` becomes ``value``."""
    hidden = lstm_bias_ih.numel() // 4
    with torch.no_grad():
        lstm_bias_ih[hidden : 2 * hidden].fill_(value)
        lstm_bias_hh[hidden : 2 * hidden].fill_(0.0)


class Tree2SeqEncoder(FairseqEncoder):
    def __init__(
        self,
        dictionary,
        embed_tokens: nn.Embedding,
        hidden_size: int,
        dropout_in: float,
        dropout_out: float,
        sequential: bool = True,
        forget_bias: float = 1.0,
        left_pad: bool = True,
    ) -> None:
        super().__init__(dictionary)
        self.embed_tokens = embed_tokens
        self.padding_idx = dictionary.pad()
        self.hidden_size = hidden_size
        self.left_pad = left_pad
        self.sequential = sequential
        embed_dim = embed_tokens.embedding_dim
        self.dropout_in_module = FairseqDropout(dropout_in, module_name=self.__class__.__name__)
        self.dropout_out_module = FairseqDropout(dropout_out, module_name=self.__class__.__name__)
        if sequential:
            self.lstm = nn.LSTM(embed_dim, hidden_size)
            for name, param in self.lstm.named_parameters():
                nn.init.uniform_(param, -0.1, 0.1)
            set_forget_bias(self.lstm.bias_ih_l0, self.lstm.bias_hh_l0, forget_bias)
        else:
            self.leaf = nn.Linear(embed_dim, 3 * hidden_size)  # i, o, u of a childless Tree-LSTM unit
        self.tree = BinaryTreeLSTM(hidden_size, forget_bias)
        self.init_unit = BinaryTreeLSTMCell(hidden_size, forget_bias)  # sec. 3.2: s_1 from h_n and h_root

    def _sequential_units(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """``(h, c)`` of every step, ``(B, T, d)``; after a row's end they run on over padding (the caller
        zeroes them). Rows are right-padded, so a row's steps never see its padding: no packing, which
        would need the lengths on the host."""
        B, T, _ = x.shape
        h, _ = self.lstm(x.transpose(0, 1))
        h = h.transpose(0, 1)
        previous = torch.cat([h.new_zeros(B, 1, self.hidden_size), h[:, :-1]], dim=1)
        gates = nn.functional.linear(x, self.lstm.weight_ih_l0, self.lstm.bias_ih_l0) + \
            nn.functional.linear(previous, self.lstm.weight_hh_l0, self.lstm.bias_hh_l0)
        i, f, g, _ = gates.chunk(4, dim=-1)
        cells = linear_recurrence(torch.sigmoid(f), torch.sigmoid(i) * torch.tanh(g))  # module doc
        return h, cells

    def _leaf_units(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        i, o, u = self.leaf(x).chunk(3, dim=-1)
        c = torch.sigmoid(i) * torch.tanh(u)
        return torch.sigmoid(o) * torch.tanh(c), c

    def forward(
        self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, src_syntax: Optional[Dict[str, Tensor]] = None
    ) -> EncoderOut:
        if src_syntax is None or PHRASE not in src_syntax or PHRASE_MASK not in src_syntax:
            raise UsageError(
                "tree2seq needs the source phrase structure (net_input['src_syntax']['phrase']): train and decode "
                "with --task syntax_translation on a data-bin made by fairseq-syntax-preprocess"
            )
        if self.left_pad:
            src_tokens = utils.convert_padding_direction(src_tokens, self.padding_idx, left_to_right=True)
        B, T = src_tokens.shape
        real = src_tokens.ne(self.padding_idx)
        lengths = real.long().sum(dim=1)  # pieces + </s>
        x = self.dropout_in_module(self.embed_tokens(src_tokens))
        h, c = self._sequential_units(x) if self.sequential else self._leaf_units(x)
        h, c = h * real.unsqueeze(-1), c * real.unsqueeze(-1)

        phrase, phrase_mask = src_syntax[PHRASE].to(src_tokens.device), src_syntax[PHRASE_MASK].to(src_tokens.device)
        n_leaves = (lengths - 1).clamp(min=0)
        node_h, node_c = self.tree(h, c, phrase, phrase_mask, n_leaves, src_syntax.get(PHRASE_HEIGHTS),
                                   src_syntax.get(PHRASE_LEVEL_SIZES))  # from the collater: no host sync

        # the root: the last merge, a one-piece line's leaf, zero for a line without a tree
        merges = phrase_mask.long().sum(dim=1)
        all_h, all_c = torch.cat([h, node_h], dim=1), torch.cat([c, node_c], dim=1)
        root = torch.where(merges > 0, T + merges - 1, torch.zeros_like(merges))
        has_root = (merges > 0) | (n_leaves == 1)
        pick = root.view(B, 1, 1).expand(B, 1, self.hidden_size)
        root_h = all_h.gather(1, pick).squeeze(1) * has_root.unsqueeze(-1)
        root_c = all_c.gather(1, pick).squeeze(1) * has_root.unsqueeze(-1)
        last = (lengths - 1).clamp(min=0).view(B, 1, 1).expand(B, 1, self.hidden_size)
        init_h, init_c = self.init_unit(h.gather(1, last).squeeze(1), c.gather(1, last).squeeze(1), root_h, root_c)

        memory = self.dropout_out_module(torch.cat([h, node_h], dim=1)).transpose(0, 1)  # (T + N, B, d)
        padding = torch.cat([~real, ~phrase_mask], dim=1).t()
        return memory, init_h.unsqueeze(0), init_c.unsqueeze(0), padding

    def reorder_encoder_out(self, encoder_out: EncoderOut, new_order: Tensor) -> EncoderOut:
        memory, hidden, cell, padding = encoder_out
        return (memory.index_select(1, new_order), hidden.index_select(1, new_order),
                cell.index_select(1, new_order), padding.index_select(1, new_order))

    def max_positions(self) -> int:
        return int(1e5)
