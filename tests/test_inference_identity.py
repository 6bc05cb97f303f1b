"""Each source keeps its own parse at inference, whatever its neighbours in the batch.

Lines with the same dictionary ids but different texts (unknown characters are ``<unk>``
whether they make one word or three: ``The ЖЖЖ runs .``, ``The Ж Ж Ж runs .``) parse
differently. ``fairseq-interactive`` and the hub must give each line what it gets alone, at
any buffer and batch size: the row is matched to its text by its sample id, not by its ids.
"""

import random
from collections import namedtuple

import pytest
import torch

from .helpers import _interactive, sample_model  # noqa: F401  (the tiny transformer_dep of the sample)

#: groups of lines with equal ids but different words (one, two or more unknown words)
GROUPS = [
    ["The ЖЖЖ runs .", "The Ж Ж Ж runs .", "The ЖЖ Ж runs ."],
    ["A ЖЖЖЖ dog runs .", "A Ж ЖЖЖ dog runs .", "A ЖЖ ЖЖ dog runs .", "A Ж Ж Ж Ж dog runs ."],
    ["Two ЖЖ women sing .", "Two Ж Ж women sing ."],
]
ORDINARY = ["A dog runs .", "Two women are buying a kite ."]
#: a score's change from batching alone (float rounding) is about 1e-7; a swapped parse moves it by 6e-5 or more
TOLERANCE = 1e-5


def _lines():
    """Every variant several times among ordinary lines, shuffled (fixed seed)."""
    lines = [line for group in GROUPS for line in group for _ in range(3)] + ORDINARY * 2
    random.Random(7).shuffle(lines)
    return lines


def _scored(stdout):
    """fairseq-interactive's ``H-`` lines: {sample id: (score, hypothesis)}."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("H-"):
            number, score, text = line.split("\t")
            out[int(number[2:])] = (float(score), text)
    return out


def _assert_same(got, alone, lines, what):
    for i, line in enumerate(lines):
        (score, text), (score_alone, text_alone) = got[i], alone[line]
        assert text == text_alone and abs(score - score_alone) <= TOLERANCE, (
            f"{what}: line {i} {line!r} gives {text!r} ({score}), alone {text_alone!r} ({score_alone})")


def _assert_distinguishable(alone):
    """The test can see a swap: the variants of a group score apart by more than the tolerance."""
    for group in GROUPS:
        for a in group:
            for b in group:
                if a < b:
                    assert alone[a][1] != alone[b][1] or abs(alone[a][0] - alone[b][0]) > 2 * TOLERANCE, (a, b)


# --------------------------------------------------------------------------- no model
def test_rows_take_the_text_of_their_sample_id_and_never_a_guess(caplog):
    from fairseq_syntax.data.online_parser import SourceTexts

    pad = 1
    same, other = torch.tensor([5, 3, 3, 2]), torch.tensor([6, 2])
    kept = SourceTexts()
    kept.record([same, other, same], ["A ЖЖ .", "B", "A Ж Ж ."])
    batch = torch.tensor([[5, 3, 3, 2], [5, 3, 3, 2], [pad, pad, 6, 2]])  # left-padded, rows out of order
    assert kept.texts_for(batch, pad, [2, 0, 1]) == ["A Ж Ж .", "A ЖЖ .", "B"]
    assert kept.texts_for(batch, pad, [0, 2, 1]) == ["A ЖЖ .", "A Ж Ж .", "B"]
    with caplog.at_level("WARNING"):
        assert kept.texts_for(batch, pad, [1, 0, 0]) == [None, "A ЖЖ .", None]  # ids not those of the sample id
    assert "2 source row(s) of this batch differ from the text kept for their sample id" in caplog.text
    # without sample ids: only ids whose kept sources share one text get it
    assert kept.texts_for(batch, pad, None) == [None, None, "B"]


def test_interactive_batches_hand_their_sample_ids_to_the_task(monkeypatch):
    from fairseq_cli import interactive

    from fairseq_syntax import compat

    Batch = namedtuple("Batch", "ids src_tokens src_lengths constraints")
    handed = []

    class Task:
        def set_inference_ids(self, ids):
            handed.append(ids.tolist())

    def make_batches(lines, cfg, task, max_positions, encode_fn):
        for ids in ([2, 0], [1]):
            yield Batch(torch.tensor(ids), None, None, None)

    monkeypatch.setattr(interactive, "make_batches", make_batches)
    assert compat._wrap_make_batches(interactive)
    seen = []
    for batch in interactive.make_batches(["a", "b", "c"], None, Task(), None, None):
        seen.append(batch.ids.tolist())
        assert handed == seen  # this batch's ids reached the task just before it, none ahead
    assert seen == [[2, 0], [1]]
    assert "make_batches" in interactive.main.__code__.co_names  # main looks it up as a module global

    def changed(lines, cfg, task, max_positions):  # another fairseq's: left alone
        yield from ()

    monkeypatch.setattr(interactive, "make_batches", changed)
    assert not compat._wrap_make_batches(interactive) and interactive.make_batches is changed


# ------------------------------------------------------------------ the trained tiny model
@pytest.fixture(scope="module")
def hub(sample_model):  # noqa: F811
    from fairseq.models import ARCH_MODEL_REGISTRY

    hub = ARCH_MODEL_REGISTRY["transformer_dep"].from_pretrained(
        str(sample_model / "ckpt"), checkpoint_file="checkpoint_last.pt",
        data_name_or_path=str(sample_model / "data-bin"), tokenizer="moses", bpe="subword_nmt",
        bpe_codes=str(sample_model / "data-bin" / "bpe.codes"), source_lang="en", target_lang="de", max_len_b=12,
    )
    hub.task.request_inputs(hub.models[0])
    return hub


@pytest.fixture(scope="module")
def interactive_alone(sample_model):  # noqa: F811
    """Each distinct line alone (buffer and batch of one), by its text."""
    lines = sorted(set(_lines()))
    scored = _scored(_interactive(sample_model, "\n".join(lines) + "\n", "--buffer-size", "1", "--batch-size", "1").stdout)
    assert sorted(scored) == list(range(len(lines)))
    return {line: scored[i] for i, line in enumerate(lines)}


@pytest.mark.slow
@pytest.mark.parametrize("flags", [
    ("--buffer-size", "3", "--batch-size", "3"),
    ("--buffer-size", "3", "--max-tokens", "40"),
    ("--buffer-size", "1000", "--batch-size", "1000"),
    ("--buffer-size", "1000", "--max-tokens", "60"),
])
def test_interactive_gives_each_line_what_it_gives_alone(sample_model, interactive_alone, flags):  # noqa: F811
    _assert_distinguishable(interactive_alone)
    lines = _lines()
    scored = _scored(_interactive(sample_model, "\n".join(lines) + "\n", *flags).stdout)
    assert sorted(scored) == list(range(len(lines)))
    _assert_same(scored, interactive_alone, lines, " ".join(flags))


def _assert_variants_parse_differently(hub):
    """The variants of a group have equal ids, and the online parser gives each features of its own."""
    parser = hub.task.online_parser()
    for group in GROUPS:
        tokens = [hub.encode(line) for line in group]
        assert all(torch.equal(t, tokens[0]) for t in tokens)
        texts = [hub.apply_bpe(hub.tokenize(line)) for line in group]
        features = parser.features_for(torch.stack(tokens), hub.task.syntax_requested, texts)
        rows = [tuple(torch.cat([v[i].flatten() for _, v in sorted(features.items())
                                 if isinstance(v, torch.Tensor)]).tolist())
                for i in range(len(group))]
        assert len(set(rows)) == len(group), rows


@pytest.mark.slow
def test_hub_gives_each_sentence_what_it_gives_alone(hub):
    _assert_variants_parse_differently(hub)
    lines = _lines()
    alone = {}
    for line in sorted(set(lines)):
        hypo = hub.generate([hub.encode(line)], beam=2)[0][0]
        alone[line] = (float(hypo["score"]), hub.decode(hypo["tokens"]))
    _assert_distinguishable(alone)
    parsed = []
    parser = hub.task.online_parser()
    original = parser.features_for
    parser.features_for = lambda tokens, requested, texts: parsed.extend(texts) or original(tokens, requested, texts)
    try:
        hypos = hub.generate([hub.encode(line) for line in lines], beam=2)
        translated = hub.translate(lines, beam=2)
    finally:
        del parser.features_for
    assert None not in parsed and len(parsed) == 2 * len(lines)  # every row parsed from its own text
    _assert_same({i: (float(h[0]["score"]), hub.decode(h[0]["tokens"])) for i, h in enumerate(hypos)},
                 alone, lines, "hub.generate")
    assert translated == [alone[line][1] for line in lines]
    tokens = hub.encode(lines[0])
    assert hub.text_of(tokens) is not None and hub.text_of(tokens.clone()) is None  # ids encoded otherwise: no text
