"""``fairseq-syntax-awsl``: Average Weight of Syntax Logits per syntax layer (Xie et al. 2021, sec. 4.3, eq. 7, Figure 3).

For a checkpoint with syntactic-position layers (``--gps-layers``, e.g. ``transformer_gps``), runs the
encoder over a split with ``record_logits`` on those layers and averages, over samples and heads,

* the **syntax** share ``1/N^2 sum_ij |e^s_ij| / (|e_ij| + |e^s_ij|)`` (AWSL, Figure 3's red line), and
* the **content** share ``1/N^2 sum_ij |e_ij| / (|e_ij| + |e^s_ij|)`` (eq. 7 as printed, the blue line),

where ``e_ij`` are the layer's normal attention logits and ``e^s_ij`` the eq. 5 syntax term (0 across
sentences); ``N`` counts the line's real tokens (``</s>`` included). Writes ``PREFIX.tsv`` (one row per
syntax layer) and ``PREFIX.png``::

    fairseq-syntax-awsl data-bin --path checkpoints/checkpoint_best.pt --split valid \\
        --max-sentences 1000 --out awsl/valid
"""

import argparse
import csv
import logging
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence

import torch

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.argtypes import positive, refuse_repeats
from fairseq_syntax_core.fileio import atomic_write_all, check_output_path, check_outside, make_output_folder, \
    remove_empty_folders

from .commands import figure_writer, run_command
from .rendering import one_line, plot_text

__all__ = ["compute_awsl", "write_tsv", "plot_awsl", "cli_main"]


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-syntax-awsl",
        description="Average Weight of Syntax Logits (Xie et al. 2021, eq. 7) per syntax layer of a checkpoint",
    )
    parser.add_argument("data", help="the data-bin the model was trained on (fairseq-syntax-preprocess)")
    parser.add_argument("--path", required=True, help="checkpoint file (e.g. checkpoint_best.pt)")
    parser.add_argument("--split", default="valid", help="split of the data-bin (default: valid)")
    parser.add_argument("--max-sentences", type=positive, default=None,
                        help="use at most this many sentences of the split (default: all)")
    parser.add_argument("--batch-size", type=positive, default=32, help="sentences per forward (default: 32)")
    parser.add_argument("--out", default="awsl", help="output prefix: PREFIX.tsv and PREFIX.png (default: awsl)")
    parser.add_argument("--cpu", action="store_true", help="run on CPU even if CUDA is available")
    parser.add_argument("--allow-other-data-bin", action="store_true",
                        help="warn, do not refuse, when the data-bin's dictionaries, BPE codes or projection rule are "
                             "not those the checkpoint was trained with")
    return refuse_repeats(parser)


def load(data: str, path: str, split: str, cpu: bool, allow_other_data_bin: bool = False):
    import fairseq_syntax  # noqa: F401  (registers the task and models; allow-lists checkpoint globals)
    from fairseq import checkpoint_utils

    overrides = {"data": data, **({"allow_other_data_bin": True} if allow_other_data_bin else {})}
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=overrides)
    model = models[0].eval()
    if torch.cuda.is_available() and not cpu:
        model = model.cuda()
    try:
        task.load_dataset(split)
    except FileNotFoundError:
        raise InputError(data, None, f"has no split {split!r} for this language pair: give --split (e.g. test)") from None
    return model, task, task.dataset(split)


def compute_awsl(model, dataset, max_sentences: Optional[int] = None, batch_size: int = 32) -> List[Dict[str, float]]:
    """One row per syntax layer: ``layer`` (0-based), ``awsl_syntax``, ``awsl_content``, ``sentences``."""
    from fairseq import utils
    from fairseq_syntax.modules.syntactic_position import syntax_logit_weights

    encoder = model.encoder
    layers = tuple(encoder.component_layers("gps")) if hasattr(encoder, "component_layers") else ()
    if not layers:
        raise ValueError("this checkpoint has no syntactic-position layers (--gps-layers): nothing to analyse")
    attns = {i: encoder.layers[i].self_attn for i in layers}
    # e^s of eq. 5 is what the gps component adds in layer i, asked of it: other components' additive
    # terms (a label-pair bias, say) are in the attention's summed bias too, and are not syntax positions
    terms = {i: encoder.layers[i].attention_terms["gps"] for i in layers}
    for i, attn in attns.items():
        attn.record_logits = True
        terms[i].record = True
    device = next(model.parameters()).device
    n = len(dataset) if max_sentences is None else min(max_sentences, len(dataset))
    sums = {i: torch.zeros(2, dtype=torch.float64) for i in layers}
    count = 0
    try:
        with torch.no_grad():
            for start in range(0, n, batch_size):
                sample = dataset.collater([dataset[k] for k in range(start, min(n, start + batch_size))])
                if not sample:
                    continue
                sample = utils.move_to_cuda(sample) if device.type == "cuda" else sample
                net = sample["net_input"]
                encoder(net["src_tokens"], src_lengths=net["src_lengths"], src_syntax=net.get("src_syntax"))
                pad = net["src_tokens"].eq(encoder.padding_idx)
                for i, attn in attns.items():
                    w = syntax_logit_weights(attn.recorded_logits["content"], terms[i].last_term, pad)
                    # average over heads per sample, summed over samples
                    sums[i] += torch.stack([w.syntax.mean(1).sum(), w.content.mean(1).sum()]).double().cpu()
                count += net["src_tokens"].size(0)
    finally:
        for i, attn in attns.items():
            attn.record_logits = False
            attn.recorded_logits = None
            terms[i].record = False
            terms[i].last_term = None
    return [
        {"layer": i, "awsl_syntax": float(sums[i][0] / max(count, 1)),
         "awsl_content": float(sums[i][1] / max(count, 1)), "sentences": count}
        for i in layers
    ]


def tsv_writer(rows: Sequence[Dict[str, float]]) -> Callable[[str], None]:
    """A writer of the table, one row per syntax layer (for ``atomic_write_all``)."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["layer", "awsl_syntax", "awsl_content", "sentences"])
            for r in rows:
                writer.writerow([r["layer"], f"{r['awsl_syntax']:.6f}", f"{r['awsl_content']:.6f}", r["sentences"]])

    return write


def write_tsv(rows: Sequence[Dict[str, float]], path: str) -> None:
    """The table written to a temporary name, then renamed into place."""
    atomic_write_all([(path, tsv_writer(rows))])


def plot_awsl(rows: Sequence[Dict[str, float]], path: str, title: str = "") -> None:
    """Figure 3 of Xie et al. (2021) written to ``path`` (PNG)."""
    atomic_write_all([(path, figure_writer(awsl_figure(rows, title)))])


def awsl_figure(rows: Sequence[Dict[str, float]], title: str = ""):
    """The figure of Xie et al. (2021)'s Figure 3: syntax share (red) and content share (blue) over the syntax layers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["layer"] for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(xs, [r["awsl_syntax"] for r in rows], "o-", color="red", label="AWSL (syntax logits)")
    ax.plot(xs, [r["awsl_content"] for r in rows], "s-", color="blue", label="standard attention logits")
    ax.set_xlabel("encoder layer with syntactic position (0-based)")
    ax.set_ylabel("average weight")
    ax.set_ylim(0.0, 1.0)
    ax.set_xticks(xs)
    ax.legend(loc="best")
    if title:
        ax.set_title(plot_text(title))
    fig.tight_layout()
    return fig


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    return run_command("fairseq-syntax-awsl", _main, argv)


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    # fairseq's wav2vec2_classification module sets the root logger to DEBUG when imported
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    if not os.path.basename(args.out):
        raise InputError(repr(args.out), None, "--out names no file: give a prefix such as awsl/valid")
    for suffix in (".tsv", ".png"):
        check_outside(args.out + suffix, args.data, "--out", "the data-bin")  # before any folder is made
    if not os.path.isfile(args.path):
        raise InputError(args.path, None, "not found: --path names the checkpoint file to analyse")
    made = make_output_folder(args.out)
    try:
        for suffix in (".tsv", ".png"):
            check_output_path(args.out + suffix, [args.path], "--out")
        model, _task, dataset = load(args.data, args.path, args.split, args.cpu, args.allow_other_data_bin)
        try:
            rows = compute_awsl(model, dataset, args.max_sentences, args.batch_size)
        except ValueError as err:
            print(f"fairseq-syntax-awsl: error: {one_line(args.path)}: {one_line(str(err))}", file=sys.stderr)
            remove_empty_folders(made)
            return 2
        figure = awsl_figure(rows, title=f"AWSL, {args.split} ({rows[0]['sentences']} sentences)")
        atomic_write_all([(args.out + ".tsv", tsv_writer(rows)), (args.out + ".png", figure_writer(figure))])
    except BaseException:
        remove_empty_folders(made)  # a failed run leaves no folder of its own behind
        raise
    for r in rows:
        print(f"layer {r['layer']}\tAWSL {r['awsl_syntax']:.4f}\tcontent {r['awsl_content']:.4f}")
    print(f"wrote {one_line(args.out)}.tsv and {one_line(args.out)}.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
