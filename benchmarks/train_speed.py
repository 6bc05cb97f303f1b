"""``fairseq-train``'s own words per second and peak memory, syntax models against ``transformer``.

What a user sees: each run is a real ``fairseq-train`` process (data loading, collation of the
side inputs, forward, backward, Adam), ``--max-update`` updates on the same data-bin with the
same batches (``--seed``), the models' runs interleaved (model A, B, C, ... then again) so that
machine noise falls on all of them alike. Per run: ``train_wps`` of fairseq's end-of-training
summary (all updates, the first included) and the process's peak resident memory
(``ru_maxrss`` of ``os.wait4``). Reported per model and head count: the median of the runs,
their spread (min, max), and the ratio of the medians to ``transformer``'s.

    python benchmarks/train_speed.py DATA_BIN --heads 4,8 --reps 3 --out benchmarks/results/train_speed.json

Defaults follow the project's CPU speed protocol: 3+3 layers, 256 wide, FFN 1024, 4,000 tokens per
batch, 60 updates, 2 threads. ``--user-dir NAME=PATH`` adds a model run from another copy of
the plugin (e.g. an older commit checked out elsewhere), to compare versions in one run:

    python benchmarks/train_speed.py DATA_BIN --archs transformer,transformer_dep_rel \\
        --other old_dep_rel=transformer_dep_rel@/tmp/old/fairseq_syntax

On a machine whose load swings more from run to run than the models differ (a shared cloud VM),
``--paired`` runs each model side by side with the baseline instead, one thread each, each pinned
to its own core, the cores swapped between repetitions, and reports the median of the per-pair
ratios: a slowdown of the machine falls on both runs of a pair at once.

    python benchmarks/train_speed.py DATA_BIN --archs transformer,transformer_gps --heads 4,8 --reps 4 --paired

Recurrent models (Eriguchi et al. (2016)'s ``tree2seq`` against fairseq's ``lstm``): one layer,
``--dim`` wide embeddings and hidden units, input feeding, no head count:

    python benchmarks/train_speed.py DATA_BIN --archs lstm,tree2seq --baseline lstm --heads 1 \\
        --out benchmarks/results/tree2seq_speed_cpu.json
"""

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

DEFAULT_ARCHS = ("transformer,transformer_rel,transformer_dep,transformer_dep_rel,"
                 "transformer_gps,transformer_pascal,transformer_structural")


#: recurrent architectures: sized by one width, no layers of attention heads
RECURRENT = ("lstm", "tree2seq")


def model_flags(arch: str, heads: int, args) -> List[str]:
    if arch.startswith(RECURRENT):  # fairseq's lstm: 1 layer each side, input feeding, equal size
        return ["--encoder-embed-dim", str(args.dim), "--encoder-hidden-size", str(args.dim),
                "--decoder-embed-dim", str(args.dim), "--decoder-hidden-size", str(args.dim),
                "--decoder-out-embed-dim", str(args.dim), "--share-all-embeddings"]
    return ["--encoder-layers", str(args.layers), "--decoder-layers", str(args.layers),
            "--encoder-embed-dim", str(args.dim), "--decoder-embed-dim", str(args.dim),
            "--encoder-ffn-embed-dim", str(4 * args.dim), "--decoder-ffn-embed-dim", str(4 * args.dim),
            "--encoder-attention-heads", str(heads), "--decoder-attention-heads", str(heads),
            "--share-all-embeddings"] + pascal_heads(arch, heads)


def command(data_bin: str, arch: str, heads: int, args, user_dir: str, save_dir: str) -> List[str]:
    criterion = "label_smoothed_cross_entropy_with_nsd" if arch.startswith("transformer_nsd") else \
        "label_smoothed_cross_entropy"
    return [
        shutil.which("fairseq-train") or "fairseq-train", data_bin, "--user-dir", user_dir,
        "--task", "syntax_translation", "--arch", arch, *model_flags(arch, heads, args),
        "--dropout", "0.1", "--criterion", criterion, "--label-smoothing", "0.1",
        "--optimizer", "adam", "--lr", "0.0005", "--max-tokens", str(args.max_tokens),
        "--max-update", str(args.updates), "--disable-validation", "--no-save", "--num-workers", "0",
        "--seed", "1", "--log-format", "json", "--log-interval", str(args.updates), "--no-progress-bar",
        "--save-dir", save_dir, "--cpu",
    ] + shlex.split(args.flags)


def pascal_heads(arch: str, heads: int) -> List[str]:
    """PASCAL scales 5 of 8 heads; with fewer heads, the same share rounded up (4 heads: 3)."""
    return ["--pascal-heads", str(-(-5 * heads // 8))] if arch.startswith("transformer_pascal") else []


def start(cmd: List[str], threads: int, core: Optional[int] = None):
    """Start one fairseq-train process (``threads`` threads, pinned to ``core`` when given)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    out = tempfile.TemporaryFile("w+")
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=pin), out, cmd


def finish(started) -> Tuple[float, float]:
    """(train_wps, peak RSS in MiB) of a process from ``start``, once it has exited."""
    proc, out, cmd = started
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    with out:
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{text[-3000:]}")
    wps = None
    for line in text.splitlines():
        begin = line.find("{")
        if begin < 0:
            continue
        try:
            record = json.loads(line[begin:])
        except ValueError:
            continue
        if "train_wps" in record:
            wps = float(record["train_wps"])
    if wps is None:
        raise RuntimeError(f"no train_wps in the log of {' '.join(cmd)}\n{text[-3000:]}")
    return wps, usage.ru_maxrss / 1024.0


def run_once(cmd: List[str], threads: int) -> Tuple[float, float]:
    """(train_wps, peak RSS in MiB) of one fairseq-train process."""
    return finish(start(cmd, threads))


def run_pair(baseline: List[str], model: List[str], cores: Tuple[int, int]) -> Tuple[Tuple[float, float], ...]:
    """The baseline and a model side by side, one thread each, pinned to ``cores`` (baseline first).

    Both runs see the same machine at the same time, so what the machine's load does to one it does
    to the other and their ratio keeps little of it; swapping the cores between repetitions cancels
    a difference between the cores. The faster run ends first and the other runs its last updates
    alone: that favours the slower model by a fraction of its shortfall (at 0.95x, its last 5%).
    """
    first, second = start(baseline, 1, cores[0]), start(model, 1, cores[1])
    return finish(first), finish(second)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_bin")
    parser.add_argument("--archs", default=DEFAULT_ARCHS)
    parser.add_argument("--baseline", default="transformer", help="the model the ratios are taken against")
    parser.add_argument("--other", action="append", default=[], metavar="NAME=ARCH@USER_DIR",
                        help="a further run: ARCH from the plugin copy at USER_DIR, reported as NAME")
    parser.add_argument("--heads", default="4,8")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--flags", default="", help="extra fairseq-train flags for every run")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--paired", action="store_true",
                        help="run each model side by side with the baseline, one thread each on its own core "
                        "(cores swapped between the two runs of a repetition), and take the speed ratio per "
                        "pair: for a machine whose load swings more between runs than the models differ")
    args = parser.parse_args()

    runs: Dict[str, Tuple[str, str]] = {a: (a, "fairseq_syntax") for a in args.archs.split(",") if a}
    for spec in args.other:
        name, rest = spec.split("=", 1)
        arch, user_dir = rest.split("@", 1)
        runs[name] = (arch, user_dir)
    if args.baseline not in runs:
        raise SystemExit(f"--archs must include the --baseline {args.baseline} (the reference)")
    heads = [int(h) for h in args.heads.split(",")]
    wps: Dict[str, List[float]] = {f"{n}@{h}": [] for n in runs for h in heads}
    rss: Dict[str, List[float]] = {k: [] for k in wps}
    started = time.time()
    ratios: Dict[str, List[float]] = {k: [] for k in wps}  # --paired: model over baseline, per pair
    cores = sorted(os.sched_getaffinity(0))
    if args.paired and len(cores) < 2:
        raise SystemExit("--paired needs two cores to pin the two runs to")
    with tempfile.TemporaryDirectory() as save_dir:
        for rep in range(args.reps):
            for h in heads:
                def cmd(name: str) -> List[str]:
                    arch, user_dir = runs[name]
                    return command(args.data_bin, arch, h, args, user_dir, os.path.join(save_dir, name))
                for name in runs:
                    if not args.paired:
                        done = [(name, run_once(cmd(name), args.threads))]
                    elif name == args.baseline:
                        continue
                    else:
                        pair_cores = (cores[0], cores[1]) if rep % 2 == 0 else (cores[1], cores[0])
                        base, model = run_pair(cmd(args.baseline), cmd(name), pair_cores)
                        ratios[f"{name}@{h}"].append(model[0] / base[0])
                        done = [(args.baseline, base), (name, model)]
                    for key, (w, m) in ((f"{n}@{h}", r) for n, r in done):
                        wps[key].append(w)
                        rss[key].append(m)
                    print(f"rep {rep} heads {h} " + ", ".join(f"{n}: {w:.0f} wps, {m:.0f} MiB" for n, (w, m) in done),
                          file=sys.stderr, flush=True)
    results = {}
    for h in heads:
        ref_w = statistics.median(wps[f"{args.baseline}@{h}"])
        ref_m = statistics.median(rss[f"{args.baseline}@{h}"])
        for name in runs:
            key = f"{name}@{h}"
            pair_ratios = ratios[key] if name != args.baseline else [1.0]
            results[key] = {
                "wps_median": statistics.median(wps[key]), "wps_min": min(wps[key]), "wps_max": max(wps[key]),
                "speed_ratio": statistics.median(pair_ratios) if args.paired else statistics.median(wps[key]) / ref_w,
                "speed_ratio_spread": [min(pair_ratios), max(pair_ratios)] if args.paired else
                [min(wps[key]) / ref_w, max(wps[key]) / ref_w],
                "peak_rss_mib_median": statistics.median(rss[key]),
                "memory_ratio": statistics.median(rss[key]) / ref_m,
                "runs_wps": wps[key], "runs_rss_mib": rss[key],
            }
            if args.paired and name != args.baseline:
                results[key]["pair_ratios"] = ratios[key]
    report = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "threads": 1 if args.paired else args.threads},
        "mode": "paired (model and baseline side by side, one thread each, cores swapped)" if args.paired
        else "interleaved (one run at a time)",
        "baseline": args.baseline,
        "seconds": round(time.time() - started, 1),
        "results": results,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
