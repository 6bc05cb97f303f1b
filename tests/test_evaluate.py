"""fairseq-syntax-evaluate: sacreBLEU scores, paired bootstrap, buckets by source length and tree depth."""

import json
import random

import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from fairseq_syntax_analysis import buckets as bk
from fairseq_syntax_analysis import scoring
from fairseq_syntax_analysis.evaluate import cli_main
from fairseq_syntax_analysis.hypotheses import read_translations
from fairseq_syntax_core.errors import InputError
from .conftest import parsed_bin, write

REFS = [
    "A man rides a red bike down the street .",
    "Two dogs play in the snow .",
    "A woman is reading a book in the park .",
    "Children are swimming in a lake .",
    "An old man sits on a bench .",
    "A girl with a hat runs on the beach .",
    "The band plays music on a stage .",
    "A boy jumps into the water .",
]
# every sentence has one word wrong
WORSE = [
    "A man rides a blue bike down the street .",
    "Two cats play in the snow .",
    "A woman is reading a paper in the park .",
    "Children are swimming in a pool .",
    "An old woman sits on a bench .",
    "A girl with a cap runs on the beach .",
    "The band plays songs on a stage .",
    "A boy jumps into the sea .",
]


def files(tmp_path, **texts):
    return {name: write(tmp_path / f"{name}.txt", "\n".join(lines) + "\n") for name, lines in texts.items()}


def evaluate_json(tmp_path, *argv):
    out = tmp_path / "eval.json"
    assert cli_main([*argv, "--json", str(out), "--quiet"]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def test_identical_systems_are_p_1_and_not_significant(tmp_path):
    f = files(tmp_path, ref=REFS, base=WORSE, same=WORSE)
    report = evaluate_json(tmp_path, "-r", f["ref"], "-b", f"base={f['base']}", "-s", f"same={f['same']}")
    for metric in ("BLEU", "chrF2"):
        paired = report["systems"][1]["paired"][metric]
        assert paired["difference"] == 0.0
        assert paired["p_value"] == 1.0  # sacreBLEU alone would say 1/1001
        assert not paired["significant"]
        assert "p = 1" in paired["note"]


def test_a_system_with_every_sentence_fixed_is_significant(tmp_path):
    refs, worse = REFS * 4, WORSE * 4
    f = files(tmp_path, ref=refs, base=worse, fixed=refs)
    report = evaluate_json(tmp_path, "-r", f["ref"], "-b", f"base={f['base']}", "-s", f"fixed={f['fixed']}")
    fixed = report["systems"][1]
    assert fixed["scores"]["BLEU"] == pytest.approx(100.0)
    for metric in ("BLEU", "chrF2"):
        assert fixed["paired"][metric]["difference"] > 0
        assert fixed["paired"][metric]["p_value"] < 0.05
        assert fixed["paired"][metric]["significant"]
    assert report["paired_signatures"]["BLEU"].endswith("bs:1000|seed:12345") or "bs:1000" in report["paired_signatures"]["BLEU"]


def test_paired_bootstrap_from_statistics_equals_sacrebleus_own():
    rng = random.Random(3)
    words = "a the cat dog sat on mat red big small ran home".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(120)]
    base = [" ".join(w if rng.random() < 0.7 else rng.choice(words) for w in r.split()) for r in refs]
    system = [" ".join(w if rng.random() < 0.75 else rng.choice(words) for w in r.split()) for r in refs]
    _, scores = PairedTest([("base", base), ("sys", system)], {"BLEU": BLEU(), "chrF2": CHRF()}, [refs],
                           test_type="bs", n_samples=1000)()
    for metric in ("BLEU", "chrF2"):
        m = scoring.make_metric(metric)
        ours = scoring.paired_bootstrap(metric, scoring.sentence_statistics(m, base, refs),
                                        scoring.sentence_statistics(m, system, refs))
        theirs = scores[metric][1]
        assert ours.p_value == theirs.p_value
        assert ours.system == pytest.approx(theirs.score, abs=1e-4)
        assert ours.mean == pytest.approx(theirs.mean, abs=1e-4)
        assert ours.ci == pytest.approx(theirs.ci, abs=1e-4)


def test_fairseq_generate_output_in_id_order_without_bpe_and_detokenized(tmp_path):
    gen = write(tmp_path / "gen.txt", "\n".join([
        "S-1\tZwei Hunde",
        "H-1\t-0.5\tZwei Hun@@ de spielen .",
        "D-1\t-0.5\tZwei Hun@@ de spielen .",
        "P-1\t-0.1 -0.2",
        "S-0\tEin Mann",
        "H-0\t-0.4\tEin Mann , der &quot; fährt &quot; .",
        "D-0\t-0.4\tEin Mann , der &quot; fährt &quot; .",
        "Generate test with beam=5: BLEU4 = 10.00",
    ]) + "\n")
    assert read_translations(gen, "de") == ['Ein Mann, der "fährt".', "Zwei Hunde spielen."]
    assert read_translations(gen, "de", detokenize=False)[1] == "Zwei Hunde spielen ."


def test_output_fairseq_already_detokenized_is_taken_as_it_is(tmp_path):
    gen = write(tmp_path / "gen.txt", "\n".join([
        "H-0\t-0.4\tR &amp; B , Mann .",
        "D-0\t-0.4\tR &amp; B, Mann.",  # --tokenizer moses: fairseq detokenized (a literal "&amp;" stays)
        "H-1\t-0.5\tZwei Hunde .",
        "D-1\t-0.5\tZwei Hunde.",
    ]) + "\n")
    assert read_translations(gen, "de") == ["R &amp; B, Mann.", "Zwei Hunde."]


def test_interrupted_generate_output_is_refused(tmp_path):
    gen = write(tmp_path / "gen.txt", "H-0\t-0.4\tEin Mann .\nH-2\t-0.4\tDrei .\n")
    with pytest.raises(InputError, match=r"gen.txt: .*not 0..1 \(missing e.g. \[1\]\)"):
        read_translations(gen, "de")


def test_translations_of_another_test_set_are_refused_naming_the_file(tmp_path, capsys):
    f = files(tmp_path, ref=REFS, base=WORSE, short=WORSE[:5])
    assert cli_main(["-r", f["ref"], "-b", f["base"], "-s", f["short"], "--quiet"]) == 1
    assert f"{f['short']}: has 5 translations, the reference has 8 lines" in capsys.readouterr().err


# ------------------------------------------------------------------ buckets from the parse
#: source sentences and their parses: depth 1 (flat), depth 3 (a chain), depth 0 (one word)
BUCKET_SRC = ["the dog runs fast .", "big dogs chase small cats", "Stop"]
BUCKET_CONLLU = (
    "1\tthe\t_\tX\t_\t_\t2\tdet\t_\t_\n2\tdog\t_\tX\t_\t_\t0\troot\t_\t_\n3\truns\t_\tX\t_\t_\t2\tdep\t_\t_\n"
    "4\tfast\t_\tX\t_\t_\t2\tdep\t_\t_\n5\t.\t_\tX\t_\t_\t2\tpunct\t_\t_\n\n"
    "1\tbig\t_\tX\t_\t_\t0\troot\t_\t_\n2\tdogs\t_\tX\t_\t_\t1\tdep\t_\t_\n3\tchase\t_\tX\t_\t_\t2\tdep\t_\t_\n"
    "4\tsmall\t_\tX\t_\t_\t3\tdep\t_\t_\n5\tcats\t_\tX\t_\t_\t3\tdep\t_\t_\n\n"
    "1\tStop\t_\tX\t_\t_\t0\troot\t_\t_\n\n"
)


@pytest.fixture
def bucket_bin(tmp_path):
    # few BPE merges: words split into pieces, which must not count as words or depth
    tgt = ["der Hund rennt schnell .", "große Hunde jagen kleine Katzen", "Halt"]
    return parsed_bin(tmp_path, {"train": (BUCKET_SRC, tgt, BUCKET_CONLLU)}, bpe_symbols=3)


def test_lengths_and_depths_come_from_the_data_bins_parse_in_words(bucket_bin):
    profile = bk.profile_from_data_bin(str(bucket_bin), "train", None, None)
    assert profile.lengths.tolist() == [5, 5, 1]
    assert profile.depths.tolist() == [1, 3, 0]


def test_bucket_edges_and_names():
    assert bk.bucket_names([20, 30, 40, 50]) == ["<20", "20-29", "30-39", "40-49", ">=50"]
    assert bk.bucket_of(bk.np.array([3, 20, 29, 30, 77]), [20, 30, 40, 50]).tolist() == [0, 1, 1, 2, 4]
    with pytest.raises(ValueError, match="increasing"):
        bk.parse_edges("30,20", bk.np.array([1]))


def test_bleu_by_depth_and_length_tables_json_and_plot(bucket_bin, tmp_path):
    refs = ["der Hund rennt schnell .", "große Hunde jagen kleine Katzen", "Halt"]
    f = files(tmp_path, ref=refs, base=["der Hund rennt .", "große Hunde jagen Katzen", "Halt"], sys=refs)
    plot = tmp_path / "eval.png"
    report = evaluate_json(tmp_path, "-r", f["ref"], "-b", f"base={f['base']}", "-s", f"sys={f['sys']}",
                           "--data-bin", str(bucket_bin), "--split", "train", "--depth-buckets", "1,2",
                           "--length-buckets", "2", "--plot", str(plot), "--statistics")
    depth = report["buckets"]["depth"]
    assert depth["names"] == ["<1", "1", ">=2"] and depth["sentences"] == [1, 1, 1]
    # (a one-word sentence has no 4-grams: BLEU 0 even when exact)
    assert depth["BLEU"]["sys"][1:] == pytest.approx([100.0, 100.0])
    assert depth["BLEU"]["base"][1] < 100.0 and depth["BLEU"]["base"][2] < 100.0
    length = report["buckets"]["length"]
    assert length["names"] == ["<2", ">=2"] and length["sentences"] == [1, 2]
    assert len(report["statistics"]["sys"]["BLEU"]) == 3
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _generate_log(sources, hypotheses, targets):
    return [line for i, (s, h, t) in enumerate(zip(sources, hypotheses, targets))
            for line in (f"S-{i}\t{s}", f"T-{i}\t{t}", f"H-{i}\t-0.5\t{h}", f"D-{i}\t-0.5\t{h}")] + \
        ["Generate test with beam=5: BLEU4 = 1.00"]


def test_a_generate_log_of_another_test_set_as_long_is_refused_against_the_data_bin(bucket_bin, tmp_path, capsys):
    refs = ["der Hund rennt schnell .", "große Hunde jagen kleine Katzen", "Halt"]
    # fairseq-generate prints the source BPE joined and detokenized ("fast." for "fast ."): that is the same
    same = _generate_log(["the dog runs fast.", "big dogs chase small cats", "Stop"], refs, refs)
    other = _generate_log(["a cat sleeps .", "small dogs chase big cats", "Go"], refs, refs)  # as many sentences
    f = files(tmp_path, ref=refs, same=same, other=other)
    common = ["-r", f["ref"], "--data-bin", str(bucket_bin), "--split", "train", "--quiet", "--length-buckets", "2"]
    assert cli_main([*common, "-b", f"same={f['same']}", "--json", str(tmp_path / "same.json")]) == 0
    assert json.loads((tmp_path / "same.json").read_text())["perturbation"] == 0.0  # a data-bin as parsed
    capsys.readouterr()
    assert cli_main([*common, "-b", f"other={f['other']}"]) == 1
    err = capsys.readouterr().err
    assert f"{f['other']}: its S- lines (the sources fairseq-generate translated) differ from" in err
    assert "on 3 of 3 sentences (e.g. sentence 0: 'a cat sleeps .' against 'the dog runs fast .')" in err


def test_an_empty_bucket_has_no_score_not_zero(bucket_bin, tmp_path):
    refs = ["der Hund rennt schnell .", "große Hunde jagen kleine Katzen", "Halt"]
    f = files(tmp_path, ref=refs, base=refs, sys=refs)
    report = evaluate_json(tmp_path, "-r", f["ref"], "-b", f"base={f['base']}", "-s", f"sys={f['sys']}",
                           "--data-bin", str(bucket_bin), "--split", "train", "--length-buckets", "2,50")
    length = report["buckets"]["length"]
    assert length["sentences"][-1] == 0  # no sentence of 50 words or more
    assert length["BLEU"]["base"][-1] is None and length["BLEU"]["sys"][-1] is None
    assert length["BLEU"]["sys"][1] == pytest.approx(100.0)

def test_two_generate_runs_in_one_file_are_refused(tmp_path):
    run = "S-0\tx\nH-0\t-1\tEin Mann .\nS-1\ty\nH-1\t-1\tZwei .\n"
    gen = write(tmp_path / "gen.txt", run + run)
    with pytest.raises(InputError, match=r"gen.txt:5: sentence id 0 appears a second time"):
        read_translations(gen, "de")


def test_empty_reference_and_bad_settings_are_one_line_errors(tmp_path, capsys):
    f = files(tmp_path, ref=REFS, base=WORSE)
    empty = write(tmp_path / "empty.txt", "")
    assert cli_main(["-r", empty, "-b", f["base"], "--quiet"]) == 1
    assert "the reference file is empty" in capsys.readouterr().err
    for bad in (["--seed", "-1"], ["--bootstrap-samples", "1000000000"], ["--alpha", "2"]):
        with pytest.raises(SystemExit):
            cli_main(["-r", f["ref"], "-b", f["base"], *bad])


def test_a_generate_log_given_as_the_reference_is_refused_naming_its_first_hypothesis(tmp_path, capsys):
    """fairseq-generate's output as --reference would score its H- lines, with scores and BPE, as the text."""
    gen = write(tmp_path / "gen.txt", "S-0\tEin Mann\nT-0\tA man\nH-0\t-0.4\tA man\nD-0\t-0.4\tA man\n")
    assert cli_main(["-r", gen, "-b", gen, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{gen}:3: looks like fairseq-generate output" in err and "Traceback" not in err


def test_ribes_per_system_in_table_and_json_when_asked(tmp_path, capsys):
    from fairseq_syntax.scoring.ribes import corpus_ribes

    f = files(tmp_path, ref=REFS, base=WORSE, same=REFS)
    plain = evaluate_json(tmp_path, "-r", f["ref"], "-b", f"base={f['base']}", "--bootstrap-samples", "10")
    assert "RIBES" not in plain["systems"][0]["scores"] and "RIBES" not in capsys.readouterr().out
    report = evaluate_json(tmp_path, "-r", f["ref"], "-b", f"base={f['base']}", "-s", f"same={f['same']}", "--ribes",
                           "--bootstrap-samples", "10")
    base, same = report["systems"]
    # these lines are already 13a tokens: RIBES of the words as they stand
    expected = 100 * corpus_ribes([r.split() for r in REFS], [h.split() for h in WORSE])
    assert base["scores"]["RIBES"] == pytest.approx(expected)
    # one word wrong per line, in place: every other word aligned in order, NKT 1, BP 1, RIBES = P ** 0.25
    assert expected == pytest.approx(100 * sum(((len(r.split()) - 1) / len(r.split())) ** 0.25 for r in REFS) / 8)
    assert same["scores"]["RIBES"] == pytest.approx(100.0)
    assert "RIBES" not in same["paired"]  # a corpus score, no paired test
    assert report["signatures"]["RIBES"].startswith("nltk:")
    out = capsys.readouterr().out
    assert "RIBES" in out.splitlines()[0] and f"{expected:.2f}" in out


# ------------------------------------------------------------------ hostile inputs
def test_one_damaged_d_line_does_not_switch_off_detokenization_for_the_file(tmp_path):
    # no --tokenizer: D = H on every line, except the last, cut mid-way by an interrupted write
    gen = write(tmp_path / "gen.txt", "\n".join([
        "H-0\t-0.4\tEin Mann , der &quot; fährt &quot; .",
        "D-0\t-0.4\tEin Mann , der &quot; fährt &quot; .",
        "H-1\t-0.5\tZwei Hunde spielen .",
        "D-1\t-0.5\tZwei Hun",
    ]) + "\n")
    assert read_translations(gen, "de")[0] == 'Ein Mann, der "fährt".'


def test_a_generate_log_of_another_test_set_is_refused_by_its_targets(tmp_path):
    lines = []
    for i, (ref, hyp) in enumerate(zip(WORSE, REFS)):  # its T- lines are another set's references
        lines += [f"T-{i}\t{ref}", f"H-{i}\t-0.5\t{hyp}", f"D-{i}\t-0.5\t{hyp}"]
    gen = write(tmp_path / "gen.txt", "\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"gen.txt: its T- lines .* differ from the reference on 8 of 8"):
        read_translations(gen, "en", references=REFS)
    # the same log against its own references (tokenized, BPE, an <unk>) is read
    own = write(tmp_path / "own.txt", "\n".join(
        [f"T-{i}\t{r.replace('man', 'm@@ an').replace('Two', '<<unk>>')}\nH-{i}\t-1\t{r}" for i, r in enumerate(REFS)])
        + "\n")
    assert read_translations(own, "en", references=REFS) == [r.replace(" .", ".") for r in REFS]
    # a word-level vocabulary: an <unk> on every line still matches its reference
    unk = write(tmp_path / "unk.txt", "\n".join(
        [f"T-{i}\t{r.replace(r.split()[1], '<<unk>>')}\nH-{i}\t-1\t{r}" for i, r in enumerate(REFS)]) + "\n")
    assert len(read_translations(unk, "en", references=REFS)) == len(REFS)


def test_outputs_never_replace_the_data_bins_files_or_each_other(bucket_bin, tmp_path, capsys):
    f = files(tmp_path, ref=["der Hund rennt schnell .", "große Hunde jagen kleine Katzen", "Halt"],
              base=["der Hund .", "Hunde", "Halt"])
    meta = bucket_bin / "syntax.json"
    before = meta.read_bytes()
    common = ["-r", f["ref"], "-b", f["base"], "--data-bin", str(bucket_bin), "--split", "train", "--quiet"]
    assert cli_main([*common, "--json", str(meta)]) == 1
    assert "is inside the data-bin" in capsys.readouterr().err and meta.read_bytes() == before
    (tmp_path / "here").symlink_to(tmp_path)
    assert cli_main([*common, "--json", str(tmp_path / "a.png"), "--plot", str(tmp_path / "here" / "a.png")]) == 1
    assert "name the same file" in capsys.readouterr().err
    from fairseq_syntax_core.fileio import check_distinct_outputs

    with pytest.raises(InputError, match="name the same file"):
        check_distinct_outputs([("--json", str(tmp_path / "a.png")), ("--plot", str(tmp_path / "here" / "a.png"))])


def test_bad_bucket_edges_and_orphan_flags_are_refused_before_any_work(tmp_path):
    f = files(tmp_path, ref=REFS, base=WORSE)
    for bad in (["--source", f["ref"], "--length-buckets", "abc"], ["--source", f["ref"], "--length-buckets", ","],
                ["--source", f["ref"], "--depth-buckets", "1,2"], ["--statistics"]):
        with pytest.raises(SystemExit):
            cli_main(["-r", f["ref"], "-b", f["base"], "--quiet", *bad])


def test_bootstrap_memory_is_bounded_by_samples_times_sentences(tmp_path, capsys, monkeypatch):
    from fairseq_syntax_analysis import evaluate as ev

    f = files(tmp_path, ref=REFS, base=WORSE, same=REFS)
    # 8 sentences allow every legal sample count: shrink the bound to 100 samples to test it
    monkeypatch.setattr(ev, "MAX_BOOTSTRAP_BYTES", ev.BOOTSTRAP_BYTES * len(REFS) * 100)
    with pytest.raises(SystemExit):
        cli_main(["-r", f["ref"], "-b", f["base"], "-s", f["same"], "--quiet", "--bootstrap-samples", "101"])
    assert "at most 100 here" in capsys.readouterr().err
    # a baseline alone runs no bootstrap: no bound
    assert cli_main(["-r", f["ref"], "-b", f["base"], "--quiet", "--bootstrap-samples", "101"]) == 0


def test_an_in_process_call_keeps_the_callers_signal_handlers(tmp_path):
    import signal

    f = files(tmp_path, ref=REFS, base=WORSE)
    before = signal.getsignal(signal.SIGINT)
    assert cli_main(["-r", f["ref"], "-b", f["base"], "--quiet"]) == 0
    assert signal.getsignal(signal.SIGINT) is before
