"""What the ``syntax_translation`` task would hand one model: shared by the benchmark scripts."""

from typing import Dict


def for_model(sample: Dict, model) -> Dict:
    """The batch as the task would give it to ``model``: only the syntax inputs it consumes.

    The benchmarks draw every batch once, with all the side inputs any of the compared models
    reads, and give each model its share, as ``SyntaxTranslationTask`` does for one model.
    """
    wanted = model.syntax_inputs() if hasattr(model, "syntax_inputs") else set()
    target = getattr(model, "target_syntax_inputs", None)
    target_wanted = set(target() or ()) if callable(target) else set()
    net_input = {k: v for k, v in sample["net_input"].items() if k not in ("src_syntax", "tgt_syntax")}
    if wanted:  # a wanted feature and what the collater derives with it (phrase_mask, depth_level_sizes)
        net_input["src_syntax"] = {k: v for k, v in sample["net_input"]["src_syntax"].items()
                                   if k in wanted or any(k.startswith(w + "_") for w in wanted)}
    own = dict(sample, net_input=net_input)
    own.pop("target_syntax", None)
    if target_wanted:  # Ma et al. (2019)'s target side: inputs aligned with prev_output_tokens, gold aligned with target
        net_input["tgt_syntax"] = {k: v for k, v in sample["net_input"]["tgt_syntax"].items() if k in target_wanted}
        own["target_syntax"] = {k: v for k, v in sample["target_syntax"].items() if k in target_wanted}
    return own
