"""What every analysis command shares: one-line errors, Ctrl-C, quiet logging, atomic PNG figures."""

import logging
import sys
from typing import Callable, Optional, Sequence

from fairseq_syntax_core.errors import UserError
from fairseq_syntax_preprocess.fileio import atomic_write_with

__all__ = ["run_command", "quiet_logging", "save_figure"]


def run_command(prog: str, main: Callable[[Optional[Sequence[str]]], int], argv: Optional[Sequence[str]]) -> int:
    """``main(argv)``; a :class:`UserError` is printed as ``PROG: error: ...`` (exit 1), Ctrl-C exits 130."""
    try:
        return main(argv)
    except UserError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; outputs are written whole or not at all", file=sys.stderr)
        return 130


def quiet_logging() -> None:
    """Warnings only: fairseq's wav2vec2_classification module sets the root logger to DEBUG when imported."""
    logging.getLogger().setLevel(logging.WARNING)
    for name in ("matplotlib", "sacrebleu"):
        logging.getLogger(name).setLevel(logging.WARNING)


def save_figure(fig, path: str) -> None:
    """Write a matplotlib figure to ``path`` as PNG, atomically, and close it."""
    import matplotlib.pyplot as plt

    try:
        atomic_write_with(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    finally:
        plt.close(fig)
