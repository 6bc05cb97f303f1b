"""One ``fairseq-train`` at a time in a ``--save-dir``.

fairseq takes no lock: a job submitted twice resumes the other's ``checkpoint_last.pt`` while it trains,
both write the same checkpoints, and the run left behind is neither (each carries the same run identifier,
so ``report record`` cannot tell). A single-process run holds an exclusive lock (``lockf``: its forked
data-loader workers do not inherit it, so a killed run frees it at once) on a file in its ``--save-dir`` for as
long as it lives; a second is refused. Runs of several ranks are not locked (their
processes start apart, on nodes whose shared file systems may not honour locks).
"""

import fcntl
import os
from typing import Any, Dict, Optional

from fairseq_syntax_core.oneline import one_line

#: the lock file, in --save-dir (no checkpoint pattern of fairseq's matches it)
LOCK_FILE = ".fairseq-syntax-train.lock"
_held: Dict[str, int] = {}  # real path of a --save-dir -> the open file this process locks it with


def save_dir_lock_error(cfg: Any) -> Optional[str]:
    """Lock ``--save-dir`` for this process (made if missing, as fairseq-train makes it), or why another
    ``fairseq-train`` holds it (None: locked, or not locked: several ranks, ``--no-save``)."""
    checkpoint = getattr(cfg, "checkpoint", None)
    world = getattr(getattr(cfg, "distributed_training", None), "distributed_world_size", 1)
    save_dir = getattr(checkpoint, "save_dir", None)
    if getattr(checkpoint, "no_save", False) or not isinstance(save_dir, str) or (isinstance(world, int) and world > 1):
        return None
    try:  # as fairseq-train makes it first thing (verify_checkpoint_directory): two fresh runs meet here too
        os.makedirs(save_dir, exist_ok=True)
    except OSError:
        return None  # fairseq says why when it makes it
    key = os.path.realpath(save_dir)
    if key in _held:  # this process holds it already (a second main() in one process)
        return None
    path = os.path.join(save_dir, LOCK_FILE)
    try:
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None  # a read-only folder: fairseq says so when it saves
    try:
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a POSIX lock: not inherited by forked workers
    except OSError:
        os.close(handle)
        return (f"--save-dir {one_line(save_dir)[:160]}: another fairseq-train is training into it now (it holds "
                f"{LOCK_FILE}): two runs would write the same checkpoints; wait for it, or give another --save-dir")
    _held[key] = handle
    return None
