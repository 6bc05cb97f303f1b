"""The one line for an :class:`OSError` (:func:`error_message`): its file, the system's message, and what to do."""

import errno
import os

from .errors import UserError
from .oneline import one_line

__all__ = ["error_message"]

#: what to do about the OSErrors whose message alone does not say it
_OS_HINTS = {
    errno.ENOSPC: "the disk is full: free space, or write elsewhere",
    errno.EDQUOT: "the disk quota is used up: free space, or write elsewhere",
    errno.EFBIG: "the file is larger than this file system (or ulimit -f) allows: write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
}


def error_message(error: BaseException) -> str:
    """The one line that tells the user about ``error`` (after ``PROG: error:``).

    An :class:`OSError` names its file (``FILE: No space left on device; ...``; two files for a
    rename); one that names none (a write to an open file, standard output) is its system message. Anything else
    is ``str(error)``.
    """
    if isinstance(error, OSError) and not isinstance(error, UserError) and error.strerror:
        files = [one_line(os.fsdecode(f) if isinstance(f, (str, bytes)) else str(f))
                 for f in (error.filename, error.filename2) if f is not None]
        message = f"{' -> '.join(files)}: {error.strerror}" if files else error.strerror
        hint = _OS_HINTS.get(error.errno)
        if error.errno in (errno.EEXIST, errno.ENOTDIR) and len(files) == 1:  # os.makedirs onto or under a file
            from .fileio import file_in_the_way  # (fileio imports interrupts, which imports this)

            blocking = file_in_the_way(files[0])  # fairseq-generate --results-path FILE
            hint = f"{blocking} is a file, not a folder" if blocking is not None else hint
        return f"{message}; {hint}" if hint else message
    return one_line(str(error)) or type(error).__name__  # every message one line, whatever values it holds

