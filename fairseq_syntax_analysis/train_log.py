"""The validation metrics fairseq-train logged, read back from its log for a run's result.

A checkpoint keeps only the best value of ``--best-checkpoint-metric``. What a reader of a
result also wants (the translation's own validation loss ``nll_loss``, beside ``loss``, which
adds the syntactic distance terms, and ``nll_loss_fed`` of a decoder that reads target
distances) is in the training log: fairseq writes one ``valid`` line per validation, in its
``simple`` format (``... | valid on 'valid' subset | loss 4.1 | nll_loss 3.2 | ... | num_updates 650``)
or ``json`` format (``{"epoch": 5, "valid_loss": "4.1", ...}``). :func:`valid_metrics` returns the
numbers of the validation at a given update (the last one logged there: a resumed run appends).
:func:`training_seconds` sums the time of every fairseq-train invocation the log holds (a resumed run's
parts), so that a result's wall time is that of the whole run.
"""

import math
import os
import re
from typing import Dict, List, Optional, Tuple

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.oneline import quoted
from fairseq_syntax_core.jsonfile import parse_json

__all__ = ["valid_metrics", "training_seconds", "logs_the_start", "logged_run"]

_SIMPLE = re.compile(r"(?:^|\| )valid on '(?P<subset>[^']*)' subset \|(?P<fields>.*)$")
#: fairseq's json progress bar: a subset's validation under its own logger name, its keys prefixed with it
_JSON = re.compile(r"\| (?P<subset>[^|\s]+) \| (?P<json>\{.*\})\s*$")
#: the fields kept in a result (all losses are per target token, in bits, as fairseq logs them)
KEPT = ("loss", "nll_loss", "nll_loss_fed", "nll_loss_gap", "ppl", "tgt_nsd_acc", "tgt_nsd_fed_acc", "nsd_acc",
        "num_updates", "epoch")


#: fairseq's log line time (``%(asctime)s | LEVEL | logger | message``), and the first line of an invocation
_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:,\d+)? \| ")
_START = re.compile(r"\| fairseq_cli\.train \| (?:\{'_name'|Namespace\()")
#: a line of an invocation's own training, after its settings line: progress (``train_inner``, ``train``, a valid
#: subset's logger: names without a dot), the trainer, checkpoints, the epoch iterator. Lines that fairseq's imports
#: log before the next invocation's settings line (``fairseq.tasks.text_to_speech``) are the next invocation's
_OWN = re.compile(r"^[^|]*\| [A-Z]+ \| (?:[A-Za-z0-9_]+|fairseq\.trainer|fairseq\.checkpoint_utils|fairseq_cli\.train"
                  r"|fairseq\.data\.iterators|fairseq\.tasks\.fairseq_task) \| ")
#: the settings line of another fairseq command (fairseq-validate, -generate) appended to the log
_OTHER_COMMAND = re.compile(r"\| fairseq_cli\.(?!train \|)[A-Za-z_]+ \| ")
#: fairseq-train starting from scratch: the invocations logged before it trained another run
_FRESH = re.compile(r"\| fairseq\.trainer \| No existing checkpoint found")

#: the run identifier fairseq-train logs once it has read its settings (``fairseq_syntax.compat``)
_RUN_ID = re.compile(r"\| fairseq_syntax\.compat \| run ([0-9a-f]{32}):")

#: a setting in the settings line (``'seed': 1`` of the dict, ``seed=1`` of a Namespace): its first occurrence
_SETTING = {key: re.compile(rf"(?:'{key}': |[(,] {key}=)(?:'((?:[^'\\]|\\.)*)'|(-?\d+))")
            for key in ("seed", "arch", "save_dir")}

#: the longest log line read whole (a longer one, or a file without newlines, is read in pieces)
MAX_LINE = 1 << 20


def _number(text: object) -> Optional[float]:
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        return None
    try:
        value = float(text)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _count(text: object) -> Optional[float]:
    """A non-negative integer count (epoch, updates) as fairseq logs it, else None."""
    value = _number(text)
    return value if value is not None and value >= 0 and value == int(value) and value < 2 ** 53 else None


def _fields(line: str, subset: str) -> Optional[Dict[str, float]]:
    found = _SIMPLE.search(line)
    if found:
        if found.group("subset") != subset:
            return None
        pairs = (part.strip().rsplit(" ", 1) for part in found.group("fields").split("|"))
        values = {pair[0]: _number(pair[1]) for pair in pairs if len(pair) == 2}
        epoch = re.search(r"(?:^|\| )epoch (\d{1,15}) \|", line)
        if epoch:
            values["epoch"] = float(epoch.group(1))
        return {k: v for k, v in values.items() if v is not None}
    record = _json_validation(line)
    if record is not None:
        if record[0] != subset:
            return None
        prefix = f"{subset}_"
        values = {k[len(prefix):]: _number(v) for k, v in record[1].items() if k.startswith(prefix)}
        values["epoch"] = _count(record[1].get("epoch"))
        return {k: v for k, v in values.items() if v is not None}
    return None


def _json_validation(line: str) -> Optional[Tuple[str, Dict]]:
    """``(subset, record)`` of a validation line of fairseq's json log format (``| test | {"test_loss": ...}``)."""
    found = _JSON.search(line)
    if not found or '_loss"' not in found.group("json"):
        return None
    try:
        record = parse_json(found.group("json"), "<log line>")
    except ValueError:  # not JSON, nested too deeply: not a line of fairseq's
        return None
    subset = found.group("subset")
    if not isinstance(record, dict) or f"{subset}_loss" not in record or subset in ("train", "train_inner"):
        return None
    return subset, record


def valid_metrics(path: str, updates: int, subset: str = "valid") -> Dict[str, float]:
    """The :data:`KEPT` metrics of the last validation of ``subset`` logged at ``updates`` in ``path``.

    ``subset`` may be fairseq-train's own ``--valid-subset`` list: its first subset is the one fairseq selects
    checkpoints on. Raises :class:`InputError` naming the file when it cannot be read or logs no such validation.
    """
    subset = subset.split(",")[0].strip()
    found: Optional[Dict[str, float]] = None
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise InputError(path, None, "is not a regular file (a FIFO, socket or device): expected fairseq-train's log")
    subsets = set()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in iter(lambda: handle.readline(MAX_LINE), ""):
                named = _SIMPLE.search(line.rstrip("\n"))
                named = named.group("subset") if named else (_json_validation(line.rstrip("\n")) or (None,))[0]
                if named is not None and len(subsets) < 10:
                    subsets.add(named)
                values = _fields(line.rstrip("\n"), subset)
                if values is not None and "num_updates" in values and _count(values["num_updates"]) == updates:
                    found = values
    except OSError as error:
        raise InputError(path, None, f"cannot be read as a fairseq-train log ({error.strerror or error})") from None
    if found is None:
        others = f"; it validates on {', '.join(quoted(s, 40) for s in sorted(subsets))} (--valid-subset)" \
            if subsets - {subset} else ""
        raise InputError(path, None, f"logs no validation on {quoted(subset, 40)} at update {updates} (fairseq-train's "
                         f"'valid' lines, --log-format simple or json){others}: is it this run's log?")
    kept = {k: v for k, v in found.items() if k in KEPT}
    for key in ("num_updates", "epoch"):
        if key in kept:
            count = _count(kept[key])
            if count is None:
                del kept[key]
            else:
                kept[key] = int(count)
    return kept


def training_seconds(path: str) -> Optional[float]:
    """Seconds of fairseq-train in ``path``: per invocation, the time from the settings line it starts with over
    its lines of training (:data:`_OWN`; a clock stepped back counts nothing, not the whole invocation as 0),
    summed over the invocations of the run the log ends with: those that log its identifier (:data:`_RUN_ID`),
    or in logs without identifiers, those since the last that found no checkpoint to resume (a run started again
    from scratch). None when no invocation is logged. The time between invocations (the run stopped: also the
    lines the next one logs before its settings, and what another fairseq command appended: ``fairseq-validate``
    logs under ``valid`` too) does not count. Time stamps are the log's local clock: a daylight-saving change
    during an invocation shifts it by the hour."""
    import datetime

    runs: List[list] = []  # per invocation: [run identifier or None, seconds, started from scratch]
    last = None  # the time of the current invocation's latest line of its own (None: between invocations)
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in iter(lambda: handle.readline(MAX_LINE), ""):
                stamp = _STAMP.match(line)
                if stamp is None:
                    continue
                try:
                    when = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")
                except ValueError:
                    continue
                if _START.search(line):
                    runs.append([None, 0.0, False])
                    last = when
                elif _OTHER_COMMAND.search(line):  # another fairseq command's lines: the invocation has ended
                    last = None
                elif last is not None and _FRESH.search(line):
                    runs[-1][2] = True
                elif last is not None and _RUN_ID.search(line) and runs[-1][0] is None:
                    runs[-1][0] = _RUN_ID.search(line).group(1)
                if last is not None and _OWN.match(line):
                    runs[-1][1] += max(0.0, (when - last).total_seconds())
                    last = when
    except OSError as error:
        raise InputError(path, None, f"cannot be read as a fairseq-train log ({error.strerror or error})") from None
    if not runs:
        return None
    if runs[-1][0] is not None:  # the invocations of the log's last run, wherever they are among other runs'
        return sum(seconds for run_id, seconds, _ in runs if run_id == runs[-1][0])
    started = max((k for k, run in enumerate(runs) if run[2]), default=0)
    return sum(seconds for _, seconds, _ in runs[started:])


def logs_the_start(path: str) -> bool:
    """Whether ``path`` logs the invocation that started its run (fairseq-train found no checkpoint to resume): a log
    of the resumed part only would give part of the run's training time."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return any(_FRESH.search(line) for line in iter(lambda: handle.readline(MAX_LINE), ""))
    except OSError as error:
        raise InputError(path, None, f"cannot be read as a fairseq-train log ({error.strerror or error})") from None


def logged_run(path: str) -> Dict[str, object]:
    """The architecture, seed and save folder in the settings line of the last fairseq-train invocation ``path``
    logs (the run a resumed log ends with), as :func:`fairseq_syntax_core.decoding_record.run_identity` reads them from
    a checkpoint, and the identifier of its run (``run_id``) when it logs one; empty when no settings line is logged."""
    found: Dict[str, object] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in iter(lambda: handle.readline(MAX_LINE), ""):
                run = _RUN_ID.search(line) if found else None
                if run is not None:
                    found["run_id"] = run.group(1)
                if not _START.search(line):
                    continue
                found = {}
                for key, pattern in _SETTING.items():
                    match = pattern.search(line)
                    if match is None:
                        continue
                    text, number = match.groups()
                    if number is not None:
                        found[key] = int(number)
                    elif text is not None:
                        found[key] = os.path.normpath(text) if key == "save_dir" and text else text
    except OSError as error:
        raise InputError(path, None, f"cannot be read as a fairseq-train log ({error.strerror or error})") from None
    return found
