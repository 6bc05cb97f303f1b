"""Helpers and fixtures several test modules share (no test module imports another)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from fairseq_syntax_analysis import results as rs
from fairseq_syntax_analysis import scoring

from .conftest import (CLI_TINY, REPO, SAMPLE, SRC, WORDS, batch, call, conllu_for, parsed_bin, spacy_model,
                       tool, write)



# ---- from test_layering.py
def _modules_after(statement: str):
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


# ---- from test_distributed.py
RNN_TINY = ["--encoder-embed-dim", "32", "--encoder-hidden-size", "32", "--decoder-embed-dim", "32",
            "--decoder-hidden-size", "32", "--decoder-out-embed-dim", "32"]


NSD = ["--criterion", "label_smoothed_cross_entropy_with_nsd", "--label-smoothing", "0.1"]


#: one model per family of the plugin, with the flags of its tiny version and its criterion
FAMILIES = {
    "relative+dependency": ["--arch", "transformer_dep_rel", *CLI_TINY],
    "gps": ["--arch", "transformer_gps", *CLI_TINY, "--gps-label-dim", "8", "--gps-path-dim", "16"],
    "pascal": ["--arch", "transformer_pascal", *CLI_TINY, "--pascal-heads", "1"],
    "structural": ["--arch", "transformer_structural", *CLI_TINY],
    "features+spe": ["--arch", "transformer_syntax_spe", *CLI_TINY, "--syntax-feature-dim", "8"],
    "nsd": ["--arch", "transformer_nsd", *CLI_TINY, *NSD],
    "nsd-both-sides": ["--arch", "transformer_nsd_both", *CLI_TINY, "--share-all-embeddings", *NSD],
    "tree2seq+blackout": ["--arch", "tree2seq", *RNN_TINY, "--criterion", "blackout", "--blackout-samples", "20"],
}


COMMON = ["data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--optimizer", "adam",
          "--lr", "0.002", "--max-tokens", "400", "--seed", "1", "--cpu", "--no-epoch-checkpoints",
          "--disable-validation", "--no-progress-bar", "--log-format", "json", "--log-interval", "1",
          "--num-workers", "0"]


def built_as_fairseq_train_builds(data_bin, flags):
    """(task, model, criterion, first training batch) of ``fairseq-train DATA_BIN FLAGS``, in this process."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [str(data_bin), *COMMON[1:], *flags]
    argv[argv.index("--user-dir") + 1] = os.path.join(REPO, "fairseq_syntax")
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    torch.manual_seed(1)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    batches = task.get_batch_iterator(task.dataset("train"), max_tokens=400, seed=1).next_epoch_itr(shuffle=False)
    return task, model, criterion, next(batches)


# ---- from test_review_checkpoints.py
def _fairseq_state(**changes):
    """A fairseq-shaped checkpoint state (``cfg`` settings, tensor weights, optimizer history), changed."""
    state = {"model": {"w": torch.ones(2)}, "args": None,
             "cfg": {"_name": None, "model": {"_name": "transformer"}, "task": {"_name": "translation"}},
             "optimizer_history": [{"num_updates": 3}], "extra_state": {"train_iterator": {"epoch": 1}},
             "task_state": {}, "criterion": None}
    state.update(changes)
    return state


# ---- from test_edge_errors.py
TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2"]


def one_line_error(result, prog: str, *named: str) -> str:
    """The last stderr line of a refused command: ``PROG: error: ...`` naming each of ``named``; no traceback."""
    assert result.returncode not in (0, None), result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{prog}: error: "), result.stderr[-3000:]
    for name in named:
        assert name in last, last
    return last


# ---- from test_untrusted_names.py
@pytest.fixture(scope="module")
def small_bin(tmp_path_factory):
    src = ["the big dog runs .", "birds sing"]
    conll = lambda words, heads: "".join(
        f"{i}\t{w}\t_\tX\t_\t_\t{h}\t{'root' if h == 0 else ('dep', 'obj')[i % 2]}\t_\t_\n"
        for i, (w, h) in enumerate(zip(words, heads), 1)) + "\n"
    trees = conll(src[0].split(), [3, 3, 4, 0, 4]) + conll(src[1].split(), [2, 0])
    tgt = ["der große Hund rennt .", "Vögel singen"]
    return parsed_bin(tmp_path_factory.mktemp("small"), {"train": (src, tgt, trees), "test": (src, tgt, trees)})


# ---- from test_results_report.py
REFS = ["a man rides a red bike", "two dogs play in the snow", "a woman reads a book", "kids swim in a lake"] * 5


def fake_result(model, seed, hyps, updates=2000, cap=2000, patience=None):
    metric = scoring.make_metric("BLEU")
    stats = scoring.sentence_statistics(metric, hyps, REFS)
    chrf = scoring.make_metric("chrF2")
    cstats = scoring.sentence_statistics(chrf, hyps, REFS)
    facts = {"last_updates": updates, "last_epoch": 9, "best_epoch": 7, "best_updates": updates - 200,
             "best_valid_loss": 4.1}
    evaluation = {"sentences": len(REFS), "signatures": {"BLEU": "sig", "chrF2": "sig"},
                  "systems": [{"name": model, "scores": {"BLEU": scoring.corpus_score(metric, stats),
                                                         "chrF2": scoring.corpus_score(chrf, cstats)}}],
                  "statistics": {model: {"BLEU": stats, "chrF2": cstats}}, "hypotheses": {model: hyps}}
    return rs.build_result(model, model, seed, "", cap, facts, {"test_2016_flickr": evaluation}, "abc1234",
                           "cpu", 10.0, patience)


# ------------------------------------------------------------------ hostile inputs
def _folder(tmp_path, results, name="r"):
    folder = tmp_path / name
    folder.mkdir()
    for r in results:
        (folder / f"{r['model']}.seed{r['seed']}.json").write_text(json.dumps(r), encoding="utf-8")
    return folder


# ---- from test_syntax_inputs.py
def nsd_sample(model, sentences):
    src, lengths, syntax = batch(model, sentences)
    target = torch.tensor([[WORDS.index("a"), WORDS.index("b"), WORDS.eos()]] * len(sentences))
    prev = torch.cat([torch.full((len(sentences), 1), WORDS.eos()), target[:, :-1]], 1)
    return {
        "id": torch.arange(len(sentences)),
        "net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev, "src_syntax": syntax},
        "target": target,
        "ntokens": int(target.numel()),
    }


# ---- from test_cli_e2e.py
def generate(work, checkpoint, *extra):
    result = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", checkpoint, "--gen-subset", "test", "--beam", "3",
                   "--batch-size", "16", "--remove-bpe", "--max-len-b", "20", *extra], cwd=work)
    hypotheses = [line for line in result.stdout.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 40, result.stdout[-2000:]  # every test sentence, none dropped
    return result


def interactive(work, checkpoint, *extra):
    text = "A man is riding a bike down the street.\nTwo dogs play in the snow. A child watches them.\n"
    result = call([tool("fairseq-interactive"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", checkpoint, "--source-lang", "en", "--target-lang", "de",
                   "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", "data-bin/bpe.codes",
                   "--beam", "2", "--max-len-b", "20", *extra], cwd=work, stdin=text)
    assert len([l for l in result.stdout.splitlines() if l.startswith("H-")]) == 2, result.stdout[-2000:]


#: words whose letters the sample's train set never shows: pieces missing from the dictionary
ODD = ["The ſkier in a çhic coat is reading a book.", "Zwölf Ölbäume stand in the park.", "A dog runs."]


@pytest.fixture(scope="module")
def sample_model(tmp_path_factory):
    """A tiny transformer_dep trained on the embedded sample; its test set has unknown pieces."""
    model = spacy_model()
    work = tmp_path_factory.mktemp("sample_run")
    for lang in ("en", "de"):
        shutil.copy(os.path.join(SAMPLE, f"train.{lang}"), work / f"train.{lang}")
        with open(os.path.join(SAMPLE, f"test.{lang}"), encoding="utf-8") as handle:
            lines = [next(handle) for _ in range(12)]
        extra = ODD if lang == "en" else ["Ein Satz ."] * len(ODD)
        (work / f"test.{lang}").write_text("".join(lines) + "\n".join(extra) + "\n", encoding="utf-8")
    call([tool("fairseq-syntax-preprocess"), "-s", "en", "-t", "de", "--trainpref", "train", "--testpref", "test",
          "--destdir", "data-bin", "--parser", model, "--bpe-symbols", "300", "--joined-dictionary"], cwd=work)
    call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
          "--arch", "transformer_dep", *CLI_TINY, "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "2000",
          "--max-update", "30", "--save-dir", "ckpt", "--no-epoch-checkpoints", "--no-progress-bar", "--seed", "1",
          "--valid-subset", "test"], cwd=work)
    return work


def _interactive(work, text, *extra):
    return call([tool("fairseq-interactive"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                 "syntax_translation", "--path", "ckpt/checkpoint_last.pt", "--source-lang", "en", "--target-lang",
                 "de", "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", "data-bin/bpe.codes",
                 "--beam", "2", "--max-len-b", "12", *extra], cwd=work, stdin=text)


# ---- from test_target_syntax.py
TGT_FR = ["Le chien court .", "Un chat dort sur le tapis .", "Les oiseaux chantent ."]


def _bin(folder, target_conllu=True, extra=()):
    """An en-fr data-bin from hand-made parses of both sides (no parser needed); returns its path."""
    from fairseq_syntax_preprocess.cli import get_parser, run

    argv = ["-s", "en", "-t", "fr", "--pretokenized", "--external-parse", "conllu", "--bpe-symbols", "5",
            "--joined-dictionary", "--destdir", str(folder / "bin")]
    for split in ("train", "valid"):
        write(folder / f"{split}.en", "\n".join(SRC) + "\n")
        write(folder / f"{split}.fr", "\n".join(TGT_FR) + "\n")
        write(folder / f"{split}.en.conllu", conllu_for(SRC))
        write(folder / f"{split}.fr.conllu", conllu_for(TGT_FR))
        argv += [f"--{split}pref", str(folder / split)]
    if target_conllu:
        argv += ["--target-external-parse", "conllu"]
    run(get_parser().parse_args(argv + list(extra)))
    return folder / "bin"


def _task(data_bin):
    from fairseq_syntax.tasks.syntax_translation import SyntaxTranslationConfig, SyntaxTranslationTask

    cfg = SyntaxTranslationConfig(_name="syntax_translation", data=str(data_bin), source_lang="en", target_lang="fr",
                                  train_subset="train", dataset_impl="mmap", required_seq_len_multiple=1)
    return SyntaxTranslationTask.setup_task(cfg)


# ---- from test_checkpoint_loader.py
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_1")


# ------------------------------------------------------------------------------ every command
def decoded_record(*checkpoints, search=None) -> dict:
    """The ``fairseq-syntax-decoded`` record fairseq-generate writes after decoding with ``checkpoints``
    (beam 5 on the test split unless ``search`` says otherwise)."""
    from fairseq_syntax_core import decoding_record
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    decoding_record.start()
    for path in checkpoints:
        decoding_record.note_read(str(path), load_fairseq_checkpoint(str(path)))
    line = decoding_record.record_line("data-bin", None, search=search or {"beam": 5, "gen_subset": "test"})
    decoding_record.start()
    return decoding_record.parse_line(line)


#: a fairseq-syntax-decoded record of one checkpoint (what every point of a noise curve must share)
DECODED_RUN = {"checkpoints": [{"arch": "transformer", "seed": 1, "save_dir": "ck", "updates": 20,
                                "checkpoint": "ck/checkpoint_best.pt"}], "data_bin": "data-bin", "perturbation": None}


def _evaluation(path, decoded=None) -> str:
    """An evaluation of one sentence by the system ``m``, whose log recorded ``decoded`` (see :func:`decoded_record`)."""
    stats = {"BLEU": [[0.0] * 10], "chrF2": [[0.0] * 18]}  # nothing matched: the scores they give are 0
    system = {"name": "m", "scores": {"BLEU": 0.0, "chrF2": 0.0}}
    if decoded is not None:
        system["decoded"] = decoded
    path.write_text(json.dumps({"sentences": 1, "signatures": {"BLEU": "s", "chrF2": "s"},
                                "systems": [system], "statistics": {"m": stats}}), encoding="utf-8")
    return str(path)


CHECKPOINT_TASK = ["--user-dir", "fairseq_syntax", "--task", "syntax_translation"]
CHECKPOINT_TINY = ["--arch", "transformer_dep_rel", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--optimizer", "adam", "--lr", "0.01"]
COMMANDS = {
    "report": (["fairseq-syntax-report", "record", "--model", "m", "--seed", "1", "--max-update", "3", "--save-dir",
                "ckpt", "--commit", "x", "--eval", "t=ev.json", "--out", "r.json"], "ckpt/checkpoint_last.pt"),
    "generate": (["fairseq-generate", "data-bin", *CHECKPOINT_TASK, "--path", "ckpt/checkpoint_best.pt", "--gen-subset", "test",
                  "--batch-size", "8"], "ckpt/checkpoint_best.pt"),
    "interactive": (["fairseq-interactive", "data-bin", *CHECKPOINT_TASK, "--path", "ckpt/checkpoint1.pt", "--source-lang", "en",
                     "--target-lang", "de"], "ckpt/checkpoint1.pt"),
    "validate": (["fairseq-validate", "data-bin", *CHECKPOINT_TASK, "--path", "ckpt/checkpoint_last.pt", "--valid-subset", "test",
                  "--batch-size", "8"], "ckpt/checkpoint_last.pt"),
    "train-resume": (["fairseq-train", "data-bin", *CHECKPOINT_TASK, *CHECKPOINT_TINY, "--max-update", "2", "--max-tokens", "2000",
                      "--save-dir", "ckpt", "--valid-subset", "test", "--no-progress-bar", "--cpu"],
                     "ckpt/checkpoint_last.pt"),
    "train-restore": (["fairseq-train", "data-bin", *CHECKPOINT_TASK, *CHECKPOINT_TINY, "--max-update", "2", "--max-tokens", "2000",
                       "--save-dir", "fresh", "--restore-file", "ckpt/checkpoint1.pt", "--valid-subset", "test",
                       "--no-progress-bar", "--cpu"], "ckpt/checkpoint1.pt"),
    "awsl": (["fairseq-syntax-awsl", "data-bin", "--path", "ckpt/checkpoint_best.pt", "--split", "test", "--out",
              "aw/r", "--cpu"], "ckpt/checkpoint_best.pt"),
}


# ---- from test_phrase_structure.py
def _conllu(lines, heads):
    out = []
    for line, hs in zip(lines, heads):
        rows = [f"{i}\t{w}\t_\tX\t_\t_\t{h}\t{'root' if h == 0 else 'dep'}\t_\t_"
                for i, (w, h) in enumerate(zip(line.split(), hs), start=1)]
        out.append("\n".join(rows) + "\n\n")
    return "".join(out)


PHRASE_SRC = ["the big dog barked loudly .", "a cat slept .", "birds sing ."]


PHRASE_TGT = ["der große Hund bellte laut .", "eine Katze schlief .", "Vögel singen ."]


HEADS = [[3, 3, 4, 0, 4, 4], [2, 3, 0, 3], [2, 0, 2]]


PTB = ["(ROOT (S (NP (DT the) (JJ big) (NN dog)) (VP (VBD barked) (ADVP (RB loudly))) (. .)))",
       "(S (NP (DT a) (NN cat)) (VP (VBD slept)) (. .))",
       "(S (NP birds) (VP sing) (. .))"]


# ---- from test_provenance_identity.py (also test_awsl.py)
def _swap_two_symbols(data_bin) -> None:
    """``dict.en.txt`` with the words of its lines 2 and 3 swapped: same size, other ids (a silent mix-up)."""
    path = data_bin / "dict.en.txt"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    (a, count_a), (b, count_b) = (line.split(" ", 1) for line in lines[1:3])
    lines[1:3] = [f"{b} {count_a}", f"{a} {count_b}"]
    path.write_text("".join(lines), encoding="utf-8")


# ---- checkpoints edited as an attacker would
RELEASE_CHECKPOINT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_2", "checkpoints",
                                  "transformer_dep_rel.pt")


def crafted_checkpoint(folder, edit, name: str = "model.pt") -> str:
    """The release fixture's checkpoint with ``edit`` applied to its ``cfg``, saved as ``folder/name``."""
    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    state = load_checkpoint(RELEASE_CHECKPOINT)
    edit(state["cfg"])
    torch.save(state, os.path.join(folder, name))
    return os.path.join(str(folder), name)


def decoded_at(decoded, p):
    """``decoded`` (a log's ``fairseq-syntax-decoded`` record) as a log decoded on a data-bin perturbed with ``p`` in
    one round records it: evaluate copies it into its JSON, and ``report noise`` checks it against the JSON's p."""
    if not isinstance(decoded, dict):
        return decoded
    perturbed = isinstance(p, (int, float)) and not isinstance(p, bool) and p != 0
    return dict(decoded, perturbation={"p": p, "seed": 1} if perturbed else None)
