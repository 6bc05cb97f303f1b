"""Bad and hostile input: no data lost, no silent wrong result, a clear message naming file and line.

One test (or one parametrized family) per kind of the reliability issue: ``--overwrite``,
interrupts, encodings, CoNLL-U values, damaged data-bins and checkpoints, arguments,
permissions. Decoding raw text (empty lines, parsing the user's text) is in
``test_cli_e2e.py``, where a trained checkpoint is at hand.
"""

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from fairseq_syntax_preprocess.cli import get_parser, run
from fairseq_syntax_preprocess.conllu import read_conllu
from fairseq_syntax_core.errors import InputError, UsageError
from fairseq_syntax_core.interrupts import remove_stale, temp_tag

from . import fork_server
from .conftest import SAMPLE, SRC, conllu_for, corpus, spacy_model, syntax_task, write




def args(prefix, destdir, *extra, parse=("--pretokenized", "--external-parse", "conllu")):
    return get_parser().parse_args(
        ["-s", "en", "-t", "de", "--trainpref", str(prefix), "--destdir", str(destdir), *parse,
         "--bpe-symbols", "20", "--joined-dictionary", *extra]
    )


def listing(directory):
    return sorted(os.listdir(directory))


def subdir(tmp_path, name):
    (tmp_path / name).mkdir()
    return tmp_path / name


# ------------------------------------------------------------------------ --overwrite
#: a parent that drew a progress bar forks a child; the child dies (SIGKILL) inside a progress bar of
#: its own, as the BPE child does when the parent fails; then the parent draws its next one
KILLED_INSIDE_A_PROGRESS_BAR = """
import multiprocessing, os, signal, sys
sys.path.insert(0, sys.argv[2])
if sys.argv[1] == "own":
    import fairseq_syntax_core.interrupts  # registers the at-fork hook
from tqdm import tqdm
tqdm(disable=True).close()
def child():
    tqdm.get_lock().acquire()
    os.kill(os.getpid(), signal.SIGKILL)
process = multiprocessing.get_context("fork").Process(target=child)
process.start()
process.join()
signal.alarm(5)
tqdm(disable=True).close()
print("the parent drew its next progress bar")
"""


def test_a_child_killed_inside_a_progress_bar_does_not_hang_the_parent():
    """tqdm's lock is a semaphore a fork shares with its parent: once the pipeline is imported, every
    forked child takes a lock of its own (this hung a test worker that ran the pipeline in-process)."""
    from .conftest import REPO

    def run_with(lock):
        return subprocess.run([sys.executable, "-c", KILLED_INSIDE_A_PROGRESS_BAR, lock, REPO],
                              capture_output=True, text=True, timeout=60)

    own = run_with("own")
    assert own.returncode == 0 and "next progress bar" in own.stdout, own.stderr[-2000:]
    shared = run_with("shared")  # without the pipeline: the lock tqdm gives a fork: the parent waits until the alarm kills it
    assert shared.returncode == -signal.SIGALRM


def test_overwrite_replaces_a_data_bin_of_ours(tmp_path):
    prefix = corpus(tmp_path)
    run(args(prefix, tmp_path / "bin"))
    meta = json.loads((tmp_path / "bin" / "syntax.json").read_text())
    assert meta["producer"] == "fairseq-syntax-preprocess"
    run(args(prefix, tmp_path / "bin", "--overwrite"))
    assert (tmp_path / "bin" / "train.en-de.en.head.bin").exists()
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n or ".old-" in n]


def test_overwrite_replaces_a_data_bin_of_the_first_release(tmp_path):
    """0.1.0 wrote no producer key: its syntax.json is recognised by format_version and parsed_langs."""
    prefix = corpus(tmp_path)
    run(args(prefix, tmp_path / "bin"))
    meta = json.loads((tmp_path / "bin" / "syntax.json").read_text())
    del meta["producer"]
    write(tmp_path / "bin" / "syntax.json", json.dumps(meta))
    run(args(prefix, tmp_path / "bin", "--overwrite"))
    assert "producer" in json.loads((tmp_path / "bin" / "syntax.json").read_text())


def test_overwrite_refuses_the_folder_holding_the_corpus(tmp_path):
    prefix = corpus(tmp_path)
    before = listing(tmp_path)
    with pytest.raises(UsageError, match=r"holds the input .*train\.en"):
        run(args(prefix, tmp_path, "--overwrite"))
    assert listing(tmp_path) == before


def test_overwrite_refuses_the_current_directory(tmp_path, monkeypatch):
    prefix = corpus(subdir(tmp_path, "raw"))
    (tmp_path / "here").mkdir()
    write(tmp_path / "here" / "notes.txt", "mine")
    monkeypatch.chdir(tmp_path / "here")
    with pytest.raises(UsageError, match="is the current directory"):
        run(args(prefix, ".", "--overwrite"))
    assert (tmp_path / "here" / "notes.txt").read_text() == "mine"


def test_overwrite_refuses_a_folder_that_is_not_a_data_bin(tmp_path):
    prefix = corpus(tmp_path)
    (tmp_path / "mine").mkdir()
    write(tmp_path / "mine" / "thesis.tex", "mine")
    with pytest.raises(UsageError, match=r"mine is not a data-bin made by fairseq-syntax-preprocess.*nothing was deleted"):
        run(args(prefix, tmp_path / "mine", "--overwrite"))
    assert listing(tmp_path / "mine") == ["thesis.tex"]


def test_overwrite_refuses_a_data_bin_holding_files_of_the_user(tmp_path):
    prefix = corpus(tmp_path)
    run(args(prefix, tmp_path / "bin"))
    write(tmp_path / "bin" / "checkpoint_best.pt", "weights")
    (tmp_path / "bin" / "runs").mkdir()
    with pytest.raises(UsageError, match=r"holds files the pipeline did not write \(checkpoint_best.pt, runs\)"):
        run(args(prefix, tmp_path / "bin", "--overwrite"))
    assert (tmp_path / "bin" / "checkpoint_best.pt").read_text() == "weights"


def test_destdir_that_is_a_file_or_a_link(tmp_path):
    prefix = corpus(tmp_path)
    write(tmp_path / "afile", "x")
    with pytest.raises(UsageError, match="exists and is not a directory"):
        run(args(prefix, tmp_path / "afile", "--overwrite"))
    os.symlink(tmp_path, tmp_path / "link")
    with pytest.raises(UsageError, match="is a symbolic link"):
        run(args(prefix, tmp_path / "link", "--overwrite"))
    assert (tmp_path / "afile").read_text() == "x"


# ------------------------------------------------------------------------ interrupts
def _big_corpus(tmp_path, copies=12):
    """The embedded sample, repeated: long enough to be interrupted while it parses."""
    for lang in ("en", "de"):
        with open(os.path.join(SAMPLE, f"train.{lang}"), encoding="utf-8") as handle:
            text = handle.read()
        write(tmp_path / f"train.{lang}", text * copies)
    return tmp_path / "train"


def _as_from_a_terminal():
    """Default SIGINT/SIGHUP in the child: a suite run under nohup or as a background job ignores
    them, and the pipeline deliberately keeps ignored signals ignored (fairseq_syntax_core/interrupts.py)."""
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _start_preprocess(tmp_path):
    model = spacy_model()
    tool = os.path.join(os.path.dirname(sys.executable), "fairseq-syntax-preprocess")
    if not os.path.exists(tool):
        pytest.skip("fairseq-syntax-preprocess is not installed beside this Python")
    prefix = _big_corpus(tmp_path)
    process = subprocess.Popen(
        [tool, "-s", "en", "-t", "de", "--trainpref", str(prefix), "--destdir", str(tmp_path / "bin"),
         "--parser", model, "--bpe-symbols", "200", "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal,
    )
    deadline = time.time() + 300
    while not [n for n in os.listdir(tmp_path) if n.startswith(".bin.tmp-")]:  # the work has started
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            pytest.fail(f"the run ended or never started its work: {process.communicate()}")
        time.sleep(0.02)
    time.sleep(2.0)  # tokenizing or parsing, with forked workers
    return process


def _children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return [int(p) for p in handle.read().split()]


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _all_dead(pids, seconds=10.0):
    deadline = time.time() + seconds
    while any(_running(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    return not any(_running(p) for p in pids)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG are Linux's")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_clean_up_and_exit_128_plus_the_signal(tmp_path, signum):
    process = _start_preprocess(tmp_path)
    children = _children(process.pid)
    process.send_signal(signum)
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signum, stderr[-2000:]
    assert _all_dead(children), "forked workers outlived their interrupted parent"
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "bin").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".bin.")]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG are Linux's")
def test_sigkill_children_die_and_next_run_removes_the_leftovers(tmp_path):
    process = _start_preprocess(tmp_path)
    deadline = time.time() + 120  # the workers come and go by phase: wait for some (a fixed delay missed them)
    children = _children(process.pid)
    while not children and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
        children = _children(process.pid)
    assert children, "the run should have forked its BPE/dictionary process and parse workers"
    process.kill()
    process.communicate(timeout=60)
    assert _all_dead(children), "forked children outlived their killed parent"
    [left] = [n for n in os.listdir(tmp_path) if n.startswith(".bin.tmp-")]
    assert f"-{process.pid}-" in left  # named after its owner
    prefix = corpus(subdir(tmp_path, "small"))
    run(args(prefix, tmp_path / "bin"))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".bin.tmp-")]


def test_remove_stale_spares_live_processes_and_other_hosts(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = temp_tag().rsplit("-", 1)[0]
    for name in (f".bin.tmp-{host}-{dead.pid}-abc", f".bin.tmp-{temp_tag()}-abc", f".bin.tmp-otherhost-{dead.pid}-abc",
                 ".bin.tmp-abc"):
        (tmp_path / name).mkdir()
    removed = remove_stale(str(tmp_path), [".bin.tmp-"])
    assert [os.path.basename(p) for p in removed] == [f".bin.tmp-{host}-{dead.pid}-abc"]
    assert len(os.listdir(tmp_path)) == 3


# ------------------------------------------------------------------------- encodings
def test_byte_order_mark_is_not_a_token(tmp_path):
    prefix = corpus(tmp_path)
    for lang in ("en", "de"):
        data = (tmp_path / f"train.{lang}").read_bytes()
        (tmp_path / f"train.{lang}").write_bytes(b"\xef\xbb\xbf" + data)
    run(args(prefix, tmp_path / "bin", "--no-bpe", parse=("--external-parse", "conllu")))
    first = (tmp_path / "bin" / "train.en-de.en.conllu").read_text(encoding="utf-8").split("\n")[1]
    assert first.split("\t")[1] == "The"
    assert "\ufeff" not in (tmp_path / "bin" / "dict.en.txt").read_text(encoding="utf-8")


def test_non_utf8_input_names_file_line_and_byte(tmp_path):
    prefix = corpus(tmp_path)
    (tmp_path / "train.de").write_bytes("Der Hund rennt .\nEine Katze schl".encode() + b"\xe4ft .\nV\n")
    with pytest.raises(InputError, match=r"train\.de:2: not UTF-8: byte 0xe4 at byte 16 of the line"):
        run(args(prefix, tmp_path / "bin"))
    assert not (tmp_path / "bin").exists()


def test_line_of_control_characters_is_an_empty_sentence(tmp_path):
    prefix = corpus(tmp_path, src=[SRC[0], "\x01\x02", SRC[2]], conllu=conllu_for([SRC[0], "x", SRC[2]]))
    with pytest.raises(InputError, match=r"train\.en:2: no visible token"):
        run(args(prefix, tmp_path / "bin", parse=("--external-parse", "conllu")))


# ----------------------------------------------------------------- CoNLL-U values
@pytest.mark.parametrize(
    "row, message",
    [
        ("1\tA\t_\tDET\t_\t_\t+2\tdet\t_\t_", r"HEAD must be a whole number in ASCII digits .* found '\+2'"),
        ("1\tA\t_\tDET\t_\t_\t0_2\tdet\t_\t_", r"HEAD must be a whole number .* found '0_2'"),
        ("1\tA\t_\tDET\t_\t_\t\uff12\tdet\t_\t_", r"HEAD must be a whole number .* found '\uff12'"),
        ("1\tA\t_\tDET\t_\t_\t02\tdet\t_\t_", r"HEAD must be a whole number .* found '02'"),
        ("\uff11\tA\t_\tDET\t_\t_\t2\tdet\t_\t_", r"ID must be a word number"),
        ("+1\tA\t_\tDET\t_\t_\t2\tdet\t_\t_", r"ID must be a word number"),
        ("1\tA\t_\tDET\t_\t_\t2\t\t_\t_", r"DEPREL is empty"),
        ("1\tA\t_\tDET\t_\t_\t2\tnom subj\t_\t_", r"DEPREL 'nom subj' contains white space"),
        ("1\tA\t_\tDET\t_\t_\t2\t<pad>\t_\t_", r"DEPREL '<pad>' is a reserved symbol"),
        ("1\tA\t_\tDET\t_\t_\t2\t<subword>\t_\t_", r"DEPREL '<subword>' is a reserved symbol"),
        ("1\tA\t_\t</s>\t_\t_\t2\tdet\t_\t_", r"UPOS '</s>' is a reserved symbol"),
        ("1\tA\t_\t\t_\t_\t2\tdet\t_\t_", r"UPOS is empty"),
    ],
)
def test_conllu_values_the_format_forbids(row, message):
    text = f"# c\n{row}\n2\tman\t_\tNOUN\t_\t_\t0\troot\t_\t_\n\n"
    with pytest.raises(InputError, match=message) as error:
        list(read_conllu(io.StringIO(text), "bad.conllu"))
    assert str(error.value).startswith("bad.conllu:2:")


def test_conllu_not_utf8_names_the_line(tmp_path):
    prefix = corpus(tmp_path)
    data = conllu_for(SRC).encode().replace(b"Birds", b"B\xffirds")
    (tmp_path / "train.en.conllu").write_bytes(data)
    with pytest.raises(InputError, match=r"train\.en\.conllu:\d+: not UTF-8: byte 0xff"):
        run(args(prefix, tmp_path / "bin"))


# ------------------------------------------------------------------------ arguments
@pytest.mark.parametrize(
    "extra, error, message",
    [
        (["--labeldict", "nowhere.txt"], InputError, r"nowhere\.txt: label dictionary not found"),
        (["--srcdict", "nowhere.txt"], InputError, r"nowhere\.txt: dictionary not found"),
        (["--bpe-codes", "JUNK"], InputError, r"JUNK:2: not a subword-nmt codes line"),
        (["--labeldict", "JUNK"], InputError, r"JUNK:1: not a fairseq label dictionary line"),
        (["--parser", "no_such_pipeline"], UsageError, r"--parser no_such_pipeline: not an installed spaCy pipeline"),
        (["--validpref", "DIR"], InputError, r"DIR\.en: is a directory; expected the valid source file"),
    ],
)
def test_bad_arguments_fail_before_any_work(tmp_path, monkeypatch, extra, error, message):
    prefix = corpus(tmp_path)
    write(tmp_path / "JUNK", "#version: 0.2\nthis line has three\n")
    (tmp_path / "DIR.en").mkdir()
    write(tmp_path / "DIR.de", "x\n")
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("DIR", str(tmp_path / "DIR")) for a in extra]
    if "--parser" in extra:
        argv = ["--bpe-symbols", "20", "--trainpref", prefix, *argv]
        parsed = get_parser().parse_args(["-s", "en", "-t", "de", "--destdir", "bin", *argv])
    else:
        parsed = args(prefix, "bin", *argv)
    with pytest.raises(error, match=message):
        run(parsed)
    assert not (tmp_path / "bin").exists()


def test_parser_without_dependency_parser(tmp_path):
    import spacy

    blank = tmp_path / "blank_en"
    spacy.blank("en").to_disk(blank)
    prefix = corpus(tmp_path)
    with pytest.raises(UsageError, match="has no dependency parser"):
        run(get_parser().parse_args(["-s", "en", "-t", "de", "--trainpref", prefix, "--destdir",
                                     str(tmp_path / "bin"), "--parser", str(blank), "--bpe-symbols", "20"]))


@pytest.mark.parametrize("flag, value", [("--workers", "0"), ("--max-len", "-1"), ("--bpe-symbols", "0"),
                                         ("--parse-batch-size", "zero")])
def test_bad_numbers_are_usage_errors(flag, value, capsys):
    with pytest.raises(SystemExit) as exit_:
        get_parser().parse_args(["-s", "en", "-t", "de", "--trainpref", "x", flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_empty_train_file_and_every_line_skipped(tmp_path):
    prefix = corpus(tmp_path)
    write(tmp_path / "train.en", "")
    write(tmp_path / "train.de", "")
    with pytest.raises(InputError, match=r"train\.en: is empty: the train split needs at least one line"):
        run(args(prefix, tmp_path / "bin"))
    prefix = corpus(tmp_path)
    with pytest.raises(InputError, match=r"every line of the train split is longer than --max-len 1"):
        run(args(prefix, tmp_path / "bin", "--max-len", "1", "--max-len-action", "skip"))


def _stage(name, *argv, cwd):
    tool = os.path.join(os.path.dirname(sys.executable), name)
    if not os.path.exists(tool):
        pytest.skip(f"{name} is not installed beside this Python")
    return fork_server.run([tool, *argv], cwd=cwd, env=dict(os.environ, PYTHONPATH=""), timeout=120)


def test_stage_tools_check_their_arguments(tmp_path):
    write(tmp_path / "in.txt", "The dog runs .\n")
    result = _stage("fairseq-syntax-bpe", "--codes", "codes", "--input", "in.txt", cwd=tmp_path)
    assert result.returncode == 2 and "--input and --output go together" in result.stderr
    result = _stage("fairseq-syntax-tokenize", "--lang", "en", "--input", "in.txt", "--output", "in.txt", cwd=tmp_path)
    assert result.returncode == 1 and "--output is the input file" in result.stderr
    assert (tmp_path / "in.txt").read_text() == "The dog runs .\n"
    result = _stage("fairseq-syntax-tokenize", "--lang", "en", "--input", "nowhere", "--output", "o", cwd=tmp_path)
    assert result.returncode == 1 and "nowhere: input file not found" in result.stderr
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------- permissions
def test_outputs_follow_the_umask(tmp_path):
    prefix = corpus(tmp_path)
    old = os.umask(0o022)
    try:
        run(args(prefix, tmp_path / "bin"))
        from fairseq_syntax_core.fileio import atomic_write

        atomic_write(str(tmp_path / "out.txt"), ["x\n"])
    finally:
        os.umask(old)
    assert (tmp_path / "bin").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "bin" / "syntax.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o644


# ------------------------------------------------------------ damaged data-bins
@pytest.fixture
def small_bin(tmp_path):
    prefix = corpus(tmp_path)
    run(args(prefix, tmp_path / "bin"))
    return tmp_path / "bin"


def _load(data_bin):
    task = syntax_task(data_bin)
    task.load_dataset("train")
    return task


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: (b / "train.en-de.en.head.bin").write_bytes((b / "train.en-de.en.head.bin").read_bytes()[:-4]),
         r"train\.en-de\.en\.head\.bin: truncated: it holds \d+ bytes"),
        (lambda b: (b / "train.en-de.de.bin").write_bytes((b / "train.en-de.de.bin").read_bytes()[:-2]),
         r"train\.en-de\.de\.bin: truncated"),
        (lambda b: (b / "train.en-de.en.pos.idx").write_bytes((b / "train.en-de.en.pos.idx").read_bytes()[:30]),
         r"train\.en-de\.en\.pos\.idx: is damaged or truncated"),
        (lambda b: (b / "train.en-de.en.idx").write_bytes(b"junk"), r"train\.en-de\.en\.idx: is not a fairseq mmap index"),
        (lambda b: (b / "train.en-de.en.deplabel.bin").unlink(), r"train\.en-de\.en\.deplabel\.bin: missing"),
        (lambda b: (b / "syntax.json").write_text("{\"parsed"), r"syntax\.json:1: is not valid JSON"),
        (lambda b: (b / "syntax.json").unlink(), r"syntax\.json: not found"),
        (lambda b: (b / "dict.en.pos.txt").write_text("NOUN 3\nVERB\n"), r"dict\.en\.pos\.txt:2: not a fairseq POS dictionary line"),
        (lambda b: (b / "dict.de.txt").write_bytes(b"\xff\xfe 1\n"), r"dict\.de\.txt:1: not UTF-8"),
        (lambda b: (b / "syntax.json").write_text(
            (b / "syntax.json").read_text().replace('"format_version": 1', '"format_version": 99')),
         r"syntax\.json: format_version 99: this fairseq-syntax reads data-bins up to version 1"),
        (lambda b: (b / "dict.en.pos.txt").write_text(""),
         r"train\.en-de\.en\.\{head,deplabel,pos,phrase\}: .*the pos side-file: id \d+ is outside its dictionary of 4"),
    ],
)
def test_damaged_data_bin_names_the_file(small_bin, damage, message):
    from fairseq_syntax_core.errors import DataBinError

    _load(small_bin)  # intact
    damage(small_bin)
    with pytest.raises(DataBinError, match=message):
        _load(small_bin)


def test_empty_or_junk_checkpoint_names_the_file(tmp_path):
    import fairseq_syntax  # noqa: F401  (installs the compatibility wrappers)
    from fairseq import checkpoint_utils

    from fairseq_syntax_core.errors import CheckpointError

    write(tmp_path / "empty.pt", "")
    with pytest.raises(CheckpointError, match=r"empty\.pt: the file is empty \(0 bytes\)"):
        checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "empty.pt"))
    write(tmp_path / "junk.pt", "not a checkpoint")
    with pytest.raises(CheckpointError, match=r"junk\.pt: it cannot be read as a fairseq checkpoint"):
        checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "junk.pt"))


def test_interactive_input_that_is_not_utf8_names_the_line(tmp_path):
    import fairseq_syntax  # noqa: F401  (installs the compatibility wrappers)
    from fairseq_cli import interactive

    (tmp_path / "in.txt").write_bytes(b"A dog runs .\n\nA d\xe4g .\n")
    lines = interactive.buffered_read(str(tmp_path / "in.txt"), 2)
    assert next(lines) == ["A dog runs .", ""]
    with pytest.raises(InputError, match=r"in\.txt:3: not UTF-8: byte 0xe4 at byte 4 of the line"):
        next(lines)
    with pytest.raises(InputError, match=r"nowhere: --input file not found"):
        next(interactive.buffered_read(str(tmp_path / "nowhere"), 1))


# ------------------------------------------------- found by a hostile tester, one test each
def test_empty_destdir_is_refused_and_nothing_is_deleted(tmp_path, monkeypatch):
    prefix = corpus(subdir(tmp_path, "raw"))
    here = subdir(tmp_path, "here")
    write(here / "precious.txt", "mine")
    monkeypatch.chdir(here)
    with pytest.raises(UsageError, match=r"--destdir is empty"):
        run(args(prefix, ""))
    assert listing(here) == ["precious.txt"]


def test_outputs_that_are_devices_pipes_or_links_are_refused(tmp_path):
    from fairseq_syntax_core.fileio import check_output_path

    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "target", tmp_path / "link")
    with pytest.raises(InputError, match="is not a regular file"):
        check_output_path(str(tmp_path / "fifo"))
    with pytest.raises(InputError, match="is not a regular file"):
        check_output_path("/dev/null")
    with pytest.raises(InputError, match="is a symbolic link"):
        check_output_path(str(tmp_path / "link"))
    # bpe --codes C --learn ... --output C: the same path, before C exists
    with pytest.raises(InputError, match="is the input file"):
        check_output_path(str(tmp_path / "new.codes"), [str(tmp_path / "new.codes")])


def test_overwrite_spares_user_files_named_like_ours(tmp_path):
    prefix = corpus(tmp_path)
    run(args(prefix, tmp_path / "bin"))
    for name in ("gold.en.conllu", "wiki.vectors.bin", "dict.README.txt"):
        write(tmp_path / "bin" / name, "mine")
    with pytest.raises(UsageError, match=r"did not write \(dict\.README\.txt, gold\.en\.conllu, wiki\.vectors\.bin\)"):
        run(args(prefix, tmp_path / "bin", "--overwrite"))
    assert (tmp_path / "bin" / "gold.en.conllu").read_text() == "mine"


def test_files_added_while_the_run_works_are_never_replaced(tmp_path):
    from fairseq_syntax_preprocess.destdir import make_temp_dir, move_into_place

    prefix = corpus(tmp_path)
    run(args(prefix, tmp_path / "bin"))
    out = make_temp_dir(str(tmp_path / "bin"))
    write(tmp_path / "bin" / "NOTES.txt", "written during the run")
    with pytest.raises(UsageError, match=r"did not write \(NOTES\.txt\)"):
        move_into_place(out, str(tmp_path / "bin"), overwrite=True)
    assert (tmp_path / "bin" / "NOTES.txt").exists() and (tmp_path / "bin" / "syntax.json").exists()
    # a data-bin that another run wrote into a new --destdir meanwhile
    out = make_temp_dir(str(tmp_path / "new"))
    run(args(prefix, tmp_path / "new"))
    with pytest.raises(UsageError, match="was filled while this run worked"):
        move_into_place(out, str(tmp_path / "new"), overwrite=False)


def _die(chunk):
    os._exit(3)


def test_a_parse_worker_that_dies_fails_the_run_instead_of_hanging(monkeypatch):
    from fairseq_syntax_core.errors import StageError
    from fairseq_syntax_preprocess import parse

    monkeypatch.setattr(parse, "_parse_chunk", _die)
    with pytest.raises(StageError, match="a parse worker died"):
        list(parse.parse_lines(None, [["a"]] * 6, workers=2, chunk_size=1, path="x.en"))


def test_pretokenized_special_symbols_are_refused(tmp_path):
    src = [SRC[0], "Two </s> dogs .", SRC[2]]
    prefix = corpus(tmp_path, src=src, conllu=conllu_for(src))
    with pytest.raises(InputError, match=r"train\.en:2: token '</s>' is one of fairseq's special symbols"):
        run(args(prefix, tmp_path / "bin"))


def test_invisible_only_line_is_an_empty_sentence(tmp_path):
    src = [SRC[0], "\u200b \u200d", SRC[2]]
    prefix = corpus(tmp_path, src=src, conllu=conllu_for([SRC[0], "x", SRC[2]]))
    with pytest.raises(InputError, match=r"train\.en:2: no visible token"):
        run(args(prefix, tmp_path / "bin"))


@pytest.mark.parametrize("text, message", [
    ("nsubj 3\nnsubj 2\n", r"DICT:2: 'nsubj' is listed twice \(first on line 1\)"),
    ("<pad> 3\n", r"DICT:1: '<pad>' is one of fairseq's special symbols"),
    ("nsubj 5 #fairseq:overwrite\nnsubj 5 #fairseq:overwrite\n", r"DICT:2: 'nsubj' is listed twice"),
    ("\ufeffnsubj 5\n", r"DICT:1: starts with a byte-order mark"),
])
def test_dictionary_with_duplicates_or_specials(tmp_path, text, message):
    prefix = corpus(tmp_path)
    write(tmp_path / "DICT", text)
    with pytest.raises(InputError, match=message):
        run(args(prefix, tmp_path / "bin", "--posdict", str(tmp_path / "DICT")))


def test_bpe_codes_without_merges(tmp_path):
    prefix = corpus(tmp_path)
    write(tmp_path / "empty.codes", "#version: 0.2\n")
    with pytest.raises(InputError, match=r"empty\.codes: holds no merges"):
        run(args(prefix, tmp_path / "bin", "--bpe-codes", str(tmp_path / "empty.codes")))


@pytest.mark.parametrize("lang", ["e n", "e/n", ""])
def test_language_codes_that_cannot_name_files(tmp_path, lang):
    prefix = corpus(tmp_path)
    parsed = args(prefix, tmp_path / "bin")
    parsed.source_lang = lang
    with pytest.raises(UsageError, match="a language code names files"):
        run(parsed)


def test_checkpoint_of_another_data_bin_is_named_as_such(small_bin):
    import fairseq_syntax  # noqa: F401
    from fairseq import checkpoint_utils

    checkpoint = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_1",
                              "checkpoints", "transformer_dep_rel.pt")
    with pytest.raises(UsageError, match="the checkpoint does not fit this data-bin"):
        checkpoint_utils.load_model_ensemble([checkpoint], arg_overrides={"data": str(small_bin)})


# ------------------------------------------------------------ second hostile round
def test_a_log_of_the_user_in_the_data_bin_is_not_ours(tmp_path):
    prefix = corpus(tmp_path)
    run(args(prefix, tmp_path / "bin"))
    write(tmp_path / "bin" / "preprocess.log", "my notes")
    with pytest.raises(UsageError, match=r"did not write \(preprocess\.log\)"):
        run(args(prefix, tmp_path / "bin", "--overwrite"))


@pytest.mark.parametrize("blank", ["\u3164", "\u2800", "\u200b\u2060"])
def test_lines_of_blank_glyphs_hold_no_sentence(tmp_path, blank):
    from fairseq_syntax_core.fileio import is_visible

    assert not is_visible(blank) and is_visible("a" + blank)
    src = [SRC[0], blank, SRC[2]]
    prefix = corpus(tmp_path, src=src, conllu=conllu_for([SRC[0], "x", SRC[2]]))
    with pytest.raises(InputError, match=r"train\.en:2: no visible token"):
        run(args(prefix, tmp_path / "bin"))


def test_too_little_text_for_bpe_names_the_train_file(tmp_path):
    from fairseq_syntax_core.errors import StageError

    prefix = corpus(tmp_path, src=["A ."], tgt=["x ."], conllu=conllu_for(["A ."]))
    with pytest.raises(StageError, match=r"train\.en: BPE learned no merges from the train split \(1 lines"):
        run(args(prefix, tmp_path / "bin"))


@pytest.mark.slow
def test_awsl_on_a_missing_split_names_the_data_bin(tmp_path):
    from .conftest import call, tool

    fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_1")
    result = call([tool("fairseq-syntax-awsl"), os.path.join(fixture, "data-bin"), "--path",
                   os.path.join(fixture, "checkpoints", "transformer_gps.pt"), "--out", "aw/r", "--cpu"],
                  cwd=tmp_path, expect_ok=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "data-bin: has no split 'valid'" in result.stderr


def _spawn_grandchild(queue):
    sleeper = subprocess.Popen(["sleep", "60"])  # exec'd: no death signal of ours reaches it
    queue.put(sleeper.pid)
    time.sleep(60)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_an_interrupt_kills_grandchildren_first_not_only_through_their_parents_death():
    # A grandchild killed only by its parent's death sees the parent's pipes close first and can
    # print a BrokenPipeError traceback into the user's terminal; the cleanup kills it directly.
    import multiprocessing

    from fairseq_syntax_core import interrupts

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_spawn_grandchild, args=(queue,))
    child.start()
    grandchild = queue.get(timeout=30)
    assert grandchild in interrupts._descendants(child.pid)
    interrupts._kill_children()
    child.join(10)
    assert _all_dead([child.pid, grandchild])
