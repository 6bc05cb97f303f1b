"""Beam-search speed of trained checkpoints against fairseq's ``transformer``, same batches, interleaved.

``model_speed.py`` measures generation on models trained for a few steps, whose hypotheses
differ in length from model to model; this script loads checkpoints trained to the same point
(e.g. by ``examples/dep_rel/multi30k.sh``), so the comparison is between real translations.
Every model decodes the same batches of the split, batch by batch in turn (machine noise falls
on all alike), with fairseq's ``SequenceGenerator`` as ``fairseq-generate`` builds it. Reported
per model: sentences/s, generated target tokens/s, mean hypothesis length, and the ratios of
the first two to the first model's.

    python benchmarks/generation_speed.py DATA_BIN --threads 1 \\
      transformer=runs/multi30k_dep_rel/checkpoints/transformer.seed1/checkpoint_best.pt \\
      transformer_dep_rel=runs/multi30k_dep_rel/checkpoints/transformer_dep_rel.seed1/checkpoint_best.pt
"""

import argparse
import json
import platform
import shlex
import sys
import time
from typing import Dict, List, Tuple

import torch

from model_inputs import for_model


def load(name_path: str, data_bin: str, device: torch.device) -> Tuple[str, object, object]:
    """``NAME=PATH`` -> (name, task, model in eval mode on ``device``)."""
    from fairseq import checkpoint_utils

    name, sep, path = name_path.partition("=")
    if not sep or not path:
        raise SystemExit(f"expected NAME=CHECKPOINT, got {name_path!r}")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data_bin})
    model = models[0].to(device).eval()
    return name, task, model




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_bin")
    parser.add_argument("checkpoints", nargs="+", metavar="NAME=CHECKPOINT",
                        help="the first is the reference of the ratios")
    parser.add_argument("--gen-subset", default="test")
    parser.add_argument("--gen-batches", type=int, default=8,
                        help="batches to time, evenly spaced over the length-sorted split (0: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--warmup-batches", type=int, default=1, help="decoded first and not timed")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    from fairseq import utils

    # registers the plugin's task and models and its checkpoint allow-list (torch >= 2.6)
    utils.import_user_module(argparse.Namespace(user_dir="fairseq_syntax"))
    loaded = [load(item, args.data_bin, device) for item in args.checkpoints]
    names = [name for name, _, _ in loaded]
    if len(set(names)) != len(names):
        raise SystemExit(f"names must differ: {names}")
    # one feeder task with every syntax input any model reads; each model gets its share
    feeder = next((task for _, task, _ in loaded if hasattr(task, "syntax_requested")), loaded[0][1])
    for _, _, model in loaded:
        if hasattr(feeder, "syntax_requested"):
            feeder.syntax_requested.update(model.syntax_inputs() if hasattr(model, "syntax_inputs") else ())
    feeder.load_dataset(args.gen_subset)
    itr = feeder.get_batch_iterator(dataset=feeder.dataset(args.gen_subset), max_sentences=args.batch_size,
                                    seed=1).next_epoch_itr(shuffle=False)
    batches: List[Dict] = [utils.move_to_cuda(b, device) if device.type == "cuda" else b for b in itr]
    if args.gen_batches and args.gen_batches < len(batches):
        # batches come sorted by source length: take them evenly spaced, short to long
        step = len(batches) / args.gen_batches
        timed = [batches[int(i * step)] for i in range(args.gen_batches)]
    else:
        timed = batches
    batches = batches[: args.warmup_batches] + timed

    gen_args = argparse.Namespace(beam=args.beam, max_len_a=1.2, max_len_b=10)
    generators = {name: task.build_generator([model], gen_args) for name, task, model in loaded}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    seconds = {n: 0.0 for n in names}
    sentences = {n: 0 for n in names}
    tokens = {n: 0 for n in names}
    for index, sample in enumerate(batches):
        for name, _, model in loaded:  # interleaved
            own = for_model(sample, model)
            sync()
            start = time.perf_counter()
            with torch.no_grad():
                hypos = generators[name].generate([model], own)
            sync()
            if index >= args.warmup_batches:
                seconds[name] += time.perf_counter() - start
                sentences[name] += own["nsentences"]
                tokens[name] += sum(int(h[0]["tokens"].numel()) for h in hypos)

    base = names[0]
    rows = {}
    for name in names:
        sps, tps = sentences[name] / seconds[name], tokens[name] / seconds[name]
        rows[name] = {
            "sentences_per_s": round(sps, 2),
            "sentences_ratio": round(sps / (sentences[base] / seconds[base]), 3),
            "tokens_per_s": round(tps, 1),
            "tokens_ratio": round(tps / (tokens[base] / seconds[base]), 3),
            "mean_hypothesis_tokens": round(tokens[name] / sentences[name], 2),
        }
    print(json.dumps({
        "device": torch.cuda.get_device_name(device) if device.type == "cuda"
        else f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)",
        "split": args.gen_subset, "sentences": sentences[base], "beam": args.beam,
        "models": rows, "command": " ".join(["python"] + [shlex.quote(a) for a in sys.argv]),
    }, indent=2))


if __name__ == "__main__":
    main()
