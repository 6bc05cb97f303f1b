"""Training and generation speed and memory of the syntax models against fairseq's ``transformer``.

One process, one data-bin, the same batches, the models interleaved batch by batch (so that
machine noise falls on all of them alike), equal dimensions. Reported as ratios to
``transformer``:

- training: target words per second over forward + backward + Adam step;
- memory: on CUDA the peak allocated memory of a training step; on CPU the peak bytes of
  tensors saved for backward (activations) plus parameters, gradients and Adam moments;
- generation: beam-5 sentences per second over the test set (fairseq's SequenceGenerator).

    python benchmarks/model_speed.py DATA_BIN --archs transformer,transformer_rel,transformer_dep,transformer_dep_rel
    python benchmarks/model_speed.py DATA_BIN --archs transformer,transformer_syntax_embed,transformer_syntax_spe,transformer_nsd

The Duan et al. (2019) models get the same ``--dims``, so their encoder is wider by the concatenated
feature embeddings (``--encoder-embed-dim`` is the word dimension); ``transformer_nsd`` trains
with ``label_smoothed_cross_entropy_with_nsd``. ``--model-flags ARCH=FLAGS`` adds flags to one
model only (they come last, so they win): with it the Duan et al. (2019) models can be compared with a
``transformer`` of the same model width, e.g. ``transformer`` at 352 everywhere against
``transformer_syntax_embed_iwslt_de_en`` with 256-wide words + 3 x 32 features (what the
features themselves cost, apart from the width the paper gives the model):

    python benchmarks/model_speed.py DATA_BIN --threads 1 \
      --archs transformer,transformer_syntax_embed_iwslt_de_en \
      --dims "--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 352 --decoder-embed-dim 352 \
              --encoder-ffn-embed-dim 1408 --decoder-ffn-embed-dim 1408 --encoder-attention-heads 11 \
              --decoder-attention-heads 11 --share-decoder-input-output-embed" \
      --model-flags "transformer_syntax_embed_iwslt_de_en=--encoder-embed-dim 256"
"""

import argparse
import json
import platform
import shlex
import statistics
import sys
import time
from typing import Dict, List

import torch

from model_inputs import for_model


def build(data_bin: str, arch: str, dims: List[str], device: torch.device):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    # Ma et al. (2019)'s model trains with its distance losses (eqs. 19-20): part of its training cost
    criterion = "label_smoothed_cross_entropy_with_nsd" if arch.startswith("transformer_nsd") else "label_smoothed_cross_entropy"
    args = options.parse_args_and_arch(parser, input_args=[
        data_bin, "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--arch", arch,
        "--criterion", criterion, "--label-smoothing", "0.1", "--dropout", "0.1",
        "--optimizer", "adam", "--lr", "0.0005", *dims,
    ])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model).to(device)
    criterion = task.build_criterion(cfg.criterion).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
    return task, model, criterion, optimizer




class SavedBytes:
    """Peak bytes of tensors saved for backward (CPU activation memory)."""

    def __init__(self) -> None:
        self.current = 0

    def pack(self, tensor):
        self.current += tensor.numel() * tensor.element_size()
        return tensor

    @staticmethod
    def unpack(tensor):
        return tensor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_bin")
    parser.add_argument("--archs", default="transformer,transformer_rel,transformer_dep,transformer_dep_rel")
    parser.add_argument("--dims", default="--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 "
                        "--decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 "
                        "--encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings",
                        help="dimension flags given to every model (equal dimensions)")
    parser.add_argument("--model-flags", action="append", default=[], metavar="ARCH=FLAGS",
                        help="extra flags for one model only, after --dims (repeatable)")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--gen-subset", default="test")
    parser.add_argument("--gen-batches", type=int, default=10)
    parser.add_argument("--gen-batch-size", type=int, default=64)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--fixed-length", type=int, default=0, metavar="N",
                        help="every hypothesis exactly N target tokens (min_len = max_len = N): generation speed "
                             "per decoder step, independent of how long each model's outputs are (0: max_len "
                             "1.2 x source + 10, outputs end where the model says)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    archs = args.archs.split(",")
    torch.manual_seed(1)

    own_flags: Dict[str, List[str]] = {}
    for item in args.model_flags:
        arch, sep, flags = item.partition("=")
        if not sep or arch not in archs:
            parser.error(f"--model-flags {item!r}: expected ARCH=FLAGS with ARCH one of {archs}")
        own_flags.setdefault(arch, []).extend(flags.split())
    built = {arch: build(args.data_bin, arch, args.dims.split() + own_flags.get(arch, []), device) for arch in archs}
    # batches from one task with every feature any model consumes; each model gets its share
    feeder = built[archs[-1]][0]
    for task, model, _, _ in built.values():
        feeder.request_inputs(model, require_target=True)  # source and target (Ma et al. 2019) features
    feeder.load_dataset("train")
    feeder.load_dataset(args.gen_subset)
    from fairseq import utils

    def batches(split, **kw):
        itr = feeder.get_batch_iterator(dataset=feeder.dataset(split), seed=1, **kw).next_epoch_itr(shuffle=(split == "train"))
        return [utils.move_to_cuda(b, device) if device.type == "cuda" else b for _, b in zip(range(10**9), itr)]

    train_batches = batches("train", max_tokens=args.max_tokens, required_batch_size_multiple=8)
    gen_batches = batches(args.gen_subset, max_sentences=args.gen_batch_size)[: args.gen_batches]

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    words = {a: 0 for a in archs}
    seconds = {a: 0.0 for a in archs}
    peak = {a: 0 for a in archs}
    for step in range(args.warmup_steps + args.train_steps):
        sample = train_batches[step % len(train_batches)]
        for arch in archs:  # interleaved
            _, model, criterion, optimizer = built[arch]
            model.train()
            own = for_model(sample, model)
            saved = SavedBytes()
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            sync()
            start = time.perf_counter()
            with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                loss, _, log = criterion(model, own)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sync()
            if step >= args.warmup_steps:
                seconds[arch] += time.perf_counter() - start
                words[arch] += int(log["ntokens"])
            if device.type == "cuda":
                peak[arch] = max(peak[arch], torch.cuda.max_memory_allocated(device))
            else:
                params = sum(p.numel() * p.element_size() for p in model.parameters())
                peak[arch] = max(peak[arch], saved.current + 4 * params)

    gen_seconds = {a: 0.0 for a in archs}
    sentences = {a: 0 for a in archs}
    if args.fixed_length:
        gen_args = argparse.Namespace(beam=args.beam, max_len_a=0, max_len_b=args.fixed_length,
                                      min_len=args.fixed_length)
    else:
        gen_args = argparse.Namespace(beam=args.beam, max_len_a=1.2, max_len_b=10)
    generators = {a: built[a][0].build_generator([built[a][1]], gen_args) for a in archs}
    for sample in gen_batches:
        for arch in archs:
            task, model, _, _ = built[arch]
            model.eval()
            own = for_model(sample, model)
            own["net_input"].pop("tgt_syntax", None)  # predicted at generation, as the task's inference_step does
            sync()
            start = time.perf_counter()
            with torch.no_grad():
                generators[arch].generate([model], own)
            sync()
            gen_seconds[arch] += time.perf_counter() - start
            sentences[arch] += own["nsentences"]

    base = archs[0]
    rows = {}
    for arch in archs:
        wps = words[arch] / seconds[arch]
        sps = sentences[arch] / gen_seconds[arch]
        rows[arch] = {
            "parameters": sum(p.numel() for p in built[arch][1].parameters()),
            "train_words_per_s": round(wps, 1),
            "train_speed_ratio": round(wps / (words[base] / seconds[base]), 3),
            "peak_memory_mb": round(peak[arch] / 2**20, 1),
            "memory_ratio": round(peak[arch] / peak[base], 3),
            "generate_sentences_per_s": round(sps, 2),
            "generate_speed_ratio": round(sps / (sentences[base] / gen_seconds[base]), 3),
        }
    print(json.dumps({
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)",
        "memory_measure": "cuda max_memory_allocated" if device.type == "cuda" else "saved-for-backward bytes + 4 x parameter bytes",
        "train_steps": args.train_steps, "max_tokens": args.max_tokens, "gen_batches": len(gen_batches),
        "gen_fixed_length": args.fixed_length or None,
        "models": rows, "command": " ".join(["python"] + [shlex.quote(a) for a in sys.argv]),
    }, indent=2))


if __name__ == "__main__":
    main()
