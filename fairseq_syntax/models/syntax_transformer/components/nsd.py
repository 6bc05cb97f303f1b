"""Options of neural syntactic distance (Ma et al. 2019), source and target side.

The source-side parts are input components (:mod:`.inputs`: ``nsd_input``, ``nsd_position``)
and the encoder's predictor (:mod:`.nsd_prediction`); the target-side parts are a decoder
component (:mod:`.target_nsd`). They share ``--nsd-distance``, ``--nsd-max-distance`` and ``--nsd-embed-dim``.
"""

import math
from dataclasses import dataclass

from fairseq.dataclass import ChoiceEnum

from fairseq_syntax.modules.syntactic_distance import (
    NSD_DISTANCES,
    NSD_INPUT_MODES,
    NSD_ROOTS,
    NSD_UNITS,
    nsd_distance_key,
)
from fairseq_syntax.modules.target_distance import NSD_TARGET_PREDICT_FROM

from ..options import ModelOptionError, ModelSizes, check_heads, check_positive, opt
from .base import register_options
from .decoder_side import decoder_model_dim

__all__ = ["NsdOptions", "target_nsd_consumes", "uses_target_nsd"]

#: ``--nsd-distance`` -> ``src_syntax`` key (Ma et al. 2019, eqs. 1-4; ``--nsd-roots line``: see nsd_distance_key)
NSD_DISTANCE_KEYS = NSD_DISTANCES


@register_options
@dataclass
class NsdOptions:
    """Ma et al. (2019): the distance as input, positional encoding and output, on the source and the target side."""

    nsd_distance: ChoiceEnum(tuple(NSD_DISTANCE_KEYS)) = opt("dependency", "which source syntactic distance (Ma et al. 2019): dependency = d_D(i) = "
                             "i - h(i) (eq. 4); constituency-height = d_S, the height of the lowest common ancestor "
                             "of pieces i and i+1 (eq. 1); constituency-depth = d_G, the number of their common "
                             "ancestors (eq. 1); constituency-relative = d_R, d_G(i) - d_G(i-1) (eq. 3); the "
                             "constituency ones from the data-bin's phrase structures", choices=tuple(NSD_DISTANCE_KEYS))
    nsd_roots: ChoiceEnum(NSD_ROOTS) = opt("sentence", "i of a root in d_D = i - h(i) (Ma et al. 2019, eq. 4, h(root) = 0) on a "
                           "line of several parser sentences: sentence = its position within its own sentence "
                           "(the paper parsed one sentence at a time), line = its position in the line (0.2's "
                           "d_D; checkpoints made before this option keep it)", choices=NSD_ROOTS)
    nsd_units: ChoiceEnum(NSD_UNITS) = opt("piece", "units of d_D (Ma et al. 2019, eq. 4): piece = positions and heads count BPE "
                           "pieces; word = they count words, as the paper's parses did, and every piece of a word "
                           "gets its word's distance (--nsd-distance dependency only)", choices=NSD_UNITS)
    nsd_input: ChoiceEnum(NSD_INPUT_MODES) = opt("none", "the distance as input, combined with the word embedding (Ma et al. 2019, eqs. 5-10): "
                          "concat (eq. 8, widens the encoder by --nsd-embed-dim), add (eq. 9), linear W[x;e]+b "
                          "(eq. 10); none disables", choices=NSD_INPUT_MODES)
    nsd_embed_dim: int = opt(32, "dimension of the distance embedding for --nsd-input concat (add and linear use "
                              "the word dimension)", metavar="N")
    nsd_spe_lambda: float = opt(0.0, "period lambda_SPE of the distance positional encoding (Ma et al. 2019, eqs. 15-16; "
                                 "the paper's best 40); 0 disables", metavar="LAMBDA")
    nsd_predict: bool = opt(False, "predict each source token's distance from the encoder states (Ma et al. 2019, eq. 11); "
                             "train with --criterion label_smoothed_cross_entropy_with_nsd")
    nsd_max_distance: int = opt(64, "distances are clipped to [-D, D] for the embedding table, the positional "
                                 "encoding and the 2D+1 classes of the predictor", metavar="D")
    # Shares --nsd-distance, --nsd-max-distance and --nsd-embed-dim with the source; checks: _check_target_nsd
    nsd_target_input: ChoiceEnum(NSD_INPUT_MODES) = opt("none", "the target distance as decoder input, combined "
                                 "with each input token's embedding by the source's combiners (Ma et al. 2019, eq. 7 with "
                                 "eqs. 8-10): concat (widens the decoder by --nsd-embed-dim), add, linear; at "
                                 "generation the decoder's own prediction of the previous step is fed back (needs "
                                 "--nsd-target-predict); none disables", choices=NSD_INPUT_MODES)
    nsd_target_spe_lambda: float = opt(0.0, "period lambda_SPE of the target distance positional encoding on the "
                                        "decoder input (Ma et al. 2019, eqs. 15-16, fed back like --nsd-target-input); "
                                        "0 disables", metavar="LAMBDA")
    nsd_target_predict: bool = opt(False, "predict the distance of each next target token beside the token, from "
                                    "the decoder's final states (Ma et al. 2019, eq. 11); train with --criterion "
                                    "label_smoothed_cross_entropy_with_nsd")
    nsd_target_predict_from: ChoiceEnum(NSD_TARGET_PREDICT_FROM) = opt(
        "state+token", "what the target's eq. 11 reads: state+token = the decoder state and the embedding of the "
        "token whose distance it predicts, so the distance fed back at generation is that of the token emitted; "
        "state = the state alone, before the token is chosen (checkpoints made before this option keep it)",
        choices=NSD_TARGET_PREDICT_FROM)
    nsd_target_sampling: float = opt(
        1.0, "training only: the share of the decoder's input distances replaced by the model's own predictions "
        "(a first pass without gradient on the gold ones, as scheduled sampling): 1 = the decoder always trains on "
        "what it predicts, as it decodes; 0 = on the gold distances (teacher forcing, as before this option)",
        metavar="P")

    def check(self) -> None:
        check_positive(self, ("nsd_embed_dim", "nsd_max_distance"))
        if not (self.nsd_spe_lambda == 0 or 1 < self.nsd_spe_lambda < math.inf):
            raise ModelOptionError(
                f"--nsd-spe-lambda {self.nsd_spe_lambda}: expected 0 (off) or a finite period > 1 "
                "(Ma et al. 2019, eqs. 15-16; the paper's best: 40)"
            )
        if self.nsd_units != "piece" and self.nsd_distance != "dependency":
            raise ModelOptionError(
                f"--nsd-units {self.nsd_units}: word units work with --nsd-distance dependency; "
                f"--nsd-distance {self.nsd_distance} is over the phrase structure's leaves, the pieces"
            )
        _check_target_nsd(self)  # target-side NSD (Ma et al. 2019, secs. 3.1-3.3)

    def check_sizes(self, sizes: ModelSizes) -> None:
        if self.nsd_spe_lambda > 0 and sizes.model_dim % 2 != 0:
            raise ModelOptionError(
                f"--nsd-spe-lambda {self.nsd_spe_lambda}: the distance positional encoding (Ma et al. 2019, eqs. 15-16) "
                f"needs an even encoder model dimension, got {sizes.model_dim} (--encoder-embed-dim "
                f"{sizes.word_dim} + syntax embeddings)"
            )
        _check_target_nsd_sizes(self, sizes.decoder_dim, sizes.decoder_heads)

    @property
    def nsd_key(self) -> str:
        """The ``src_syntax`` key of the source distance (``--nsd-distance``, ``--nsd-roots``)."""
        return nsd_distance_key(str(self.nsd_distance), str(self.nsd_roots), str(self.nsd_units))

    @property
    def uses_nsd(self) -> bool:
        """Whether any source-side NSD component (input, positional encoding, prediction) is on."""
        return self.nsd_input != "none" or self.nsd_spe_lambda > 0 or self.nsd_predict


def target_nsd_consumes(syntax: "NsdOptions") -> bool:
    """Whether the decoder reads target distances (``--nsd-target-input`` or ``--nsd-target-spe-lambda``)."""
    return syntax.nsd_target_input != "none" or syntax.nsd_target_spe_lambda > 0


def uses_target_nsd(syntax: "NsdOptions") -> bool:
    """Whether any target-side NSD part (input, positional encoding, prediction) is on."""
    return target_nsd_consumes(syntax) or bool(syntax.nsd_target_predict)


def _check_target_nsd(syntax: "NsdOptions") -> None:
    """The target options' own values, and the combination generation cannot run."""
    if not 0.0 <= syntax.nsd_target_sampling <= 1.0:  # NaN too
        raise ModelOptionError(f"--nsd-target-sampling {syntax.nsd_target_sampling}: expected a share in [0, 1]")
    lam = syntax.nsd_target_spe_lambda
    if not (lam == 0 or 1 < lam < math.inf):
        raise ModelOptionError(
            f"--nsd-target-spe-lambda {lam}: expected 0 (off) or a finite period > 1 "
            "(Ma et al. 2019, eqs. 15-16; the paper's best: 40)"
        )
    if target_nsd_consumes(syntax) and not syntax.nsd_target_predict:
        given = [f"--nsd-target-input {syntax.nsd_target_input}"] if syntax.nsd_target_input != "none" else []
        given += [f"--nsd-target-spe-lambda {lam:g}"] if lam > 0 else []
        raise ModelOptionError(
            f"{' with '.join(given)} needs --nsd-target-predict: the target distances are unknown at generation, "
            "where the decoder feeds back its own prediction of the previous step (Ma et al. 2019, sec. 3.1)"
        )


def _check_target_nsd_sizes(syntax: "NsdOptions", word_dim: int, heads: int) -> None:
    """Decoder heads that divide the decoder width widened by ``concat``; an even width for the SPE."""
    dim = decoder_model_dim(syntax, word_dim)
    if dim != word_dim:
        check_heads(dim, heads, "--decoder-attention-heads",
                     f"the decoder model dimension {dim} (--decoder-embed-dim {word_dim} + --nsd-embed-dim "
                     f"{syntax.nsd_embed_dim} of --nsd-target-input concat)")
    if syntax.nsd_target_spe_lambda > 0 and dim % 2 != 0:
        raise ModelOptionError(
            f"--nsd-target-spe-lambda {syntax.nsd_target_spe_lambda:g}: the distance positional encoding (Ma et al. 2019 "
            f"eqs. 15-16) needs an even decoder model dimension, got {dim}"
        )
