"""A second hostile pass (fresh cases): values read from files never allocate without bound, forge
message lines, or end in a traceback."""

import pytest
import torch

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.length_prior import MAX_SOURCE_LENGTH, LengthPrior
from fairseq_syntax_core.shards import missing_shards

from .helpers import _fairseq_state


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
    from fairseq_syntax_analysis.results import checkpoint_facts

    for which in ("last", "best"):
        torch.save(_fairseq_state(extra_state=extra), tmp_path / f"checkpoint_{which}.pt")
    with pytest.raises(InputError, match="is not a fairseq checkpoint") as error:
        checkpoint_facts(str(tmp_path))
    assert what in str(error.value) and "\n" not in str(error.value)


def test_a_dictionary_count_too_long_to_convert_is_one_line():
    from fairseq_syntax_core.fileio import check_dictionary_file

    import tempfile, os
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "dict.en.pos.txt")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("NOUN " + "9" * 5000 + "\nVERB 3\n")
        with pytest.raises(InputError, match=r"dict.en.pos.txt:1: not a fairseq dictionary line") as error:
            check_dictionary_file(path)
        assert len(str(error.value)) < 300


def test_conllu_values_in_messages_are_shortened():
    from fairseq_syntax_preprocess.word_tree import tag_problem

    problem = tag_problem("x y" * 1000000)
    assert problem is not None and len(problem) < 300


def test_the_hub_does_not_use_the_text_of_a_tensor_changed_since_encode():
    import types

    from fairseq_syntax.hub import SyntaxHubInterface

    hub = SyntaxHubInterface.__new__(SyntaxHubInterface)
    hub._texts = {}
    hub.tokenize, hub.apply_bpe = (lambda s: s), (lambda s: s)
    hub.binarize = lambda text: torch.tensor([len(w) for w in text.split()] + [2])
    a = hub.encode("A man rides")
    assert hub.text_of(a) == "A man rides"
    a[0] = 7  # changed in place: another sentence's ids
    assert hub.text_of(a) is None


@pytest.mark.parametrize("key", ["nsd_max_distance", "max_source_positions"])
def test_a_forged_model_size_in_a_checkpoint_is_refused_before_fairseq_builds_the_model(tmp_path, key):
    """fairseq builds the model from the stored args before loading the weights: 10**9 allocated 16-128 GB."""
    import argparse

    from fairseq_syntax_core.checkpoint_loader import check_fairseq_state
    from fairseq_syntax_core.errors import CheckpointError

    state = _fairseq_state()
    state["cfg"]["model"] = argparse.Namespace(arch="transformer_nsd", **{key: 10 ** 9})
    with pytest.raises(CheckpointError, match=f"setting {key} = 1000000000 is beyond any model size"):
        check_fairseq_state(str(tmp_path / "c.pt"), state)
    state["cfg"]["model"] = argparse.Namespace(arch="transformer_nsd", **{key: 64})
    assert check_fairseq_state(str(tmp_path / "c.pt"), state) is state


def test_evaluate_refuses_a_runaway_line_before_scoring(tmp_path, capsys):
    from fairseq_syntax_analysis import evaluate
    from fairseq_syntax_analysis.hypotheses import MAX_LINE_CHARS

    (tmp_path / "ref.txt").write_text("a b c\nd e f\n", encoding="utf-8")
    (tmp_path / "base.txt").write_text("a b c\nd e g\n", encoding="utf-8")
    (tmp_path / "big.txt").write_text("x " * MAX_LINE_CHARS + "\nd e f\n", encoding="utf-8")
    assert evaluate.cli_main(["--reference", str(tmp_path / "ref.txt"), "--baseline", f"b={tmp_path / 'base.txt'}",
                              "--system", f"s={tmp_path / 'big.txt'}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "big.txt:1: a line of" in err and "longer than the 100000" in err
