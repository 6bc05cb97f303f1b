"""Seconds per training update: ``--criterion blackout`` against ``cross_entropy`` (full softmax).

Eriguchi et al. (2016, secs. 3.4 and 5.1) train with BlackOut because the softmax over a word-level target
vocabulary dominates the cost of a recurrent NMT model; the goal here is BlackOut at least 2x
faster per update than the full softmax at a ~30k vocabulary. What is timed is one whole
update as fairseq's trainer does it: the criterion's forward (model forward included),
backward, and an Adam step over all parameters, on fairseq's own ``lstm`` model
(``lstm`` architecture: one layer each side, attention, input feeding), with both criterions
on the same model weights and the same synthetic batches.

Synthetic data: ``--batch-size`` sentences of ``--src-len``/``--tgt-len`` tokens drawn from a Zipf
law over the ``--vocab`` words (so that ``Q ~ unigram^beta`` is as skewed as real text's); the
BlackOut criterion gets those same Zipf counts as its target-side counts
(``set_target_counts``, instead of reading a data-bin). The two criterions alternate run by
run (A, B, A, B, ...) so that machine noise falls on both alike; each run times ``--updates``
updates after ``--warmup`` untimed ones. Reported: median seconds per update of each, their
spread, and the speed-up (cross_entropy / blackout).

    python benchmarks/blackout_speed.py --vocab 30000 --dim 256 --batch-size 64 --tgt-len 25 \\
        --samples 500 --reps 3 --threads 2 --out benchmarks/results/blackout_speed_cpu.json
    python benchmarks/blackout_speed.py --device cuda ...        # on a GPU

A quick smoke run (seconds): ``--vocab 2000 --dim 32 --batch-size 8 --updates 2 --reps 1``.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from argparse import Namespace
from types import SimpleNamespace
from typing import Dict, List

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def zipf_counts(vocab: int, nspecial: int, exponent: float, total: int) -> np.ndarray:
    """Expected token counts of a Zipf law over the non-special words (rank r: r^-exponent)."""
    counts = np.zeros(vocab, dtype=np.int64)
    ranks = np.arange(1, vocab - nspecial + 1, dtype=np.float64)
    p = ranks ** -exponent
    counts[nspecial:] = np.maximum(1, np.round(total * p / p.sum())).astype(np.int64)
    return counts


def build(args):
    from fairseq.data import Dictionary
    from fairseq.models.lstm import LSTMModel, base_architecture

    dictionary = Dictionary()
    for i in range(args.vocab - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}")
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary,
                           cfg=SimpleNamespace(data="", train_subset="train", source_lang="src", target_lang="tgt"))
    model_args = Namespace(
        encoder_embed_dim=args.dim, encoder_hidden_size=args.dim, decoder_embed_dim=args.dim,
        decoder_hidden_size=args.dim, decoder_out_embed_dim=args.dim, dropout=0.1,
        share_decoder_input_output_embed=args.tied, share_all_embeddings=args.tied,
        max_source_positions=1024, max_target_positions=1024, criterion="cross_entropy",
    )
    base_architecture(model_args)
    model_args.adaptive_softmax_cutoff = None
    model = LSTMModel.build_model(model_args, task)
    return task, dictionary, model


def batches(args, dictionary, counts, device) -> List[Dict]:
    rng = np.random.default_rng(args.seed)
    p = counts / counts.sum()
    out = []
    for _ in range(args.batches):
        src = rng.choice(len(p), size=(args.batch_size, args.src_len), p=p)
        tgt = rng.choice(len(p), size=(args.batch_size, args.tgt_len - 1), p=p)
        eos = np.full((args.batch_size, 1), dictionary.eos())
        target = torch.from_numpy(np.concatenate([tgt, eos], 1)).long()
        prev = torch.from_numpy(np.concatenate([eos, tgt], 1)).long()
        src = torch.from_numpy(np.concatenate([src, eos], 1)).long()
        out.append({
            "net_input": {"src_tokens": src.to(device),
                          "src_lengths": torch.full((args.batch_size,), src.size(1)).to(device),
                          "prev_output_tokens": prev.to(device)},
            "target": target.to(device), "ntokens": int(target.numel()), "nsentences": args.batch_size,
        })
    return out


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(criterion, model, optimizer, data, args, device) -> float:
    """Median seconds per update over ``--updates`` timed updates (after ``--warmup``)."""
    model.train()
    times = []
    for step in range(args.warmup + args.updates):
        sample = data[step % len(data)]
        synchronize(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss, sample_size, _ = criterion(model, sample)
        (loss / sample_size).backward()
        optimizer.step()
        synchronize(device)
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> Dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, default=30000, help="source and target vocabulary (one dictionary)")
    parser.add_argument("--dim", type=int, default=256, help="embedding and hidden size of the lstm")
    parser.add_argument("--tied", action="store_true", help="--share-all-embeddings (default: untied output layer)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=25)
    parser.add_argument("--tgt-len", type=int, default=25)
    parser.add_argument("--samples", type=int, default=500, help="BlackOut's K")
    parser.add_argument("--beta", type=float, default=0.4, help="BlackOut's beta")
    parser.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of the synthetic words")
    parser.add_argument("--batches", type=int, default=4, help="distinct synthetic batches, cycled")
    parser.add_argument("--updates", type=int, default=10, help="timed updates per run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed updates first in each run")
    parser.add_argument("--reps", type=int, default=3, help="runs per criterion, interleaved")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    from fairseq_syntax.criterions.blackout import BlackOutCriterion

    task, dictionary, model = build(args)
    model.to(device)
    counts = zipf_counts(args.vocab, dictionary.nspecial, args.zipf, total=10_000_000)
    counts[dictionary.eos()] = counts.sum() // args.tgt_len
    data = batches(args, dictionary, counts, device)
    criterions = {
        "cross_entropy": CrossEntropyCriterion(task, sentence_avg=False),
        "blackout": BlackOutCriterion(task, False, blackout_samples=args.samples, blackout_beta=args.beta),
    }
    criterions["blackout"].set_target_counts(counts)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    seconds: Dict[str, List[float]] = {name: [] for name in criterions}
    for rep in range(args.reps):
        for name, criterion in criterions.items():
            model.load_state_dict(initial)  # same weights, fresh optimizer: same work for both
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            torch.manual_seed(args.seed + rep)
            seconds[name].append(run(criterion, model, optimizer, data, args, device))
            print(f"rep {rep} {name}: {seconds[name][-1] * 1000:.1f} ms/update", file=sys.stderr)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    result = {
        "command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
        "settings": vars(args),
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "torch": torch.__version__,
                    "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"},
        "target_tokens_per_batch": args.batch_size * args.tgt_len,
        "seconds_per_update": {name: {"median": median[name], "min": min(v), "max": max(v), "runs": v}
                               for name, v in seconds.items()},
        "speedup_blackout_vs_cross_entropy": median["cross_entropy"] / median["blackout"],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return result


if __name__ == "__main__":
    main()
