"""One ``fairseq-train`` at a time in a ``--save-dir``.

fairseq takes no lock: a job submitted twice resumes the other's ``checkpoint_last.pt`` while it trains,
both write the same checkpoints, and the run left behind is neither (each carries the same run identifier,
so ``report record`` cannot tell). A single-process run holds an exclusive lock on a file in its
``--save-dir`` from the moment it would load its checkpoint (fairseq-train has made the folder by then, so a run
refused earlier leaves no folder) for as long as it lives; a second is refused before it reads anything.

The lock is POSIX (:mod:`fairseq_syntax_core.file_lock`): forked data-loader workers do not inherit it, so a
killed run frees it at once.
Runs of several ranks are not locked: their processes start apart, on nodes whose shared file systems may not
honour locks. The lock is held until the process ends and its file stays in the folder (no hook of the plugin
runs at the end of fairseq-train to remove it); the file matches no checkpoint pattern of fairseq's.
"""

import os
from typing import Dict, Optional

from fairseq_syntax_core.file_lock import LockFileError, try_lock
from fairseq_syntax_core.oneline import one_line

#: the lock file, in --save-dir
LOCK_FILE = ".fairseq-syntax-train.lock"
_held: Dict[str, int] = {}  # real path of a --save-dir -> the open file this process locks it with


def lock_save_dir(save_dir: object, world_size: object = 1, no_save: bool = False) -> Optional[str]:
    """Lock ``save_dir`` for this process, or say why not: another ``fairseq-train`` holds it, or its lock file
    cannot be opened as one (a folder or a link in its place: a run that went on unlocked could share the folder).
    None: locked, or not locked (several ranks, ``--no-save``, a folder that is not there)."""
    if no_save or not isinstance(save_dir, str) or not os.path.isdir(save_dir):
        return None
    if isinstance(world_size, int) and world_size > 1:
        return None
    key = os.path.realpath(save_dir)
    if key in _held:  # this process holds it already (a second main() in one process)
        return None
    try:
        handle = try_lock(os.path.join(save_dir, LOCK_FILE))
    except LockFileError as error:
        return (f"--save-dir {one_line(save_dir)[:160]}: its lock file {LOCK_FILE} cannot be opened ({error.strerror}): "
                "without it another fairseq-train could train into the same folder; remove what is in its place, "
                "or give another --save-dir")
    if handle is None:
        return (f"--save-dir {one_line(save_dir)[:160]}: another fairseq-train is training into it now (it holds "
                f"{LOCK_FILE}): two runs would write the same checkpoints; wait for it, or give another --save-dir")
    _held[key] = handle
    return None
