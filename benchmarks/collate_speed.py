"""Batch collation time of the syntax models' inputs against fairseq's own (the ``transformer``'s) batches.

With ``--num-workers 0`` (the recipes' setting) ``fairseq-train`` builds each batch in the
training loop: ``dataset[i]`` for every sentence, then ``dataset.collater``. This times exactly
that, for the same batches of one split, once per model: a model reads only the side-inputs it
declares (``fairseq_syntax`` task, ``request_inputs``), so ``transformer`` gets fairseq's
``LanguagePairDataset`` batch alone. Reported per model: milliseconds per batch (median over
``--reps`` passes over the batches, the models interleaved per pass), and the extra time over
``transformer`` per batch.

    python benchmarks/collate_speed.py DATA_BIN --archs transformer,transformer_gps,transformer_dep_rel
"""

import argparse
import json
import statistics
import sys
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_bin")
    parser.add_argument("--archs", default="transformer,transformer_dep_rel,transformer_gps")
    parser.add_argument("--split", default="train")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from model_speed import build

    archs = args.archs.split(",")
    dims = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
            "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--share-all-embeddings"]
    datasets, batches = {}, None
    for arch in archs:
        task, model, _, _ = build(args.data_bin, arch, dims, torch.device("cpu"))
        task.request_inputs(model, require_target=True)
        task.load_dataset(args.split)
        datasets[arch] = task.dataset(args.split)
        if batches is None:
            itr = task.get_batch_iterator(dataset=datasets[arch], seed=1, max_tokens=args.max_tokens,
                                          required_batch_size_multiple=8)
            batches = list(itr.frozen_batches)[: args.batches]
    times = {arch: [] for arch in archs}
    for _ in range(args.reps):
        for arch in archs:  # interleaved
            dataset = datasets[arch]
            start = time.perf_counter()
            for indices in batches:
                dataset.collater([dataset[i] for i in indices])
            times[arch].append((time.perf_counter() - start) / len(batches))
    base = statistics.median(times[archs[0]])
    rows = {arch: {"ms_per_batch": round(1000 * statistics.median(t), 2),
                   "spread_ms": [round(1000 * min(t), 2), round(1000 * max(t), 2)],
                   "extra_ms_over_" + archs[0]: round(1000 * (statistics.median(t) - base), 2)}
            for arch, t in times.items()}
    result = {"command": " ".join(sys.argv), "batches": len(batches),
              "sentences_per_batch": round(sum(len(b) for b in batches) / len(batches), 1), "models": rows}
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
