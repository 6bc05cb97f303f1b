"""``SyntaxTransformerDecoder``: fairseq's Transformer decoder with our layers and target-side NSD.

Layers: :class:`~.layers.SyntaxDecoderLayer` (Shaw relative positions, ``--decoder-rel-seq-k``).

Target-side neural syntactic distance, Ma et al. 2019 secs. 3.1-3.3 (the parts are
in :mod:`fairseq_syntax.modules.target_distance` and :mod:`fairseq_syntax.modules.syntactic_distance`):

* ``--nsd-target-input concat|add|linear``: each decoder input token's scaled word embedding
  is combined with the embedding of its distance (eq. 7 with the combiners of eqs. 8-10).
  ``concat`` widens the decoder: its layers, positions and layer norms are
  ``--decoder-embed-dim + --nsd-embed-dim`` wide, and fairseq's ``project_out_dim`` maps the final
  states back to ``--decoder-output-dim`` (the word width) for the output layer.
* ``--nsd-target-spe-lambda λ``: the distance positional encoding (eqs. 15-16), added with
  fairseq's ordinary one.
* ``--nsd-target-predict``: eq. 11 on the final states (the output layer's input), the
  distance of the next token, returned in ``extra["tgt_nsd_logits"]`` (``[B x T x (2D+1)]``,
  a one-element list, like the source's ``src_nsd_logits``) for
  ``label_smoothed_cross_entropy_with_nsd``; ``--nsd-target-predict-from state+token`` also reads
  the embedding of that next token (the one emitted at generation), ``state`` the state alone.

Where the input distances come from:

* training and validation (no ``incremental_state``): ``tgt_syntax["distance"]``, the gold
  distances aligned with ``prev_output_tokens`` (teacher forcing; 0 at the leading ``</s>`` and at
  padding); in training, ``--nsd-target-sampling P`` replaces a share P of them by the model's own
  predictions from a first pass without gradient, so that it learns to read what it will feed
  back at generation;
* generation (``incremental_state`` given, no ``tgt_syntax``): the feedback of sec. 3.3, the most
  probable class of eq. 11 for the previous step's token (:class:`~fairseq_syntax.modules.target_distance.DistanceFeedback`,
  in the incremental state, reordered with the beam); fairseq's ``SequenceGenerator`` needs no fork;
* a full forward without ``tgt_syntax`` (fairseq-generate ``--score-reference`` or
  ``--print-alignment`` on a data-bin without target distances, ``hub.score``) is **refused** with
  a message: predicting and feeding back distances is sequential and cannot be done in one
  parallel pass, and a pass with made-up distances would score another model than the one that
  generated. To rescore given translations as generation scored them, compute the distances
  generation feeds (:meth:`SyntaxTransformerDecoder.feedback_distances`, one incremental step
  per position) and pass them as ``tgt_syntax``.

The input distances used are returned in ``extra["tgt_nsd_distance"]`` (``[B x T]``).
"""

import copy
import math
from typing import Any, Dict, List, Optional, Set

import torch
from torch import Tensor

from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase

from fairseq_syntax.modules.syntactic_distance import DistancePredictor
from fairseq_syntax.modules.target_distance import (
    BOS_DISTANCE,
    TGT_NSD_INPUT_KEY,
    TGT_NSD_LOGITS_KEY,
    DistanceFeedback,
    TargetDistanceInput,
)

from fairseq_syntax.data.syntax_features import PHRASE_FEATURES

from .config import SyntaxModelConfig, decoder_model_dim, target_nsd_consumes, uses_target_nsd
from .layers import SyntaxDecoderLayer, wrap_layer

__all__ = ["SyntaxTransformerDecoder", "with_decoder_dim"]


def with_decoder_dim(cfg: TransformerConfig, dim: int) -> TransformerConfig:
    """A copy of ``cfg`` whose ``decoder.embed_dim`` (the layers' width) is ``dim``; ``output_dim`` stays."""
    if cfg.decoder.embed_dim == dim:
        return cfg
    cfg = copy.deepcopy(cfg)
    cfg.decoder.embed_dim = dim
    return cfg


class SyntaxTransformerDecoder(TransformerDecoderBase):
    """Transformer decoder whose layers may use Shaw relative positions, with target-side NSD.

    ``nsd_input`` (eq. 7 and eqs. 15-16), ``nsd_predictor`` (eq. 11) and ``nsd_feedback`` (sec. 3.3)
    exist only when their options are on; with every target option off the decoder is
    fairseq's, parameter for parameter.
    """

    def __init__(self, cfg: TransformerConfig, dictionary, embed_tokens, no_encoder_attn: bool = False,
                 output_projection=None) -> None:
        syntax = SyntaxModelConfig.from_args(cfg)
        word_dim = embed_tokens.embedding_dim
        model_dim = decoder_model_dim(syntax, word_dim)
        super().__init__(with_decoder_dim(cfg, model_dim), dictionary, embed_tokens,
                         no_encoder_attn=no_encoder_attn, output_projection=output_projection)
        if model_dim != word_dim:
            # f_emb (eq. 8) already gives the layers' width; the scale stays that of the words
            self.project_in_dim = None
            self.embed_scale = 1.0 if self.cfg.no_scale_embedding else math.sqrt(word_dim)
        self.syntax_cfg = syntax
        max_distance = syntax.nsd_max_distance
        self.nsd_key: Optional[str] = syntax.nsd_key if uses_target_nsd(syntax) else None  # --nsd-distance/-roots/-units
        consumes = target_nsd_consumes(syntax)
        self.nsd_input: Optional[TargetDistanceInput] = (
            TargetDistanceInput(str(syntax.nsd_target_input), word_dim, syntax.nsd_embed_dim, max_distance,
                                syntax.nsd_target_spe_lambda, model_dim, scale=not self.cfg.no_scale_embedding)
            if consumes else None
        )
        # eq. 11 on h_t (state) or on [h_t; E(y_t)] (state+token: the token the distance belongs to)
        self.nsd_predict_from_token = str(syntax.nsd_target_predict_from) == "state+token"
        predictor_dim = self.output_embed_dim + (word_dim if self.nsd_predict_from_token else 0)
        self.nsd_predictor: Optional[DistancePredictor] = (
            DistancePredictor(predictor_dim, max_distance) if syntax.nsd_target_predict else None
        )
        self.nsd_feedback: Optional[DistanceFeedback] = DistanceFeedback(max_distance) if consumes else None
        self.nsd_sampling = float(syntax.nsd_target_sampling) if consumes else 0.0  # training only

    def build_decoder_layer(self, cfg: TransformerConfig, no_encoder_attn: bool = False):
        return wrap_layer(SyntaxDecoderLayer(cfg, no_encoder_attn), cfg)

    def target_syntax_inputs(self) -> Set[str]:
        """Keys of ``tgt_syntax`` / ``target_syntax`` this decoder reads or predicts (e.g. ``{"distance"}``, or empty).

        A constituency distance brings its ``KEY_mask`` (which lines have a tree: the loss mask).
        """
        if self.nsd_key is None:
            return set()
        return {self.nsd_key} | ({self.nsd_key + "_mask"} if self.nsd_key + "_mask" in PHRASE_FEATURES else set())

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        features_only: bool = False,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        src_lengths: Optional[Any] = None,
        return_all_hiddens: bool = False,
        tgt_syntax: Optional[Dict[str, Tensor]] = None,
    ):
        """fairseq's decoder forward; ``tgt_syntax`` holds the input distances (see the module doc)."""
        if self.training and incremental_state is None and self.nsd_sampling > 0:
            tgt_syntax = self._own_input_distances(prev_output_tokens, encoder_out, tgt_syntax)
        x, extra = self.extract_features(
            prev_output_tokens,
            encoder_out=encoder_out,
            incremental_state=incremental_state,
            full_context_alignment=full_context_alignment,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            tgt_syntax=tgt_syntax,
        )
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        tgt_syntax: Optional[Dict[str, Tensor]] = None,
    ):
        return self.extract_features_scriptable(
            prev_output_tokens, encoder_out, incremental_state, full_context_alignment, alignment_layer,
            alignment_heads, tgt_syntax,
        )

    def _input_distance(self, prev_output_tokens: Tensor, incremental_state, tgt_syntax) -> Tensor:
        """The distance of each input token: ``tgt_syntax`` when given, else the feedback (generation)."""
        assert self.nsd_key is not None and self.nsd_feedback is not None
        distance = (tgt_syntax or {}).get(self.nsd_key)
        if distance is not None:
            if distance.shape != prev_output_tokens.shape:
                raise ValueError(
                    f"tgt_syntax[{self.nsd_key!r}] has shape {tuple(distance.shape)}, prev_output_tokens "
                    f"{tuple(prev_output_tokens.shape)}: the distances must be aligned with the decoder input"
                )
            distance = distance.to(prev_output_tokens.device)
            return distance[:, -1:] if incremental_state is not None else distance
        if incremental_state is not None:
            if not self.nsd_predict_from_token:
                return self.nsd_feedback.next_input(incremental_state, prev_output_tokens.size(0),
                                                    prev_output_tokens.device)
            # eq. 11 for the token the search just chose, from the state of the step that chose it
            state = self.nsd_feedback.recall(incremental_state, "state", prev_output_tokens.size(0))
            if state is None:
                return self.nsd_feedback.bos(prev_output_tokens.size(0), prev_output_tokens.device)
            assert self.nsd_predictor is not None
            logits = self.nsd_predictor(self._predictor_input(state.unsqueeze(1), prev_output_tokens[:, -1:]))
            return self.nsd_feedback.predicted(logits)
        raise ValueError(
            f"this decoder reads target syntactic distances (Ma et al. 2019, sec. 3.1) but got no "
            f"tgt_syntax[{self.nsd_key!r}]: training and validation need the gold distances (--task "
            "syntax_translation on a data-bin with parsed targets); at generation they are fed back step by "
            "step (incremental decoding), which one full forward pass cannot do (fairseq-generate "
            "--score-reference or --print-alignment without target distances, hub.score). To rescore "
            "translations, pass tgt_syntax={'distance': model.decoder.feedback_distances(prev_output_tokens, "
            "encoder_out)}"
        )

    def extract_features_scriptable(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        tgt_syntax: Optional[Dict[str, Tensor]] = None,
    ):
        """fairseq's, with the target distance input after the word embedding and eq. 11 on the output.

        Returns ``(features, extra)``; ``extra`` adds ``"tgt_nsd_logits"`` (with
        ``--nsd-target-predict``; at generation only when the distances are fed back) and
        ``"tgt_nsd_distance"`` (the input distances used, when the decoder reads them).
        """
        distance: Optional[Tensor] = None
        if self.nsd_input is not None:
            distance = self._input_distance(prev_output_tokens, incremental_state, tgt_syntax)

        full_tokens = prev_output_tokens
        # --- from fairseq TransformerDecoderBase.extract_features_scriptable (ve-fairseq 0.12.3) ---
        bs, slen = prev_output_tokens.size()
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1

        enc: Optional[Tensor] = None
        padding_mask: Optional[Tensor] = None
        if encoder_out is not None and len(encoder_out["encoder_out"]) > 0:
            enc = encoder_out["encoder_out"][0]
        if encoder_out is not None and len(encoder_out["encoder_padding_mask"]) > 0:
            padding_mask = encoder_out["encoder_padding_mask"][0]

        # embed positions
        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)

        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]

        # Prevent torchscript exporting issue for dynamic quant embedding
        prev_output_tokens = prev_output_tokens.contiguous()
        # embed tokens and positions
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)

        syntax_positions: Optional[Tensor] = None
        if self.nsd_input is not None and distance is not None:
            # eq. 7 (f_emb of eqs. 8-10) on the scaled word embedding; SPE (eqs. 15-16) with the PE below
            x = self.nsd_input.combine(x, distance, prev_output_tokens.eq(self.padding_idx))
            syntax_positions = self.nsd_input.positions(distance, x.dtype)

        if self.quant_noise is not None:
            x = self.quant_noise(x)

        if self.project_in_dim is not None:
            x = self.project_in_dim(x)

        if positions is not None:
            x += positions
        if syntax_positions is not None:
            x = x + syntax_positions

        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)

        x = self.dropout_module(x)

        # B x T x C -> T x B x C
        x = x.transpose(0, 1)

        self_attn_padding_mask: Optional[Tensor] = None
        # fairseq tests `prev_output_tokens.eq(pad).any()` (a host sync); here the mask is always
        # given in training (all-False changes nothing) and left out in incremental decoding, whose
        # prefixes hold no padding (fairseq's generator writes no pad into them)
        if self.cross_self_attention or incremental_state is None:
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)

        # decoder layers
        attn: Optional[Tensor] = None
        inner_states: List[Optional[Tensor]] = [x]
        for idx, layer in enumerate(self.layers):
            if incremental_state is None and not full_context_alignment:
                self_attn_mask = self.buffered_future_mask(x)
            else:
                self_attn_mask = None

            x, layer_attn, _ = layer(
                x,
                enc,
                padding_mask,
                incremental_state,
                self_attn_mask=self_attn_mask,
                self_attn_padding_mask=self_attn_padding_mask,
                need_attn=bool((idx == alignment_layer)),
                need_head_weights=bool((idx == alignment_layer)),
            )
            inner_states.append(x)
            if layer_attn is not None and idx == alignment_layer:
                attn = layer_attn.float().to(x)

        if attn is not None:
            if alignment_heads is not None:
                attn = attn[:alignment_heads]

            # average probabilities over heads
            attn = attn.mean(dim=0)

        if self.layer_norm is not None:
            x = self.layer_norm(x)

        # T x B x C -> B x T x C
        x = x.transpose(0, 1)

        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        # --- end of fairseq's ---

        extra: Dict[str, Any] = {"attn": [attn], "inner_states": inner_states}
        if self.nsd_predictor is not None:
            if incremental_state is None:
                # eq. 11 at every position t: the distance of the next token target[:, t]
                inputs = self._predictor_input(x, self._next_tokens(full_tokens)) if self.nsd_predict_from_token else x
                extra[TGT_NSD_LOGITS_KEY] = [self.nsd_predictor(inputs)]
            elif self.nsd_feedback is not None:
                if self.nsd_predict_from_token:
                    self.nsd_feedback.remember(incremental_state, "state", x[:, -1])  # for the next step
                else:
                    logits = self.nsd_predictor(x)
                    extra[TGT_NSD_LOGITS_KEY] = [logits]
                    self.nsd_feedback.update(incremental_state, logits[:, -1])  # the next step's input (sec. 3.3)
        if distance is not None:
            extra[TGT_NSD_INPUT_KEY] = [distance]
        return x, extra

    def _own_input_distances(self, prev_output_tokens: Tensor, encoder_out, tgt_syntax) -> Optional[Dict[str, Tensor]]:
        """``tgt_syntax`` with a share ``--nsd-target-sampling`` of its input distances replaced by predictions.

        A first pass without gradient on the gold distances predicts the distance of every target
        token (eq. 11); the input distance of position ``t + 1`` becomes the one predicted at ``t``,
        as generation feeds it back (the leading ``</s>`` keeps :data:`BOS_DISTANCE`, padding 0).
        Each position takes the prediction with probability ``--nsd-target-sampling``.
        """
        gold = (tgt_syntax or {}).get(self.nsd_key) if self.nsd_key is not None else None
        if gold is None or self.nsd_feedback is None or self.nsd_predictor is None:
            return tgt_syntax
        with torch.no_grad():
            _, extra = self.extract_features(prev_output_tokens, encoder_out, tgt_syntax=tgt_syntax)
            predicted = self.nsd_feedback.predicted(extra[TGT_NSD_LOGITS_KEY][0])  # of target[:, t]
        own = torch.cat([predicted[:, :1], predicted[:, :-1]], dim=1)  # position t + 1 reads t's prediction
        own = own.masked_fill(prev_output_tokens.eq(self.dictionary.eos()), BOS_DISTANCE)
        own = own.masked_fill(prev_output_tokens.eq(self.padding_idx), 0).to(gold.dtype)
        if self.nsd_sampling < 1:
            own = torch.where(torch.rand(own.shape, device=own.device) < self.nsd_sampling, own, gold)
        return {**tgt_syntax, self.nsd_key: own}

    def _predictor_input(self, states: Tensor, tokens: Tensor) -> Tensor:
        """What eq. 11 reads: ``h`` (``state``), or ``[h; E(y)]`` (``state+token``) for ``states (B, T, C)``."""
        if not self.nsd_predict_from_token:
            return states
        return torch.cat([states, self.embed_tokens(tokens).to(states.dtype)], dim=-1)

    def _next_tokens(self, prev_output_tokens: Tensor) -> Tensor:
        """``target[:, t]`` from the decoder input: ``prev_output_tokens[:, t + 1]``, padding after the last.

        fairseq's ``prev_output_tokens`` is the target moved one step right behind ``</s>`` (either
        padding side), so the shift gives every real target token; the last position (the final
        ``</s>``, which has no distance and is never scored) gets padding.
        """
        pad = prev_output_tokens.new_full((prev_output_tokens.size(0), 1), self.padding_idx)
        return torch.cat([prev_output_tokens[:, 1:], pad], dim=1)

    @torch.no_grad()
    def feedback_distances(self, prev_output_tokens: Tensor,
                           encoder_out: Optional[Dict[str, List[Tensor]]]) -> Tensor:
        """The input distances generation feeds for these decoder inputs, ``(B, T)`` (0 at padding).

        One incremental step per position, as ``SequenceGenerator`` runs the decoder: position 0
        gets :data:`~fairseq_syntax.modules.target_distance.BOS_DISTANCE`, position ``t`` the most
        probable distance of eq. 11 at ``t - 1``. Passed as ``tgt_syntax``, they make a full
        forward score the tokens as generation did (``--score-reference``-style rescoring).
        """
        if self.nsd_feedback is None:
            raise ValueError("this decoder reads no target distances (--nsd-target-input none, "
                             "--nsd-target-spe-lambda 0): nothing is fed back")
        state: Dict[str, Dict[str, Optional[Tensor]]] = {}
        steps: List[Tensor] = []
        for t in range(prev_output_tokens.size(1)):
            _, extra = self.forward(prev_output_tokens[:, : t + 1], encoder_out=encoder_out,
                                    incremental_state=state, features_only=True)
            steps.append(extra[TGT_NSD_INPUT_KEY][0])
        distance = torch.cat(steps, dim=1)
        return distance.masked_fill(prev_output_tokens.eq(self.padding_idx), 0)
