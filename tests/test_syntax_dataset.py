"""The syntax_translation task and its dataset: loading, checks, padding, EOS, collation."""

import numpy as np
import pytest
import torch

import fairseq_syntax  # noqa: F401  (registers the task)
from fairseq_syntax_core import trees
from fairseq_syntax.data.syntax_dataset import SideFileError, check_streams
from fairseq_syntax.data.syntax_features import FEATURES, append_eos, collate_features, sentence_features
from fairseq_syntax_core.errors import DataBinError

from .conftest import syntax_task as setup_task


# ------------------------------------------------------------- features
def test_eos_attaches_to_last_root():
    heads = torch.tensor([0, 1, 0, 3])  # two sentences: roots at 1 and 3
    h, l, p = append_eos(heads, torch.tensor([5, 6, 5, 6]), torch.tensor([7, 7, 7, 7]), eos_label=2, eos_pos=2)
    assert h.tolist() == [0, 1, 0, 3, 3] and l[-1] == 2 and p[-1] == 2
    feats = sentence_features(h, l, p, FEATURES)
    assert feats["depth"].tolist() == [0, 1, 0, 1, 1]
    assert feats["parents"].tolist() == [0, 0, 2, 2, 2]
    # d_D(i) = i - h(i), paper 002 eq. 4: a root's i within its own sentence (--nsd-roots sentence) ...
    assert feats["distance"].tolist() == [1, 1, 1, 1, 2]
    assert feats["distance_line"].tolist() == [1, 1, 3, 1, 2]  # ... or within the line (--nsd-roots line)


@pytest.mark.parametrize("left_pad", [True, False])
def test_batched_derivation_equals_per_sentence_padding(left_pad):
    """The collater derives features once per batch (batch_features): same values as per sentence."""
    from fairseq_syntax.data.syntax_features import batch_features, collate_trees

    rng = np.random.default_rng(1)
    sentences = []
    for n in (1, 5, 12, 3, 8):
        heads = [0] + [int(rng.integers(1, i + 1)) for i in range(1, n)]
        order = rng.permutation(n)  # shuffle positions, keep a tree
        inverse = np.argsort(order)
        shuffled = [0 if heads[order[i]] == 0 else int(inverse[heads[order[i]] - 1]) + 1 for i in range(n)]
        sentences.append(append_eos(torch.tensor(shuffled), torch.arange(4, 4 + n), torch.full((n,), 5), 2, 2))
    pads = {"labels": 1, "pos": 1}
    expected = collate_features([sentence_features(*s, FEATURES) for s in sentences], pads, left_pad, length=15)
    got = batch_features(*collate_trees(sentences, 1, 1, left_pad, length=15), FEATURES)
    for name in FEATURES:
        assert got[name].tolist() == expected[name].tolist(), name


def _sentence(heads):
    h, l, p = append_eos(torch.tensor(heads), torch.arange(4, 4 + len(heads)), torch.full((len(heads),), 4), 2, 2)
    return sentence_features(h, l, p, FEATURES)


@pytest.mark.parametrize("left_pad", [True, False])
def test_short_sentence_alone_equals_batched_with_longer(left_pad):
    short = [2, 0, 2]
    long = [2, 3, 0, 6, 6, 3, 3, 9, 3]
    pads = {"labels": 1, "pos": 1}
    alone = collate_features([_sentence(short)], pads, left_pad, length=4)
    batched = collate_features([_sentence(long), _sentence(short)], pads, left_pad, length=10)
    real = slice(6, 10) if left_pad else slice(0, 4)
    for name in ("heads", "depth", "labels", "pos", "distance"):
        assert batched[name][1, real].tolist() == alone[name][0].tolist(), name
    # parents index the padded row: shifted by the padding offset, padding points to itself
    offset = 6 if left_pad else 0
    assert batched["parents"][1, real].tolist() == [p + offset for p in alone["parents"][0].tolist()]
    pad_positions = [i for i in range(10) if not (real.start <= i < real.stop)]
    assert batched["parents"][1, pad_positions].tolist() == pad_positions
    # tree derivations on the padded batch agree with the sentence alone
    depth_batched = trees.tree_depth(batched["parents"])[1, real]
    assert depth_batched.tolist() == alone["depth"][0].tolist()


# ------------------------------------------------------------- load-time checks
class _Stream:
    def __init__(self, items):
        self.items = [np.asarray(x) for x in items]
        self.sizes = np.array([len(x) for x in items])

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return torch.from_numpy(self.items[i])


def _check(src_sizes, head, symbols=None, limit=10):
    symbols = symbols or _Stream([[4, 5], [4, 5, 6]])
    streams = {"head": head, "deplabel": symbols, "pos": symbols}
    check_streams("valid", np.array(src_sizes), streams, {"deplabel": limit, "pos": limit})


def test_check_streams_names_split_and_sentence():
    good = _Stream([[0, 1], [2, 0, 2]])
    _check([3, 4], good)
    with pytest.raises(SideFileError, match=r"split 'valid', sentence 1: the head side-file has 3 entries for a source of 4"):
        _check([3, 5], good)
    with pytest.raises(SideFileError, match=r"sentence 1: the head side-file: head 7 is outside 0..3"):
        _check([3, 4], _Stream([[0, 1], [2, 0, 7]]))
    with pytest.raises(SideFileError, match=r"sentence 1: the head side-file: token 1 does not reach a root"):
        _check([3, 4], _Stream([[0, 1], [2, 3, 1]]))
    with pytest.raises(SideFileError, match=r"sentence 1: the deplabel side-file: id 12 is outside its dictionary of 10"):
        _check([3, 4], good, _Stream([[4, 5], [4, 12, 6]]))


# ------------------------------------------------------------- real data through the task
def test_task_loads_real_parses_and_collates(multi30k_bin):
    task = setup_task(multi30k_bin)
    task.syntax_requested.update({"depth", "parents", "labels"})
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    assert len(dataset) == 40
    batch = dataset.collater([dataset[i] for i in range(8)])
    src = batch["net_input"]["src_tokens"]
    syntax = batch["net_input"]["src_syntax"]
    assert set(syntax) == {"depth", "parents", "labels", "depth_level_sizes"}
    # the level sizes of paper 001's path LSTM, counted on the host by the collater
    from fairseq_syntax_core.trees import level_sizes_of
    assert syntax["depth_level_sizes"] == level_sizes_of(syntax["depth"], src.eq(task.source_dictionary.pad()))
    assert all(type(c) is int for c in syntax["depth_level_sizes"]) and sum(syntax["depth_level_sizes"]) == src.numel()
    assert all(v.shape == src.shape for k, v in syntax.items() if k != "depth_level_sizes")
    pad = src.eq(task.source_dictionary.pad())
    assert syntax["labels"][pad].eq(task.label_dict.pad()).all()
    # the last real token of every row is </s>, and its label is </s>
    assert syntax["labels"][:, -1].eq(task.label_dict.eos()).all()
    # every row of each collated feature equals the per-sentence derivation
    # (the batch's rows are read at once: the reference reads sentence by sentence, fairseq's way)
    for row, sample_id in enumerate(batch["id"].tolist()):
        n = int((~pad[row]).sum())
        stored = append_eos(*(dataset.streams[name][sample_id] for name in ("head", "deplabel", "pos")),
                            task.label_dict.eos(), task.pos_dict.eos())
        alone = sentence_features(*stored, {"depth", "labels", "parents"})
        assert syntax["depth"][row, -n:].tolist() == alone["depth"].tolist()
        assert syntax["labels"][row, -n:].tolist() == alone["labels"].tolist()
        assert (syntax["parents"][row, -n:] - (src.size(1) - n)).tolist() == alone["parents"].tolist()


def test_baseline_gets_no_side_inputs(multi30k_bin):
    task = setup_task(multi30k_bin)
    task.load_dataset("test")
    batch = task.dataset("test").collater([task.dataset("test")[i] for i in range(4)])
    assert set(batch["net_input"]) == {"src_tokens", "src_lengths", "prev_output_tokens"}


def test_mismatched_side_file_is_refused(multi30k_bin, tmp_path):
    import shutil

    copy = tmp_path / "bin"
    shutil.copytree(multi30k_bin, copy)
    for ext in ("bin", "idx"):  # the valid parse beside the test text
        shutil.copy(copy / f"test.en-de.en.head.{ext}", copy / f"valid.en-de.en.head.{ext}")
    task = setup_task(copy)
    with pytest.raises(DataBinError, match=r"valid\.en-de\.en\.\{head,deplabel,pos,phrase\}: split 'valid', sentence \d+: "
                       r"the head side-file has .* do not match the source text"):
        task.load_dataset("valid")


def test_not_a_syntax_data_bin(tmp_path):
    for lang in ("en", "de"):
        (tmp_path / f"dict.{lang}.txt").write_text("a 1\n")
    with pytest.raises(DataBinError, match=r"syntax\.json: not found: this is not a data-bin made by fairseq-syntax-preprocess"):
        setup_task(tmp_path)


# ------------------------------------------------------------- a stream of another shape
def _add_node_stream(data_bin, monkeypatch, lengths_of, values_of=None):
    """Register a node-level stream (one value per internal node of a binary tree: n - 1 per line of
    n pieces) and write it for every split of ``data_bin``, as a later pipeline stage would."""
    import json

    from fairseq.data import data_utils
    from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

    from fairseq_syntax_core import databin
    from fairseq_syntax_core.stream_checks import check_non_negative

    stream = databin.Stream("test_nodes", databin.SOURCE, np.int32, None, databin.NODE, "nodes",
                            "a test stream of n - 1 node values", check_non_negative)
    monkeypatch.setitem(databin.STREAMS, stream.name, stream)
    for split in ("train", "valid", "test"):
        src = data_utils.load_indexed_dataset(str(data_bin / f"{split}.en-de.en"), None, "mmap")
        prefix = str(data_bin / f"{split}.en-de.en.{stream.name}")
        builder = MMapIndexedDatasetBuilder(prefix + ".bin", dtype=np.int32)
        for i in range(len(src)):
            n = int(src.sizes[i]) - 1  # pieces without </s>
            values = values_of(i, n) if values_of else np.arange(lengths_of(n), dtype=np.int32)
            builder.add_item(torch.from_numpy(np.asarray(values, dtype=np.int32)))
        builder.finalize(prefix + ".idx")
    meta_path = data_bin / "syntax.json"
    meta = json.loads(meta_path.read_text())
    meta["parsed_langs"]["en"].append(stream.name)
    from fairseq_syntax_core.split_digests import FILES_KEY, split_file_digests

    for split in ("train", "valid", "test"):  # a later stage records its files, as the pipeline does
        meta["splits"][split][FILES_KEY] = split_file_digests(str(data_bin), split, "en", "de")
    meta_path.write_text(json.dumps(meta))


def test_node_level_stream_collates_to_its_own_padded_tensor_and_mask(multi30k_bin, tmp_path, monkeypatch):
    import shutil

    copy = tmp_path / "bin"
    shutil.copytree(multi30k_bin, copy)
    _add_node_stream(copy, monkeypatch, lambda n: max(n - 1, 0))
    task = setup_task(copy)
    task.syntax_requested.update({"test_nodes", "depth"})
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    batch = dataset.collater([dataset[i] for i in range(6)])
    syntax = batch["net_input"]["src_syntax"]
    src = batch["net_input"]["src_tokens"]
    nodes, mask = syntax["test_nodes"], syntax["test_nodes_mask"]
    assert syntax["depth"].shape == src.shape  # token streams keep the source's shape
    lengths = src.ne(task.source_dictionary.pad()).sum(1) - 2  # n - 1 nodes for n pieces + </s>
    assert nodes.shape == (src.size(0), int(lengths.max())) and mask.dtype == torch.bool
    assert mask.sum(1).tolist() == lengths.tolist()
    for row in range(src.size(0)):
        n = int(lengths[row])
        assert nodes[row, :n].tolist() == list(range(n)) and not mask[row, n:].any()


def test_node_level_stream_is_validated_on_load(multi30k_bin, tmp_path, monkeypatch):
    import shutil

    copy = tmp_path / "bin"
    shutil.copytree(multi30k_bin, copy)
    _add_node_stream(copy, monkeypatch, None, values_of=lambda i, n: [-1] * n if i == 3 else [0] * n)
    task = setup_task(copy)
    with pytest.raises(DataBinError, match=r"split 'valid', sentence 3: the test_nodes side-file: value -1 is negative"):
        task.load_dataset("valid")


def test_provenance_differences_name_both_values_and_skip_unknowns():
    from fairseq_syntax.data import provenance

    trained = {"parser": "en_core_web_sm", "parser_version": "3.8.0", "spacy_version": "3.8.18",
               "projection": "first", "bpe_codes_sha256": "a" * 64, "phrase_structure": "ptb", "pos_column": "upos"}
    now = dict(trained, parser_version="3.7.1", bpe_codes_sha256=None)
    assert provenance.differences(trained, now) == ["parser_version: trained with 3.8.0, now 3.7.1"]
    assert provenance.decode(provenance.encode(trained)) == trained
    assert provenance.decode(None) is None and provenance.decode("not json") == {provenance.DAMAGED: True}


def test_provenance_tells_bpe_codes_from_no_bpe(tmp_path):
    """A model trained on BPE pieces and a data-bin of whole words segment differently: that is a difference,
    where a codes file that is not there is only unknown."""
    from fairseq_syntax.data import provenance

    (tmp_path / "bpe.codes").write_text("#version: 0.2\na b\n", encoding="utf-8")
    with_bpe = provenance.of_data_bin(str(tmp_path), {"bpe": {"name": "subword_nmt", "codes": "bpe.codes"}})
    whole_words = provenance.of_data_bin(str(tmp_path), {"bpe": {"name": "none"}})
    missing = provenance.of_data_bin(str(tmp_path), {"bpe": {"name": "subword_nmt", "codes": "gone.codes"}})
    assert whole_words["bpe_codes_sha256"] == provenance.NO_BPE and missing["bpe_codes_sha256"] is None
    assert provenance.differences(with_bpe, whole_words) == [
        f"bpe_codes_sha256: trained with {with_bpe['bpe_codes_sha256']}, now none"]
    assert provenance.differences(with_bpe, missing) == []
