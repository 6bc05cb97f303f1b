"""What a fairseq-generate log says it decoded: the line ``fairseq-syntax-decoded<TAB>{JSON}`` that the plugin
writes after fairseq's own output (``fairseq_syntax.results_file``).

The JSON holds, for each checkpoint read (``--path a.pt:b.pt``), what its settings record of its run
(:func:`run_identity`: architecture, seed, save folder, data-bin, update cap) and its update count, and, of the
data-bin decoded, its folder and the parse perturbation its ``syntax.json`` records (``fairseq-syntax-perturb``;
None when clean). ``fairseq-syntax-evaluate`` copies the record into its JSON and refuses a ``--data-bin`` of
another perturbation; ``fairseq-syntax-report record`` refuses translations another run's checkpoint made. Logs
of earlier releases, or of fairseq without the plugin, have no such line: nothing is compared.

The record also holds a SHA-256 of the log's sentence lines (``S-``, ``T-``, ``H-``, ``D-``, ``P-``, in the order
written: :class:`LinesDigest`), so that a record cannot vouch for lines it was not written with (a log cut, spliced
from two logs, or given another log's record).
"""

import hashlib
import json
import os
import re
from typing import Any, Dict, List, Optional

#: the first field of the line
MARK = "fairseq-syntax-decoded"

#: what a checkpoint records of its run, and which of it a resumed run keeps (a later cap may be raised)
IDENTITY_KEYS = {"arch": ("model",), "seed": ("common",), "save_dir": ("checkpoint",), "data": ("task",),
                 "max_update": ("optimization",)}

#: where a checkpoint's model settings (and task state) hold the provenance of its training data, a JSON string
#: (:mod:`fairseq_syntax.data.provenance`)
PROVENANCE_ARG = "syntax_provenance"
#: what of that provenance says which data a run trained on (the same for every seed of one system)
TRAINING_DATA_KEYS = ("dictionaries_sha256", "bpe_codes_sha256", "perturbation")

#: the key of the digest of the sentence lines, and the lines it covers
LINES_KEY = "lines_sha256"
SENTENCE_LINE = re.compile(r"^[SHDTP]-\d+\t")


class LinesDigest:
    """SHA-256 of a log's sentence lines (:data:`SENTENCE_LINE`), each without its line end, in order."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def add(self, line: str) -> None:
        """Count ``line`` (one line, its end ``\\n`` or ``\\r\\n`` ignored) if it is a sentence line."""
        line = line.rstrip("\r\n").lstrip("\ufeff")  # as the log's reader takes it (a byte-order mark dropped)
        if SENTENCE_LINE.match(line):
            self._hash.update(line.encode("utf-8", errors="surrogateescape") + b"\n")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


#: the identities of the checkpoints this process read (fairseq's checkpoint reads note them)
read_identities: List[Dict[str, object]] = []


def _plain(value: Any) -> Any:
    """An OmegaConf section as a dict (fairseq's loader returns them), anything else as it is."""
    if value is not None and type(value).__name__ == "DictConfig":
        from omegaconf import OmegaConf

        try:
            return OmegaConf.to_container(value, resolve=False)
        except Exception:  # noqa: BLE001 - an unreadable section records nothing
            return None
    return value


def run_identity(state: Dict) -> Dict[str, object]:
    """What a checkpoint's settings (``cfg``, or 0.9-style ``args``) record of its run: architecture, seed, save
    folder, data-bin and update cap, where they do (paths normalized as written, not resolved)."""
    cfg = _plain(state.get("cfg"))
    cfg = cfg if isinstance(cfg, dict) else {}
    args = state.get("args")
    found: Dict[str, object] = {}
    for key, sections in IDENTITY_KEYS.items():
        for source in [cfg.get(s) for s in sections] + [cfg.get("model"), args]:
            settings = vars(source) if hasattr(source, "__dict__") and not isinstance(source, dict) else source
            value = settings.get(key, settings.get("_name") if key == "arch" else None) \
                if isinstance(settings, dict) else None
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                found[key] = os.path.normpath(value) if key in ("save_dir", "data") and value else value
                break
    return found


def training_data(state: Dict) -> Optional[Dict[str, object]]:
    """The data a checkpoint's run trained on, as its stored provenance records it: the dictionaries' and BPE
    codes' digests and the parse perturbation of the data-bin (None: a checkpoint recording none)."""
    cfg = _plain(state.get("cfg"))
    model = (cfg.get("model") if isinstance(cfg, dict) else None) or state.get("args")
    task_state = state.get("task_state")
    for stored in (model.get(PROVENANCE_ARG) if isinstance(model, dict) else getattr(model, PROVENANCE_ARG, None),
                   task_state.get(PROVENANCE_ARG) if isinstance(task_state, dict) else None):
        try:
            data = json.loads(stored) if isinstance(stored, str) else None
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            return {key: data.get(key) for key in TRAINING_DATA_KEYS}
    return None


#: the task-state key of the update counts at which a run's count was restarted (``--reset-optimizer`` on resume)
RESTARTS_KEY = "update_restarts"


#: the task-state key of the update counts at which a resume started the epochs again (``--reset-dataloader``)
EPOCH_RESTARTS_KEY = "epoch_restarts"
#: the task-state key of a run's identifier: drawn when a run starts, kept by every resume of it
RUN_ID_KEY = "run_id"
#: the task-state key of the update counts at which a resume forgot the best validation value (--reset-meters)
METER_RESETS_KEY = "meter_resets"
#: the task-state key of the weights a run started from (--finetune-from-model on its first launch)
FINETUNED_KEY = "finetuned_from"
#: the task-state key of fairseq's count of validations without improvement (--patience) when it saved
STALLED_KEY = "validations_without_improvement"
#: the task-state key of the checkpoint a run was resumed from that is not its own checkpoint_last.pt
#: (--restore-file of another folder's or an earlier checkpoint, --continue-once)
RESTORED_KEY = "restored_from"
#: the task-state key of the seeds a run trained under: the one it started with, then any a resume changed to
SEEDS_KEY = "seeds"


def _task_state(state: Dict) -> Dict:
    return state.get("task_state") if isinstance(state.get("task_state"), dict) else {}


def _counts(state: Dict, key: str) -> List[int]:
    counts = _task_state(state).get(key)
    if not isinstance(counts, list):
        return []
    return [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]


def update_restarts(state: Dict) -> List[int]:
    """The update counts at which the run of a checkpoint ``state`` restarted its count (none recorded: [])."""
    return _counts(state, RESTARTS_KEY)


def carried_problem(state: Dict) -> Optional[str]:
    """What of a checkpoint's carried run record (its task state's entries above) is not what fairseq-train
    writes, or None: an edited entry would otherwise be dropped or misread on resume, and the run lose its identity."""
    task_state = _task_state(state)
    for key in (RESTARTS_KEY, EPOCH_RESTARTS_KEY, METER_RESETS_KEY, SEEDS_KEY):
        value = task_state.get(key)
        if value is not None and not (isinstance(value, list) and all(type(c) is int and c >= 0 for c in value)):
            return f"{key} is not a list of update counts"
    if RUN_ID_KEY in task_state and stored_run_id(state) is None:
        return f"{RUN_ID_KEY} is not 32 lower-case hexadecimal digits"
    for key in (FINETUNED_KEY, RESTORED_KEY):
        if task_state.get(key) is not None and not isinstance(task_state[key], str):
            return f"{key} is not a path"
    stalled = task_state.get(STALLED_KEY)
    if stalled is not None and not (type(stalled) is int and stalled >= 0):
        return f"{STALLED_KEY} is not a count"
    return None


def meter_resets(state: Dict) -> List[int]:
    """The update counts at which the run of a checkpoint ``state`` forgot its best validation value ([] if none)."""
    return _counts(state, METER_RESETS_KEY)


def carried(state: Dict, key: str) -> Any:
    """A task-state entry of checkpoint ``state`` (None when absent)."""
    return _task_state(state).get(key)


def epoch_restarts(state: Dict) -> List[int]:
    """The update counts at which the run of a checkpoint ``state`` started its epochs again (none recorded: [])."""
    return _counts(state, EPOCH_RESTARTS_KEY)


def stored_run_id(state: Dict) -> Optional[str]:
    """The identifier of the run that saved checkpoint ``state``; None for checkpoints of runs started before runs
    carried one (or edited into something else)."""
    value = _task_state(state).get(RUN_ID_KEY)
    return value if isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value) \
        else None


def note_read(path: Any, state: Any) -> None:
    """Note the run identity, update count and training data of the checkpoint at ``path`` fairseq has just read."""
    if not isinstance(state, dict):
        return
    identity = run_identity(state)
    identity["checkpoint"] = os.path.normpath(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else None
    identity["training_data"] = training_data(state)
    if stored_run_id(state) is not None:  # which run saved it (report record compares it)
        identity["run_id"] = stored_run_id(state)
    history = state.get("optimizer_history")
    updates = history[-1].get("num_updates") if isinstance(history, list) and history and \
        isinstance(history[-1], dict) else None
    if isinstance(updates, int) and not isinstance(updates, bool):
        identity["updates"] = updates
    read_identities.append(identity)


#: the key of the decoding settings that copy from the reference (``--score-reference``, ``--prefix-size N``): the
#: hypotheses of such a log are not translations
FROM_REFERENCE_KEY = "from_reference"


#: the search settings a decoding records (fairseq's generation options), with the split decoded (gen_subset)
SEARCH_KEYS = ("beam", "nbest", "sampling", "lenpen", "unkpen", "max_len_a", "max_len_b", "min_len", "temperature")
SEARCH_KEY = "search"


def record_line(data_bin: Optional[str], perturbation: Any, paths: Optional[List[str]] = None,
                from_reference: Optional[List[str]] = None, search: Optional[Dict[str, Any]] = None,
                lines_sha256: Optional[str] = None) -> str:
    """The line of one decoding: the checkpoints read since :func:`start` (those at ``paths`` when given: the
    model's, not a language model's), the data-bin and its perturbation, and the settings that copy from the
    reference (``from_reference``), if any."""
    wanted = {os.path.normpath(p) for p in paths} if paths else None
    checkpoints = [c for c in read_identities if wanted is None or c.get("checkpoint") in wanted]
    record = {"checkpoints": checkpoints, "data_bin": os.path.normpath(data_bin) if data_bin else None,
              "perturbation": perturbation}
    if from_reference:
        record[FROM_REFERENCE_KEY] = list(from_reference)
    if search:
        record[SEARCH_KEY] = dict(search)
    if lines_sha256:
        record[LINES_KEY] = lines_sha256
    return f"{MARK}\t{json.dumps(record, sort_keys=True)}"


def start() -> None:
    """Forget the checkpoints read before this decoding."""
    read_identities.clear()


def parse_line(line: str) -> Optional[Dict]:
    """The record of a ``fairseq-syntax-decoded`` line, or None when the line is not one or not well formed."""
    mark, sep, text = line.rstrip("\n").partition("\t")
    if mark != MARK or not sep:
        return None
    try:
        record = json.loads(text, parse_constant=_not_json)  # NaN, Infinity: Python's, not JSON
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("checkpoints"), list) \
            or not all(isinstance(c, dict) and _counts_are_counts(c) for c in record["checkpoints"]):
        return None
    return record


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def _counts_are_counts(checkpoint: Dict) -> bool:
    """The seed, update count and cap a checkpoint record holds are whole numbers of a real run, where present."""
    return all(checkpoint.get(key) is None or (type(checkpoint[key]) is int and 0 <= checkpoint[key] < 2**63)
               for key in ("seed", "updates", "max_update")) and \
        (checkpoint.get("run_id") is None or isinstance(checkpoint["run_id"], str)) and \
        (checkpoint.get("training_data") is None or isinstance(checkpoint["training_data"], dict))
