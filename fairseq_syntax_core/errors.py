"""Errors that reach the user as one clear line: every one names a file (and a line where there is one).

The hierarchy is shared by the pipeline and the plugin (this module imports only
:mod:`.oneline`), so that every command, ours or fairseq's with ``--user-dir fairseq_syntax``, prints these as
``PROG: error: FILE:LINE: what was expected`` instead of a traceback
(:func:`fairseq_syntax_core.interrupts.install_error_hook`).
"""

from typing import Optional

from .oneline import one_line


class UserError(Exception):
    """An error the user can fix from its message alone; printed without a traceback."""


class UsageError(UserError):
    """Bad command-line arguments, found before any expensive work starts."""


class InputError(UserError, ValueError):
    """Bad input: names the file, the 1-based line and what was expected.

    The text is one line whatever the path or the message holds (:func:`.oneline.one_line`): a file
    name or a value read from a file with a line break or an escape sequence cannot forge lines.
    """

    def __init__(self, path: str, line: Optional[int], message: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(one_line(f"{where}: {message}"))
        self.path = path
        self.line = line
        self.message = message


class DataBinError(InputError):
    """A data-bin file that is missing, damaged, or belongs to another data-bin."""


class CheckpointError(InputError):
    """A checkpoint file that cannot be read as one written by fairseq-train."""


class StageError(UserError):
    """A stage that failed in a process of its own (a worker killed, a child's error)."""
