"""Ctrl-C and SIGTERM while one of our commands starts: one line, not a ``KeyboardInterrupt`` traceback.

A command spends seconds importing torch, fairseq and spaCy before its entry point installs the
full handlers (``fairseq_syntax_core.interrupts.handle_termination``, which replace this one).
``fairseq_syntax_preprocess`` and ``fairseq_syntax`` import this module first, so the handler is in
place from the first of our imports: it prints ``PROG: interrupted (SIGINT)`` and exits with
128 + the signal (nothing has been written yet). Installed only in the main process of one of our
console scripts (``fairseq-syntax-*``): a program that imports our packages as a library, and
fairseq's own commands (``fairseq-train --user-dir fairseq_syntax``), keep their own behaviour, as
does a signal the shell set to be ignored (``nohup``, ``cmd &``).
"""

import os
import signal
import sys

__all__ = ["MODULE_COMMANDS", "OUR_COMMANDS", "install_startup_handler", "program_name"]

#: the console scripts of this project (setup.py) all start so
OUR_COMMANDS = "fairseq-syntax-"

#: the modules with a command's entry point, run as ``python -m MODULE``: the command they are (setup.py's
#: console scripts; a test keeps the two alike)
MODULE_COMMANDS = {
    "fairseq_syntax_preprocess.cli": "fairseq-syntax-preprocess",
    "fairseq_syntax_preprocess.cluster": "fairseq-syntax-preprocess-cluster",
    "fairseq_syntax_preprocess.perturb": "fairseq-syntax-perturb",
    "fairseq_syntax_analysis.awsl": "fairseq-syntax-awsl",
    "fairseq_syntax_analysis.evaluate": "fairseq-syntax-evaluate",
    "fairseq_syntax_analysis.results": "fairseq-syntax-report",
    "fairseq_syntax_analysis.show": "fairseq-syntax-show",
}


def program_name(default: str = "") -> str:
    """The command's name as its user knows it, for ``PROG: error: ...``: the console script's (``argv[0]``),
    also when run as a module (``python -m fairseq_cli.generate`` is ``fairseq-generate``, not ``generate.py``)."""
    module = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
    if module is None and getattr(sys, "argv", None) and sys.argv[0] == "-m":  # runpy still imports its package
        given = list(getattr(sys, "orig_argv", []))
        module = given[given.index("-m") + 1] if "-m" in given[:-1] else None
    if module in MODULE_COMMANDS:
        return MODULE_COMMANDS[module]
    if isinstance(module, str) and module.startswith("fairseq_cli."):
        return "fairseq-" + module.rsplit(".", 1)[1].replace("_", "-")
    return os.path.basename(sys.argv[0]) if getattr(sys, "argv", None) and sys.argv[0] else default


def _prog() -> str:
    return program_name()


def _interrupted(signum, frame) -> None:
    try:
        sys.stderr.write(f"\n{_prog()}: interrupted ({signal.Signals(signum).name})\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # stderr closed or not set up
        pass
    os._exit(128 + signum)


def file_size_limit() -> "int | None":
    """The soft file-size limit in bytes (``ulimit -f``), or None when there is none."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def _import_error(kind, value, traceback) -> None:
    """A file-system error or too little memory while a command imports its libraries (sacreBLEU's portalocker
    asks for a temporary folder at import; torch maps hundreds of MB): one line, exit 1, as the command's own
    handler prints it later on."""
    text = " ".join(str(value).split())
    memory = issubclass(kind, MemoryError) or (issubclass(kind, (ImportError, OSError)) and (
        "failed to map segment" in text or "Cannot allocate memory" in text))
    if not (issubclass(kind, OSError) or memory) or os.environ.get("FAIRSEQ_SYNTAX_TRACEBACK") == "1":
        return sys.__excepthook__(kind, value, traceback)
    if memory:
        text = (f"too little memory to load its libraries ({text[:160] or kind.__name__}): a memory limit "
                "(ulimit -v) below what torch needs? raise it")
    elif "temporary directory" in text and file_size_limit() is not None:
        text += f": the file-size limit (ulimit -f: {file_size_limit()} bytes) lets no file be written; raise it"
    elif "temporary directory" in text:
        text += ": free space in one of them, or set TMPDIR to a folder with room"
    sys.stderr.write(f"{_prog()}: error: {text}\n")


def install_startup_handler() -> bool:
    """Install the start-up handler for SIGINT and SIGTERM when running as one of our commands (and one line
    for a file-system error while it imports); returns whether it did."""
    if not _prog().startswith(OUR_COMMANDS):
        return False
    try:
        os.getcwd()
    except FileNotFoundError:  # torch's MKL aborts with a message about its own library when it imports here
        sys.stderr.write(f"{_prog()}: error: the working folder no longer exists (removed while it was the current "
                         "folder): change to an existing folder\n")
        os._exit(1)
    multiprocessing = sys.modules.get("multiprocessing")  # a spawned worker gets its parent's argv
    if multiprocessing is not None and multiprocessing.parent_process() is not None:
        return False
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _import_error
    installed = False
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(signum, _interrupted)
                installed = True
        except ValueError:  # not the main thread
            return False
    return installed


def ensure_standard_output() -> None:
    """Refuse to start with standard output closed (``>&-``): Python drops every ``print`` then, so a command
    that writes its output there (translations, scores, tables) lost it all and exited 0."""
    if sys.stdout is None or sys.__stdout__ is None:
        from .errors import UsageError

        raise UsageError("standard output is closed (>&-): the command writes there; send it to a file, or to "
                         "/dev/null to discard it")


def ensure_open_files(minimum: int, who: str = "fairseq's data loading") -> None:
    """At least ``minimum`` files may be open at once: the soft limit is raised up to the hard one when it
    is lower (no one loses anything), else a one-line :class:`~.errors.UsageError`. Below it, fairseq's
    data loader workers fail to pass tensors (``Too many open files``) and retry forever, or hang."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or soft >= minimum:
        return
    if hard == unlimited or hard >= minimum:
        resource.setrlimit(resource.RLIMIT_NOFILE, (minimum, hard))
        return
    from .errors import UsageError

    raise UsageError(f"only {hard} files may be open at once (ulimit -n {hard}); {who} needs at least {minimum}: "
                     "raise the limit")
