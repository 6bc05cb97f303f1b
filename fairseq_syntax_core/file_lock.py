"""One process at a time on an output: an exclusive POSIX lock (``lockf``) on a lock file beside it.

``lockf`` locks are not inherited by forked children (data-loader workers), so a killed process frees its lock at
once. A lock file is never followed through a link, and a lock taken on a file that another process has since
removed (and another made in its place) is not a lock: it is checked after locking.
"""

import fcntl
import os
from typing import Optional


class LockFileError(OSError):
    """The lock file cannot be opened as one (a folder or a link in its place, or no permission)."""


def try_lock(path: str) -> Optional[int]:
    """An open descriptor holding the lock on ``path`` (made if missing), or None when another process holds it.
    Raises :class:`LockFileError` when ``path`` cannot be opened as a lock file."""
    while True:
        try:
            handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as error:
            why = "a symbolic link" if os.path.islink(path) else "a folder" if os.path.isdir(path) else \
                (error.strerror or str(error))
            raise LockFileError(error.errno, why, path) from None
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(handle)
            return None
        try:
            same = os.path.samestat(os.fstat(handle), os.stat(path, follow_symlinks=False))
        except OSError:
            same = False
        if same:
            return handle
        os.close(handle)  # removed by its last holder while this process opened it: lock the one there now


def release(path: str, handle: int) -> None:
    """Give the lock back, removing its file first, while still held (a process that opened the file meanwhile
    finds it gone when it checks, and locks the one there then)."""
    try:
        os.remove(path)
    except OSError:
        pass
    os.close(handle)
