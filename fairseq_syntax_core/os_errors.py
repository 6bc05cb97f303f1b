"""The one line for an :class:`OSError` (:func:`error_message`): its file, the system's message, and what to do."""

import errno
import os
import select
import stat
import sys
from typing import Optional

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


def _failing_standard_output(error: OSError) -> Optional[str]:
    """``"standard output"`` when it is what ``error`` (which names no file) failed to write: a pipe whose reader
    is gone (``| head -1``), ``/dev/full``, or a file on a file system that is full; None otherwise."""
    try:
        fd = sys.__stdout__.fileno()
        mode, rdev = os.fstat(fd).st_mode, os.fstat(fd).st_rdev
        if error.errno == errno.EPIPE and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            failed = any(events & select.POLLERR for _, events in poller.poll(0))
        elif error.errno in (errno.ENOSPC, errno.EDQUOT):
            failed = (stat.S_ISCHR(mode) and rdev == os.makedev(1, 7)) or (  # /dev/full
                stat.S_ISREG(mode) and os.fstatvfs(fd).f_bavail == 0)
        else:
            failed = False
    except (OSError, ValueError, AttributeError):  # stdout closed, or no such calls here
        return None
    return "standard output" if failed else None


def error_message(error: BaseException) -> str:
    """The one line that tells the user about ``error`` (after ``PROG: error:``).

    An :class:`OSError` names its file (``FILE: No space left on device; ...``; two files for a
    rename); one that names none (a write to an open file, standard output) is its system message. Anything else
    is ``str(error)``.
    """
    if isinstance(error, OSError) and not isinstance(error, UserError) and error.strerror:
        files = [one_line(os.fsdecode(f) if isinstance(f, (str, bytes)) else str(f))
                 for f in (error.filename, error.filename2) if f is not None]
        stdout = None if files else _failing_standard_output(error)
        files = files or ([stdout] if stdout else [])
        message = f"{' -> '.join(files)}: {error.strerror}" if files else error.strerror
        hint = _OS_HINTS.get(error.errno, "the command reading the output stopped reading"
                             if stdout and error.errno == errno.EPIPE else None)
        if error.errno == errno.EFBIG:
            from .startup import file_size_limit

            limit = file_size_limit()
            hint = (f"the file-size limit (ulimit -f: {limit} bytes) stops the write: raise it, or write less"
                    if limit is not None else hint)
        if error.errno in (errno.EEXIST, errno.ENOTDIR) and len(files) == 1:  # os.makedirs onto or under a file
            from .fileio import file_in_the_way  # (fileio imports interrupts, which imports this)

            blocking = file_in_the_way(files[0])  # fairseq-generate --results-path FILE
            hint = f"{blocking} is a file, not a folder" if blocking is not None else hint
        return f"{message}; {hint}" if hint else message
    return one_line(str(error)) or type(error).__name__  # every message one line, whatever values it holds

