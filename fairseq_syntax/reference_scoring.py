"""``fairseq-generate --score-reference`` with a decoder that reads target distances (Ma et al. 2019, target side).

Scoring a reference is teacher-forced: fairseq's ``SequenceScorer`` runs one full forward pass
over the given target. A decoder that reads target syntactic distances (``--nsd-target-input``,
``--nsd-target-spe-lambda``: ``transformer_nsd_target``, ``transformer_nsd_both``) then reads the
gold distances of the reference, as in training and validation: the task collates them from the
data-bin's target streams (``net_input["tgt_syntax"]``) and leaves them in the scorer's input
(:func:`is_reference_scorer`), while beam search, which feeds back its own predictions, never
gets them. A data-bin whose target was not parsed has no gold distances: that is refused before
any decoding (:func:`check_reference_scoring`), naming the data-bin and what to do, since the
distances generation would feed back score another thing than the reference's own tree
(``decoder.feedback_distances`` computes those for a rescoring that wants them).
"""

import os
from typing import Iterable, Optional

from fairseq_syntax_core.databin import METADATA_FILE, PARSED_LANGS_KEY
from fairseq_syntax_core.errors import UsageError

__all__ = ["is_reference_scorer", "reads_target_distances", "check_reference_scoring"]


def is_reference_scorer(generator) -> bool:
    """Whether ``generator`` scores given targets in one teacher-forced pass (fairseq's ``SequenceScorer``)."""
    from fairseq.sequence_scorer import SequenceScorer

    return isinstance(generator, SequenceScorer)


def reads_target_distances(model) -> bool:
    """Whether ``model``'s decoder reads target distances at its input (not only predicts them)."""
    from fairseq_syntax.models.syntax_transformer.components.target_nsd import target_distances

    component = target_distances(model)
    return component is not None and component.input is not None


def check_reference_scoring(models: Iterable, data_bin: str, target_lang: Optional[str], target_parsed: bool) -> None:
    """Refuse ``--score-reference`` for a model that reads target distances when the data-bin has none."""
    if target_parsed or not any(reads_target_distances(model) for model in models):
        return
    raise UsageError(
        f"--score-reference: the model reads target syntactic distances (Ma et al. (2019)'s target side), and "
        f"scoring a reference gives it the reference's gold ones, but the target '{target_lang}' of the data-bin "
        f"{data_bin} was not parsed ({os.path.join(data_bin, METADATA_FILE)} {PARSED_LANGS_KEY} lists no "
        f"'{target_lang}'): score with a data-bin made with fairseq-syntax-preprocess --target-parser or "
        "--target-external-parse, or translate without --score-reference"
    )
