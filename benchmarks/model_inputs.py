"""What the ``syntax_translation`` task would hand one model: shared by the benchmark scripts."""

from typing import Dict


def for_model(sample: Dict, model) -> Dict:
    """The batch as the task would give it to ``model``: only the syntax inputs it consumes.

    The benchmarks draw every batch once, with all the side inputs any of the compared models
    reads, and give each model its share, as ``SyntaxTranslationTask`` does for one model.
    """
    wanted = model.syntax_inputs() if hasattr(model, "syntax_inputs") else set()
    net_input = {k: v for k, v in sample["net_input"].items() if k != "src_syntax"}
    if wanted:
        net_input["src_syntax"] = {k: v for k, v in sample["net_input"]["src_syntax"].items() if k in wanted}
    return dict(sample, net_input=net_input)
