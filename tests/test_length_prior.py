"""Paper 004's length prior (section 4.3): the table by hand, smoothing, back-off, the stored file,
and the beam search that adds it to finished hypotheses (``--length-prior``)."""

import json
import logging
import math
import os
import shutil

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary
from fairseq.dataclass.configs import GenerationConfig
from fairseq.models import FairseqDecoder, FairseqEncoder, FairseqEncoderDecoderModel
from fairseq.sequence_generator import SequenceGenerator

from fairseq_syntax.data.length_prior import (
    LengthPrior, estimate_length_prior, length_prior_path, load_length_prior, read_length_prior, write_length_prior,
)
from fairseq_syntax.sequence_generator import (
    LengthPriorSequenceGenerator, LengthPriorSequenceGeneratorWithAlignment,
)
from fairseq_syntax_core.databin import LENGTH_PRIOR_FILE
from fairseq_syntax_core.errors import DataBinError, UsageError
from .conftest import SRC, TGT, conllu_for, parsed_bin, syntax_task

# ------------------------------------------------------------------ the table by hand
#: (source length, target length) of a toy corpus, in pieces; (3, 0) is an empty target
TOY = [(2, 2), (2, 2), (2, 3), (4, 5), (3, 0)]


def toy(max_target_length=None) -> LengthPrior:
    return LengthPrior.from_lengths([s for s, _ in TOY], [t for _, t in TOY], max_target_length)


def p(prior, s, t):
    return math.exp(prior.log_prob(s, t))


def test_counts_and_add_one_smoothing_by_hand():
    prior = toy(max_target_length=5)  # support t = 1..5
    assert prior.counts == {(2, 2): 2, (2, 3): 1, (4, 5): 1}
    assert (prior.pairs, prior.lines, prior.skipped_empty_targets) == (4, 5, 1)
    # p(t | 2) = (c(2, t) + 1) / (3 + 5)
    assert [p(prior, 2, t) for t in range(1, 6)] == pytest.approx([1 / 8, 3 / 8, 2 / 8, 1 / 8, 1 / 8])
    # p(t | 4) = (c(4, t) + 1) / (1 + 5): an unseen pair is 1/6, not 0
    assert [p(prior, 4, t) for t in range(1, 6)] == pytest.approx([1 / 6] * 4 + [2 / 6])


def test_support_is_at_least_the_papers_100_pieces():
    prior = toy()
    assert prior.max_target_length == 100
    assert p(prior, 2, 2) == pytest.approx(3 / 103)
    assert p(prior, 2, 100) == pytest.approx(1 / 103)
    longer = LengthPrior.from_lengths([3], [130])
    assert longer.max_target_length == 130 and p(longer, 3, 130) == pytest.approx(2 / 131)
    with pytest.raises(ValueError):
        LengthPrior.from_lengths([3], [130], max_target_length=100)


def test_every_row_is_a_distribution_over_1_to_L():
    prior = toy()
    table = prior.log_prob_table()
    assert np.isfinite(table).all()
    assert np.exp(table[:, 1:101]).sum(axis=1) == pytest.approx(np.ones(table.shape[0]))


def test_back_off_to_the_nearest_seen_source_length():
    prior = toy(max_target_length=5)
    seen2 = [p(prior, 2, t) for t in range(1, 6)]
    seen4 = [p(prior, 4, t) for t in range(1, 6)]
    # shorter than every seen source length (0, 1): the shortest seen (2)
    assert [p(prior, 0, t) for t in range(1, 6)] == pytest.approx(seen2)
    assert [p(prior, 1, t) for t in range(1, 6)] == pytest.approx(seen2)
    # 3 is as near to 2 as to 4: both counts summed, N = 4: (c(2,t) + c(4,t) + 1) / (4 + 5)
    assert [p(prior, 3, t) for t in range(1, 6)] == pytest.approx([1 / 9, 3 / 9, 2 / 9, 1 / 9, 2 / 9])
    # beyond the longest (4): the longest
    assert [p(prior, 50, t) for t in range(1, 6)] == pytest.approx(seen4)


def test_nearest_wins_over_the_farther_neighbour():
    prior = LengthPrior.from_lengths([1, 5], [1, 5], max_target_length=5)
    assert p(prior, 2, 1) == pytest.approx(2 / 6)  # row 1
    assert p(prior, 4, 5) == pytest.approx(2 / 6)  # row 5
    assert p(prior, 3, 1) == pytest.approx(2 / 7) and p(prior, 3, 5) == pytest.approx(2 / 7)  # tie: both


def test_outside_the_support_is_an_unseen_length_never_minus_infinity():
    prior = toy(max_target_length=5)
    assert p(prior, 2, 0) == pytest.approx(1 / 8)
    assert p(prior, 2, 6) == pytest.approx(1 / 8)
    assert p(prior, -1, 1000) == pytest.approx(1 / 8)


def test_no_pair_is_an_error():
    with pytest.raises(ValueError):
        LengthPrior.from_lengths([], [])
    with pytest.raises(ValueError):
        LengthPrior.from_lengths([3], [0])


def test_json_round_trip_and_damage(tmp_path):
    prior = toy()
    data = prior.to_json()
    assert data["counts"] == [[2, 2, 2], [2, 3, 1], [4, 5, 1]]
    again = LengthPrior.from_json(json.loads(json.dumps(data)))
    assert np.array_equal(again.log_prob_table(), prior.log_prob_table())
    for damage in ({"counts": [[2, 2]]}, {"counts": [[2, 0, 1]]}, {"pairs": 7}, {"version": 2}, {"format": "x"}):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps({**data, **damage}), encoding="utf-8")
        with pytest.raises(DataBinError, match="bad.json"):
            read_length_prior(str(path))
    path.write_text("{", encoding="utf-8")
    with pytest.raises(DataBinError, match="JSON"):
        read_length_prior(str(path))


# ------------------------------------------------------------------ the data-bin
@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    """Whole words (no BPE): the train pairs are (4, 4), (7, 7), (3, 3) words, without </s>."""
    folder = tmp_path_factory.mktemp("length_prior")
    test_src, test_tgt = ["A dog sleeps on a long mat ."], ["Ein Hund schläft auf einer langen Matte ."]
    path = parsed_bin(folder, {"train": (SRC, TGT, conllu_for(SRC)),
                               "test": (test_src, test_tgt, conllu_for(test_src))}, extra=["--no-bpe"])
    table = path / LENGTH_PRIOR_FILE.format(src="en", tgt="de")
    if table.exists():  # the pipeline writes it: these tests write it themselves
        table.unlink()
    return path


def test_write_counts_the_train_split_in_pieces_without_eos(data_bin, tmp_path):
    work = tmp_path / "bin"
    shutil.copytree(data_bin, work)
    path = write_length_prior(str(work), "en", "de")
    assert os.path.basename(path) == "length_prior.en-de.json"
    data = json.loads(open(path, encoding="utf-8").read())
    assert data["counts"] == [[3, 3, 1], [4, 4, 1], [7, 7, 1]]
    assert (data["splits"], data["lines"], data["pairs"], data["max_target_length"]) == (["train"], 3, 3, 100)
    assert [n for n in os.listdir(work) if n.startswith(".")] == []  # written through a renamed temp file


def test_every_train_shard_goes_into_one_table(data_bin, tmp_path):
    work = tmp_path / "bin"
    shutil.copytree(data_bin, work)
    for lang in ("en", "de"):
        for ext in ("bin", "idx"):
            shutil.copy(work / f"train.en-de.{lang}.{ext}", work / f"train1.en-de.{lang}.{ext}")
    prior = read_length_prior(write_length_prior(str(work), "en", "de"))
    assert prior.splits == ["train", "train1"]
    assert prior.counts == {(3, 3): 2, (4, 4): 2, (7, 7): 2}


def test_older_data_bins_get_the_table_estimated_from_train(data_bin, caplog):
    assert not os.path.exists(length_prior_path(str(data_bin), "en", "de"))
    with caplog.at_level(logging.INFO, logger="fairseq_syntax.data.length_prior"):
        prior = load_length_prior(str(data_bin), "en", "de")
    assert "estimated from the train split" in caplog.text
    assert prior.counts == {(3, 3): 1, (4, 4): 1, (7, 7): 1}


def test_stored_table_is_read_and_checked_against_the_train_split(data_bin, tmp_path):
    work = tmp_path / "bin"
    shutil.copytree(data_bin, work)
    path = write_length_prior(str(work), "en", "de")
    assert load_length_prior(str(work), "en", "de").to_json() == estimate_length_prior(str(work), "en", "de").to_json()
    data = json.loads(open(path, encoding="utf-8").read())
    data["counts"].append([9, 9, 1])
    data["lines"] += 1
    data["pairs"] += 1
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    with pytest.raises(DataBinError, match="another run"):
        load_length_prior(str(work), "en", "de")
    os.rename(path, work / "length_prior.de-en.json")
    with pytest.raises(DataBinError, match="source language 'en', not 'de'"):
        read_length_prior(str(work / "length_prior.de-en.json"), "de", "en")


def test_no_train_split_and_no_table_is_an_error(data_bin, tmp_path):
    work = tmp_path / "bin"
    shutil.copytree(data_bin, work)
    for name in os.listdir(work):
        if name.startswith("train."):
            os.unlink(work / name)
    with pytest.raises(DataBinError, match="has none"):
        load_length_prior(str(work), "en", "de")


# ------------------------------------------------------------------ the beam search
class ScriptedEncoder(FairseqEncoder):
    def forward(self, src_tokens, src_lengths=None, **kwargs):
        return {"src_tokens": [src_tokens]}

    def reorder_encoder_out(self, encoder_out, new_order):
        return {"src_tokens": [encoder_out["src_tokens"][0].index_select(0, new_order)]}


class ScriptedDecoder(FairseqDecoder):
    """p(</s>) = eos[step] after any prefix; the rest goes to the dictionary's first two words 0.6 : 0.4."""

    def __init__(self, dictionary, eos):
        super().__init__(dictionary)
        self.eos = eos
        self.words = [dictionary.nspecial, dictionary.nspecial + 1]

    def forward(self, prev_output_tokens, encoder_out=None, **kwargs):
        bsz, steps = prev_output_tokens.shape
        p_eos = self.eos[min(steps - 1, len(self.eos) - 1)]
        out = torch.full((bsz, steps, len(self.dictionary)), -1e4)
        out[:, :, self.dictionary.eos()] = math.log(p_eos)
        out[:, :, self.words[0]] = math.log(0.6 * (1 - p_eos))
        out[:, :, self.words[1]] = math.log(0.4 * (1 - p_eos))
        return out, None

    def max_positions(self):
        return 1024


def scripted_model(dictionary, eos=(0.5, 0.5, 0.3, 0.3)):
    return FairseqEncoderDecoderModel(ScriptedEncoder(dictionary), ScriptedDecoder(dictionary, list(eos))).eval()


DICT = Dictionary()
A, B = DICT.add_symbol("a"), DICT.add_symbol("b")
#: one source of 2 pieces (+ </s>)
SAMPLE = {"net_input": {"src_tokens": torch.tensor([[A, B, DICT.eos()]]), "src_lengths": torch.tensor([3])},
          "id": torch.tensor([0])}
#: training pairs that say: 2 source pieces give 3 target pieces
PRIOR = LengthPrior.from_lengths([2] * 50, [3] * 50)


def hypotheses(generator, model, sample=SAMPLE):
    return {tuple(h["tokens"].tolist()): h for h in generator.generate([model], sample)[0]}


def test_the_prior_changes_the_ranking_of_finished_hypotheses():
    model = scripted_model(DICT)
    plain = SequenceGenerator([model], DICT, beam_size=4, normalize_scores=False)
    with_prior = LengthPriorSequenceGenerator([model], DICT, beam_size=4, normalize_scores=False, length_prior=PRIOR)
    before, after = plain.generate([model], SAMPLE)[0], with_prior.generate([model], SAMPLE)[0]
    assert len(before[0]["tokens"]) - 1 == 1  # the model alone: one piece
    assert len(after[0]["tokens"]) - 1 == 3  # with the prior: the 3 pieces the training pairs had
    # the same hypotheses finish (the search is fairseq's); each gains log p(len | 2) once
    plain_by, prior_by = hypotheses(plain, model), hypotheses(with_prior, model)
    assert plain_by.keys() == prior_by.keys()
    for tokens, hypo in prior_by.items():
        log_p = math.log((51 if len(tokens) - 1 == 3 else 1) / 150)  # (c + 1) / (N + L), N = 50, L = 100
        assert float(hypo["length_prior"]) == pytest.approx(log_p, abs=1e-6)
        assert float(hypo["score"]) == pytest.approx(float(plain_by[tokens]["score"]) + log_p, abs=1e-5)
        assert torch.equal(hypo["positional_scores"], plain_by[tokens]["positional_scores"])
    scores = [float(h["score"]) for h in after]
    assert scores == sorted(scores, reverse=True)


def test_each_sentence_of_a_batch_gets_its_own_source_length():
    model = scripted_model(DICT)
    pad, eos = DICT.pad(), DICT.eos()
    sample = {"net_input": {"src_tokens": torch.tensor([[pad, pad, A, B, eos], [A, B, A, B, eos]]),
                            "src_lengths": torch.tensor([3, 5])}, "id": torch.tensor([0, 1])}
    prior = LengthPrior.from_lengths([2] * 50 + [4] * 50, [3] * 50 + [1] * 50)
    generator = LengthPriorSequenceGenerator([model], DICT, beam_size=4, normalize_scores=False, length_prior=prior)
    first, second = generator.generate([model], sample)
    assert len(first[0]["tokens"]) - 1 == 3 and len(second[0]["tokens"]) - 1 == 1
    for source_length, hypos in ((2, first), (4, second)):
        for hypo in hypos:
            assert float(hypo["length_prior"]) == pytest.approx(
                prior.log_prob(source_length, len(hypo["tokens"]) - 1), abs=1e-6)


def test_weight_and_normalisation():
    model = scripted_model(DICT)
    plain = hypotheses(SequenceGenerator([model], DICT, beam_size=4, normalize_scores=False), model)
    zero = hypotheses(LengthPriorSequenceGenerator([model], DICT, beam_size=4, normalize_scores=False,
                                                   length_prior=PRIOR, length_prior_weight=0.0), model)
    assert {k: float(h["score"]) for k, h in zero.items()} == {k: float(h["score"]) for k, h in plain.items()}
    # normalised (fairseq's default): the prior is added after the division by len ** lenpen
    normalised = hypotheses(SequenceGenerator([model], DICT, beam_size=4, len_penalty=0.5), model)
    both = hypotheses(LengthPriorSequenceGenerator([model], DICT, beam_size=4, len_penalty=0.5,
                                                   length_prior=PRIOR, length_prior_weight=2.0), model)
    for tokens, hypo in both.items():
        assert float(hypo["score"]) == pytest.approx(
            float(normalised[tokens]["score"]) + 2.0 * float(hypo["length_prior"]), abs=1e-5)
    with pytest.raises(UsageError):
        LengthPriorSequenceGenerator([model], DICT, length_prior=PRIOR, length_prior_weight=-1.0)


def test_lengths_are_capped_at_the_tables_support():
    model = scripted_model(DICT, eos=(0.01,))  # the model would go on for ever
    short = LengthPrior.from_lengths([2], [3], max_target_length=4)
    generator = LengthPriorSequenceGenerator([model], DICT, beam_size=2, length_prior=short)
    assert max(len(h["tokens"]) - 1 for h in generator.generate([model], SAMPLE)[0]) == 4
    plain = SequenceGenerator([model], DICT, beam_size=2, max_len_b=10)
    assert max(len(h["tokens"]) - 1 for h in plain.generate([model], SAMPLE)[0]) == 10


def test_alignment_generator_adds_the_prior_too():
    model = scripted_model(DICT)
    generator = LengthPriorSequenceGeneratorWithAlignment([model], DICT, beam_size=4, normalize_scores=False,
                                                          length_prior=PRIOR)
    finished = generator._generate(SAMPLE)[0]  # generate() would also extract alignments from attention
    assert len(finished[0]["tokens"]) - 1 == 3 and "length_prior" in finished[0]


# ------------------------------------------------------------------ through the task
def task_with_prior(data_bin, **cfg):
    task = syntax_task(data_bin)
    task.cfg.length_prior = True
    for key, value in cfg.items():
        setattr(task.cfg, key, value)
    return task


def test_task_builds_the_length_prior_generator_from_the_data_bin(data_bin, caplog):
    plain_task = syntax_task(data_bin)
    model = scripted_model(plain_task.target_dictionary)
    assert type(plain_task.build_generator([model], GenerationConfig(beam=2))) is SequenceGenerator
    task = task_with_prior(data_bin, length_prior_weight=0.5)
    with caplog.at_level(logging.WARNING):
        generator = task.build_generator([model], GenerationConfig(beam=2, unnormalized=True))
    assert "--unnormalized" not in caplog.text
    assert isinstance(generator, LengthPriorSequenceGenerator) and generator.length_prior_weight == 0.5
    assert generator.length_prior.counts == {(3, 3): 1, (4, 4): 1, (7, 7): 1}
    assert generator.max_len == 101
    with caplog.at_level(logging.WARNING):
        task.build_generator([model], GenerationConfig(beam=2))
    assert "add --unnormalized to reproduce it" in caplog.text
    aligned = task.build_generator([model], GenerationConfig(beam=2, print_alignment="hard"))
    assert isinstance(aligned, LengthPriorSequenceGeneratorWithAlignment)


def test_a_weight_without_the_prior_is_named_not_silently_ignored(data_bin, caplog):
    task = syntax_task(data_bin)
    task.cfg.length_prior_weight = 0.3
    model = scripted_model(task.target_dictionary)
    with caplog.at_level(logging.WARNING):
        generator = task.build_generator([model], GenerationConfig(beam=2))
    assert type(generator) is SequenceGenerator
    assert "--length-prior-weight 0.3 has no effect without --length-prior" in caplog.text


@pytest.mark.parametrize("option", [{"sampling": True}, {"diverse_beam_groups": 2}, {"diversity_rate": 0.0},
                                    {"match_source_len": True}])
def test_other_search_strategies_are_refused(data_bin, option):
    task = task_with_prior(data_bin)
    model = scripted_model(task.target_dictionary)
    with pytest.raises(UsageError, match="--length-prior"):
        task.build_generator([model], GenerationConfig(beam=2, **option))


def test_decoding_a_split_uses_the_train_table_and_source_lengths_without_eos(data_bin):
    task = task_with_prior(data_bin)
    task.load_dataset("test")
    dataset = task.datasets["test"]
    model = scripted_model(task.target_dictionary)
    generator = task.build_generator([model], GenerationConfig(beam=2, unnormalized=True))
    sample = dataset.collater([dataset[0]])
    (best, *_), = task.inference_step(generator, [model], sample)
    source_length = 8  # "A dog sleeps on a long mat ." in words: unseen in train, nearest seen: 7
    assert int(sample["net_input"]["src_lengths"][0]) == source_length + 1
    train = estimate_length_prior(str(data_bin), "en", "de")
    assert float(best["length_prior"]) == pytest.approx(train.log_prob(7, len(best["tokens"]) - 1), abs=1e-6)


def test_the_pipeline_stores_the_table_it_would_estimate(tmp_path):
    """fairseq-syntax-preprocess writes the table (from its own pieces) equal to the estimate from the binarized sizes."""
    data_bin = parsed_bin(tmp_path, {"train": (SRC, TGT, conllu_for(SRC)), "valid": (SRC[:2], TGT[:2], conllu_for(SRC[:2]))})
    stored = read_length_prior(length_prior_path(str(data_bin), "en", "de"), "en", "de")
    estimated = estimate_length_prior(str(data_bin), "en", "de")
    assert stored.to_json()["counts"] == estimated.to_json()["counts"] and stored.lines == estimated.lines == 3
    from fairseq_syntax_preprocess.destdir import files_of
    import json

    meta = json.loads((data_bin / "syntax.json").read_text())
    assert LENGTH_PRIOR_FILE.format(src="en", tgt="de") in files_of(meta)  # --overwrite and perturb know it


def test_a_table_with_the_same_line_count_but_other_counts_is_refused(data_bin, tmp_path):
    # before: only the number of train lines was compared, so the table of the same corpus with other
    # BPE codes (same lines, other lengths), or an edited one, was used without a word
    work = tmp_path / "bin"
    shutil.copytree(data_bin, work)
    path = write_length_prior(str(work), "en", "de")
    data = json.loads(open(path, encoding="utf-8").read())
    data["counts"] = [[s, t + 1, c] for s, t, c in data["counts"]]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    with pytest.raises(DataBinError, match=r"counts \(source 3, target 3\) pieces differently.*another run"):
        load_length_prior(str(work), "en", "de")


def test_a_stored_support_other_than_the_pipelines_is_refused(tmp_path):
    # max_target_length is always max(100, longest target); 10**8 would allocate a table that wide
    data = {**toy().to_json(), "max_target_length": 10 ** 8}
    path = tmp_path / "length_prior.en-de.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DataBinError, match="max_target_length 100000000 is not max"):
        read_length_prior(str(path))
