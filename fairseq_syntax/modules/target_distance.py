"""Neural syntactic distance on the target side, Ma et al. 2019 secs. 3.1-3.3.

The pieces of the source side (:mod:`fairseq_syntax.modules.syntactic_distance`) are reused;
this module adds what only the decoder needs: the input of eq. 7 and the feedback of sec. 3.3.

Input (eq. 7, ``x^t_i = f_emb(E^t_w[w^t_i], e^{dt}_i)``), ``--nsd-target-input``
    The decoder's input token at position ``t`` (``prev_output_tokens[:, t]``) is combined with
    the embedding ``E^t_d`` of its distance by the combiners of eqs. 8-10
    (:class:`~fairseq_syntax.modules.syntactic_distance.DistanceEmbedding`, a table of its own,
    ``E^t_d`` beside the source's ``E^s_d``). ``--nsd-target-spe-lambda`` adds the distance
    positional encoding of eqs. 15-16 with fairseq's ordinary one.

Which distance each decoder position reads (the data contract)
    ``tgt_syntax["distance"]`` is aligned with ``prev_output_tokens``: position 0 is the leading
    ``</s>`` (BOS) and holds :data:`BOS_DISTANCE` (0), position ``t > 0`` holds the gold distance
    of target token ``t - 1``; padding holds 0 and is embedded by the padding row. A dependency
    distance d_D is never 0, so the BOS value has an embedding row no real token uses.

Output (eq. 11), ``--nsd-target-predict``, ``--nsd-target-predict-from``
    ``state``: ``p(d̂_t | h_t) = softmax(W_d h_t + b_d)`` on the decoder's final state at position
    ``t`` (what the output layer sees), beside ``p(y_t | y_<t, x)``: the distance of the *next*
    token ``target[:, t]``, predicted before that token is chosen. ``state+token`` (the default
    for new models): ``softmax(W_d [h_t; E(y_t)] + b_d)``, the state and the embedding of the
    token ``y_t`` itself (the decoder's own word embedding, unscaled), so the distance is that of
    the token actually emitted. Eq. 11 writes ``h_i`` for the hidden vector; which vector holds
    "the current time step" of the decoder is our reading (see below why it matters). Its gold is
    ``sample["target_syntax"]["distance"]``. Training stays one parallel pass: ``y_t`` is the
    decoder input at ``t + 1`` (teacher forcing).

Feedback at generation (sec. 3.1: "let the decoder predict NSD on-the-fly ... and use the
predicted NSD to calculate e^{dt}"; sec. 3.3: "we use the predicted NSD as the input of the next
time step")
    The input distance of step ``t`` is the most probable class of eq. 11 for the token emitted
    at step ``t - 1`` (:func:`most_probable_distance`); at step 0 it is :data:`BOS_DISTANCE`.
    ``state``: eq. 11 is conditioned on ``h_{t-1}`` only, so the fed-back value does not depend
    on which token the search picks at ``t - 1`` (checkpoints made before
    ``--nsd-target-predict-from`` decode this way). ``state+token``: step ``t`` computes it from
    ``h_{t-1}``, kept from the previous step, and the token ``y_{t-1}`` the search chose
    (``prev_output_tokens[:, -1]``), exactly as training computed it.
    :class:`DistanceFeedback` keeps what the next step needs (the predicted distance, or the
    state) per hypothesis in fairseq's incremental state and reorders it with the beam
    (``reorder_incremental_state``, which
    ``FairseqIncrementalDecoder.reorder_incremental_state_scripting`` calls on every submodule),
    so fairseq's ``SequenceGenerator`` runs unchanged.
"""

from typing import Dict, Optional

import torch
from torch import Tensor, nn

from fairseq.incremental_decoding_utils import with_incremental_state

from fairseq_syntax.modules.syntactic_distance import DistanceEmbedding, nsd_positional_encoding

__all__ = [
    "BOS_DISTANCE",
    "NSD_TARGET_PREDICT_FROM",
    "TGT_NSD_LOGITS_KEY",
    "TGT_NSD_INPUT_KEY",
    "TargetDistanceInput",
    "DistanceFeedback",
    "most_probable_distance",
]

#: the input distance of the leading ``</s>`` (data contract; the first step of generation)
BOS_DISTANCE = 0
#: ``--nsd-target-predict-from``: what eq. 11 reads on the decoder (see the module doc)
NSD_TARGET_PREDICT_FROM = ("state", "state+token")
#: where the decoder's ``extra`` output carries the eq. 11 logits ``[B x T x (2D+1)]`` (a one-element list)
TGT_NSD_LOGITS_KEY = "tgt_nsd_logits"
#: where it carries the input distances it used ``[B x T]`` (gold, or fed back at generation)
TGT_NSD_INPUT_KEY = "tgt_nsd_distance"


def most_probable_distance(logits: Tensor) -> Tensor:
    """The distance of the most probable class of eq. 11: ``argmax_c logits_c - D`` (LongTensor)."""
    max_distance = (logits.size(-1) - 1) // 2
    return logits.argmax(dim=-1) - max_distance


class TargetDistanceInput(nn.Module):
    """The decoder input's distance parts: ``f_emb`` of eq. 7 (eqs. 8-10) and the SPE of eqs. 15-16.

    Args:
        mode: ``--nsd-target-input`` (``none``, ``concat``, ``add``, ``linear``).
        word_dim: the decoder's word embedding width ``d``.
        concat_dim: ``dim(e)`` for ``concat`` (``--nsd-embed-dim``).
        max_distance: ``D`` (``--nsd-max-distance``).
        spe_lambda: ``λ_SPE`` (``--nsd-target-spe-lambda``), 0 = off.
        model_dim: the decoder width (the SPE's dimension).
        scale: scale ``e`` like fairseq's word embeddings.
    """

    def __init__(self, mode: str, word_dim: int, concat_dim: int, max_distance: int, spe_lambda: float,
                 model_dim: int, scale: bool = True) -> None:
        super().__init__()
        self.embed: Optional[DistanceEmbedding] = (
            DistanceEmbedding(mode, word_dim, concat_dim, max_distance, scale=scale) if mode != "none" else None
        )
        self.max_distance = max_distance
        self.spe_lambda = float(spe_lambda)
        self.model_dim = model_dim

    def combine(self, x: Tensor, distance: Tensor, padding_mask: Tensor) -> Tensor:
        """``f_emb(x, e^{dt})`` (eqs. 7-10) for the scaled word embeddings ``x (B, T, d)``; ``x`` when off."""
        if self.embed is None:
            return x
        return self.embed(x, distance, padding_mask)

    def positions(self, distance: Tensor, dtype: torch.dtype) -> Optional[Tensor]:
        """The SPE of eqs. 15-16, ``(B, T, model_dim)``, or None when off."""
        if self.spe_lambda <= 0:
            return None
        return nsd_positional_encoding(distance, self.max_distance, self.spe_lambda, self.model_dim).to(dtype)

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}, spe_lambda={self.spe_lambda}"


@with_incremental_state
class DistanceFeedback(nn.Module):
    """Sec. 3.3's feedback: what step ``t - 1`` leaves for the input distance of step ``t``.

    The tensors waiting for the next step (``distance``: the predicted distance ``(B,)``, for
    ``--nsd-target-predict-from state``; ``state``: the final decoder state ``(B, C)``, for
    ``state+token``) are kept per hypothesis in fairseq's incremental state
    (``get_incremental_state`` / ``set_incremental_state`` of ``FairseqIncrementalState``) and
    follow the beam in :meth:`reorder_incremental_state`.
    """

    STATE = "nsd_feedback"

    def __init__(self, max_distance: int) -> None:
        super().__init__()
        self.max_distance = max_distance

    def recall(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], name: str,
               batch_size: int) -> Optional[Tensor]:
        """The tensor ``name`` the previous step stored (None at step 0), checked against the beam."""
        state = self.get_incremental_state(incremental_state, self.STATE)
        if state is None or state.get(name) is None:
            return None
        value = state[name]
        assert value is not None
        if value.size(0) != batch_size:
            raise ValueError(
                f"the target-distance feedback holds {value.size(0)} hypotheses, the step has {batch_size}: "
                "reorder the incremental state with the beam (reorder_incremental_state)"
            )
        return value

    def remember(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], name: str, value: Tensor) -> None:
        """Keep ``value`` (one row per hypothesis) for the next step."""
        self.set_incremental_state(incremental_state, self.STATE, {name: value})

    def bos(self, batch_size: int, device: torch.device) -> Tensor:
        """The input distance of step 0, ``(B, 1)``: :data:`BOS_DISTANCE`."""
        return torch.full((batch_size, 1), BOS_DISTANCE, dtype=torch.long, device=device)

    def next_input(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], batch_size: int,
                   device: torch.device) -> Tensor:
        """The input distance of this step, ``(B, 1)``: the last prediction, or :data:`BOS_DISTANCE` at step 0."""
        distance = self.recall(incremental_state, "distance", batch_size)
        return self.bos(batch_size, device) if distance is None else distance.unsqueeze(1)

    def predicted(self, logits: Tensor) -> Tensor:
        """The most probable distance of eq. 11 (``logits (..., 2D+1)``), within ``[-D, D]``."""
        return most_probable_distance(logits).clamp(-self.max_distance, self.max_distance)

    def update(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], logits: Tensor) -> Tensor:
        """Store the most probable distance of eq. 11 (``logits (B, 2D+1)``) for the next step; returns it."""
        predicted = self.predicted(logits)
        self.remember(incremental_state, "distance", predicted)
        return predicted

    def reorder_incremental_state(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
                                  new_order: Tensor) -> None:
        """Follow the beam: hypothesis ``i`` of the next step continues ``new_order[i]``."""
        state = self.get_incremental_state(incremental_state, self.STATE)
        if state is None:
            return
        reordered = {name: value.index_select(0, new_order.to(value.device))
                     for name, value in state.items() if value is not None}
        if reordered:
            self.set_incremental_state(incremental_state, self.STATE, reordered)

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}"
