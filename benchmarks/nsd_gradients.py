"""Gradient norm of each term of Ma et al. (2019)'s loss on the layers it shares with translation, at initialisation.

For every (model, criterion flags) given, one model is built on the data-bin and scored on the
first validation batches; the gradient norm of each weighted term (translation, and eq. 19's
squared error and hinge, eq. 20's cross-entropy, per side) is measured on the encoder layers
(source terms) and decoder layers (target terms, and the translation on both), in eval mode
(no dropout), and averaged over ``--batches``. Reported per term and as a ratio to the
translation's on the same layers.

    python benchmarks/nsd_gradients.py runs/multi30k_en_fr/data-bin --arch transformer_nsd_both \
      --variant "units raw=--nsd-dist-units raw" --variant "defaults=" --out benchmarks/results/nsd_gradients.json

The model flags are the run protocol's (examples/dep_rel/multi30k.sh) unless ``--model`` is given.
"""

import argparse
import json
import platform
import shlex
import sys
from typing import Dict, List

import torch

PROTOCOL = ("--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256 "
            "--encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4 "
            "--decoder-attention-heads 4 --share-all-embeddings --dropout 0.3 --label-smoothing 0.1")


def measure(data_bin: str, arch: str, flags: List[str], batches: int, seed: int) -> Dict[str, Dict[str, float]]:
    from fairseq import options, tasks, utils

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        data_bin, "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--arch", arch,
        "--criterion", "label_smoothed_cross_entropy_with_nsd", "--seed", str(seed), "--max-tokens", "4096",
        *flags])
    from fairseq_syntax.criterions.nsd_balance import balance  # the --user-dir's

    utils.set_torch_seed(seed)
    task = tasks.setup_task(args)
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    task.load_dataset("valid")
    model.eval()
    itr = task.get_batch_iterator(task.dataset("valid"), max_tokens=4096).next_epoch_itr(shuffle=False)
    return balance(model, criterion, (sample for _, sample in zip(range(batches), itr)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_bin")
    parser.add_argument("--arch", default="transformer_nsd_both")
    parser.add_argument("--model", default=PROTOCOL, help="model and criterion flags shared by every variant")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                        help="criterion/model flags of one variant (repeat); default: the presets alone")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    variants = [v.split("=", 1) for v in args.variant] or [["defaults", ""]]
    results = {"command": " ".join(shlex.quote(a) for a in ["python", "benchmarks/nsd_gradients.py", *sys.argv[1:]]),
               "machine": platform.platform(), "torch": torch.__version__, "arch": args.arch, "variants": {}}
    for name, flags in variants:
        totals = measure(args.data_bin, args.arch, shlex.split(args.model) + shlex.split(flags), args.batches, args.seed)
        results["variants"][name] = {"flags": flags, "gradient_norms": totals}
        for side, norms in totals.items():
            base = norms["translation"]
            row = ", ".join(f"{k} {v:.3g} ({v / base:.2f}x)" for k, v in norms.items())
            print(f"{name:24s} {side:7s} {row}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2, sort_keys=True)
            handle.write("\n")


if __name__ == "__main__":
    main()
