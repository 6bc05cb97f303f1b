"""What every analysis command shares: one-line errors, Ctrl-C and SIGTERM, quiet logging, atomic outputs."""

import logging
import signal
import sys
import threading
from typing import Callable, Optional, Sequence

from fairseq_syntax_core.errors import UserError
from fairseq_syntax_core.startup import ensure_open_files, ensure_standard_output
from fairseq_syntax_core.fileio import atomic_write_with, text_writer
from fairseq_syntax_core.interrupts import USER_ERRORS, handle_termination, print_error

__all__ = ["run_command", "quiet_logging", "save_figure", "figure_writer", "text_writer"]


def run_command(prog: str, main: Callable[[Optional[Sequence[str]]], int], argv: Optional[Sequence[str]]) -> int:
    """``main(argv)``; a :class:`UserError` or an :class:`OSError` is printed as ``PROG: error: ...`` (exit 1).

    Ctrl-C, SIGTERM and SIGHUP remove the temporary files of outputs not yet in place and exit
    with 128 + the signal (:func:`~fairseq_syntax_core.interrupts.handle_termination`);
    commands write their outputs together (``atomic_write_all``), so none is half-replaced. The
    handlers are installed in the main thread only, and the caller's are put back on return
    (an in-process caller such as pytest or a notebook keeps its own Ctrl-C).
    """
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.getsignal(s) for s in held} if threading.current_thread() is threading.main_thread() else {}
    if previous:
        handle_termination()
    try:
        ensure_open_files(64, prog)
        ensure_standard_output()
        return main(argv)
    except USER_ERRORS as error:  # OSError: disk full, permissions; it names the file
        return print_error(prog, error)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; outputs are written whole or not at all", file=sys.stderr)
        return 130
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def quiet_logging() -> None:
    """Warnings only: fairseq's wav2vec2_classification module sets the root logger to DEBUG when imported."""
    logging.getLogger().setLevel(logging.WARNING)
    for name in ("matplotlib", "sacrebleu"):
        logging.getLogger(name).setLevel(logging.WARNING)


def figure_writer(fig) -> Callable[[str], None]:
    """A writer of a matplotlib figure as PNG (for ``atomic_write_all``); the figure is closed after."""
    import matplotlib.pyplot as plt

    def write(tmp: str) -> None:
        try:
            fig.savefig(tmp, dpi=120, format="png")
        except (ValueError, RuntimeError) as error:  # matplotlib refuses to draw it (size, text, backend)
            last = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            raise UserError(f"matplotlib cannot draw the plot: {last}") from error
        finally:
            plt.close(fig)

    return write


def save_figure(fig, path: str) -> None:
    """Write a matplotlib figure to ``path`` as PNG, atomically, and close it."""
    atomic_write_with(path, figure_writer(fig))
