"""Sharded preprocessing (issue 15): --dict-only, --num-shards/--shard-id, the cluster command, the task on shards.

The spec: shards made with the dictionaries of a ``--dict-only`` run, read together, give the
same sentences, side streams and dictionaries as the unsharded data-bin; shards that do not
belong together are errors naming the shard; ``fairseq-train shard0:shard1`` trains with the
task's checks run on each shard; the submitit command limits its jobs, sets their timeout and
cancels them when it is killed.
"""

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from fairseq_syntax_core.errors import DataBinError, InputError, UsageError

from .conftest import CLI_TINY, call, multi30k_slice, spacy_model, syntax_task, tool, write

SRC, TGT = "en", "de"
STREAMS = ("head", "deplabel", "pos", "phrase")
DICTIONARIES = ("dict.en.txt", "dict.de.txt", "dict.en.deplabel.txt", "dict.en.pos.txt", "bpe.codes")


def preprocess(argv):
    from fairseq_syntax_preprocess.cli import get_parser, run

    return run(get_parser().parse_args(argv))


def common(raw, parser):
    return ["-s", SRC, "-t", TGT, "--trainpref", str(raw / "train"), "--parser", parser, "--workers", "1"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """An unsharded data-bin, a --dict-only folder on the same train set, and two shards made with it."""
    parser = spacy_model()
    root = tmp_path_factory.mktemp("sharding")
    raw = root / "raw"
    raw.mkdir()
    multi30k_slice(str(raw), {"train": 240, "val": 20, "test_2016_flickr": 20})
    splits = ["--validpref", str(raw / "valid"), "--testpref", str(raw / "test")]
    learn = ["--bpe-symbols", "800", "--joined-dictionary"]
    preprocess(common(raw, parser) + splits + learn + ["--destdir", str(root / "whole")])
    preprocess(common(raw, parser) + learn + ["--dict-only", "--destdir", str(root / "dicts")])
    summaries = [
        preprocess(common(raw, parser) + splits + ["--dictdir", str(root / "dicts"), "--joined-dictionary",
                                                   "--num-shards", "2", "--shard-id", str(k), "--block-lines", "50",
                                                   "--destdir", str(root / f"bin/shard{k}")])
        for k in range(2)
    ]
    return root, raw, summaries


def items(prefix):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    dataset = MMapIndexedDataset(str(prefix))
    return [dataset[i].numpy().tolist() for i in range(len(dataset))]


def read(path):
    with open(path, "rb") as handle:
        return handle.read()


def test_shard_ranges_are_contiguous_cover_every_line_and_differ_by_at_most_one():
    from fairseq_syntax_core.shards import shard_range

    for lines, shards in ((10, 3), (7, 7), (4500000, 16), (1, 1)):
        ranges = [shard_range(lines, shards, k) for k in range(shards)]
        assert ranges[0][0] == 0 and ranges[-1][1] == lines
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert max(e - s for s, e in ranges) - min(e - s for s, e in ranges) <= 1
    with pytest.raises(ValueError):
        shard_range(10, 2, 2)


def test_dict_only_writes_the_dictionaries_and_codes_of_the_unsharded_run_and_nothing_else(made):
    root, _, _ = made
    assert sorted(os.listdir(root / "dicts")) == sorted(DICTIONARIES + ("syntax.json",))
    for name in DICTIONARIES:
        assert read(root / "dicts" / name) == read(root / "whole" / name), name
    meta = json.loads(read(root / "dicts" / "syntax.json"))
    assert meta["dict_only"]["sentences"] == 240 and meta["splits"] == {}


def test_two_shards_read_together_equal_the_unsharded_data_bin(made):
    root, _, summaries = made
    whole, shards = root / "whole", [root / "bin" / f"shard{k}" for k in range(2)]
    assert [s["sentences"] for s in summaries] == [120 + 20 + 20, 120]
    for shard in shards:  # the same dictionaries and codes in every shard
        for name in DICTIONARIES:
            assert read(shard / name) == read(whole / name), (shard, name)
    # the train sentences and every side stream, shard 0's lines then shard 1's
    for lang in (SRC, TGT):
        name = f"train.{SRC}-{TGT}.{lang}"
        assert items(shards[0] / name) + items(shards[1] / name) == items(whole / name), name
    for stream in STREAMS:
        name = f"train.{SRC}-{TGT}.{SRC}.{stream}"
        assert items(shards[0] / name) + items(shards[1] / name) == items(whole / name), name
    # valid and test go with shard 0, byte for byte (fairseq reads them from the first path)
    for split in ("valid", "test"):
        for suffix in [f"{SRC}", f"{TGT}"] + [f"{SRC}.{s}" for s in STREAMS]:
            for ext in ("bin", "idx"):
                name = f"{split}.{SRC}-{TGT}.{suffix}.{ext}"
                assert read(shards[0] / name) == read(whole / name), name
                assert not (shards[1] / name).exists()
    # the settings the task reads are the same; each shard records its line range
    from fairseq_syntax_core.shards import SHARED_SETTINGS

    metas = [json.loads(read(d / "syntax.json")) for d in (whole, *shards)]
    for key in SHARED_SETTINGS + ("parser", "phrase_structure"):
        assert metas[1].get(key) == metas[0].get(key) == metas[2].get(key), key
    assert [m["shard"]["train_lines"] for m in metas[1:]] == [[0, 120], [120, 240]]


def test_a_whole_file_run_and_a_streamed_run_write_through_one_writer_byte_for_byte(made, tmp_path):
    """The pipeline's one writer: a whole-file run (learning its codes and dictionaries) and a run streamed in blocks
    with those dictionaries given write the same bytes, lines left out by --max-len included; the CoNLL-U names
    each sentence by its input line."""
    root, raw, _ = made
    parser = spacy_model()
    splits = ["--validpref", str(raw / "valid"), "--testpref", str(raw / "test"), "--max-len", "14",
              "--max-len-action", "skip"]
    whole = tmp_path / "whole"
    summary = preprocess(common(raw, parser) + splits + ["--bpe-symbols", "800", "--destdir", str(whole)])
    given = ["--srcdict", str(whole / "dict.en.txt"), "--tgtdict", str(whole / "dict.de.txt"),
             "--bpe-codes", str(whole / "bpe.codes"), "--labeldict", str(whole / "dict.en.deplabel.txt"),
             "--posdict", str(whole / "dict.en.pos.txt")]
    streamed = tmp_path / "streamed"
    preprocess(common(raw, parser) + splits + given + ["--num-shards", "1", "--shard-id", "0", "--block-lines", "7",
                                                       "--destdir", str(streamed)])
    names = sorted(os.listdir(whole))
    assert names == sorted(os.listdir(streamed)) and len(names) > 20
    for name in names:
        if name != "syntax.json":
            assert read(whole / name) == read(streamed / name), name
    meta = json.loads(read(whole / "syntax.json"))
    skipped = meta["splits"]["train"]["skipped_lines"]
    assert summary["skipped_too_long"] > 0 and skipped
    with open(raw / "train.en", encoding="utf-8") as handle:
        kept = [i for i in range(1, sum(1 for _ in handle) + 1) if i not in set(skipped)]
    conllu = read(whole / f"train.{SRC}-{TGT}.{SRC}.conllu").decode()
    assert [int(line.rsplit("-", 1)[1]) for line in conllu.splitlines() if line.startswith("# sent_id")] == kept


def test_each_shard_holds_the_length_prior_of_its_own_train_lines(made):
    """The decision documented in docs/scale_out.md: a shard's table counts its own lines; the tables add up."""
    from fairseq_syntax_core.length_prior import read_length_prior

    root, _, _ = made
    name = f"length_prior.{SRC}-{TGT}.json"
    whole = read_length_prior(str(root / "whole" / name))
    parts = [read_length_prior(str(root / "bin" / f"shard{k}" / name)) for k in range(2)]
    assert [p.lines for p in parts] == [120, 120]
    summed = {}
    for part in parts:
        for key, count in part.counts.items():
            summed[key] = summed.get(key, 0) + count
    assert summed == whole.counts


def test_shards_of_another_run_or_other_codes_are_errors_naming_the_shard(made, tmp_path):
    from fairseq_syntax_preprocess.cluster import check_shards

    root, _, _ = made
    bins = tmp_path / "bins"
    shutil.copytree(root / "bin", bins)
    check_shards(str(bins), 2)
    with open(bins / "shard1" / "bpe.codes", "a", encoding="utf-8") as handle:
        handle.write("x y\n")
    with pytest.raises(DataBinError, match=r"shard1/bpe.codes: this BPE codes differs"):
        check_shards(str(bins), 2)
    shutil.copyfile(root / "bin" / "shard1" / "bpe.codes", bins / "shard1" / "bpe.codes")
    write(bins / "shard1" / "dict.de.txt", read(root / "bin" / "shard1" / "dict.de.txt").decode() + "neu 1\n")
    with pytest.raises(DataBinError, match=r"shard1/dict.de.txt: this dictionary differs"):
        check_shards(str(bins), 2)
    # the task refuses it too, before training on wrong ids
    with pytest.raises(DataBinError, match=r"shard1/dict.de.txt"):
        syntax_task(f"{bins / 'shard0'}:{bins / 'shard1'}")
    shutil.rmtree(bins / "shard1")
    with pytest.raises(DataBinError, match=r"shard1: shard 1 of 2 is missing"):
        check_shards(str(bins), 2)
    with pytest.raises(DataBinError, match=r"shard0/syntax.json: is shard 0 of 2, expected shard 0 of 1"):
        check_shards(str(bins), 1)


def test_bad_shard_arguments_are_refused_before_any_work(made, tmp_path):
    root, raw, _ = made
    parser = spacy_model()
    base = common(raw, parser) + ["--destdir", str(tmp_path / "s")]
    with pytest.raises(UsageError, match=r"--shard-id 2 with --num-shards 2: shard ids are 0..1"):
        preprocess(base + ["--dictdir", str(root / "dicts"), "--num-shards", "2", "--shard-id", "2"])
    with pytest.raises(UsageError, match=r"needs the dictionaries every shard shares: give --dictdir"):
        preprocess(base + ["--bpe-symbols", "100", "--num-shards", "2", "--shard-id", "0"])
    with pytest.raises(UsageError, match=r"--num-shards and --shard-id go together"):
        preprocess(base + ["--dictdir", str(root / "dicts"), "--num-shards", "2"])
    with pytest.raises(UsageError, match=r"--dictdir .* was made for en-de, not en-fr"):
        preprocess(["-s", "en", "-t", "fr"] + base[4:] + ["--dictdir", str(root / "dicts"),
                                                          "--num-shards", "2", "--shard-id", "0"])
    # --dictdir naming a file, or a folder whose syntax.json was cut short
    write(tmp_path / "a_file", "x\n")
    with pytest.raises(UsageError, match=r"--dictdir .*a_file: not a directory"):
        preprocess(base + ["--dictdir", str(tmp_path / "a_file"), "--num-shards", "2", "--shard-id", "0"])
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    write(truncated / "syntax.json", read(root / "dicts" / "syntax.json").decode()[:40])
    with pytest.raises(UsageError, match=r"--dictdir .*truncated: its syntax.json is not one fairseq-syntax-preprocess "
                                         r"wrote \(unreadable, truncated"):
        preprocess(base + ["--dictdir", str(truncated), "--num-shards", "2", "--shard-id", "0"])
    # dictionaries learned on Moses tokens, applied to whitespace tokens: other ids for the same words
    with pytest.raises(UsageError, match=r"learned on Moses tokens, but this run keeps whitespace tokens .*drop --pretokenized"):
        preprocess(base + ["--dictdir", str(root / "dicts"), "--pretokenized", "--num-shards", "2", "--shard-id", "0"])
    # a folder with separate dictionaries under --joined-dictionary: target words would become <unk>
    separate = tmp_path / "separate"
    shutil.copytree(root / "dicts", separate)
    write(separate / "dict.de.txt", read(separate / "dict.de.txt").decode() + "nurdeutsch 1\n")
    with pytest.raises(UsageError, match=r"separate en and de dictionaries .* drop --joined-dictionary"):
        preprocess(base + ["--dictdir", str(separate), "--joined-dictionary", "--num-shards", "2", "--shard-id", "0"])
    assert not (tmp_path / "s").exists()


def test_a_bad_line_in_a_shard_names_its_line_in_the_whole_train_file(made, tmp_path):
    root, raw, _ = made
    lines = read(raw / "train.en").decode().splitlines()
    lines[199] = "   "
    write(tmp_path / "train.en", "\n".join(lines) + "\n")
    shutil.copyfile(raw / "train.de", tmp_path / "train.de")
    argv = common(tmp_path, spacy_model()) + ["--dictdir", str(root / "dicts"), "--joined-dictionary",
                                              "--num-shards", "2", "--shard-id", "1", "--block-lines", "50",
                                              "--destdir", str(tmp_path / "shard1")]
    from fairseq_syntax_core.errors import InputError

    with pytest.raises(InputError, match=r"train.en:200: empty line"):
        preprocess(argv)
    assert not (tmp_path / "shard1").exists()
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_the_task_reads_one_shard_per_epoch_and_checks_each(made, tmp_path):
    root, _, _ = made
    shards = [root / "bin" / f"shard{k}" for k in range(2)]
    task = syntax_task(f"{shards[0]}:{shards[1]}")
    sizes = []
    for epoch in (1, 2, 3):
        task.load_dataset("train", epoch=epoch)
        sizes.append(len(task.datasets["train"]))
    assert sizes == [120, 120, 120]
    task.load_dataset("valid")
    assert len(task.datasets["valid"]) == 20
    # a list that lacks a shard of the run is trained on with a warning; one that lists a shard twice is refused
    from fairseq_syntax.data.data_bin_checks import check_epoch_paths
    from fairseq_syntax_core.errors import DataBinError

    meta = json.loads(read(shards[0] / "syntax.json"))
    assert check_epoch_paths([str(shards[0])], meta) == []
    with pytest.raises(DataBinError, match="is shard 0 again"):
        check_epoch_paths([str(shards[0]), str(shards[0])], meta)
    # the missing shard is named when the train split is loaded (tests/test_provenance_identity.py)
    from fairseq_syntax_core.shards import missing_shards

    assert f"hold 1 of the 2 shards of their run; missing: {shards[1]}," in missing_shards([(str(shards[0]), meta)] * 2)
    # a shard whose side-files are another shard's: epoch 2 stops naming it
    bad = tmp_path / "shard1"
    shutil.copytree(shards[1], bad)
    for ext in ("bin", "idx"):
        shutil.copyfile(shards[0] / f"valid.en-de.en.head.{ext}", bad / f"train.en-de.en.head.{ext}")
    task = syntax_task(f"{shards[0]}:{bad}")
    task.load_dataset("train", epoch=1)
    with pytest.raises(DataBinError, match=str(bad)):
        task.load_dataset("train", epoch=2)


def test_fairseq_train_on_two_shards(made, tmp_path):
    root, _, _ = made
    data = f"{root / 'bin' / 'shard0'}:{root / 'bin' / 'shard1'}"
    result = call([tool("fairseq-train"), data, "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                   "--arch", "transformer_dep_rel", *CLI_TINY, "--optimizer", "adam", "--lr", "0.005",
                   "--max-tokens", "2000", "--max-epoch", "2", "--save-dir", str(tmp_path / "ckpt"),
                   "--no-epoch-checkpoints", "--no-progress-bar", "--seed", "1"], cwd=str(tmp_path))
    log = result.stdout + result.stderr
    assert "shard0/train.en-de.en" in log and "shard1/train.en-de.en" in log  # one shard per epoch
    assert os.path.exists(tmp_path / "ckpt" / "checkpoint_last.pt")


def _cluster_argv(raw, destdir, dicts, *extra):
    return [tool("fairseq-syntax-preprocess-cluster"), "--engine", "local", "--num-shards", "2",
            "--destdir", str(destdir), "--timeout-min", "5", *extra,
            "-s", SRC, "-t", TGT, "--trainpref", str(raw / "train"), "--parser", spacy_model(),
            "--dictdir", str(dicts), "--joined-dictionary", "--workers", "1"]


@pytest.mark.slow
def test_cluster_runs_one_local_job_per_shard_and_checks_them(made, tmp_path):
    root, raw, _ = made
    result = call(_cluster_argv(raw, tmp_path / "bin", root / "dicts", "--parallelism", "2"), cwd=str(tmp_path))
    out = result.stdout
    assert "2 shards on local, 2 at a time, timeout 5 min" in out
    assert "shard 0: done, 120 sentences" in out and "shard 1: done, 120 sentences" in out
    assert "2 shards written and checked" in out
    for k in range(2):
        assert items(tmp_path / "bin" / f"shard{k}" / "train.en-de.en.head") == \
            items(root / "bin" / f"shard{k}" / "train.en-de.en.head")


def _descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_killing_the_cluster_command_cancels_its_jobs(made, tmp_path, background):
    """One job at a time (--parallelism 1) under the timeout this command set (not submitit's 2 minutes);
    SIGTERM to the submitter while shard 0 writes: its job (controller and task) stops and removes its
    temporary folder, shard 1 is never submitted, nothing is written. Also when the command was started in
    the background (`cmd &` in a script: SIGINT ignored, and inherited so by what it starts), where the
    job's controller ignored submitit's SIGINT cancel and shard 0 was written after the cancel (the jobs
    keep ignoring SIGINT; SIGTERM cancels them)."""
    root, raw, _ = made
    # the train set 20 times over: shard 0 still writes when the signal comes (120 lines can be done
    # between seeing its temporary folder and sending the signal)
    big = tmp_path / "raw"
    big.mkdir()
    for lang in (SRC, TGT):
        (big / f"train.{lang}").write_text((raw / f"train.{lang}").read_text(encoding="utf-8") * 20,
                                           encoding="utf-8")
    env = dict(os.environ, PYTHONPATH="")
    # as a shell starts the command, whatever this test run itself inherited (CI may run in the background)
    sigint = signal.SIG_IGN if background else signal.SIG_DFL
    process = subprocess.Popen(_cluster_argv(big, tmp_path / "bin", root / "dicts", "--parallelism", "1"),
                               cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    try:
        line = ""
        while "shard 0: job" not in line:
            line = process.stdout.readline()
            assert line, process.stderr.read()[-3000:]
        controller = int(line.split("job ")[1].split()[0])
        deadline = time.time() + 120
        while time.time() < deadline and not [n for n in os.listdir(tmp_path / "bin") if ".shard0.tmp-" in n]:
            time.sleep(0.05)  # until the job has started writing the shard
        assert time.time() < deadline
        jobs = [controller] + _descendants(controller)
        assert len(jobs) >= 2 and [p for p in _descendants(process.pid) if p not in jobs] == []  # one job at once
        with open(f"/proc/{controller}/environ", "rb") as handle:
            assert b"SUBMITIT_LOCAL_TIMEOUT_S=300\0" in handle.read()
        with open(f"/proc/{controller}/status") as handle:  # the job ignores SIGINT as the command does
            ignored = int(next(line for line in handle if line.startswith("SigIgn:")).split()[1], 16)
        assert bool(ignored & (1 << (signal.SIGINT - 1))) == background
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "cancelled the jobs of shards 0" in stderr
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in jobs):
        time.sleep(0.1)
    assert not [p for p in jobs if _alive(p)]
    assert "shard 1: job" not in stdout
    assert not (tmp_path / "bin" / "shard0").exists()
    assert not [n for n in os.listdir(tmp_path / "bin") if ".tmp-" in n]


class _FakeJob:
    def __init__(self, job_id):
        self.job_id, self.cancelled = job_id, False

    def cancel(self, check=True):
        self.cancelled = True

    def done(self):
        return self.cancelled


class _ArrayQueuedThenSignalled:
    """A SLURM executor whose ``sbatch`` has queued the array when SIGTERM comes, before it returns the ids."""
    cluster = "slurm"

    def __init__(self):
        self.jobs = []

    def map_array(self, function, argvs):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered now, in the middle of the submission
        self.jobs = [_FakeJob(f"77_{k}") for k in range(len(argvs))]
        return self.jobs


def test_a_signal_during_sbatch_cancels_the_array_it_queued(monkeypatch, capsys):
    """The signal is held while the array is submitted, then every job of it is cancelled and the
    command exits 128 + SIGTERM: no array is left running on the cluster."""
    from fairseq_syntax_preprocess import cluster

    def exit_(code):
        raise SystemExit(code)

    monkeypatch.setattr(cluster.os, "_exit", exit_)
    executor = _ArrayQueuedThenSignalled()
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        with pytest.raises(SystemExit) as stopped:
            cluster.Submission(executor, [["a", "shard0"], ["b", "shard1"]], parallelism=2).run()
    finally:
        for signum, handler in previous.items():  # the handlers run() installed go with the test
            signal.signal(signum, handler)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert [job.cancelled for job in executor.jobs] == [True, True]
    assert "cancelled the jobs of shards 0, 1" in capsys.readouterr().err


def test_shards_of_another_cut_or_another_corpus_are_errors_and_plain_data_bins_need_only_the_same_ids(made, tmp_path):
    """Shard 1 of a 3-way cut listed after shard 0 of a 2-way cut overlaps it and leaves lines out:
    an error naming it. Two data-bins that are not shards (several corpora) need the same
    dictionaries, not the same parser settings (they trained together before sharding existed)."""
    from fairseq_syntax.data.data_bin_checks import check_epoch_paths

    root, _, _ = made
    shard0, shard1 = root / "bin" / "shard0", tmp_path / "other_cut"
    shutil.copytree(root / "bin" / "shard1", shard1)
    meta = json.loads(read(shard1 / "syntax.json"))
    meta["shard"].update(num_shards=3, train_lines=[80, 160])
    write(shard1 / "syntax.json", json.dumps(meta))
    first = json.loads(read(shard0 / "syntax.json"))
    with pytest.raises(DataBinError, match=r"other_cut/syntax.json: is shard 1 of 3 .* first shard of this list is one of 2"):
        check_epoch_paths([str(shard0), str(shard1)], first)
    meta["shard"].update(num_shards=2, train_lines=[120, 240], train_files=["elsewhere/train.en", "elsewhere/train.de"])
    write(shard1 / "syntax.json", json.dumps(meta))
    with pytest.raises(DataBinError, match=r"cut from train files \['elsewhere/train.en'"):
        check_epoch_paths([str(shard0), str(shard1)], first)
    # same names and line count, other content (another corpus): an error, in the task and the cluster check
    assert len(first["shard"]["train_sha256"]) == 64
    meta["shard"].update(train_lines=[120, 240], train_files=first["shard"]["train_files"], train_sha256="0" * 64)
    write(shard1 / "syntax.json", json.dumps(meta))
    with pytest.raises(DataBinError, match=r"other_cut/syntax.json: is shard 1, cut from train files .* whose content "
                                           r"differs from the first shard's"):
        check_epoch_paths([str(shard0), str(shard1)], first)
    from fairseq_syntax_core.shards import check_shard_set

    with pytest.raises(DataBinError, match=r"other_cut/syntax.json: is shard 1, cut from train files .* whose content "
                                           r"differs from the first shard's"):
        check_shard_set([(str(shard0), first), (str(shard1), meta)])
    # two plain data-bins with the same dictionaries and another spaCy version: accepted
    plain_a, plain_b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(root / "whole", plain_a)
    shutil.copytree(root / "whole", plain_b)
    meta_b = json.loads(read(plain_b / "syntax.json"))
    meta_b.setdefault("parser", {})["spacy_version"] = "0.0.0-other"
    write(plain_b / "syntax.json", json.dumps(meta_b))
    meta_a = json.loads(read(plain_a / "syntax.json"))
    assert check_epoch_paths([str(plain_a), str(plain_b)], meta_a) == []
    write(plain_b / "dict.en.deplabel.txt", read(plain_b / "dict.en.deplabel.txt").decode() + "newlabel 1\n")
    with pytest.raises(DataBinError, match=r"b/dict.en.deplabel.txt: differs from"):
        check_epoch_paths([str(plain_a), str(plain_b)], meta_a)


def test_a_shard_missing_a_file_or_cut_short_is_named_with_its_job(made, tmp_path):
    from fairseq_syntax_preprocess.cluster import check_shards

    root, _, _ = made
    bins = tmp_path / "bins"
    shutil.copytree(root / "bin", bins)
    os.remove(bins / "shard1" / "train.en-de.en.pos.idx")
    with pytest.raises(DataBinError, match=r"shard1: shard 1 of 2 is damaged \(.*train.en-de.en.pos.idx.*--shard-id 1"):
        check_shards(str(bins), 2)
    shutil.copyfile(root / "bin" / "shard1" / "train.en-de.en.pos.idx", bins / "shard1" / "train.en-de.en.pos.idx")
    head = bins / "shard0" / "train.en-de.en.head.bin"
    head.write_bytes(head.read_bytes()[:-10])
    with pytest.raises(DataBinError, match=r"shard 0 of 2 is damaged \(.*train.en-de.en.head"):
        check_shards(str(bins), 2)


def test_a_dictdir_whose_codes_or_dictionaries_were_replaced_is_refused(made, tmp_path, caplog):
    """--dict-only records the SHA-256 of what it wrote: codes of another run would leave most pieces <unk>."""
    from fairseq_syntax_preprocess.cli import get_parser
    from fairseq_syntax_preprocess.dictdir import apply_dictdir

    root, raw, _ = made
    dicts = tmp_path / "dicts"
    shutil.copytree(root / "dicts", dicts)
    argv = common(raw, spacy_model()) + ["--dictdir", str(dicts), "--joined-dictionary", "--destdir", "x"]
    apply_dictdir(get_parser().parse_args(argv))  # as written: taken
    (dicts / "bpe.codes").write_text((dicts / "bpe.codes").read_text(encoding="utf-8") + "x y\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"bpe.codes is not the file the --dict-only run wrote"):
        apply_dictdir(get_parser().parse_args(argv))
    external = ["-s", SRC, "-t", TGT, "--trainpref", str(raw / "train"), "--external-parse", "conllu",
                "--dictdir", str(root / "dicts"), "--joined-dictionary", "--destdir", "x"]
    apply_dictdir(get_parser().parse_args(external))  # warned: an external parse may be the same parser's
    assert "unless both are one parser's labels and tags, most become <unk>" in caplog.text


def test_a_cluster_submission_that_fails_leaves_no_folder_it_made(made, tmp_path, monkeypatch):
    from fairseq_syntax_core.errors import UserError
    from fairseq_syntax_preprocess import cluster

    root, raw, _ = made
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("sbatch", "srun"):
        (fake / name).write_text("#!/bin/sh\necho 'sbatch: error: Batch job submission failed' >&2\nexit 1\n")
        (fake / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    destdir = tmp_path / "cl"
    with pytest.raises(UserError, match="the submission failed"):
        cluster.main(["--num-shards", "2", "--destdir", str(destdir), "--engine", "slurm", *common(raw, spacy_model()),
                      "--dictdir", str(root / "dicts"), "--joined-dictionary"])
    assert not destdir.exists()


def test_a_train_file_changed_while_a_shard_reads_it_is_refused_not_recorded(made, tmp_path, monkeypatch):
    """The shard's recorded digest is of the bytes it read: taken before, compared after."""
    from fairseq_syntax_preprocess import streaming

    root, raw, _ = made
    copy = tmp_path / "raw"
    shutil.copytree(raw, copy)
    write_split = streaming.write_split

    def then_edited(args, out, name, *rest):
        written = write_split(args, out, name, *rest)
        if name == "train":
            with open(copy / "train.en", "a", encoding="utf-8") as handle:
                handle.write("A line added while the shard was written .\n")
        return written

    monkeypatch.setattr(streaming, "write_split", then_edited)
    with pytest.raises(InputError, match=r"changed while the shard was read"):
        preprocess(common(copy, spacy_model()) + ["--dictdir", str(root / "dicts"), "--joined-dictionary",
                                                  "--num-shards", "2", "--shard-id", "1",
                                                  "--destdir", str(tmp_path / "shard")])
    assert not (tmp_path / "shard").exists()


def test_text_tokens_missing_from_a_given_dictionary_are_counted_and_warned_about(made, tmp_path, caplog):
    from fairseq_syntax_preprocess.cli import cli_main

    root, raw, _ = made
    (tmp_path / "dict.en.txt").write_text("the 10\na 9\n.@@ 1\n", encoding="utf-8")  # another corpus's words
    given = root / "dicts"
    argv = common(raw, spacy_model()) + [
        "--srcdict", str(tmp_path / "dict.en.txt"), "--tgtdict", str(given / "dict.de.txt"), "--bpe-codes",
        str(given / "bpe.codes"), "--labeldict", str(given / "dict.en.deplabel.txt"), "--posdict",
        str(given / "dict.en.pos.txt"), "--num-shards", "2", "--shard-id", "1"]
    summary = preprocess(argv + ["--destdir", str(tmp_path / "a")])
    assert summary["unknown_source_tokens"] > 0.5 * summary["source_tokens"] > 0
    assert summary["unknown_target_tokens"] < 0.1 * summary["target_tokens"]
    caplog.set_level("WARNING")
    cli_main(argv + ["--destdir", str(tmp_path / "b")])
    assert "source tokens are <unk> in the text dictionary (--srcdict" in caplog.text
    assert "target tokens are <unk>" not in caplog.text
