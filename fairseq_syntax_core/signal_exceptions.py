"""Signals as exceptions, for commands of fairseq's whose cleanup is an ``except`` of ours (fairseq-generate's
results file): :func:`signals_raised` turns SIGINT, SIGTERM and SIGHUP into :class:`Interrupted` within a block;
the error hook (:func:`fairseq_syntax_core.interrupts.install_error_hook`) prints it as one line."""

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator

from .startup import program_name

__all__ = ["Interrupted", "handle_late_signals", "signals_raised"]


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP raised as an exception (:func:`signals_raised`), so that the command unwinds
    through its cleanup; the error hook prints it as one line and exits with 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_raised() -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM/SIGHUP raise :class:`Interrupted` (for a command of fairseq's whose
    cleanup is a ``try``/``except`` of ours, e.g. fairseq-generate's results file). Ignored signals (nohup, a
    background job) stay ignored; outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise Interrupted(signum)

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) != signal.SIG_IGN:
            previous[signum] = signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def handle_late_signals() -> None:
    """At interpreter exit: a signal while Python's exit callbacks run (torch's finalizers) is one line and
    128 + the signal, not a ``KeyboardInterrupt`` traceback "ignored in atexit callback" and exit 0."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _late_signal)


def _late_signal(signum, frame) -> None:
    try:
        sys.stderr.write(f"\n{_prog()}: interrupted ({signal.Signals(signum).name}) while exiting, after its work "
                         "was done\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(128 + signum)


def _prog() -> str:
    return program_name("fairseq")
