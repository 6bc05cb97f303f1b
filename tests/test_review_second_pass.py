"""A second hostile pass (fresh cases): values read from files never allocate without bound, forge
message lines, or end in a traceback."""

import pytest
import torch

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.length_prior import MAX_SOURCE_LENGTH, LengthPrior
from fairseq_syntax_core.shards import missing_shards

from .test_review_checkpoints import _fairseq_state


def test_a_length_table_with_a_forged_source_length_is_refused_before_any_allocation():
    prior = LengthPrior({(3, 4): 2, (5, 5): 1}, 100, "en", "fr", ["train"], 3, 0)
    data = prior.to_json()
    data["counts"][-1][0] = 10 ** 9  # the totals still add up
    with pytest.raises(ValueError, match=f"source length 1000000000 is over {MAX_SOURCE_LENGTH}"):
        LengthPrior.from_json(data)
    assert LengthPrior.from_json(prior.to_json()).counts == prior.counts


def test_a_forged_shard_count_names_a_few_missing_shards_without_listing_them_all():
    record = {"id": 0, "num_shards": 10 ** 9, "train_lines": [0, 5], "train_total_lines": 10}
    warning = missing_shards([("data-bin/shard0", {"shard": record})])
    assert "hold 1 of the 1000000000 shards" in warning and "data-bin/shard1," in warning
    assert f"and {10 ** 9 - 21} more" in warning and len(warning) < 2000


def test_provenance_strings_from_a_checkpoint_are_shown_on_one_line_shortened():
    from fairseq_syntax.data import provenance

    forged = "first\nfairseq-interactive: error: \x1b[31mFAKE\x1b[0m \u202e"
    notes = provenance.differences({"projection": forged, "parser": "x" * 100000}, {"projection": "first",
                                                                                    "parser": "y"})
    assert all("\n" not in n and "\x1b" not in n and "\u202e" not in n and len(n) < 300 for n in notes)
    files = provenance.differing_files({"dictionaries_sha256": {"dict\n.txt": "a\nb" * 9}},
                                       {"dictionaries_sha256": {"dict\n.txt": "c"}})
    assert files and "\n" not in files[0]


@pytest.mark.parametrize("extra, what", [({"train_iterator": {"epoch": "x", "iterations_in_epoch": "y"}}, "epoch"),
                                         ({"train_iterator": {"epoch": 2}, "best": "|evil\n<b>"}, "best"),
                                         ({"train_iterator": {"epoch": 2}, "best": float("nan")}, "best")])
def test_record_refuses_a_checkpoint_whose_iterator_or_best_value_is_not_a_number(tmp_path, extra, what):
    from fairseq_syntax.analysis.results import checkpoint_facts

    for which in ("last", "best"):
        torch.save(_fairseq_state(extra_state=extra), tmp_path / f"checkpoint_{which}.pt")
    with pytest.raises(InputError, match="is not a fairseq checkpoint") as error:
        checkpoint_facts(str(tmp_path))
    assert what in str(error.value) and "\n" not in str(error.value)
