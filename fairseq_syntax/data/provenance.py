"""Which data a model was trained on: recorded in its checkpoint, compared whenever it is loaded.

A model trained on one data-bin learns that data-bin's ids (its dictionaries: text, labels,
POS), its BPE segmentation, its parser and its projection rule. At training, the task records
them in the model's args (``syntax_provenance``, saved in the checkpoint like fairseq's other
derived settings; for every model, fairseq's own included, also in the checkpoint's task state):
the SHA-256 of each dictionary's ids and of the BPE codes, the parser's name and version (and
spaCy's), the projection rule and the source of the phrase structure.

``dictionaries_sha256`` ({file name: hex digest}) hashes what defines a dictionary's ids, not its
bytes: the symbols in id order as fairseq's ``Dictionary.load`` reads them (its special symbols,
then each line's ``SYMBOL`` of ``SYMBOL COUNT [#fairseq:overwrite]``; an overwrite line of a
symbol already there adds no id), joined by newlines, UTF-8 (:func:`dictionary_ids_sha256`).
Counts, spacing and line ends (CRLF) change no id and no hash; another symbol or order does.
``bpe_codes_sha256`` hashes the codes file's bytes: every merge and its rank is what segments.

* **Identity** (:func:`differing_files`): every load of a checkpoint onto a data-bin
  (fairseq-generate, -interactive, -validate, the hub, and fairseq-train restoring weights:
  :func:`restored_checkpoint`) compares the dictionaries and BPE codes by hash; the task refuses
  a data-bin whose files differ, naming them (``--allow-other-data-bin``: a warning). The codes
  file that fairseq-interactive and the hub apply to raw text (``--bpe-codes``) is compared too
  (:func:`applied_codes_difference`): it need not be the data-bin's.
  Checkpoints of earlier releases record no such hashes (:func:`unchecked`): a warning says so.
* **Parses** (:func:`differences`): when the model parses raw text (``fairseq-interactive``, the
  hub), the parse comes from the data-bin given at decoding and the parser installed now: the
  task warns with both values of each field that differs. ``--syntax-parser`` chooses another
  parser on purpose: that field is then reported as an override, not as a mismatch.
"""

import hashlib
import json
import os
import re
from typing import Dict, List, Optional

from fairseq_syntax_core.databin import CODES_FILE
from fairseq_syntax_core.decoding_record import PROVENANCE_ARG
from fairseq_syntax_core.oneline import one_line, shortened
from fairseq_syntax_core.names import FILE_NAME, name_problem
from fairseq_syntax_core.shards import id_files
from fairseq_syntax_core.split_digests import records_digests

__all__ = ["ARG", "of_data_bin", "of_checkpoint", "differences", "differing_files", "unchecked",
           "restored_checkpoint", "encode", "decode", "dictionary_ids_sha256", "applied_codes_difference"]

#: the name under which a checkpoint's model args (and task state) hold the provenance (a JSON string)
ARG = PROVENANCE_ARG
#: the data-bin's parse perturbation record (fairseq-syntax-perturb; None when clean): which parses it trained on
PERTURBATION = "perturbation"
#: ``bpe_codes_sha256`` of a data-bin of whole words (no BPE)
NO_BPE = "none"
#: {file name: SHA-256 of its ids} of the data-bin's dictionaries (text, and each symbol stream's, both
#: sides): :func:`dictionary_ids_sha256`
DICTIONARIES = "dictionaries_sha256"
#: [source language, target language] the model was trained to translate (not the data-bin's: ``-s fr -t en`` on
#: an en-fr data-bin trains fr -> en); checkpoints of earlier releases have none
DIRECTION = "direction"
#: whether the data-bin trained on recorded its splits' file digests (``splits.SPLIT.files_sha256``): a checkpoint
#: of such a data-bin decoding on one that records none (its record removed by hand) is refused
DIGESTS = "records_split_digests"
#: set by :func:`decode` to the name of a field whose value was not a hash (not compared, reported unchecked)
MALFORMED = "_malformed"
#: the key :func:`decode` sets for a stored record that is not one (not JSON of an object: edited?)
DAMAGED = "_damaged"
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: the fields compared when raw text is parsed (:func:`differences`)
FIELDS = ("parser", "parser_version", "spacy_version", "projection", "bpe_codes_sha256", "phrase_structure",
          "pos_column")
#: how many hex digits of a hash messages show
SHORT = 12


def _sha256(path: str) -> Optional[str]:
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def of_data_bin(data_path: str, metadata: Dict) -> Dict[str, Optional[str]]:
    """The provenance fields of a data-bin, from its ``syntax.json`` and BPE codes file."""
    parser = metadata.get("parser") or {}
    bpe = metadata.get("bpe") or {}
    # no BPE is a segmentation of its own ("none", compared like a hash); a codes file that is not
    # there is unknown (None, not compared)
    codes = NO_BPE
    if bpe.get("name", "none") != "none":
        codes = _sha256(os.path.join(data_path, bpe.get("codes", "bpe.codes")))
    # a spaCy pipeline has a name; an external parse records only its format ({"parser": "conllu"})
    name = parser.get("name") or (f"external {parser['parser']} parse" if parser.get("parser") else None)
    return {
        "parser": name,
        "parser_version": parser.get("pipeline_version"),
        "spacy_version": parser.get("spacy_version"),
        "projection": (metadata.get("projection") or {}).get("rule"),
        "bpe_codes_sha256": codes,
        # where the phrase structure came from (imported brackets or the dependency conversion)
        "phrase_structure": (metadata.get("phrase_structure") or {}).get("source"),
        # the CoNLL-U column raw text's POS tags are taken from (a tagset the POS dictionary's ids stand for)
        "pos_column": metadata.get("pos_column", "upos"),
        DICTIONARIES: dictionary_hashes(data_path, metadata),
        PERTURBATION: metadata.get(PERTURBATION) if isinstance(metadata.get(PERTURBATION), dict) else None,
        DIGESTS: records_digests(metadata),
    }


def dictionary_ids_sha256(path: str) -> Optional[str]:
    """SHA-256 of the symbols of the fairseq dictionary at ``path`` in id order (None: no such file).

    Read by fairseq's own ``Dictionary.load``, so that the hash changes exactly when an id would
    stand for another symbol (the counts, the spacing and the line ends do not matter).
    """
    if not os.path.isfile(path):
        return None
    from fairseq.data import Dictionary

    return hashlib.sha256("\n".join(Dictionary.load(path).symbols).encode("utf-8")).hexdigest()


def dictionary_hashes(data_path: str, metadata: Dict) -> Dict[str, str]:
    """{name: SHA-256 of its ids} of the dictionaries the data-bin holds (``dict.SRC.txt``, ``dict.TGT.txt``,
    and ``dict.L.{deplabel,pos,...}.txt`` of every parsed side): :func:`dictionary_ids_sha256`."""
    hashes = {}
    for name in id_files(metadata):
        digest = None if name == CODES_FILE else dictionary_ids_sha256(os.path.join(data_path, name))
        if digest is not None:
            hashes[name] = digest
    return hashes


def encode(provenance: Dict[str, Optional[str]]) -> str:
    return json.dumps(provenance, sort_keys=True)


def decode(value) -> Optional[Dict[str, Optional[str]]]:
    """The provenance stored in a checkpoint's args (None for checkpoints made before it existed;
    without ``dictionaries_sha256`` for those made before dictionaries were hashed)."""
    if not value:
        return None
    try:
        data = json.loads(value) if isinstance(value, str) else dict(value)
    except (TypeError, ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):  # a damaged or forged record ("{bad", "[1]"): refused when nothing else is kept
        return {DAMAGED: True}
    hashes = data.get(DICTIONARIES)
    decoded = {k: data.get(k) for k in FIELDS}
    codes = decoded.get("bpe_codes_sha256")
    if codes is not None and not (codes == NO_BPE or (isinstance(codes, str) and _HEX64.fullmatch(codes))):
        decoded["bpe_codes_sha256"] = None  # malformed: not compared (unchecked() says so)
        decoded[MALFORMED] = "bpe_codes_sha256"
    if isinstance(hashes, dict):
        if not all(isinstance(k, str) and name_problem(FILE_NAME, k) is None and isinstance(v, str)
                   and _HEX64.fullmatch(v) for k, v in hashes.items()):
            return {DAMAGED: True}  # names read from a checkpoint: file names of a data-bin, or an edited record
        decoded[DICTIONARIES] = dict(hashes)
    if isinstance(data.get(PERTURBATION), dict):
        decoded[PERTURBATION] = data[PERTURBATION]
    if isinstance(data.get(DIGESTS), bool):
        decoded[DIGESTS] = data[DIGESTS]
    direction = data.get(DIRECTION)
    if isinstance(direction, list) and len(direction) == 2 and all(isinstance(x, str) for x in direction):
        decoded[DIRECTION] = list(direction)
    return decoded


def differences(trained: Dict[str, Optional[str]], now: Dict[str, Optional[str]]) -> List[str]:
    """``"FIELD: trained on A, now B"`` for every field that differs (unknown values are not compared)."""
    out = []
    for key in FIELDS:
        a, b = trained.get(key), now.get(key)
        if a is not None and b is not None and a != b:  # values read from a checkpoint: shown escaped, shortened
            out.append(f"{key}: trained with {_shown(a)}, now {_shown(b)}")
    return out


def _shown(value: object, limit: int = 120) -> str:
    """A value read from a checkpoint or data-bin as a message shows it: one line, escaped, shortened."""
    return shortened(one_line(str(value)), limit)


def _short(digest: str) -> str:
    return "no BPE" if digest == NO_BPE else _shown(str(digest)[:SHORT])


def differing_files(trained: Dict, now: Dict) -> List[str]:
    """``"DICT (symbols by id: sha256 A at training, B now)"`` for each dictionary whose ids differ, and
    ``"bpe.codes (sha256 A at training, B now)"`` when the codes differ.

    Only files both record are compared: a dictionary the data-bin given now lacks (a target
    side that was not parsed) is not needed to decode.
    """
    out = []
    hashes_now = now.get(DICTIONARIES) or {}
    for name, digest in sorted((trained.get(DICTIONARIES) or {}).items()):
        if hashes_now.get(name) not in (None, digest):
            out.append(f"{_shown(name)} (symbols by id: sha256 {_short(digest)} at training, "
                       f"{_short(hashes_now[name])} now)")
    a, b = trained.get("bpe_codes_sha256"), now.get("bpe_codes_sha256")
    if a is not None and b is not None and a != b:
        out.append(f"{CODES_FILE} (sha256 {_short(a)} at training, {_short(b)} now)")
    return out


def applied_codes_difference(trained: Optional[Dict], codes_path: str) -> Optional[str]:
    """``"sha256 A at training, B now"`` when the BPE codes file applied to raw text is not the one
    ``trained`` records (a model of whole words: A is ``no BPE``); None when it is, or nothing is recorded."""
    recorded = (trained or {}).get("bpe_codes_sha256")
    applied = _sha256(codes_path)
    if recorded is None or applied is None or applied == recorded:
        return None
    if recorded == NO_BPE:
        return f"trained on whole words without BPE, sha256 {_short(applied)} now"
    return f"sha256 {_short(recorded)} at training, {_short(applied)} now"


def unchecked(trained: Optional[Dict], now: Optional[Dict] = None) -> Optional[str]:
    """What a checkpoint's provenance lacks to compare its data-bin's files (None: nothing): no record, no
    dictionary hashes (or an empty or malformed table), or no hash of a text dictionary ``now`` holds."""
    if not trained:
        return "records no hashes of its data-bin's dictionaries and BPE codes"
    if trained.get(MALFORMED):
        return f"records a {trained[MALFORMED]} that is not a SHA-256"
    hashes = trained.get(DICTIONARIES)
    if not isinstance(hashes, dict) or not hashes or not all(
            isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) for v in hashes.values()):
        return "records no hashes of its data-bin's dictionaries"
    langs = trained.get(DIRECTION)  # a language it was not trained on is the direction check's (not an old release)
    for name in sorted((now or {}).get(DICTIONARIES) or {}):
        if re.fullmatch(r"dict\.[^.]+\.txt", name) and name not in hashes \
                and not (isinstance(langs, list) and name[len("dict."):-len(".txt")] not in langs):
            return f"records no hash of {_shown(name)}"
    return None


def of_checkpoint(path: str) -> Optional[Dict]:
    """The provenance a checkpoint file records ({} if none), or None when it cannot be read here
    (fairseq's own read then reports the file). Read memory-mapped: the weights are not loaded."""
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint
    from fairseq_syntax_core.errors import CheckpointError

    try:
        state = load_fairseq_checkpoint(path, mmap=True)
    except CheckpointError:
        return None
    cfg = state.get("cfg")
    model = (cfg.get("model") if isinstance(cfg, dict) else None) or state.get("args")
    stored = model.get(ARG) if isinstance(model, dict) else getattr(model, ARG, None)
    return kept(decode(stored), decode((state.get("task_state") or {}).get(ARG))) or {}


def kept(*records: Optional[Dict]) -> Optional[Dict]:
    """The first of a checkpoint's decoded copies of its record (its args', its task state's) that is whole; a
    damaged one only when no copy is whole; None when it keeps none."""
    present = [r for r in records if r]
    whole = [r for r in present if not r.get(DAMAGED)]
    compared = (DICTIONARIES, "bpe_codes_sha256")
    if any(a.get(k) is not None and b.get(k) is not None and a.get(k) != b.get(k)
           for a in whole for b in whole for k in compared):
        return {DAMAGED: True}  # both copies are written from one record: one was edited
    return next(iter(whole), present[0] if present else None)


def restored_checkpoint(model_cfg) -> Optional[str]:
    """The checkpoint whose weights fairseq-train will load, if that file exists (else None).

    fairseq's ``checkpoint_utils.load_checkpoint`` (0.12): ``--restore-file`` (default
    ``SAVE_DIR/checkpoint_last.pt``; when that is missing, ``--continue-once`` or
    ``--finetune-from-model``), with ``--checkpoint-suffix``. ``model_cfg`` is the ``cfg.model``
    the task's ``build_model`` gets: a legacy model's holds every argument, a dataclass model's
    is a node of the whole configuration.
    """
    settings = model_cfg
    if not hasattr(settings, "restore_file"):
        parent = getattr(model_cfg, "_get_parent", lambda: None)()
        settings = getattr(parent, "checkpoint", None) if parent is not None else None
        if settings is None:
            return None
    restore = getattr(settings, "restore_file", None) or "checkpoint_last.pt"
    suffix = getattr(settings, "checkpoint_suffix", None) or ""
    if restore == "checkpoint_last.pt":
        path = os.path.join(getattr(settings, "save_dir", None) or "checkpoints", f"checkpoint_last{suffix}.pt")
        if not os.path.exists(path):
            path = getattr(settings, "continue_once", None) or getattr(settings, "finetune_from_model", None) or path
    else:
        path = restore.replace(".pt", suffix + ".pt") if suffix else restore
    return path if os.path.isfile(path) else None
