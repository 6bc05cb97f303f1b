"""The presets of ``syntax_transformer``: one table row per paper and size.

Each row is ``(name, sizes, docstring, options)``. The architecture function fills every
syntax option the command line left unset, first from ``options``, then from
:class:`~.config.SyntaxModelConfig`'s defaults (:func:`~.config.fill_unset`), then the sizes,
and checks them all (:func:`~.config.check_model_sizes`).

Sizes and dropout, and where they come from:

* ``base``: fairseq's ``base_architecture`` (6+6 layers, 512, 8 heads, FFN 2048, dropout 0.1),
  the size of Omote et al. (2019, ASPEC) and of Xie et al. (2021, WMT);
* ``small`` (``*_iwslt_de_en``): fairseq's ``transformer_iwslt_de_en`` (6+6, 512, 4 heads,
  FFN 1024) with dropout 0.3, fairseq's IWSLT'14 recipe, the value of Xie et al. on NC11
  and of Duan et al.'s small models;
* ``duan_base`` / ``duan_small``: Duan et al. (2019) Table IV, widths from the word
  dimension (512 / 256) and the selected features, dropout 0.1 / 0.3.
"""

from typing import Any, Callable, Dict, List, Tuple

from fairseq.models import register_model_architecture
from fairseq.models.transformer import base_architecture, transformer_iwslt_de_en
from fairseq.utils import safe_getattr

from .config import check_model_sizes, duan_attention_heads, fill_unset
from .encoder import encoder_model_dim

__all__ = ["PRESETS", "syntax_base_architecture"]


def base(args) -> None:
    base_architecture(args)


def small(args) -> None:
    args.dropout = safe_getattr(args, "dropout", 0.3)
    transformer_iwslt_de_en(args)


def _duan_sizes(args, word_dim: int, dropout: float) -> None:
    """Duan et al. (2019) Table IV sizes from the word dimension and the selected features.

    Encoder: word ``word_dim``, width ``word + n * feature_dim``, heads by
    :func:`~.config.duan_attention_heads`, FFN ``4 x`` width (Table IV: 1408, 1280, 2432, 2304).
    Decoder: the encoder's width (one ``d_model``, as in the paper), or the word width with
    ``--share-all-embeddings``; heads and FFN by the same rules. The command line wins.
    """
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", word_dim)
    model_dim = encoder_model_dim(args)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", duan_attention_heads(model_dim))
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 4 * model_dim)
    shared = bool(safe_getattr(args, "share_all_embeddings", False))
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", args.encoder_embed_dim if shared else model_dim)
    args.decoder_attention_heads = safe_getattr(
        args, "decoder_attention_heads", duan_attention_heads(args.decoder_embed_dim)
    )
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 4 * args.decoder_embed_dim)
    args.dropout = safe_getattr(args, "dropout", dropout)
    base_architecture(args)


def duan_base(args) -> None:
    _duan_sizes(args, word_dim=512, dropout=0.1)


def duan_small(args) -> None:
    _duan_sizes(args, word_dim=256, dropout=0.3)


OMOTE_REL = {"rel_seq_k": 2, "decoder_rel_seq_k": 2}
OMOTE_DEP = {"rel_dep_l": 2}
OMOTE_DEP_REL = {"rel_seq_k": 2, "rel_dep_l": 2, "decoder_rel_seq_k": 2}
DUAN_EMBED = {"syntax_features": "pos,label,head"}
DUAN_SPE = {"syntax_features": "pos,label", "spe_features": "head,depth"}
# Ma et al. (2019)'s best source-side combination (sec. 4, Table 1): d_D (the dependency NSD improved
# both sides, d_S/d_G hurt the target), as input with f_emb^{Wb} (eq. 10: "yields better performance"
# than concatenation or sum), as syntactic PE with lambda 40 ("the improvement was remarkable"; 1e4
# gave none), and as output (eq. 11) trained with L_dist + L_ent ("combining both [input and output]
# obtained further improvement"; each loss alone gained less). The loss weights, </s>, the hinge's scale
# and the roots are the criterion's and --nsd-roots' defaults (docs/models.md, "Ma et al. (2019), Table 1 by flags").
MA_NSD = {"nsd_input": "linear", "nsd_spe_lambda": 40.0, "nsd_predict": True}
# target side (Ma et al. 2019, secs. 3.1-3.3): the source preset's parts on the decoder, distances fed back at generation
MA_NSD_TARGET = {"nsd_target_input": "linear", "nsd_target_spe_lambda": 40.0, "nsd_target_predict": True}
MA_NSD_BOTH = {**MA_NSD, **MA_NSD_TARGET}
# Xie et al. do not state the label embedding and path LSTM sizes: ours, 64/128 (base), 32/64 (small)
XIE_GPS = {"gps_layers": "0", "gps_label_dim": 64, "gps_path_dim": 128}
XIE_GPS_SMALL = {"gps_layers": "0", "gps_label_dim": 32, "gps_path_dim": 64}
# PASCAL's WMT16 En-Ro setting (5 of 8 heads of layer 0, no parent ignoring); "3 of 4" is ours
PASCAL = {"pascal_layers": "0", "pascal_heads": 5}
PASCAL_SMALL = {"pascal_layers": "0", "pascal_heads": 3}
WANG_STRUCTURAL = {"structural_k": 8, "structural_absolute": True}

#: name, sizes, docstring, options
PRESETS: List[Tuple[str, Callable[[Any], None], str, Dict[str, Any]]] = [
    ("syntax_transformer_iwslt_de_en", small, "Transformer_abs, small.", {}),
    # Omote et al. 2019
    ("transformer_rel", base,
     "Transformer_rel: Shaw et al. (k=2) in encoder and decoder self-attention (Omote et al. 2019, eqs. 11-15).", OMOTE_REL),
    ("transformer_rel_iwslt_de_en", small, "transformer_rel, small.", OMOTE_REL),
    ("transformer_dep", base,
     "Transformer_dep: relative dependency depth (l=2), encoder only (Omote et al. 2019, eqs. 16-20).", OMOTE_DEP),
    ("transformer_dep_iwslt_de_en", small, "transformer_dep, small.", OMOTE_DEP),
    ("transformer_dep_rel", base,
     "Transformer_dep+rel: k=2 and l=2 summed in the encoder (Omote et al. 2019, eqs. 21-22), k=2 in the decoder.",
     OMOTE_DEP_REL),
    ("transformer_dep_rel_iwslt_de_en", small, "transformer_dep_rel, small.", OMOTE_DEP_REL),
    # Duan et al. (2019)
    ("transformer_syntax_embed", duan_base,
     "POS, label and head-position embeddings concatenated to the word (Duan et al. 2019, Tables II-IV, En-De): "
     "word 512 + 3 x 32 = 608, 19 heads, FFN 2432, dropout 0.1.", DUAN_EMBED),
    ("transformer_syntax_embed_iwslt_de_en", duan_small,
     "Duan et al. 2019, Table IV De-En: word 256 + 3 x 32 = 352, 11 heads, FFN 1408, dropout 0.3.", DUAN_EMBED),
    ("transformer_syntax_spe", duan_base,
     "POS and label embeddings + SPE of head position and depth (Duan et al. 2019, Table II row 4, Table V): "
     "word 512 + 2 x 32 = 576, 9 heads, FFN 2304, dropout 0.1.", DUAN_SPE),
    ("transformer_syntax_spe_iwslt_de_en", duan_small,
     "Duan et al. 2019, Table IV De-En with SPE: 256 + 2 x 32 = 320, 5 heads, FFN 1280, dropout 0.3.", DUAN_SPE),
    # Ma et al. 2019
    ("transformer_nsd", base,
     "Ma et al. (2019)'s best source-side combination: dependency NSD d_D as input (eq. 10, f_emb^{Wb}, better than "
     "eqs. 8-9), syntactic PE (lambda 40, eqs. 15-16; 1e4 gave no gain) and output (eq. 11) with L_dist + L_ent "
     "(input and output together gained most); train with --criterion label_smoothed_cross_entropy_with_nsd.",
     MA_NSD),
    ("transformer_nsd_iwslt_de_en", small, "transformer_nsd, small.", MA_NSD),
    ("transformer_nsd_target", base,
     "Target-side dependency NSD (Ma et al. 2019, secs. 3.1-3.3): the decoder input combined with its distance (eq. 10, "
     "linear), PE (lambda 40), the next token's distance predicted (eq. 11) and fed back at generation; train "
     "with --criterion label_smoothed_cross_entropy_with_nsd on a data-bin with parsed targets.", MA_NSD_TARGET),
    ("transformer_nsd_target_iwslt_de_en", small, "transformer_nsd_target, small.", MA_NSD_TARGET),
    ("transformer_nsd_both", base,
     "transformer_nsd's source side and transformer_nsd_target's target side together (Ma et al. 2019, Table 1's "
     "source + target rows).", MA_NSD_BOTH),
    ("transformer_nsd_both_iwslt_de_en", small, "transformer_nsd_both, small.", MA_NSD_BOTH),
    # Xie et al. 2021 and its baselines
    ("transformer_gps", base,
     "Global syntactic position (Xie et al. 2021, secs. 3.2-3.3): the eq. 5 syntax term in encoder layer 0 "
     "(the paper's best, Table 3).", XIE_GPS),
    ("transformer_gps_iwslt_de_en", small, "transformer_gps, small (path LSTM 32 -> 64).", XIE_GPS_SMALL),
    ("transformer_pascal", base,
     "PASCAL (Bugliarello & Okazaki 2020), their WMT16 En-Ro setting: 5 of 8 heads of encoder layer 0 "
     "parent-scaled, variance 1, no parent ignoring. NC11 De-En: --pascal-heads 8; NC11 En-De: "
     "--pascal-heads 2 --pascal-parent-ignoring 0.4.", PASCAL),
    ("transformer_pascal_iwslt_de_en", small,
     "PASCAL, small: 3 of its 4 heads (ours: 5/8 rounded up; not a setting of the paper), layer 0, variance 1.",
     PASCAL_SMALL),
    ("transformer_structural", base,
     "Structural positions (Wang et al. 2019b): absolute (depth with the sequential position) and relative "
     "(clip 8, Shaw-style keys and values) in every encoder layer; sequential positions kept.", WANG_STRUCTURAL),
    ("transformer_structural_iwslt_de_en", small, "transformer_structural, small.", WANG_STRUCTURAL),
]


def _architecture(name: str, sizes: Callable[[Any], None], doc: str, options: Dict[str, Any]) -> Callable:
    def architecture(args) -> None:
        fill_unset(args, options)
        sizes(args)
        check_model_sizes(args, encoder_model_dim(args))  # while fairseq parses: before any data is read

    architecture.__name__ = architecture.__qualname__ = name
    architecture.__doc__ = doc
    return architecture


@register_model_architecture("syntax_transformer", "syntax_transformer")
def syntax_base_architecture(args) -> None:
    """Transformer_abs of Omote et al. (2019): fairseq's base Transformer, every syntax component off."""
    fill_unset(args, {})
    base_architecture(args)
    check_model_sizes(args, encoder_model_dim(args))


for _name, _sizes, _doc, _options in PRESETS:
    register_model_architecture("syntax_transformer", _name)(_architecture(_name, _sizes, _doc, _options))
