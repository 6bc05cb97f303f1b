"""The GPU table of docs/benchmarks.md from ``gpu_check.py`` JSON files (benchmarks/results/gpu_check_*.json).

    python benchmarks/gpu_table.py benchmarks/results/gpu_check_h100_run4.json \\
        benchmarks/results/gpu_check_h100_run5.json

One row per family: the in-process fp16 training-step ratio (``steps``), every ``fairseq-train``
ratio and beam-5 ``fairseq-generate`` ratio found in the files (with the file's run name), and the
CUDA time of one profiled step against the baseline's. Ratios are within one file (one run).
"""

import json
import os
import sys
from typing import Dict, List


def read(path: str) -> Dict:
    """One gpu_check.py JSON, or exit with one line naming the file."""
    try:
        with open(path, encoding="utf-8") as handle:
            run = json.load(handle)
    except (OSError, ValueError) as error:
        raise SystemExit(f"gpu_table: {path}: not a readable gpu_check.py JSON ({type(error).__name__}: "
                         f"{' '.join(str(error).split())[:120]})")
    if not isinstance(run, dict) or not isinstance(run.get("device"), str):
        raise SystemExit(f"gpu_table: {path}: not a gpu_check.py JSON (no 'device')")
    return run


def main(paths: List[str]) -> None:
    if not paths:
        raise SystemExit("usage: python benchmarks/gpu_table.py GPU_CHECK_JSON [...]")
    runs = [(os.path.basename(p).rsplit(".", 1)[0].split("_")[-1], read(p)) for p in paths]
    names: List[str] = []
    for _, run in runs:
        for part in ("steps", "train", "generate", "profile"):
            names += [n for n in run.get(part, {}) if n not in names]
    print(f"Device: {', '.join(sorted({r['device'] for _, r in runs}))}; torch "
          f"{', '.join(sorted({str(r.get('torch')) for _, r in runs}))}.\n")
    print("| model | baseline | training steps (in-process) | `fairseq-train` | beam-5 `fairseq-generate` "
          "| CUDA time of a step | kernels of a step |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        cells: Dict[str, List[str]] = {"steps": [], "train": [], "generate": [], "profile": [], "kernels": []}
        baseline = ""
        for tag, run in runs:
            for part in ("steps", "train", "generate"):
                entry = run.get(part, {}).get(name, {})
                if "ratio" in entry:
                    cells[part].append(f"{entry['ratio']:.3f} ({tag})")
                    baseline = entry.get("baseline", baseline)
            prof = run.get("profile", {})
            entry = prof.get(name, {})
            ref = prof.get(baseline or _baseline(run, name), {})
            if "total_ms" in entry and "total_ms" in ref and ref["total_ms"]:
                cells["profile"].append(f"{entry['total_ms'] / ref['total_ms']:.2f} ({tag})")
                if entry.get("kernel_ops") and ref.get("kernel_ops"):
                    cells["kernels"].append(f"{entry['kernel_ops'] / ref['kernel_ops']:.2f} ({tag})")
        baseline = baseline or _baseline(runs[0][1], name)
        print(f"| `{name}` | `{baseline}` | " + " | ".join(", ".join(cells[c]) or "-" for c in
                                                          ("steps", "train", "generate", "profile", "kernels")) + " |")


def _baseline(run: Dict, name: str) -> str:
    for part in ("steps", "train", "generate"):
        if run.get(part, {}).get(name, {}).get("baseline"):
            return run[part][name]["baseline"]
    if name in ("lstm", "tree2seq"):
        return "lstm"
    if name.endswith("enfr") or "nsd_target" in name or "nsd_both" in name:
        return "transformer_enfr"
    if name.startswith("transformer_w") or name == "transformer":
        return name
    return {"transformer_syntax_embed": "transformer_w608", "transformer_syntax_spe": "transformer_w576"}.get(
        name, "transformer")


if __name__ == "__main__":
    main(sys.argv[1:])
