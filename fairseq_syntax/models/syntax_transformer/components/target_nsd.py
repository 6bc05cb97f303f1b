"""Target-side neural syntactic distance (Ma et al. 2019, secs. 3.1-3.3) as a decoder component.

Its parts (:mod:`fairseq_syntax.modules.target_distance`, :mod:`fairseq_syntax.modules.syntactic_distance`),
registered on the decoder as ``nsd_input``, ``nsd_predictor`` and ``nsd_feedback`` (the parameter
names of every release):

* ``--nsd-target-input concat|add|linear``: each decoder input token's scaled word embedding is
  combined with the embedding of its distance (eq. 7 with the combiners of eqs. 8-10); ``concat``
  widens the decoder by ``--nsd-embed-dim`` (:meth:`TargetDistances.added_width`), and fairseq's
  ``project_out_dim`` maps the final states back to the word width for the output layer;
* ``--nsd-target-spe-lambda λ``: the distance positional encoding (eqs. 15-16), added with
  fairseq's ordinary one;
* ``--nsd-target-predict``: eq. 11 on the final states, the distance of the next token, in
  ``extra["tgt_nsd_logits"]`` (``[B x T x (2D+1)]``, a one-element list) for
  ``label_smoothed_cross_entropy_with_nsd``; ``--nsd-target-predict-from state+token`` also reads
  the embedding of that next token (the one emitted at generation), ``state`` the state alone.

Where the input distances come from:

* training and validation (no ``incremental_state``): ``tgt_syntax[KEY]``, the gold distances
  aligned with ``prev_output_tokens`` (0 at the leading ``</s>`` and at padding); in training,
  ``--nsd-target-sampling P`` replaces a share P of them by the model's own predictions from a first
  pass without gradient, so that it learns to read what it will feed back at generation;
* generation (``incremental_state``, no ``tgt_syntax``): sec. 3.3's feedback, the most probable
  class of eq. 11 for the previous step's token, kept per hypothesis in the incremental state;
* a full forward without ``tgt_syntax`` is refused: feeding back is sequential, and made-up
  distances would score another model than the one that generated.
  :meth:`TargetDistances.feedback_distances` computes what generation feeds, for rescoring.

The input distances used are returned in ``extra["tgt_nsd_distance"]`` (``[B x T]``).
"""

from typing import Any, Dict, List, Optional, Set, Tuple

import torch
from torch import Tensor, nn

from fairseq_syntax.data.syntax_features import PHRASE_FEATURES
from fairseq_syntax.modules.syntactic_distance import DistancePredictor
from fairseq_syntax.modules.target_distance import (
    BOS_DISTANCE,
    TGT_NSD_INPUT_KEY,
    TGT_NSD_LOGITS_KEY,
    DistanceFeedback,
    TargetDistanceInput,
)

from .decoder_side import DecoderBuildContext, DecoderComponent, decoder_component, register_decoder
from .nsd import NsdOptions, target_nsd_consumes, uses_target_nsd

__all__ = ["TargetDistances", "target_distances"]


@register_decoder
class TargetDistances(DecoderComponent):
    """Ma et al. (2019)'s target side: the distance as decoder input (eq. 7, eqs. 15-16) and output (eq. 11)."""

    name = "target_nsd"
    options = NsdOptions

    def __init__(self, ctx: DecoderBuildContext) -> None:
        cfg = ctx.cfg
        self.key: str = cfg.nsd_key  # --nsd-distance/-roots/-units
        self.consumes = target_nsd_consumes(cfg)
        self.input: Optional[TargetDistanceInput] = (
            TargetDistanceInput(str(cfg.nsd_target_input), ctx.word_dim, cfg.nsd_embed_dim, cfg.nsd_max_distance,
                                cfg.nsd_target_spe_lambda, ctx.model_dim, scale=ctx.scale_embedding)
            if self.consumes else None
        )
        # eq. 11 on h_t (state) or on [h_t; E(y_t)] (state+token: the token the distance belongs to)
        self.from_token = str(cfg.nsd_target_predict_from) == "state+token"
        predictor_dim = ctx.output_dim + (ctx.word_dim if self.from_token else 0)
        self.predictor: Optional[DistancePredictor] = (
            DistancePredictor(predictor_dim, cfg.nsd_max_distance) if cfg.nsd_target_predict else None
        )
        self.feedback: Optional[DistanceFeedback] = DistanceFeedback(cfg.nsd_max_distance) if self.consumes else None
        self.sampling = float(cfg.nsd_target_sampling) if self.consumes else 0.0  # training only

    @classmethod
    def build(cls, ctx: DecoderBuildContext) -> Optional["TargetDistances"]:
        return cls(ctx) if uses_target_nsd(ctx.cfg) else None

    @classmethod
    def added_width(cls, cfg: Any) -> int:
        return cfg.nsd_embed_dim if cfg.nsd_target_input == "concat" else 0  # eq. 8 widens; eqs. 9-10 do not

    def modules(self) -> Dict[str, Optional[nn.Module]]:
        return {"nsd_input": self.input, "nsd_predictor": self.predictor, "nsd_feedback": self.feedback}

    def target_inputs(self) -> Set[str]:
        """The distance; a constituency distance brings its ``KEY_mask`` (which lines have a tree: the loss mask)."""
        return {self.key} | ({self.key + "_mask"} if self.key + "_mask" in PHRASE_FEATURES else set())

    def output_keys(self) -> Set[str]:
        return {TGT_NSD_LOGITS_KEY} if self.predictor is not None else set()

    # ------------------------------------------------------------------ the input distances

    def prepare(self, decoder: Any, prev_output_tokens: Tensor, incremental_state: Optional[Dict[str, Any]],
                tgt_syntax: Optional[Dict[str, Tensor]]) -> Optional[Tensor]:
        """The distance of each input token: ``tgt_syntax`` when given, else the feedback (generation)."""
        if self.input is None or self.feedback is None:
            return None
        distance = (tgt_syntax or {}).get(self.key)
        if distance is not None:
            if distance.shape != prev_output_tokens.shape:
                raise ValueError(
                    f"tgt_syntax[{self.key!r}] has shape {tuple(distance.shape)}, prev_output_tokens "
                    f"{tuple(prev_output_tokens.shape)}: the distances must be aligned with the decoder input"
                )
            distance = distance.to(prev_output_tokens.device)
            return distance[:, -1:] if incremental_state is not None else distance
        if incremental_state is not None:
            batch_size, device = prev_output_tokens.size(0), prev_output_tokens.device
            if not self.from_token:
                return self.feedback.next_input(incremental_state, batch_size, device)
            # eq. 11 for the token the search just chose, from the state of the step that chose it
            state = self.feedback.recall(incremental_state, "state", batch_size)
            if state is None:
                return self.feedback.bos(batch_size, device)
            assert self.predictor is not None
            logits = self.predictor(self._predictor_input(decoder, state.unsqueeze(1), prev_output_tokens[:, -1:]))
            return self.feedback.predicted(logits)
        raise ValueError(
            f"this decoder reads target syntactic distances (Ma et al. 2019, sec. 3.1) but got no "
            f"tgt_syntax[{self.key!r}]: training and validation need the gold distances (--task "
            "syntax_translation on a data-bin with parsed targets); at generation they are fed back step by "
            "step (incremental decoding), which one full forward pass cannot do (fairseq-generate "
            "--score-reference or --print-alignment without target distances, hub.score). To rescore "
            "translations, pass tgt_syntax={'distance': model.decoder.feedback_distances(prev_output_tokens, "
            "encoder_out)}"
        )

    def embed(self, x: Tensor, prepared: Optional[Tensor], padding_mask: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        """Eq. 7 (``f_emb`` of eqs. 8-10) on the scaled word embedding; the SPE of eqs. 15-16 as a position term."""
        if self.input is None or prepared is None:
            return x, None
        x = self.input.combine(x, prepared, padding_mask)
        return x, self.input.positions(prepared, x.dtype)

    # ------------------------------------------------------------------ eq. 11 on the output

    def outputs(self, decoder: Any, states: Tensor, full_tokens: Tensor, incremental_state: Optional[Dict[str, Any]],
                prepared: Optional[Tensor], extra: Dict[str, Any]) -> None:
        if self.predictor is not None:
            if incremental_state is None:
                # eq. 11 at every position t: the distance of the next token target[:, t]
                inputs = (self._predictor_input(decoder, states, _next_tokens(full_tokens, decoder.padding_idx))
                          if self.from_token else states)
                extra[TGT_NSD_LOGITS_KEY] = [self.predictor(inputs)]
            elif self.feedback is not None:
                if self.from_token:
                    self.feedback.remember(incremental_state, "state", states[:, -1])  # for the next step
                else:
                    logits = self.predictor(states)
                    extra[TGT_NSD_LOGITS_KEY] = [logits]
                    self.feedback.update(incremental_state, logits[:, -1])  # the next step's input (sec. 3.3)
        if prepared is not None:
            extra[TGT_NSD_INPUT_KEY] = [prepared]

    def _predictor_input(self, decoder: Any, states: Tensor, tokens: Tensor) -> Tensor:
        """What eq. 11 reads: ``h`` (``state``), or ``[h; E(y)]`` (``state+token``) for ``states (B, T, C)``."""
        if not self.from_token:
            return states
        return torch.cat([states, decoder.embed_tokens(tokens).to(states.dtype)], dim=-1)

    # ------------------------------------------------------------------ training on its own predictions

    def training_inputs(self, decoder: Any, prev_output_tokens: Tensor, encoder_out: Any,
                        tgt_syntax: Optional[Dict[str, Tensor]]) -> Optional[Dict[str, Tensor]]:
        """``tgt_syntax`` with a share ``--nsd-target-sampling`` of its input distances replaced by predictions.

        A first pass without gradient on the gold distances predicts the distance of every target
        token (eq. 11); the input distance of position ``t + 1`` becomes the one predicted at ``t``,
        as generation feeds it back (the leading ``</s>`` keeps :data:`BOS_DISTANCE`, padding 0).
        Each position takes the prediction with probability ``--nsd-target-sampling``.
        """
        gold = (tgt_syntax or {}).get(self.key)
        if self.sampling <= 0 or gold is None or self.feedback is None or self.predictor is None:
            return tgt_syntax
        with torch.no_grad():
            _, extra = decoder.extract_features(prev_output_tokens, encoder_out, tgt_syntax=tgt_syntax)
            predicted = self.feedback.predicted(extra[TGT_NSD_LOGITS_KEY][0])  # of target[:, t]
        own = torch.cat([predicted[:, :1], predicted[:, :-1]], dim=1)  # position t + 1 reads t's prediction
        own = own.masked_fill(prev_output_tokens.eq(decoder.dictionary.eos()), BOS_DISTANCE)
        own = own.masked_fill(prev_output_tokens.eq(decoder.padding_idx), 0).to(gold.dtype)
        if self.sampling < 1:
            own = torch.where(torch.rand(own.shape, device=own.device) < self.sampling, own, gold)
        return {**tgt_syntax, self.key: own}

    @torch.no_grad()
    def feedback_distances(self, decoder: Any, prev_output_tokens: Tensor,
                           encoder_out: Optional[Dict[str, List[Tensor]]]) -> Tensor:
        """The input distances generation feeds for these decoder inputs, ``(B, T)`` (0 at padding).

        One incremental step per position, as ``SequenceGenerator`` runs the decoder: position 0
        gets :data:`~fairseq_syntax.modules.target_distance.BOS_DISTANCE`, position ``t`` the most
        probable distance of eq. 11 at ``t - 1``. Passed as ``tgt_syntax``, they make a full
        forward score the tokens as generation did (``--score-reference``-style rescoring).
        """
        if self.feedback is None:
            raise ValueError("this decoder reads no target distances (--nsd-target-input none, "
                             "--nsd-target-spe-lambda 0): nothing is fed back")
        state: Dict[str, Dict[str, Optional[Tensor]]] = {}
        steps: List[Tensor] = []
        for t in range(prev_output_tokens.size(1)):  # sequential by nature: each step reads the last one's output
            _, extra = decoder.forward(prev_output_tokens[:, : t + 1], encoder_out=encoder_out,
                                       incremental_state=state, features_only=True)
            steps.append(extra[TGT_NSD_INPUT_KEY][0])
        distance = torch.cat(steps, dim=1)
        return distance.masked_fill(prev_output_tokens.eq(decoder.padding_idx), 0)


def _next_tokens(prev_output_tokens: Tensor, padding_idx: int) -> Tensor:
    """``target[:, t]`` from the decoder input: ``prev_output_tokens[:, t + 1]``, padding after the last.

    fairseq's ``prev_output_tokens`` is the target moved one step right behind ``</s>`` (either
    padding side), so the shift gives every real target token; the last position (the final
    ``</s>``, which has no distance and is never scored) gets padding.
    """
    pad = prev_output_tokens.new_full((prev_output_tokens.size(0), 1), padding_idx)
    return torch.cat([prev_output_tokens[:, 1:], pad], dim=1)


def target_distances(model: Any) -> Optional[TargetDistances]:
    """The target-distance component of ``model`` (or of a decoder), or None (any other model)."""
    return decoder_component(model, TargetDistances)
