"""One-command GPU check: ``fairseq-train`` throughput, beam-5 ``fairseq-generate`` speed and the
top CUDA ops of one profiled training step, every family against fairseq's own model, in fp16.

Protocol (each run a real ``python3 -m fairseq_cli.train`` process, one at a time, the same
data-bin and batches, ``--seed 1``): base size (6+6 layers, 512 wide, 8 heads, FFN 2048, shared
embeddings; the recurrent models 1 layer at 512), ``--fp16``, ``--max-tokens 8192``, 4 loader
workers, ``--updates`` updates; throughput is the mean of fairseq's ``train_inner`` words/s over
the log intervals after the first ``--skip`` updates (start-up, cuDNN autotuning and the first
epoch's batch building excluded). Families that change the model's width (Duan et al. 2019) are
compared with ``transformer`` at the same width. Generation: ``fairseq-generate`` with
``--beam 5`` on the test set from each model's checkpoint, every hypothesis exactly
``--gen-len`` tokens (``--min-len`` = ``--max-len-b``), so that all models decode the same amount
of work; fairseq's own "sentences/s" line. Profiling: one training step per family in this
process (fp16 autocast, the same batch), the top ops by CUDA time.

The script keeps to ``--budget`` seconds: it starts nothing that would not end in time (what it
skipped is named in the JSON) and rewrites ``--out`` after every measurement, so that what it
measured survives a stop. How to run it on a GPU machine with PyTorch but no package index is in
benchmarks/README.md ("GPU check"):

    python3 benchmarks/gpu_check.py --data-bin /tmp/data/en-de --target-data-bin /tmp/data/en-fr \
        --out $OUT/gpu_check.json --budget 450
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

BASE = ["--encoder-layers", "6", "--decoder-layers", "6", "--encoder-embed-dim", "512",
        "--decoder-embed-dim", "512", "--encoder-ffn-embed-dim", "2048", "--decoder-ffn-embed-dim", "2048",
        "--encoder-attention-heads", "8", "--decoder-attention-heads", "8", "--share-all-embeddings"]
RECURRENT = ["--encoder-embed-dim", "512", "--encoder-hidden-size", "512", "--decoder-embed-dim", "512",
             "--decoder-hidden-size", "512", "--decoder-out-embed-dim", "512", "--share-all-embeddings"]


def width(dim: int, heads: int) -> List[str]:
    """``transformer`` at Duan et al. (2019)'s widths: everything ``dim`` wide, its heads, decoder embeddings shared."""
    return ["--encoder-layers", "6", "--decoder-layers", "6", "--encoder-embed-dim", str(dim),
            "--decoder-embed-dim", str(dim), "--encoder-ffn-embed-dim", str(4 * dim),
            "--decoder-ffn-embed-dim", str(4 * dim), "--encoder-attention-heads", str(heads),
            "--decoder-attention-heads", str(heads), "--share-decoder-input-output-embed"]


@dataclass
class Family:
    name: str
    arch: str
    flags: List[str]
    baseline: str
    data: str = "source"  # "source": --data-bin; "target": --target-data-bin (a target-side parse)
    generate: bool = False
    profile: bool = True
    criterion: str = "label_smoothed_cross_entropy"
    extra: Dict[str, str] = field(default_factory=dict)


NSD = "label_smoothed_cross_entropy_with_nsd"
STAGES = ("steps", "train", "profile", "generate")
PAPER_003 = ["--encoder-layers", "6", "--decoder-layers", "6", "--share-decoder-input-output-embed"]
#: in the order they run: what matters most first, so that a short budget still measures it
FAMILIES = [
    Family("transformer", "transformer", BASE, "transformer", generate=True),
    Family("transformer_dep_rel", "transformer_dep_rel", BASE, "transformer", generate=True),
    # relative values through the fused kernel as extra value columns (off by default: slower, measured)
    Family("transformer_dep_rel_fused_values", "transformer_dep_rel", BASE, "transformer",
           extra={"FAIRSEQ_SYNTAX_FUSED_VALUES": "1"}),
    Family("transformer_gps", "transformer_gps", BASE, "transformer", generate=True),
    Family("transformer_nsd", "transformer_nsd", BASE, "transformer", generate=True, criterion=NSD),
    Family("transformer_pascal", "transformer_pascal", BASE, "transformer", generate=True),
    Family("transformer_structural", "transformer_structural", BASE, "transformer", generate=True),
    Family("lstm", "lstm", RECURRENT, "lstm", generate=True),
    Family("tree2seq", "tree2seq", RECURRENT, "lstm", generate=True),
    # Duan et al. (2019) widens the encoder by its feature embeddings: 512 + 3 x 32 and 512 + 2 x 32
    Family("transformer_w608", "transformer", width(608, 19), "transformer_w608"),
    Family("transformer_syntax_embed", "transformer_syntax_embed", PAPER_003, "transformer_w608"),
    Family("transformer_w576", "transformer", width(576, 9), "transformer_w576"),
    Family("transformer_syntax_spe", "transformer_syntax_spe", PAPER_003, "transformer_w576"),
    Family("transformer_rel", "transformer_rel", BASE, "transformer", profile=False),
    Family("transformer_dep", "transformer_dep", BASE, "transformer", profile=False),
    # Ma et al. (2019)'s target side needs a target-side parse: the en-fr data-bin, its own baseline
    Family("transformer_enfr", "transformer", BASE, "transformer_enfr", data="target", generate=True),
    Family("transformer_nsd_target", "transformer_nsd_target", BASE, "transformer_enfr", data="target",
           generate=True, criterion=NSD),
    Family("transformer_nsd_both", "transformer_nsd_both", BASE, "transformer_enfr", data="target", criterion=NSD),
]


def train_command(fam: Family, data_bin: str, save_dir: str, args) -> List[str]:
    cmd = [sys.executable, "-m", "fairseq_cli.train", data_bin, "--user-dir", "fairseq_syntax",
           "--task", "syntax_translation", "--arch", fam.arch, *fam.flags,
           "--criterion", fam.criterion, "--label-smoothing", "0.1", "--dropout", "0.1",
           "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "0.0005",
           "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4000",
           "--max-tokens", str(args.max_tokens), "--max-update", str(args.updates),
           "--num-workers", str(args.workers), "--seed", "1", "--disable-validation",
           "--log-format", "json", "--log-interval", str(args.log_interval), "--no-progress-bar",
           "--save-dir", save_dir]
    if fam.arch.startswith("transformer_pascal"):
        cmd += ["--pascal-heads", "5"]
    if args.fp16:
        cmd += ["--fp16"]
    if args.cpu:
        cmd += ["--cpu"]
    if fam.generate:  # only the last checkpoint, written once at the end
        cmd += ["--no-epoch-checkpoints", "--save-interval", "100000"]
    else:
        cmd += ["--no-save"]
    return cmd


def inner_wps(log: str, skip: int, interval: int) -> List[float]:
    """fairseq's ``train_inner`` words/s of the intervals that start after ``skip`` updates."""
    out = []
    for line in log.splitlines():
        start = line.find("{")
        if start < 0 or '"wps"' not in line:
            continue
        try:
            rec = json.loads(line[start:])
        except ValueError:
            continue
        if "num_updates" in rec and "wps" in rec and int(rec["num_updates"]) - interval >= skip:
            out.append(float(rec["wps"]))
    return out


def run(cmd: List[str], timeout: float, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=max(timeout, 1), env=env)


def profile_step(fam: Family, data_bin: str, args, device) -> Dict:
    """The top ops by CUDA (or CPU) time of one training step (forward, loss, backward), after warm-up."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    task, model, criterion, batches = built(fam, data_bin, args, device, 1)
    sample = batches[0]

    def step():
        train_step(model, criterion, sample)

    for _ in range(3):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    if device.type == "cuda":
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, key, 0) > 0]
    events.sort(key=lambda e: getattr(e, key), reverse=True)
    total = sum(getattr(e, key) for e in events)
    launched = sum(e.count for e in events) if device.type == "cuda" else None
    return {
        "time_measure": key,
        "total_ms": round(total / 1000.0, 3),
        "kernel_ops": launched,
        "sdpa_calls": sum(e.count for e in prof.key_averages() if "scaled_dot_product" in e.key),
        "top": [{"op": e.key, "ms": round(getattr(e, key) / 1000.0, 3), "calls": e.count} for e in events[:args.top]],
    }


def built(fam: Family, data_bin: str, args, device, n_batches: int):
    """The family's task, model (half precision with ``--fp16``, as fairseq-train's ``--fp16``),
    criterion and its first ``n_batches`` training batches (the task's own collation) on ``device``."""
    from fairseq import utils

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from model_speed import build

    flags = list(fam.flags) + (["--pascal-heads", "5"] if fam.arch.startswith("transformer_pascal") else [])
    task, model, criterion, _ = build(data_bin, fam.arch, flags, device)
    if args.fp16:
        model = model.half()
    model.train()
    task.load_dataset("train")
    itr = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=args.max_tokens, seed=1,
                                  ignore_invalid_inputs=True).next_epoch_itr(shuffle=False)
    batches = []
    for sample in itr:
        batches.append(utils.move_to_cuda(sample, device) if device.type == "cuda" else sample)
        if len(batches) == n_batches:
            break
    return task, model, criterion, batches


def train_step(model, criterion, sample) -> None:
    """Forward, loss and backward (fairseq's train_step without the optimizer)."""
    loss, _, _ = criterion(model, sample)
    loss.backward()
    model.zero_grad(set_to_none=True)


def step_speed(families: List[Family], data: Dict[str, Optional[str]], args, device, result: Dict, save,
               left) -> None:
    """Training steps in this process, every family's model built at once and timed interleaved.

    The same first ``--step-batches`` training batches for every family (each through its own task);
    one pass over them first (warm-up: cuDNN plans for every shape), then ``--step-reps`` rounds of
    one timed pass per family in turn, so that a slower moment of the machine falls on all alike.
    Reported: target words per second of the median pass, and the ratio to the family's baseline.
    """
    import statistics

    import torch

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    models = {}
    for fam in families:
        if data[fam.data] is None or left("steps") < 10:
            continue
        with family_env(fam):
            try:
                _, model, criterion, batches = built(fam, data[fam.data], args, device, args.step_batches)
                for sample in batches:
                    train_step(model, criterion, sample)
            except Exception as exc:
                result["steps"][fam.name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
                continue
        models[fam.name] = (fam, model, criterion, batches, sum(int(b["ntokens"]) for b in batches))
    times: Dict[str, List[float]] = {name: [] for name in models}
    for _ in range(args.step_reps):
        for name, (fam, model, criterion, batches, _) in models.items():
            if left("steps") < 2:
                break
            with family_env(fam):
                sync()
                t0 = time.perf_counter()
                for sample in batches:
                    train_step(model, criterion, sample)
                sync()
            times[name].append(time.perf_counter() - t0)
    for name, (fam, _, _, batches, words) in models.items():
        if times[name]:
            t = statistics.median(times[name])
            result["steps"][name] = {"words_per_s": round(words / t, 1), "passes": len(times[name]),
                                     "pass_seconds": [round(x, 4) for x in times[name]], "batches": len(batches)}
    add_ratios(result["steps"], [fam for fam, *_rest in models.values()], "words_per_s")
    save()


def add_ratios(part: Dict[str, Dict], families: List[Family], key: str) -> None:
    """Each family's ``key`` over its baseline's, within one stage of one run (``ratio``, ``baseline``)."""
    for fam in families:
        entry, base = part.get(fam.name, {}), part.get(fam.baseline, {})
        if key in entry and key in base:
            entry["ratio"] = round(entry[key] / base[key], 3)
            entry["baseline"] = fam.baseline


class family_env:
    """The family's extra environment (e.g. ``FAIRSEQ_SYNTAX_FUSED_VALUES``) for a block."""

    def __init__(self, fam: Family) -> None:
        self.extra = fam.extra

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.extra}
        os.environ.update(self.extra)

    def __exit__(self, *exc):
        for k, value in self.saved.items():
            if value is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-bin", required=True, help="a data-bin with a source-side parse (Multi30k en-de)")
    parser.add_argument("--target-data-bin", default=None, help="a data-bin with a target-side parse (en-fr)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", type=float, default=450, help="seconds for the whole check")
    parser.add_argument("--stages", default="steps:0.3,train:0.65,profile:0.75,generate:1",
                        help="stages in order, each with the share of the budget by which it ends")
    for stage in STAGES:
        parser.add_argument(f"--{stage}-families", default=None,
                            help=f"comma-separated family names for the {stage} stage (default: all, in order)")
    parser.add_argument("--updates", type=int, default=150)
    parser.add_argument("--log-interval", type=int, default=25)
    parser.add_argument("--skip", type=int, default=50, help="updates left out of the throughput mean")
    parser.add_argument("--max-tokens", type=int, default=8192)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--step-batches", type=int, default=20)
    parser.add_argument("--step-reps", type=int, default=3)
    parser.add_argument("--gen-len", type=int, default=25)
    parser.add_argument("--gen-batch-size", type=int, default=128)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--no-fp16", dest="fp16", action="store_false")
    parser.add_argument("--cpu", action="store_true", help="a dry run of the script on a CPU (tiny settings)")
    parser.add_argument("--dims", default=None, help="replace the base-size flags (dry runs)")
    args = parser.parse_args()
    started = time.monotonic()
    deadline = started + args.budget

    import torch
    device = torch.device("cpu" if args.cpu or not torch.cuda.is_available() else "cuda")
    if args.cpu:
        args.fp16 = False
    if args.dims is not None:
        for fam in FAMILIES:
            if fam.flags in (BASE, PAPER_003) or fam.name.startswith("transformer_w"):
                fam.flags = shlex.split(args.dims)
    stage_end: Dict[str, float] = {}
    for item in args.stages.split(","):
        name, _, share = item.partition(":")
        if name not in STAGES:
            raise SystemExit(f"gpu_check: unknown stage {name!r} (stages: {', '.join(STAGES)})")
        try:
            fraction = float(share or 1)
        except ValueError:
            fraction = -1.0
        if not 0 < fraction <= 1:
            raise SystemExit(f"gpu_check: --stages {item!r}: expected STAGE:SHARE with a share in (0, 1], e.g. train:0.65")
        stage_end[name] = started + fraction * args.budget

    def chosen(stage: str) -> List[Family]:
        names = getattr(args, f"{stage}_families")
        return FAMILIES if not names else [f for f in FAMILIES if f.name in names.split(",")]

    result: Dict = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "python": sys.version.split()[0],
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "protocol": {"updates": args.updates, "log_interval": args.log_interval, "skip": args.skip,
                     "max_tokens": args.max_tokens, "workers": args.workers, "fp16": args.fp16,
                     "step_batches": args.step_batches, "step_reps": args.step_reps,
                     "gen_len": args.gen_len, "beam": 5},
        "steps": {}, "train": {}, "generate": {}, "profile": {}, "skipped": [],
    }

    def save() -> None:
        tmp = args.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, args.out)

    def left(stage: str) -> float:
        return min(stage_end.get(stage, deadline), deadline) - time.monotonic()

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    work = tempfile.mkdtemp(prefix="gpu_check.")
    data = {"source": args.data_bin, "target": args.target_data_bin}
    for stage in stage_end:
        if stage == "steps":
            step_speed(chosen("steps"), data, args, device, result, save, left)
            print("steps:", {k: v.get("ratio") for k, v in result["steps"].items()}, flush=True)
        elif stage == "train":
            train_stage(chosen("train"), data, args, result, save, lambda: left("train"), work, env)
        elif stage == "profile":
            for fam in chosen("profile"):
                if not fam.profile or data[fam.data] is None:
                    continue
                if left("profile") < 8:
                    result["skipped"].append(f"profile {fam.name}: budget")
                    continue
                try:
                    with family_env(fam):
                        result["profile"][fam.name] = profile_step(fam, data[fam.data], args, device)
                except Exception as exc:  # a family that fails to profile is reported, the others go on
                    result["profile"][fam.name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
                save()
                print(f"profile {fam.name}: {result['profile'][fam.name].get('total_ms')} ms", flush=True)
        elif stage == "generate":
            generate_stage(chosen("generate"), data, args, result, save, lambda: left("generate"), work, env)
    result["seconds"] = round(time.monotonic() - started, 1)
    save()
    print(json.dumps({k: {n: e.get("ratio") for n, e in result[k].items()} for k in ("steps", "train", "generate")}))


def train_stage(families, data, args, result, save, left, work, env) -> None:
    per_train = None  # seconds the slowest training run took (the estimate for the next)
    for fam in families:
        if data[fam.data] is None:
            result["skipped"].append(f"train {fam.name}: no data-bin with a target-side parse")
            continue
        if left() < (per_train or 30.0):
            result["skipped"].append(f"train {fam.name}: budget")
            continue
        save_dir = os.path.join(work, fam.name)
        t0 = time.monotonic()
        try:
            proc = run(train_command(fam, data[fam.data], save_dir, args), left(), dict(env, **fam.extra))
        except subprocess.TimeoutExpired:
            result["skipped"].append(f"train {fam.name}: timed out")
            continue
        took = time.monotonic() - t0
        per_train = max(per_train or 0.0, took)
        wps = inner_wps(proc.stdout, args.skip, args.log_interval)
        entry = {"seconds": round(took, 1), "intervals": len(wps), "rc": proc.returncode}
        if proc.returncode != 0 or not wps:
            entry["error"] = proc.stdout[-1500:]
        else:
            entry["wps"] = round(sum(wps) / len(wps), 1)
            entry["wps_intervals"] = wps
        result["train"][fam.name] = entry
        save()
        print(f"train {fam.name}: {entry.get('wps')} wps ({took:.0f} s)", flush=True)
    add_ratios(result["train"], families, "wps")
    save()


def generate_stage(families, data, args, result, save, left, work, env) -> None:
    per_gen = None
    for fam in families:
        if not fam.generate or "wps" not in result["train"].get(fam.name, {}):
            continue
        if left() < (per_gen or 25.0):
            result["skipped"].append(f"generate {fam.name}: budget")
            continue
        ckpt = os.path.join(work, fam.name, "checkpoint_last.pt")
        cmd = [sys.executable, "-m", "fairseq_cli.generate", data[fam.data], "--user-dir", "fairseq_syntax",
               "--task", "syntax_translation", "--path", ckpt, "--gen-subset", "test", "--beam", "5",
               "--batch-size", str(args.gen_batch_size), "--min-len", str(args.gen_len), "--max-len-a", "0",
               "--max-len-b", str(args.gen_len), "--quiet"] + (["--fp16"] if args.fp16 else []) + (
               ["--cpu"] if args.cpu else [])
        t0 = time.monotonic()
        try:
            proc = run(cmd, left(), dict(env, **fam.extra))
        except subprocess.TimeoutExpired:
            result["skipped"].append(f"generate {fam.name}: timed out")
            continue
        took = time.monotonic() - t0
        per_gen = max(per_gen or 0.0, took)
        m = re.search(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s \(([\d.]+) sentences/s, "
                      r"([\d.]+) tokens/s\)", proc.stdout)
        entry = {"seconds": round(took, 1), "rc": proc.returncode}
        if m:
            entry.update(sentences=int(m.group(1).replace(",", "")), sentences_per_s=float(m.group(4)),
                         tokens_per_s=float(m.group(5)))
        else:
            entry["error"] = proc.stdout[-1500:]
        result["generate"][fam.name] = entry
        save()
        print(f"generate {fam.name}: {entry.get('sentences_per_s')} sentences/s", flush=True)
    add_ratios(result["generate"], families, "sentences_per_s")
    save()


if __name__ == "__main__":
    main()
