"""Where a model's parses came from: recorded in its checkpoint, compared when it parses raw text.

A model trained on one data-bin learns that data-bin's parser, projection rule and BPE
segmentation. At training, the task records them in the model's args (``syntax_provenance``,
saved in the checkpoint like fairseq's other derived settings): the parser's name and version
(and spaCy's), the projection rule, the SHA-256 of the BPE codes and the source of the phrase
structure. When the model later
parses raw text (``fairseq-interactive``, the hub), the parse comes from the data-bin given at
decoding and the parser installed now: :func:`differences` names each field that differs, and
the task warns with both values. ``--syntax-parser`` chooses another parser on purpose: that
field is then reported as an override, not as a mismatch.
"""

import hashlib
import json
import os
from typing import Dict, List, Optional

__all__ = ["ARG", "of_data_bin", "differences", "encode", "decode"]

#: the name under which a checkpoint's model args hold the provenance (a JSON string)
ARG = "syntax_provenance"
#: ``bpe_codes_sha256`` of a data-bin of whole words (no BPE)
NO_BPE = "none"
FIELDS = ("parser", "parser_version", "spacy_version", "projection", "bpe_codes_sha256", "phrase_structure")


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
    }


def encode(provenance: Dict[str, Optional[str]]) -> str:
    return json.dumps(provenance, sort_keys=True)


def decode(value) -> Optional[Dict[str, Optional[str]]]:
    """The provenance stored in a checkpoint's args (None for checkpoints made before it existed)."""
    if not value:
        return None
    try:
        data = json.loads(value) if isinstance(value, str) else dict(value)
    except (TypeError, ValueError):
        return None
    return {k: data.get(k) for k in FIELDS}


def differences(trained: Dict[str, Optional[str]], now: Dict[str, Optional[str]]) -> List[str]:
    """``"FIELD: trained on A, now B"`` for every field that differs (unknown values are not compared)."""
    out = []
    for key in FIELDS:
        a, b = trained.get(key), now.get(key)
        if a is not None and b is not None and a != b:
            out.append(f"{key}: trained with {a}, now {b}")
    return out
