"""fairseq-generate's ``--results-path`` file: an earlier run's stays until this run completes, and a run that
stops (an error, Ctrl-C, SIGTERM, SIGHUP: :func:`~fairseq_syntax_core.signal_exceptions.signals_raised`) leaves no file
of its own half-written (wrappers in :mod:`fairseq_syntax.compat`). A link there is refused: fairseq would
write through it."""

import contextlib
import os
import sys
from typing import List, Optional, Tuple

from fairseq_syntax_core import decoding_record
from fairseq_syntax_core.databin import split_perturbation
from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core.file_lock import LockFileError, release, try_lock
from fairseq_syntax_core.interrupts import signals_deferred
from fairseq_syntax_core.oneline import one_line

__all__ = ["discard_results", "earlier_results_kept", "generate_main"]


def generate_main(original, cfg, output_file):
    """fairseq-generate's ``_main`` (``original``): after fairseq's output, the line saying what was decoded
    (:mod:`fairseq_syntax_core.decoding_record`); a write that fails (disk full, file too large) names the results
    file, and the partial file this run wrote is removed (fairseq: an OSError naming no file, the half-written
    ``generate-SPLIT.txt`` left behind); so is the empty or partial file of a run that a refusal, a failure or an
    interruption stops."""
    decoding_record.start()
    digested = DigestedOutput(output_file)
    try:
        result = original(cfg, digested)
        line = decoded_line(cfg, digested.digest.hexdigest())
        if line is not None:
            print(line, file=output_file, flush=True)
        return result
    except OSError as error:
        name = discard_results(output_file)  # this run's own, half-written
        if error.filename is not None or name is None:
            raise
        raise OSError(error.errno, f"{error.strerror}; the partial results file was removed", name) from None
    except BaseException:  # refused, failed or interrupted: no results file, as if the run had not started
        discard_results(output_file)
        raise


class DigestedOutput:
    """fairseq-generate's output, passed through, its sentence lines counted in a
    :class:`~fairseq_syntax_core.decoding_record.LinesDigest` (the record vouches for those lines only)."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._pending = ""
        self.digest = decoding_record.LinesDigest()

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        self._pending += text
        if "\n" in self._pending:
            *lines, self._pending = self._pending.split("\n")
            for line in lines:
                self.digest.add(line)
        return written

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def decoded_line(cfg, lines_sha256: Optional[str] = None) -> Optional[str]:
    """The ``fairseq-syntax-decoded`` line of a decoding with this plugin's task (None for other tasks)."""
    from fairseq import utils

    from fairseq_syntax.command_settings import task_data_bin

    found = task_data_bin(cfg)
    if found is None:
        return None
    folder, metadata = found
    subset = getattr(getattr(cfg, "dataset", None), "gen_subset", None)
    # the rounds of perturbation that touched the split decoded (perturb --splits valid leaves test clean)
    perturbation = split_perturbation(metadata.get("perturbation"), subset if isinstance(subset, str) else None)
    paths = getattr(getattr(cfg, "common_eval", None), "path", None)
    generation = getattr(cfg, "generation", None)
    copied = (["--score-reference"] if getattr(generation, "score_reference", False) else []) + \
        ([f"--prefix-size {generation.prefix_size}"] if (getattr(generation, "prefix_size", 0) or 0) > 0 else [])
    settings = {key: getattr(generation, key, None) for key in decoding_record.SEARCH_KEYS}
    settings["gen_subset"] = subset
    return decoding_record.record_line(folder, perturbation, utils.split_paths(paths) if isinstance(paths, str) else None,
                                       copied, {k: v for k, v in settings.items() if isinstance(v, (str, int, float))},
                                       lines_sha256)


def _empty(path: str) -> bool:
    try:
        return os.path.getsize(path) == 0
    except OSError:
        return False


def discard_results(output_file) -> Optional[str]:
    """Close and remove the ``--results-path`` file fairseq-generate opened for this run (with "w": nothing of an
    earlier run is in it); its name, or None when the output is not such a file (standard output)."""
    name = getattr(output_file, "name", None)
    if output_file in (sys.stdout, sys.stderr) or not isinstance(name, str):
        return None
    try:
        mine = os.fstat(output_file.fileno())
    except (OSError, ValueError):
        mine = None
    try:
        output_file.close()
    except OSError:
        pass
    try:
        there = os.stat(name)
        if mine is None or (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):  # not another run's since
            os.remove(name)
    except OSError:
        pass
    return name


@contextlib.contextmanager
def earlier_results_kept(cfg):
    """An earlier run's ``--results-path`` file stays until this run completes: fairseq opens it with "w" before
    anything is checked, so a refusal or a failure would otherwise leave the user without it."""
    # fairseq-generate's cli_main passes its argparse Namespace; main() converts it to the config afterwards
    folder = getattr(getattr(cfg, "common_eval", cfg), "results_path", None)
    subset = getattr(getattr(cfg, "dataset", cfg), "gen_subset", None)
    if not isinstance(folder, str) or not isinstance(subset, str):
        yield
        return
    if not folder:
        raise UsageError("--results-path '': expected a folder for generate-SUBSET.txt (left out: standard output)")
    if os.path.islink(folder) and not os.path.exists(folder):
        raise UsageError(f"--results-path {one_line(folder)}: a link to a folder that does not exist "
                         f"({one_line(os.readlink(folder))[:80]}): make that folder, or give another")
    path = os.path.join(folder, f"generate-{subset}.txt")
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
        what = ("a symbolic link, which fairseq-generate would write through" if os.path.islink(path)
                else "not a regular file, which fairseq-generate cannot write")
        raise UsageError(f"--results-path {one_line(folder)}: generate-{one_line(subset)}.txt there is {what}: "
                         "remove it, or give another folder")
    made = _missing_folders(folder)
    lock = _lock_results(folder, subset)
    try:
        if lock is not None:
            _put_back_after_a_kill(folder, subset, path)
        if not os.path.isfile(path):
            yield
            return
        kept = os.path.join(folder, f".generate-{subset}.txt.kept-{os.getpid()}")
        os.replace(path, kept)
        try:
            yield
        except BaseException:
            with signals_deferred():
                if not os.path.lexists(path) or _empty(path):  # the earlier results back over this run's empty file,
                    os.replace(kept, path)                             # unless another run has written there since
                else:  # in sight, and not taken for a killed run's (:func:`_put_back_after_a_kill`)
                    earlier = os.path.join(folder, f"generate-{subset}.txt.earlier-{os.getpid()}")
                    os.replace(kept, earlier)
                    print(f"fairseq-generate: warning: another run wrote {one_line(path)} meanwhile: the earlier "
                          f"results are kept as {one_line(earlier)}", file=sys.stderr)
            raise
        os.remove(kept)
    except BaseException:  # a failed run leaves no folder it made (nothing of it is left in them)
        if lock is not None:
            release(*lock)
            lock = None
        for made_folder in made:
            try:
                os.rmdir(made_folder)
            except OSError:
                break
        raise
    finally:
        if lock is not None:
            release(*lock)


def _put_back_after_a_kill(folder: str, subset: str, path: str) -> None:
    """A run killed (``kill -9``) while it held the lock left the earlier results set aside as
    ``.generate-SUBSET.txt.kept-PID``, and in their place its partial output (no ``fairseq-syntax-decoded`` line
    at its end), or nothing. Under the lock no other run is writing there. The earlier results (the oldest copy,
    when several kills left several) go back in place of a partial output, which is kept in sight as
    ``generate-SUBSET.txt.partial-PID``; a complete file there (written since) stays, and the earlier results are
    kept in sight beside it as ``generate-SUBSET.txt.earlier-PID``. Nothing is removed; a warning names each move."""
    prefix = f".generate-{subset}.txt.kept-"
    try:
        kept = sorted((os.path.join(folder, n) for n in os.listdir(folder)
                       if n.startswith(prefix) and n[len(prefix):].isdigit()), key=os.path.getmtime)
    except OSError:
        return
    kept = [k for k in kept if os.path.isfile(k) and not os.path.islink(k)]
    if not kept:
        return
    taken = set()

    def free(what: str, pid: str) -> str:  # a name in sight that nothing holds (nor an earlier move)
        name, n = os.path.join(folder, f"generate-{subset}.txt.{what}-{pid}"), 0
        while os.path.lexists(name + (f".{n}" if n else "")) or name + (f".{n}" if n else "") in taken:
            n += 1
        taken.add(name + (f".{n}" if n else ""))
        return name + (f".{n}" if n else "")

    moves = [(k, free("partial", k.rsplit("-", 1)[1])) for k in kept[1:]]
    if os.path.lexists(path) and _complete(path):
        moves.append((kept[0], free("earlier", kept[0].rsplit("-", 1)[1])))
    else:
        if os.path.lexists(path):
            moves.append((path, free("partial", kept[-1].rsplit("-", 1)[1])))  # the last killed run's
        moves.append((kept[0], path))
    with signals_deferred():
        for old, new in moves:
            os.replace(old, new)
    print(f"fairseq-generate: warning: {one_line(folder)} held results a fairseq-generate killed while it wrote there "
          "had set aside: " + "; ".join(f"{one_line(os.path.basename(a))} -> {one_line(os.path.basename(b))}"
                                        for a, b in moves), file=sys.stderr)


def _complete(path: str) -> bool:
    """Whether the results file ends with its ``fairseq-syntax-decoded`` line (a run that finished writing it)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - (1 << 20)))
            lines = handle.read().splitlines()
    except OSError:
        return True  # not readable here: left as it is
    return bool(lines) and lines[-1].startswith(decoding_record.MARK.encode("utf-8"))


def _missing_folders(folder: str) -> List[str]:
    """The folders of ``folder``'s path that do not exist yet, deepest first (those this run will make)."""
    missing, path = [], os.path.abspath(folder)
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def _lock_results(folder: str, subset: str) -> Optional[Tuple[str, int]]:
    """Hold the lock of ``generate-SUBSET.txt`` in ``folder`` for this run (a lock file beside it, removed at the
    end): a second fairseq-generate writing the same file at once is refused (both opened it with "w", and the
    one that finished last lost its translations). The folder is made here, as fairseq-generate makes it next."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None  # fairseq-generate says why when it makes it
    name = f".generate-{subset}.txt.lock"
    path = os.path.join(folder, name)
    try:
        handle = try_lock(path)
    except LockFileError as error:
        raise UsageError(f"--results-path {one_line(folder)}: its lock file {one_line(name)} cannot be opened "
                         f"({error.strerror}): remove what is in its place, or give another folder") from None
    if handle is None:
        raise UsageError(f"--results-path {one_line(folder)}: another fairseq-generate is writing "
                         f"generate-{one_line(subset)}.txt there now (it holds {one_line(name)}): wait for it, or "
                         "give another folder")
    return path, handle
