"""One cleanup path for Ctrl-C, SIGTERM and errors; forked children that die with their parent.

- Temporary files and folders are owned through :func:`removed_on_failure`: an error removes
  them as it unwinds, and so does :func:`handle_termination`'s handler for Ctrl-C, SIGTERM and
  SIGHUP (what ``timeout``, ``scancel``, ``kill`` and container stops send), which then kills
  the forked workers without waiting on them and exits with 128 + the signal number. The
  rename pair that replaces a data-bin runs with the signals held (:func:`signals_deferred`),
  so an interrupt never leaves the user without the old data-bin or the new one.
- SIGKILL cannot be caught. Every process forked after :func:`handle_termination` asks the
  kernel to kill it when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so no
  parse or binarization worker keeps writing for a dead parent; the temporary folders such a
  run leaves are named after their host and process (:func:`temp_tag`) and removed by the
  next run once that process is gone (:func:`remove_stale`).
- :func:`install_error_hook` prints a :class:`~.errors.UserError` or an :class:`OSError` (disk
  full, permission denied, a missing folder, a read-only file system) that nothing caught as one
  line (``PROG: error: ...``, the file named: :func:`error_message`) instead of a traceback;
  ``FAIRSEQ_SYNTAX_TRACEBACK=1`` shows it. Every command's entry point catches the same errors
  (:data:`USER_ERRORS`) and prints them the same way (:func:`print_error`). So are the usage
  errors of fairseq's own commands (:func:`fairseq_usage_message`): an ``assert`` of a
  ``fairseq_cli`` module (its argument checks) and omegaconf's missing mandatory value (the flag named).
"""

import atexit
import contextlib
import ctypes
import errno
import linecache
import logging
import os
import re
import shutil
import signal
import socket
import sys
from typing import Iterator, List, Optional

from fairseq_syntax_core.errors import UserError
from fairseq_syntax_core.signal_exceptions import Interrupted, handle_late_signals
from fairseq_syntax_core.oneline import one_line
from fairseq_syntax_core.os_errors import error_message
from fairseq_syntax_core.startup import program_name

logger = logging.getLogger("fairseq_syntax.preprocess")

_PR_SET_PDEATHSIG = 1
_main_pid: Optional[int] = None
_hooks_registered = False


def _descendants(pid: int) -> List[int]:
    """Every process below ``pid``, deepest first (Linux ``/proc``; empty elsewhere)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: List[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                children = [int(c) for c in handle.read().split()]
        except (OSError, ValueError):
            continue
        for child in children:
            found.extend(_descendants(child))
            found.append(child)
    return found


def _kill_children() -> None:
    """SIGKILL every process this one forked, grandchildren first, without waiting on them.

    Their output lives in temporary files that are removed anyway. Asking them to stop with
    SIGTERM and joining them (``Pool.terminate``) can hang: a worker forked a moment before the
    signal may have lost it (Python clears pending signals in a new child), and a pool's
    maintenance thread replaces dead workers while the main thread waits. Grandchildren (the BPE
    pool of the binarizing child) go first: killed only through their parent's death, they could
    see its pipes closed before their own SIGKILL arrives and print a BrokenPipeError traceback.
    """
    import multiprocessing

    for child in multiprocessing.active_children():
        for pid in _descendants(child.pid) if child.pid else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            child.kill()
        except (OSError, ValueError, AttributeError):
            pass


#: temporary files and folders of this process, removed on an error or a signal
_owned: "dict[str, None]" = {}


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


@contextlib.contextmanager
def removed_on_failure(path: str) -> Iterator[str]:
    """Own a temporary path: it is removed if the block fails or the process is interrupted."""
    _owned[path] = None
    try:
        yield path
    except BaseException:
        _remove(path)
        raise
    finally:
        _owned.pop(path, None)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP until the block ends (a rename pair that must not be split)."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _on_signal(signum, frame) -> None:
    """The one cleanup path for Ctrl-C, SIGTERM and SIGHUP: kill workers, remove what we own, exit."""
    if os.getpid() != _main_pid:  # a forked child that still has the handler: die the default way
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _kill_children()
    for path in list(_owned):
        _remove(path)
    name = signal.Signals(signum).name
    prog = program_name("fairseq-syntax")
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        sys.stderr.write(f"\n{prog}: interrupted ({name}); temporary files removed; no output was left half-written\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(128 + signum)


def own_progress_lock() -> None:
    """In every forked child of a process that imported the pipeline (an at-fork hook registered
    below): a tqdm write lock of its own, not the parent's.

    tqdm's default lock holds a multiprocessing semaphore, which a fork shares with the parent. A
    child killed while inside a progress bar (the BPE child when the parent fails, a worker of a
    stopped pool; ``subword_nmt.learn_bpe`` draws one) leaves that semaphore taken, and the
    parent's next progress bar waits forever: a test worker that runs the pipeline in-process hung
    that way.
    """
    if "tqdm" not in sys.modules:  # the parent drew no progress bar: no lock to share
        return
    from tqdm import tqdm
    import threading

    lock, classes = threading.RLock(), [tqdm]
    while classes:  # tqdm's class and every subclass that has taken a lock of its own (tqdm.auto's)
        cls = classes.pop()
        if cls is tqdm or "_lock" in vars(cls):
            cls.set_lock(lock)
        classes.extend(cls.__subclasses__())


if hasattr(os, "register_at_fork"):  # every fork, in-process runs too (not only the commands')
    os.register_at_fork(after_in_child=own_progress_lock)


def _die_with_parent() -> None:
    """Runs in every forked child: default signal dispositions, and SIGKILL when the parent dies.

    SIGTERM/SIGHUP kill a child at once (no Python handler that a blocked child cannot run);
    it ignores SIGINT, so that Ctrl-C reaches the parent alone, which stops every child.
    """
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = _parent_at_fork
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no such guard
        return
    if parent is not None and os.getppid() != parent:  # the parent died before prctl
        os._exit(1)


_parent_at_fork: Optional[int] = None


def _before_fork() -> None:
    global _parent_at_fork
    _parent_at_fork = os.getpid()


def handle_termination() -> None:
    """In the main process of a command: SIGTERM/SIGHUP unwind, forked children die with it."""
    global _main_pid, _hooks_registered
    _main_pid = os.getpid()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        if signal.getsignal(signum) != signal.SIG_IGN:  # nohup, or a background job: stay ignored
            signal.signal(signum, _on_signal)
    if not _hooks_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_child=_die_with_parent)
        _hooks_registered = True


#: what every command prints as one line instead of a traceback: the user's errors, and the file
#: system's (OSError: disk full, file too large, permission denied, a missing folder, read-only)
USER_ERRORS = (UserError, OSError)

#: the attribute of an exception that holds what its one line must add (what the failure left behind)
_NOTES = "_fairseq_syntax_notes"


def add_error_note(error: BaseException, note: str) -> None:
    """Have ``error``'s one line end with ``note`` (:func:`install_error_hook`; a traceback shows it too):
    fairseq's crash.pt, left on purpose, is named where the user reads the error."""
    setattr(error, _NOTES, [*getattr(error, _NOTES, []), note])
    if hasattr(error, "add_note"):  # Python >= 3.11: the traceback (FAIRSEQ_SYNTAX_TRACEBACK=1) shows it
        error.add_note(note)


def error_notes(error: BaseException) -> str:
    """The notes :func:`add_error_note` gave ``error``, as one clause (empty without)."""
    return "; ".join(one_line(note) for note in getattr(error, _NOTES, []))


def print_error(prog: str, error: BaseException, note: str = "") -> int:
    """Print ``PROG: error: MESSAGE[; NOTE]`` on stderr (:func:`error_message`); returns 1, the exit status."""
    message = error_message(error) + (f"; {note}" if note else "")
    try:
        sys.stderr.write(f"{prog}: error: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed
        pass
    return 1


#: what fairseq raises when one of its settings is out of range (it checks few of them up front)
_FAIRSEQ_SETTING_ERRORS = (AssertionError, ValueError, ZeroDivisionError, TypeError, KeyError, IndexError,
                           OverflowError, StopIteration, RuntimeError, ImportError, LookupError)


def _module_name(frame_globals: dict) -> str:
    """A frame's module; ``python -m fairseq_cli.generate`` runs that module as ``__main__``: named by its spec."""
    name = frame_globals.get("__name__", "")
    if name == "__main__":
        return getattr(frame_globals.get("__spec__"), "name", None) or name
    return name


def fairseq_usage_message(error: BaseException, traceback) -> Optional[str]:
    """The one line for a usage error of fairseq's own commands, or None for any other error.

    * an ``AssertionError`` with a message, raised in a frame of a ``fairseq_cli`` module: fairseq
      checks its arguments so (``fairseq-validate``: ``Must specify batch size either with
      --max-tokens or --batch-size``); its message is the line;
    * omegaconf's ``MissingMandatoryValue``: a setting without default that was not given
      (``bpe.bpe_codes`` of ``--bpe subword_nmt``), named as its flag (``--bpe-codes``), and hydra's refusal of
      an empty one (``tokenizer.source_lang`` of ``--tokenizer moses`` without ``--source-lang``).
    """
    errors = sys.modules.get("omegaconf.errors")
    if errors is not None and isinstance(error, errors.MissingMandatoryValue):
        key = str(getattr(error, "full_key", "") or getattr(error, "key", "") or "")
        if not key:
            return None
        flag = "--" + key.rsplit(".", 1)[-1].replace("_", "-")
        return f"{flag} is required here: give it a value (fairseq's setting {key} has no default)"
    if errors is not None and isinstance(error, errors.ValidationError):  # a value of the wrong type for its setting
        from fairseq_syntax_core import checkpoint_loader

        key = str(getattr(error, "full_key", "") or getattr(error, "key", "") or "a setting")
        what = one_line(str(getattr(error, "msg", "") or error).splitlines()[0])[:160]
        read = checkpoint_loader.last_read  # fairseq merges a checkpoint's stored settings into its own
        return f"{one_line(read)}: its stored setting {key}: {what}" if read else f"fairseq's setting {key}: {what}"
    text = str(error)
    hydra_errors = sys.modules.get("hydra.errors")
    merged = re.match(r"Error merging override ([\w.]+)=(.*)", text) if hydra_errors is not None and isinstance(
        error, hydra_errors.ConfigCompositionException) else None
    if merged:  # a setting fairseq copies from another, not given (--tokenizer moses reads --source-lang)
        key, value = merged.group(1), one_line(merged.group(2))[:60]
        flag = "--" + key.rsplit(".", 1)[-1].replace("_", "-")
        if value in ("null", "None", ""):
            return (f"{flag} is required here: give it a value (fairseq's setting {key} may not be empty"
                    f"{'; --tokenizer moses reads --source-lang and --target-lang' if key.startswith('tokenizer.') else ''})")
        return f"{flag} {value}: fairseq cannot set {key} to it"
    if "loading state_dict" in text or "Cannot load model parameters" in text:
        from fairseq_syntax_core.checkpoint_loader import state_dict_mismatch  # torch: only for this error

        mismatch = state_dict_mismatch(error)
        if mismatch is not None:  # fairseq-train's restore names the file in its own exception
            from fairseq_syntax_core import checkpoint_loader

            named = re.search(r"from checkpoint (.+?); please ensure", text)
            if named and checkpoint_loader.last_read is None:  # no file named yet: fairseq-train's
                return f"{one_line(named.group(1))}: {mismatch}"
            return mismatch
    frames = []
    step = traceback
    while step is not None:
        frames.append(step)
        step = step.tb_next
    modules = [_module_name(f.tb_frame.f_globals) for f in frames]
    if isinstance(error, ValueError) and modules and modules[-1] == "fairseq.registry" and text.endswith("is required!"):
        name = text[:-len(" is required!")].strip().lstrip("-").replace("_", "-")
        return f"--{name} is required: give one (--help lists them)"
    if isinstance(error, (SyntaxError, ValueError)) and any(
            m.split(".")[0] == "fairseq_cli" and "model_overrides" in linecache.getline(
                f.tb_frame.f_code.co_filename, f.tb_lineno) for m, f in zip(modules, frames)):
        return f"--model-overrides: not a Python dict literal such as \"{{'beam': 5}}\" ({one_line(text)[:120]})"
    if isinstance(error, (SyntaxError, ValueError, TypeError)) and "argparse" in modules \
            and "fairseq.dataclass.utils" in modules:
        # an option fairseq reads as a Python literal (--lr, --update-freq, --adam-betas...) while it parses the
        # command line: argparse's frame holds the flag and the text given
        flag, given = "an option", ""
        for module, frame in zip(modules, frames):
            if module == "argparse" and frame.tb_frame.f_code.co_name == "_get_value":
                action = frame.tb_frame.f_locals.get("action")
                flag = (getattr(action, "option_strings", None) or [flag])[-1]
                given = frame.tb_frame.f_locals.get("arg_string", "")
        return (f"{flag} {one_line(str(given))[:80]}: not a value fairseq can read (a number, or numbers "
                f"separated by commas, e.g. {flag} 0.0005)")
    if type(error) is Exception and modules and modules[-1] == "fairseq.data.iterators" and "is empty" in text:
        return ("fairseq made no batch of the training data: every sentence was skipped, or there are fewer "
                "sentences than --required-batch-size-multiple (8 unless given); give more data, a larger "
                "--max-tokens, or --required-batch-size-multiple 1")
    if type(error) is Exception and modules and modules[-1].startswith("fairseq.modules.") and text.strip():
        # a module's own weight check while fairseq upgrades a checkpoint's weights (adaptive softmax: "This version
        # of the model is no longer supported"): the settings build a model these weights do not fit
        from fairseq_syntax_core import checkpoint_loader

        where = f"{one_line(checkpoint_loader.last_read)}: " if checkpoint_loader.last_read else ""
        return (f"{where}fairseq ({modules[-1]}) refused the weights: {one_line(text)[:120]} (the checkpoint's "
                "settings or --model-overrides build a model its weights do not fit)")
    if isinstance(error, KeyError) and modules and modules[-1] == "fairseq_cli.train" and "best_checkpoint_metric" in \
            linecache.getline(frames[-1].tb_frame.f_code.co_filename, frames[-1].tb_lineno):
        stats = frames[-1].tb_frame.f_locals.get("stats")
        logged = ", ".join(sorted(str(k) for k in stats)) if isinstance(stats, dict) else "see the valid line above"
        return (f"--best-checkpoint-metric {one_line(str(error.args[0] if error.args else error))[:60]}: validation "
                f"logged no such value (it logged: {one_line(logged)[:300]}); bleu needs --eval-bleu")
    if isinstance(error, FloatingPointError) and "fairseq.trainer" in modules:
        return (f"fairseq-train stopped: {one_line(text)[:120]} (the training diverged: lower --lr, clip with "
                "--clip-norm, or look at the data; FAIRSEQ_SYNTAX_TRACEBACK=1 shows the traceback)")
    if isinstance(error, AssertionError) and text.strip() and modules and modules[-1].split(".")[0] == "fairseq_cli":
        return " ".join(text.split())  # fairseq_cli's own argument checks: their message is the line
    tops = [m.split(".")[0] for m in modules]
    last_fairseq = max((k for k, top in enumerate(tops) if top in ("fairseq", "fairseq_cli")), default=-1)
    if last_fairseq >= 0 and text.strip() and isinstance(error, _FAIRSEQ_SETTING_ERRORS) \
            and not isinstance(error, UserError) and "fairseq_cli" in tops \
            and not any(top.startswith("fairseq_syntax") for top in tops[last_fairseq:]):
        # raised inside fairseq (or a library it called: NumPy's seeding, torch's dropout) by one of its own
        # settings it does not check (--update-freq 0, --log-interval 0, --adam-betas '(0.9,)', --seed 2**70,
        # --constraints in fairseq-generate...): its message, one line, where fairseq was
        text = " ".join(re.sub(r"([*=#~-])\1{4,}", " ", text).split())  # NLTK's boxed messages: the words
        return (f"fairseq ({modules[last_fairseq]}) stopped on its settings: {type(error).__name__}: "
                f"{one_line(text)[:200]} (check the options given to it; FAIRSEQ_SYNTAX_TRACEBACK=1 shows "
                "the traceback)")
    return None


def _prog() -> str:
    return program_name("fairseq")


def install_error_hook() -> None:
    """Print uncaught :data:`USER_ERRORS` as ``PROG: error: MESSAGE`` (exit 1), not as tracebacks.

    So are fairseq's own usage errors (:func:`fairseq_usage_message`). Other exceptions keep the
    previous hook (Python's traceback, or fairseq's). An OSError without a system message
    (fairseq's ``IOError("Model file not found: PATH")``) prints its text.
    """
    previous = sys.excepthook
    if getattr(previous, "_fairseq_syntax", False):
        return

    def hook(kind, value, traceback):
        if isinstance(value, Interrupted) or (isinstance(value, KeyboardInterrupt)  # Python's own: a Ctrl-C
                                              and os.environ.get("FAIRSEQ_SYNTAX_TRACEBACK") != "1"):
            signum = value.signum if isinstance(value, Interrupted) else signal.SIGINT
            name = signal.Signals(signum).name
            _kill_children()  # fairseq's loader workers: left behind, they printed tracebacks after this line
            try:
                sys.stdout.flush()
                sys.stderr.write(f"\n{_prog()}: interrupted ({name}); no output was left half-written\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os._exit(128 + signum)
        if os.environ.get("FAIRSEQ_SYNTAX_TRACEBACK") != "1":
            shown = value if issubclass(kind, USER_ERRORS) else None
            if shown is None:
                usage = fairseq_usage_message(value, traceback)
                shown = UserError(usage) if usage is not None else None
            if shown is not None:
                print_error(_prog(), shown, error_notes(value))
                if _in_forked_worker():
                    os._exit(1)
                return
        previous(kind, value, traceback)

    hook._fairseq_syntax = True  # type: ignore[attr-defined]
    sys.excepthook = hook
    atexit.register(handle_late_signals)  # runs before the exit callbacks registered earlier (torch's)



def _in_forked_worker() -> bool:
    return _main_pid is not None and os.getpid() != _main_pid


# ------------------------------------------------------------------ temporary folders
def temp_tag() -> str:
    """``HOST-PID``: who owns a temporary folder, so that a later run can tell it is stale."""
    host = re.sub(r"[^A-Za-z0-9]+", "_", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(directory: str, prefixes: List[str]) -> List[str]:
    """Remove ``PREFIX-HOST-PID-*`` entries of this host whose process is gone; returns them.

    Entries of other hosts (a shared file system) and of live processes are left alone,
    as is anything whose name does not carry an owner.
    """
    removed = []
    host, _ = temp_tag().rsplit("-", 1)
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        for prefix in prefixes:
            if not name.startswith(prefix):
                continue
            match = re.match(rf"{re.escape(host)}-(\d+)-", name[len(prefix):])
            if match is None or _alive(int(match.group(1))):
                continue
            path = os.path.join(directory, name)
            _remove(path)
            if not os.path.lexists(path):
                removed.append(path)
    for path in removed:
        logger.info(f"removed {path}, left by an earlier run that was killed")
    return removed
