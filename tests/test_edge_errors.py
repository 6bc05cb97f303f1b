"""One-line errors at every edge: the file system (OSError), the libraries we call (submitit, matplotlib,
fairseq's dataset options), ``--score-reference`` with target-side NSD, and the cluster command's odd paths.

Each refusal: the command exits non-zero, the last line of its stderr is ``PROG: error: ...`` naming the
file or the flag, and no traceback is printed. Tests run as root, so a read-only folder is not made with
chmod: ``/proc`` (no file can be created there), a path under a regular file (NotADirectoryError) and
``/dev/full`` (ENOSPC) stand in for a read-only, missing and full disk.
"""

import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types

import pytest

from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core import interrupts
from fairseq_syntax_core.fileio import atomic_write_with

from .conftest import REPO, SRC, TGT, call, corpus, spacy_model, tool, write
from .helpers import DECODED_RUN, TINY, one_line_error  # noqa: F401

FIXTURE_BIN = os.path.join(REPO, "tests", "fixtures", "release_0_1", "data-bin")
FIXTURE_GPS = os.path.join(REPO, "tests", "fixtures", "release_0_1", "checkpoints", "transformer_gps.pt")


# ------------------------------------------------------------------ the message of an OSError
def test_an_os_error_names_its_file_and_says_what_to_do():
    message = interrupts.error_message
    assert message(FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/y")) == \
        "/x/y: No such file or directory"
    assert message(OSError(errno.ENOSPC, "No space left on device", "out.txt")).startswith(
        "out.txt: No space left on device; the disk is full")
    assert "larger than this file system" in message(OSError(errno.EFBIG, "File too large", "big.bin"))
    assert message(OSError(errno.EROFS, "Read-only file system", "/ro/a")).endswith("write elsewhere")
    assert message(OSError(errno.EXDEV, "Invalid cross-device link", "a", None, "b")) == "a -> b: Invalid cross-device link"
    assert message(OSError(errno.ENOSPC, "No space left on device")).startswith("No space left on device; ")
    assert message(IOError("Model file not found: ckpt.pt")) == "Model file not found: ckpt.pt"  # fairseq's
    assert message(UsageError("--x: bad")) == "--x: bad"


def test_the_error_hook_prints_an_os_error_as_one_line(monkeypatch):
    """fairseq's CLIs with --user-dir fairseq_syntax get this hook (compat.install): an OSError that nothing
    caught, e.g. an unwritable --save-dir, was a traceback."""
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *a: seen.append(a))
    monkeypatch.setattr(sys, "argv", ["fairseq-train"])
    monkeypatch.delenv("FAIRSEQ_SYNTAX_TRACEBACK", raising=False)
    interrupts.install_error_hook()
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    sys.excepthook(NotADirectoryError, NotADirectoryError(errno.ENOTDIR, "Not a directory", "f/ckpt"), None)
    assert err.getvalue() == "fairseq-train: error: f/ckpt: Not a directory\n"
    sys.excepthook(KeyError, KeyError("a bug"), None)  # anything else: the previous hook (a traceback)
    assert len(seen) == 1 and seen[0][0] is KeyError


def test_a_full_disk_names_the_file_written_not_its_temporary_file(tmp_path):
    def to_full_disk(tmp):
        with open("/dev/full", "w") as handle:  # ENOSPC, naming no file
            handle.write("x" * 100000)

    with pytest.raises(OSError) as caught:
        atomic_write_with(str(tmp_path / "out.txt"), to_full_disk)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "out.txt")
    assert os.listdir(tmp_path) == []  # the temporary file is gone


# ------------------------------------------------------------------ every command's entry point
@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("texts")
    write(folder / "ref.txt", "a b c\nd e f\n")
    write(folder / "hyp.txt", "a b c\nd e g\n")
    regular = write(folder / "regular.txt", "a file, not a folder\n")
    return folder, regular


@pytest.mark.parametrize("name,argv,named", [
    # a folder where no file can be created (the role of a read-only disk: root ignores chmod)
    ("fairseq-syntax-tokenize", ["--lang", "en", "--input", "{ref}", "--output", "/proc/tok.txt"], "/proc/tok.txt"),
    ("fairseq-syntax-bpe", ["--learn", "{ref}", "--codes", "/proc/codes", "--symbols", "5"], "/proc/codes"),
    ("fairseq-syntax-evaluate", ["-r", "{ref}", "-b", "{hyp}", "--json", "/proc/eval.json", "--quiet"],
     "/proc/eval.json"),
    ("fairseq-syntax-show", ["{bin}", "--split", "test", "--sentences", "0", "--out", "/proc/tree.html"],
     "/proc/tree.html"),
    ("fairseq-syntax-perturb", ["{bin}", "--destdir", "/proc/noisy", "--p", "0.1"], "/proc/"),
    ("fairseq-syntax-awsl", ["{bin}", "--path", "{gps}", "--split", "test", "--max-sentences", "2", "--cpu",
                             "--out", "/proc/awsl"], "/proc/awsl.tsv"),
    # a path under a regular file
    ("fairseq-syntax-tokenize", ["--lang", "en", "--input", "{regular}/in.txt", "--output", "{tmp}/o.txt"],
     "{regular}/in.txt"),
])
def test_every_command_prints_a_file_system_error_as_one_line_naming_the_file(texts, tmp_path, name, argv, named):
    folder, regular = texts
    values = dict(ref=folder / "ref.txt", hyp=folder / "hyp.txt", bin=FIXTURE_BIN, gps=FIXTURE_GPS,
                  regular=regular, tmp=tmp_path)
    result = call([tool(name), *[a.format(**values) for a in argv]], cwd=tmp_path, expect_ok=False)
    last = one_line_error(result, name, named.format(**values))
    assert "[Errno" not in last  # FILE: what went wrong, not Python's repr


def test_the_report_says_in_one_line_that_its_plot_cannot_be_written(tmp_path, monkeypatch, capsys):
    """matplotlib failures: a plot on a full disk, one matplotlib cannot draw, one in a folder without room."""
    import matplotlib.figure

    from fairseq_syntax_analysis import results as rs

    point = tmp_path / "e.json"
    point.write_text(json.dumps({"systems": [{"name": "m.seed1", "scores": {"BLEU": 30.0}, "decoded": DECODED_RUN}],
                                 "perturbation": 0}), encoding="utf-8")
    plot = tmp_path / "noise.png"
    argv = ["noise", "--plot", str(plot), "--point", f"m:0={point}"]
    real = matplotlib.figure.Figure.savefig

    def full_disk(self, fname, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full_disk)
    assert rs.cli_main(argv) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"fairseq-syntax-report: error: {plot}: No space left on device"), last

    def too_large(self, *args, **kwargs):
        raise ValueError("Image size of 100000x600 pixels is too large. It must be less than 2^16 in each direction.")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", too_large)
    assert rs.cli_main(argv) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("fairseq-syntax-report: error: matplotlib cannot draw the plot: Image size"), last
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", real)
    assert not plot.exists() and os.listdir(tmp_path) == ["e.json"]

    result = call([tool("fairseq-syntax-report"), "noise", "--plot", "/proc/noise.png", "--point", f"m:0={point}"],
                  cwd=tmp_path, expect_ok=False)
    one_line_error(result, "fairseq-syntax-report", "/proc/noise.png")


# ------------------------------------------------------------------ fairseq's CLIs with the plugin
def _train(work, *extra):
    return call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                 "--arch", "transformer", *TINY, "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "500",
                 "--max-update", "1", "--valid-subset", "test", "--no-progress-bar", "--seed", "1", *extra],
                cwd=work, expect_ok=False)


@pytest.fixture(scope="module")
def fixture_work(tmp_path_factory):
    work = tmp_path_factory.mktemp("train_work")
    shutil.copytree(FIXTURE_BIN, work / "data-bin")
    return work


@pytest.mark.parametrize("flag,named", [(["--truncate-source"], "--truncate-source"),
                                        (["--num-batch-buckets", "4"], "--num-batch-buckets 4")])
def test_dataset_options_the_side_files_cannot_follow_are_refused_up_front(fixture_work, flag, named):
    """fairseq's --truncate-source and --num-batch-buckets change the source tokens but not their parse:
    refused before any data is read (it was a ValueError traceback from load_dataset)."""
    last = one_line_error(_train(fixture_work, "--save-dir", "ckpt_refused", *flag), "fairseq-train", named)
    assert "side-files" in last
    assert not (fixture_work / "ckpt_refused" / "checkpoint_last.pt").exists()


def test_the_dataset_options_are_refused_by_the_task_itself(tmp_path):
    from fairseq_syntax.tasks.syntax_translation import SyntaxTranslationConfig, SyntaxTranslationTask

    for extra, named in (({"truncate_source": True}, "--truncate-source"), ({"num_batch_buckets": 2}, "--num-batch-b")):
        cfg = SyntaxTranslationConfig(_name="syntax_translation", data=FIXTURE_BIN, source_lang="en",
                                      target_lang="de", dataset_impl="mmap", **extra)
        with pytest.raises(UsageError, match=named):
            SyntaxTranslationTask.setup_task(cfg)


def test_an_unusable_save_dir_is_one_line_naming_it(fixture_work, texts):
    _, regular = texts
    last = one_line_error(_train(fixture_work, "--save-dir", f"{regular}/ckpt"), "fairseq-train", f"{regular}/ckpt")
    assert "Not a directory" in last


def test_a_checkpoint_on_a_full_disk_is_one_line_naming_it(fixture_work):
    """The checkpoint's temporary files are links to /dev/full: torch.save fails with ENOSPC (fairseq's
    own log line says so too), and the last line names the checkpoint."""
    save = fixture_work / "ckpt_full"
    save.mkdir()
    for name in ("checkpoint1.pt", "checkpoint_best.pt", "checkpoint_last.pt"):
        os.symlink("/dev/full", save / f"{name}.tmp")
    last = one_line_error(_train(fixture_work, "--save-dir", "ckpt_full"), "fairseq-train", "ckpt_full/checkpoint")
    assert "No space left on device" in last


# ------------------------------------------------------------------ --score-reference, target-side NSD
@pytest.fixture(scope="module")
def target_nsd(tmp_path_factory):
    """A tiny transformer_nsd_target trained on tests/test_target_syntax.py's hand-parsed en-fr data-bin,
    and the same data-bin without its target parse."""
    from .helpers import _bin

    root = tmp_path_factory.mktemp("score_reference")
    (root / "parsed").mkdir()
    (root / "plain").mkdir()
    parsed, plain = _bin(root / "parsed"), _bin(root / "plain", target_conllu=False)
    call([tool("fairseq-train"), str(parsed), "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
          "--arch", "transformer_nsd_target", *TINY, "--criterion", "label_smoothed_cross_entropy_with_nsd",
          "--optimizer", "adam", "--lr", "0.01", "--max-tokens", "500", "--max-update", "2",
          "--required-batch-size-multiple", "1", "--save-dir", "ckpt", "--no-epoch-checkpoints",
          "--no-save-optimizer-state", "--no-progress-bar", "--seed", "1"], cwd=root)
    return root, parsed, plain, root / "ckpt" / "checkpoint_last.pt"


def _score_reference(root, data_bin, checkpoint):
    return call([tool("fairseq-generate"), str(data_bin), "--user-dir", "fairseq_syntax", "--task",
                 "syntax_translation", "--path", str(checkpoint), "--gen-subset", "valid", "--score-reference",
                 "--batch-size", "8"], cwd=root, expect_ok=False)


def test_score_reference_scores_with_the_gold_target_distances(target_nsd):
    root, parsed, _, checkpoint = target_nsd
    result = _score_reference(root, parsed, checkpoint)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len([line for line in result.stdout.splitlines() if line.startswith("H-")]) == 3


def test_score_reference_equals_the_teacher_forced_forward_with_gold_distances(target_nsd):
    """In process: the scorer's token scores are the log-probabilities of one forward pass that reads the
    reference's gold distances (net_input["tgt_syntax"], as in validation)."""
    import torch
    from fairseq import checkpoint_utils

    from fairseq_syntax.data.target_syntax import NET_INPUT_KEY
    from .helpers import _task

    _, parsed, _, checkpoint = target_nsd
    task = _task(parsed)
    models, _ = checkpoint_utils.load_model_ensemble([str(checkpoint)], task=task)
    model = models[0].eval()
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    sample = dataset.collater([dataset[i] for i in range(len(dataset))])
    assert NET_INPUT_KEY in sample["net_input"]
    scorer = task.build_generator(models, types.SimpleNamespace(score_reference=True))
    with torch.no_grad():
        hypos = task.inference_step(scorer, models, sample)
        out = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(out, log_probs=True)
    gold = lprobs.gather(2, sample["target"].unsqueeze(-1)).squeeze(-1)
    pad = task.target_dictionary.pad()
    for row, hypo in enumerate(hypos):
        keep = sample["target"][row].ne(pad)
        assert torch.allclose(hypo[0]["positional_scores"], gold[row][keep], atol=1e-5)


def test_score_reference_without_target_distances_is_refused_in_one_line(target_nsd):
    root, _, plain, checkpoint = target_nsd
    last = one_line_error(_score_reference(root, plain, checkpoint), "fairseq-generate", "--score-reference",
                          str(plain), "--target-parser")
    assert "'fr'" in last


# ------------------------------------------------------------------ fairseq-syntax-preprocess-cluster
@pytest.fixture(scope="module")
def cluster_input(tmp_path_factory):
    """A corpus (many lines: a shard still runs a second after its job starts) and its --dict-only folder."""
    from fairseq_syntax_preprocess.cli import get_parser, run

    parser = spacy_model()
    root = tmp_path_factory.mktemp("cluster_input")
    prefix = corpus(root, src=SRC * 400, tgt=TGT * 400)
    run(get_parser().parse_args(["-s", "en", "-t", "de", "--trainpref", prefix, "--parser", parser,
                                 "--bpe-symbols", "30", "--joined-dictionary", "--dict-only",
                                 "--destdir", str(root / "dicts"), "--workers", "1"]))
    return ["-s", "en", "-t", "de", "--trainpref", prefix, "--parser", parser, "--dictdir", str(root / "dicts"),
            "--joined-dictionary", "--workers", "1"]


def _cluster(cwd, *argv):
    return call([tool("fairseq-syntax-preprocess-cluster"), "--num-shards", "2", "--timeout-min", "5", *argv],
                cwd=cwd, expect_ok=False)


@pytest.mark.parametrize("args,named", [
    (["--destdir", ""], "--destdir is empty"),
    (["--destdir", "", "--overwrite"], "--destdir is empty"),
    (["--destdir", "   "], "--destdir is empty"),
    (["--destdir", "."], "--destdir . is the current directory"),
    (["--destdir", "", "--check-only"], "--destdir is empty"),
    (["--destdir", "bin", "--log-folder", ""], "--log-folder is empty"),
    (["--destdir", "bin", "--log-folder", "{regular}/logs"], "--log-folder {regular}/logs"),
    (["--destdir", "{regular}/bin"], "--destdir {regular}/bin"),
])
def test_cluster_refuses_empty_and_odd_paths_as_preprocess_does(cluster_input, texts, tmp_path, args, named):
    """--destdir "" was the working folder: the shards were written there (and replaced with --overwrite)."""
    _, regular = texts
    args = [a.format(regular=regular) for a in args]
    one_line_error(_cluster(tmp_path, "--engine", "local", *args, *cluster_input),
                   "fairseq-syntax-preprocess-cluster", named.format(regular=regular))
    assert os.listdir(tmp_path) == []  # nothing submitted, nothing written


@pytest.mark.skipif(shutil.which("sbatch") is not None and shutil.which("srun") is not None,
                    reason="SLURM is installed here")
def test_cluster_on_slurm_without_slurm_is_one_line(cluster_input, tmp_path):
    last = one_line_error(_cluster(tmp_path, "--engine", "slurm", "--destdir", "bin", *cluster_input),
                          "fairseq-syntax-preprocess-cluster", "--engine slurm", "--engine local")
    assert "sbatch" in last or "srun" in last
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("group", [False, True], ids=["sigterm", "ctrl-c"])
def test_cancelling_the_cluster_prints_no_traceback_of_the_job_controllers(cluster_input, tmp_path, group):
    """SIGTERM to the command, or Ctrl-C (SIGINT to the whole foreground process group, the job's submitit
    controller included): the command's one line, and no KeyboardInterrupt traceback of a controller (it goes
    to the log folder)."""
    argv = [tool("fairseq-syntax-preprocess-cluster"), "--engine", "local", "--num-shards", "2", "--parallelism",
            "1", "--timeout-min", "5", "--destdir", str(tmp_path / "bin"), *cluster_input]
    process = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=""), start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = ""
        while "shard 0: job" not in line:
            line = process.stdout.readline()
            assert line, process.stderr.read()[-3000:]
        time.sleep(0.5)  # the controller waits on its task, which is starting
        if group:
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    name = "SIGINT" if group else "SIGTERM"
    assert process.returncode == 128 + getattr(signal, name), stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith(f"fairseq-syntax-preprocess-cluster: interrupted ({name})")
    assert os.path.isfile(tmp_path / "bin" / "submitit" / "controllers.log")


def test_tokenize_refuses_a_language_that_is_no_code_and_warns_of_one_moses_lacks(tmp_path):
    source = tmp_path / "b.en"
    source.write_text("Mr. Smith isn't here.\n", encoding="utf-8")
    refused = call([tool("fairseq-syntax-tokenize"), "--lang", "../en", "--input", str(source), "--output",
                    str(tmp_path / "t.en")], cwd=tmp_path, expect_ok=False)
    assert refused.returncode == 2 and "--lang: '../en' is not a valid language code" in refused.stderr
    assert not (tmp_path / "t.en").exists()
    warned = call([tool("fairseq-syntax-tokenize"), "--lang", "zz", "--input", str(source), "--output",
                   str(tmp_path / "t.zz")], cwd=tmp_path)
    assert "--lang zz: Moses has no non-breaking prefixes for it" in warned.stderr
    quiet = call([tool("fairseq-syntax-tokenize"), "--lang", "en", "--input", str(source), "--output",
                  str(tmp_path / "t.en")], cwd=tmp_path)
    assert "warning" not in quiet.stderr and "isn &apos;t" in (tmp_path / "t.en").read_text(encoding="utf-8")
