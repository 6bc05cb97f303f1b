"""CPU proxy of GPU cost: kernel-launching ATen ops, fused attention, saved (B, H, T, S)
tensors and host-device syncs, per model family, on one batch of held-out data. Eager mode, any CPU.

    OMP_NUM_THREADS=1 python benchmarks/op_profile.py runs/multi30k_en_fr/data-bin \\
        --out benchmarks/results/op_profile_cpu.json

Every family is built through fairseq's task API exactly as ``model_speed.py`` builds it (its
``build()``; ``transformer_nsd*`` with ``label_smoothed_cross_entropy_with_nsd``), at base size by
default (attention families: 6+6 layers, 512 wide, 8 heads, FFN 2048, all embeddings shared, PASCAL
with 5 of 8 parent heads as ``train_speed.py``; ``lstm`` and ``tree2seq``: 1 layer, 512 wide). One
batch of the ``valid`` subset (``--max-tokens 4096``, the middle one of the length-sorted, unshuffled
batches: ``--batch-index``) is drawn once, with every side input any model reads, and each model gets
its share (``model_inputs.for_model``, plus the ``phrase_mask`` it drops: :func:`share`). The
families whose target side is parsed (``transformer_nsd_target``, ``transformer_nsd_both``) are
skipped with a note on a data-bin whose target is not parsed (``runs/multi30k_dep_rel/data-bin``);
``runs/multi30k_en_fr/data-bin`` has both.

Per family (ratios to ``transformer`` for the attention families, to ``lstm`` for ``tree2seq``):

- **ops per training step**: criterion forward (model and loss) + ``loss.backward()`` in train
  mode (dropout on), the optimizer excluded, after one untimed forward of the same batch under
  ``no_grad`` (so that one-off work such as fairseq's future-mask cache is not counted). An op is an
  ATen operator call that reaches a backend kernel, as a ``TorchDispatchMode`` sees it: below
  autograd (backward ops included) and after ``CompositeImplicitAutograd`` decomposition; what a
  kernel calls internally is not counted again, so one op is about one kernel launch on a GPU.
  Not counted (listed per family under ``excluded``):

  * views and aliases, which launch no kernel: every op whose schema returns an alias of an input
    without writing it (``OpOverload.is_view``: ``aten::view``, ``t``, ``transpose``, ``permute``,
    ``expand``, ``unsqueeze``, ``squeeze``, ``select``, ``slice``, ``narrow``, ``as_strided``,
    ``alias``, ``detach``, ``lift_fresh``, ``_reshape_alias``, ``split``, ``split_with_sizes``,
    ``chunk``, ``unbind``, ``unfold``, ``diagonal``, ...) and the names in :data:`VIEW_OPS`
    (``aten::_unsafe_view``, a view whose schema claims a fresh tensor, and the in-place metadata
    changes ``as_strided_``, ``squeeze_``, ``unsqueeze_``, ``transpose_``, ``t_``, ``detach_``,
    ``swapdims_``, ``swapaxes_``, ``set_``);
  * allocations without a kernel, :data:`ALLOCATION_OPS` (``aten::empty``, ``empty_like``,
    ``empty_strided``, ``new_empty``, ``new_empty_strided``), reported apart.

- **ops per decoder step**: the model in eval mode, ``no_grad``, the batch repeated for a beam of
  ``--beam`` (5); the encoder runs once (``encoder_forward``), then fairseq's ``EnsembleModel``
  (what ``SequenceGenerator`` calls) feeds ``<eos>`` and the first ``--prefix`` (5) target tokens
  one at a time; the step counted is the last: ``reorder_incremental_state`` +
  ``reorder_encoder_out`` (identity order) + ``forward_decoder`` (log-probabilities of the last
  position), i.e. the model's share of one beam-search step.

- **attention modules without SDPA**: every fairseq ``MultiheadAttention`` (or subclass), by module
  name, whose forward in the training step ran no fused ``scaled_dot_product_attention`` kernel
  (an ``aten::_scaled_dot_product_*`` op other than ``_scaled_dot_product_attention_math``, seen by
  the dispatch mode) and did not call ``torch.nn.functional.scaled_dot_product_attention`` itself
  (seen by a ``TorchFunctionMode``: a call that the CPU sends to the math path still counts as
  SDPA, and is flagged ``math_fallback``). Modules given relative *values* (a relative table with a
  value table, through ``relative_scope``) are marked: they need the probabilities. fairseq's own
  encoder-decoder attention (``static_kv``) never takes the fused path, in ``transformer`` too: the
  goal is checked on the modules that are fused in ``transformer`` (same name) or have no
  counterpart there.

- **saved (B, H, T, S) bytes**: tensors saved for backward in the training step
  (``torch.autograd.graph.saved_tensors_hooks``) shaped ``(B, H, T, S)`` or ``(B*H, T, S)``, B the
  sentences of the batch, H the attention heads, T and S each the source or target length of the
  batch; each storage once, at most its tensor's ``numel * element_size`` (an expanded view costs
  its storage).

- **host-device syncs**: the ops in :data:`SYNC_OPS` (``_local_scalar_dense``: ``.item()``,
  ``int()``/``float()``/``bool()`` of a tensor, ``if tensor``; ``nonzero``, ``masked_select``,
  ``bincount``, ``unique``..., ``repeat_interleave`` without ``output_size``, ``histc`` without a
  range, ``equal``), boolean-mask indexing (``aten::index`` with a bool or uint8 index;
  ``index_put_`` with one, unless the value is a single element, which ATen turns into
  ``masked_fill_``), and, at the Python level, ``Tensor.tolist``, ``.numpy``, ``.cpu``,
  ``.to("cpu")`` (a device given as a string), ``__array__`` (on a CPU they dispatch no op; on a
  GPU they copy to the host).
  Each is attributed to the innermost Python frame outside ``torch`` and the standard library: a
  file under ``fairseq_syntax/`` or ``fairseq_syntax_core/`` makes it **ours** (reported as
  ``path:line``); one under ``fairseq/`` makes it fairseq's own (exempt, counted apart, with the
  innermost frame of ours further out, if any, as ``via``); anything else is ``other``. Phases:
  ``train_forward``, ``train_backward``, ``encoder_forward``, ``decoder_step`` (the syncs of all
  ``--prefix`` + 1 steps).

The JSON (``--out``, also printed) holds the command, torch's version, the batch, per family the
numbers and ratios, and ``goals``: ops per step <= 1.05x ``transformer`` for every attention family
(``tree2seq`` <= 1.15x ``lstm``), SDPA in every attention layer without relative values, no sync
from our code. ``tests/test_no_host_syncs.py`` imports :func:`profile_family` at small size.
"""

import argparse
import collections
import json
import os
import platform
import shlex
import sys
import time
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # imported by path (tests): model_speed, model_inputs, train_speed live here
    sys.path.insert(0, HERE)

import torch  # noqa: E402

from model_inputs import for_model  # noqa: E402
from op_recorder import (  # noqa: E402
    ALLOCATION_OPS, OpRecorder, SYNC_METHODS, SYNC_OPS, SavedBHTS, VIEW_OPS, attention_modules, attention_watch, recording,
)
from model_speed import build  # noqa: E402
from train_speed import RECURRENT, model_flags, pascal_heads  # noqa: E402

#: every family, in report order; the baseline of each
FAMILIES = (
    "transformer", "transformer_rel", "transformer_dep", "transformer_dep_rel", "transformer_gps",
    "transformer_pascal", "transformer_structural", "transformer_syntax_embed", "transformer_syntax_spe",
    "transformer_nsd", "transformer_nsd_target", "transformer_nsd_both", "lstm", "tree2seq",
)
ATTENTION_BASELINE, RECURRENT_BASELINE = "transformer", "lstm"
#: ops-per-step goals (ratio to the baseline): syntax should cost little over fairseq's own model
OPS_GOAL = {ATTENTION_BASELINE: 1.05, RECURRENT_BASELINE: 1.15}



def draw_batch(task, subset: str = "valid", max_tokens: int = 4096, index: Optional[int] = None):
    """One batch of ``subset`` (length-sorted, unshuffled, seed 1): the ``index``-th, the middle one by default."""
    task.load_dataset(subset)
    itr = task.get_batch_iterator(dataset=task.dataset(subset), max_tokens=max_tokens, seed=1,
                                  required_batch_size_multiple=8).next_epoch_itr(shuffle=False)
    batches = list(itr)
    return batches[len(batches) // 2 if index is None else index]


def share(sample: Dict, model) -> Dict:
    """``model_inputs.for_model``, plus the ``NAME_mask`` the task collates with each node stream ``NAME``
    (tree2seq's ``phrase_mask``), which ``for_model`` drops since the model names only ``phrase``."""
    own = for_model(sample, model)
    src = own["net_input"].get("src_syntax")
    if src is not None:
        given = sample["net_input"]["src_syntax"]
        src.update({f"{k}_mask": given[f"{k}_mask"] for k in list(src) if f"{k}_mask" in given})
    return own


def profile_family(task, model, criterion, sample, beam: int = 5, prefix: int = 5, train: bool = True,
                   inference: bool = True, backward: bool = True, warmup: bool = True) -> Dict:
    """The numbers of one model on ``sample`` (already the model's share: ``for_model``).

    ``train``: the training step (``train_forward`` + ``train_backward`` when ``backward``), after an
    untimed ``no_grad`` forward when ``warmup``; ``inference``: ``encoder_forward`` and ``prefix`` + 1
    incremental decoder steps at ``beam`` x the batch (``decoder_step``: the ops of the last one, the
    syncs of all). Returns a JSON-able dict.
    """
    recorder = OpRecorder()
    out: Dict = {}
    net_input = sample["net_input"]
    heads = sorted({m.num_heads for m in attention_modules(model).values()})
    src_len, tgt_len = net_input["src_tokens"].size(1), net_input["prev_output_tokens"].size(1)
    if train:
        model.train()
        model.zero_grad(set_to_none=True)
        if warmup:
            with torch.no_grad():
                criterion(model, sample)
        calls: Dict[str, List[Dict]] = collections.defaultdict(list)
        saved = SavedBHTS(net_input["src_tokens"].size(0), heads, (src_len, tgt_len))
        start = time.perf_counter()
        with attention_watch(model, recorder, calls):
            with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                with recording(recorder, "train_forward"):
                    loss, _, _ = criterion(model, sample)
            if backward:
                with recording(recorder, "train_backward"):
                    loss.backward()
        out["train_seconds"] = round(time.perf_counter() - start, 2)
        model.zero_grad(set_to_none=True)
        del loss
        forward, back = sum(recorder.ops["train_forward"].values()), sum(recorder.ops["train_backward"].values())
        out["train_step"] = {"ops": forward + back, "forward_ops": forward, "backward_ops": back}
        out["attention"] = _attention_report(calls)
        out["saved_bhts"] = saved.report() if heads else None
    if inference:
        out["decoder_step"] = {"ops": _inference(task, model, sample, recorder, beam, prefix)}
        out["encoder_forward"] = {"ops": sum(recorder.ops["encoder_forward"].values())}
    phases = [p for p in ("train_forward", "train_backward", "encoder_forward", "decoder_step")
              if p in recorder.ops or p in recorder.views]
    out["ops_by_name"] = {p: dict(recorder.ops[p].most_common()) for p in phases}
    out["excluded"] = {p: {"views": dict(recorder.views[p].most_common()),
                           "allocations": dict(recorder.allocations[p].most_common())} for p in phases}
    out["syncs"] = _sync_report(recorder.syncs)
    return out


def _inference(task, model, sample, recorder: OpRecorder, beam: int, prefix: int) -> int:
    """Encoder once, then ``prefix`` + 1 incremental steps as beam search makes them; ops of the last step."""
    model.eval()
    generator = task.build_generator([model], argparse.Namespace(beam=beam, max_len_a=0, max_len_b=prefix + 2))
    ensemble = generator.model
    net_input = {k: v for k, v in sample["net_input"].items() if k != "tgt_syntax"}  # predicted at generation
    bsz = net_input["src_tokens"].size(0)
    order = torch.arange(bsz).view(-1, 1).repeat(1, beam).view(-1)
    prev = sample["net_input"]["prev_output_tokens"][:, : prefix + 1]
    dictionary = task.target_dictionary
    prev = prev.masked_fill(prev.eq(dictionary.pad()), dictionary.unk()).index_select(0, order)
    identity = torch.arange(bsz * beam)
    incremental = [torch.jit.annotate(Dict[str, Dict[str, Optional[torch.Tensor]]], {})]
    with torch.no_grad():
        with recording(recorder, "encoder_forward"):
            encoder_outs = ensemble.forward_encoder(net_input)
        encoder_outs = ensemble.reorder_encoder_out(encoder_outs, order)
        for step in range(prefix + 1):  # ops: the last step's; syncs: all steps'
            for counts in (recorder.ops, recorder.views, recorder.allocations):
                counts["decoder_step"].clear()
            with recording(recorder, "decoder_step"):
                if step:
                    ensemble.reorder_incremental_state(incremental, identity)
                    encoder_outs = ensemble.reorder_encoder_out(encoder_outs, identity)
                ensemble.forward_decoder(prev[:, : step + 1], encoder_outs, incremental, 1.0)
    return sum(recorder.ops["decoder_step"].values())


def _attention_report(calls: Dict[str, List[Dict]]) -> Dict:
    uses = {name: all(c["fused"] or c["called"] for c in cs) for name, cs in calls.items()}
    return {
        "modules_called": len(calls),
        "sdpa": sorted(n for n, ok in uses.items() if ok),
        "no_sdpa": sorted(n for n, ok in uses.items() if not ok),
        "math_fallback": sorted(n for n, cs in calls.items() if any(c["called"] and not c["fused"] for c in cs)),
        "relative_values": sorted(n for n, cs in calls.items() if any(c["relative_values"] for c in cs)),
    }


def _sync_report(syncs: collections.Counter) -> Dict:
    rows = [{"phase": phase, "site": site, "op": op, "calls": n, **({"via": via} if via else {})}
            for (phase, kind, site, op, via), n in sorted(syncs.items(), key=lambda kv: kv[0][:4]) if kind == "ours"]
    exempt = collections.Counter()
    sites = collections.defaultdict(collections.Counter)
    for (phase, kind, site, op, via), n in syncs.items():
        if kind != "ours":
            exempt[kind] += n
            sites[kind][f"{phase} {site} {op}" + (f" via {via}" if via else "")] += n
    per_phase = collections.Counter()
    for (phase, kind, *_), n in syncs.items():
        per_phase[f"{phase}:{kind}"] += n
    return {"ours": rows, "ours_calls": sum(r["calls"] for r in rows), "ours_sites": sorted({r["site"] for r in rows}),
            "by_phase": dict(sorted(per_phase.items())), "exempt_calls": dict(exempt),
            "exempt": {k: dict(v) for k, v in sites.items()}}


def family_flags(arch: str, dims: Sequence[str], rnn_dims: Sequence[str], extra: Sequence[str] = ()) -> List[str]:
    """The flags ``build()`` gets: ``rnn_dims`` for the recurrent families, else ``dims`` (+ PASCAL's parent heads)."""
    if arch.startswith(RECURRENT):
        return [*rnn_dims, *extra]
    flags = list(dims)
    heads = int(flags[flags.index("--encoder-attention-heads") + 1]) if "--encoder-attention-heads" in flags else 8
    return [*flags, *pascal_heads(arch, heads), *extra]


def baseline_of(arch: str) -> str:
    return RECURRENT_BASELINE if arch.startswith(RECURRENT) else ATTENTION_BASELINE


def _ratio(value, base) -> Optional[float]:
    return round(value / base, 3) if value is not None and base else None


#: why a family stays over a goal (what its extra work is), reported beside the numbers
WHY: Dict[str, str] = {
    "transformer_rel": "relative values (Omote et al. 2019, eq. 17) need the attention probabilities: the explicit softmax "
                       "(bmm, masks, softmax, dropout, bmm) and the bucket scatter and value product in every "
                       "layer, decoder included (--decoder-rel-seq-k); the fused form with the probabilities as "
                       "extra value columns was measured slower on an H100 (0.58x against 0.75x)",
    "transformer_dep": "relative dependency-depth keys and values in every encoder layer (see transformer_rel)",
    "transformer_dep_rel": "sequence and depth relative keys and values in every encoder layer and sequence ones in "
                           "the decoder (see transformer_rel)",
    "transformer_gps": "Xie et al. (2021)'s path LSTM runs one step per tree level (about 10 small ops forward and backward "
                       "per level); the eq. 5 term itself goes to the fused kernel as a bias",
    "transformer_structural": "structural relative buckets (ancestor closure) and relative keys and values in every "
                              "encoder layer",
    "transformer_nsd": "Ma et al. (2019)'s distance embedding, predictor and three losses: about a hundred small "
                       "elementwise ops per step",
    "transformer_nsd_target": "Ma et al. (2019) on the decoder: the distance input, predictor and losses at every target "
                              "position",
    "transformer_nsd_both": "both sides of Ma et al. (2019) (see transformer_nsd and transformer_nsd_target)",
    "transformer_pascal": "PASCAL multiplies the scores by the parent weights (N = S * D_p): no float mask of the "
                          "fused kernel expresses a product, so its one parent-scaled layer keeps the explicit softmax",
    "tree2seq": "the Tree-LSTM's one step per tree level (merge heights and merges per height come from the "
                "collater, so no sync) and the sequential nn.LSTM over the words",
}


def explained(result: Dict) -> Dict:
    """``goals(...)`` with ``why`` beside every family over a goal (:data:`WHY`)."""
    ops = result["ops_per_step"]
    ops["why"] = {arch: WHY.get(arch, "") for arch in ops["over"]}
    sdpa = result["sdpa_without_relative_values"]
    sdpa["why"] = {arch: WHY.get(arch, "") for arch in sdpa["missing"]}
    syncs = result["no_syncs_from_our_code"]
    syncs["why"] = {arch: WHY.get(arch, "") for arch in syncs["sites"]}
    return result


def goals(rows: Dict[str, Dict]) -> Dict:
    """The CPU-proxy goals, checked on ``rows`` (the per-family reports, with ratios)."""
    ops_over, ops_checked = {}, {}
    sdpa_missing, sync_sites = {}, {}
    base_attn = rows.get(ATTENTION_BASELINE, {}).get("attention") or {}
    base_fused = set(base_attn.get("sdpa", ()))
    base_names = base_fused | set(base_attn.get("no_sdpa", ()))
    for arch, row in rows.items():
        if "skipped" in row or "error" in row:
            continue
        base = baseline_of(arch)
        ratio = row.get("train_step", {}).get("ratio")
        if arch != base and ratio is not None:
            ops_checked[arch] = ratio
            if ratio > OPS_GOAL[base]:
                ops_over[arch] = ratio
        attn = row.get("attention") or {}
        missing = [n for n in attn.get("no_sdpa", ()) if n not in attn.get("relative_values", ())
                   and (n in base_fused or n not in base_names)]
        if missing:
            sdpa_missing[arch] = missing
        if row.get("syncs", {}).get("ours_calls"):
            sync_sites[arch] = [f"{r['phase']} {r['site']} {r['op']} x{r['calls']}" for r in row["syncs"]["ours"]]
    return {
        "skipped": sorted(arch for arch, row in rows.items() if "skipped" in row or "error" in row),
        "ops_per_step": {"limit": {"attention families vs transformer": OPS_GOAL[ATTENTION_BASELINE],
                                   "tree2seq vs lstm": OPS_GOAL[RECURRENT_BASELINE]},
                         "met": not ops_over, "ratios": ops_checked, "over": ops_over},
        "sdpa_without_relative_values": {
            "met": not sdpa_missing, "missing": sdpa_missing,
            "note": "attention modules without a fused SDPA kernel in the training step, other than those with "
                    "relative values and those that are not fused in transformer either (fairseq's "
                    "encoder-decoder attention, static_kv)"},
        "no_syncs_from_our_code": {"met": not sync_sites, "sites": sync_sites},
    }


def table(rows: Dict[str, Dict]) -> str:
    lines = ["| model | ops/step | ratio | decoder-step ops | ratio | attention w/o SDPA | saved BHTS MiB | "
             "syncs/step (all) | syncs ours (all phases) | sites of ours |", "|---" * 10 + "|"]
    for arch, row in rows.items():
        if "skipped" in row or "error" in row:
            lines.append(f"| `{arch}` | {row.get('skipped') or row.get('error')} ||||||||")
            continue
        t, d, a = row.get("train_step", {}), row.get("decoder_step", {}), row.get("attention") or {}
        bhts = row.get("saved_bhts")
        s = row["syncs"]
        sites = ", ".join(sorted({f"{r['site']} {r['op'].replace('aten::', '')}" for r in s["ours"]}))
        step_syncs = sum(v for k, v in s["by_phase"].items() if k.startswith("train_"))
        lines.append(
            f"| `{arch}` | {t.get('ops')} | {t.get('ratio')} | {d.get('ops')} | {d.get('ratio')} | "
            f"{len(a.get('no_sdpa', ()))}/{a.get('modules_called', 0)} | "
            f"{'-' if bhts is None else round(bhts['bytes'] / 2**20, 1)} | "
            f"{step_syncs} | {s['ours_calls']} | "
            f"{sites} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_bin")
    parser.add_argument("--archs", default=",".join(FAMILIES))
    base = argparse.Namespace(dim=512, layers=6)
    parser.add_argument("--dims", default=" ".join(model_flags("transformer", 8, base)),
                        help="attention families' flags (PASCAL also gets --pascal-heads 5/8 of the heads)")
    parser.add_argument("--rnn-dims", default=" ".join(model_flags("lstm", 8, base)), help="lstm and tree2seq's flags")
    parser.add_argument("--model-flags", action="append", default=[], metavar="ARCH=FLAGS",
                        help="extra flags for one model only, last (repeatable)")
    parser.add_argument("--subset", default="valid")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--batch-index", type=int, default=None,
                        help="which batch of the length-sorted subset (default: the middle one)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--prefix", type=int, default=5, help="target tokens fed before the decoder step counted")
    parser.add_argument("--no-warmup", action="store_true", help="count the first forward's one-off work too")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", help="write the JSON here too")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    archs = args.archs.split(",")
    own: Dict[str, List[str]] = collections.defaultdict(list)
    for item in args.model_flags:
        arch, sep, flags = item.partition("=")
        if not sep or arch not in archs:
            parser.error(f"--model-flags {item!r}: expected ARCH=FLAGS with ARCH one of {archs}")
        own[arch].extend(shlex.split(flags))

    from fairseq_syntax_core.errors import DataBinError

    rows: Dict[str, Dict] = {}
    built = {}
    device = torch.device("cpu")
    for arch in archs:
        torch.manual_seed(1)
        flags = family_flags(arch, shlex.split(args.dims), shlex.split(args.rnn_dims), own[arch])
        try:  # the task refuses a model that trains on target syntax the data-bin lacks (build or request)
            task, model, criterion, _ = build(args.data_bin, arch, flags, device)
            task.request_inputs(model, require_target=True)
        except DataBinError as error:
            rows[arch] = {"skipped": f"needs a data-bin with a parsed target: {error}"}
            continue
        built[arch] = (task, model, criterion, flags)
        rows[arch] = {}
    # one batch with every side input any model reads; each model gets its share
    feeder = next(iter(built.values()))[0]
    for task, model, _, _ in built.values():
        feeder.request_inputs(model, require_target=True)
    sample = draw_batch(feeder, args.subset, args.max_tokens, args.batch_index)
    net = sample["net_input"]
    batch = {"subset": args.subset, "max_tokens": args.max_tokens, "batch_index": args.batch_index,
             "sentences": int(sample["nsentences"]), "source_length": int(net["src_tokens"].size(1)),
             "target_length": int(net["prev_output_tokens"].size(1)), "target_tokens": int(sample["ntokens"]),
             "source_tokens": int(net["src_lengths"].sum())}
    print(f"batch: {json.dumps(batch)}", file=sys.stderr)
    for arch, (task, model, criterion, flags) in built.items():
        start = time.perf_counter()
        torch.manual_seed(1)
        try:
            row = profile_family(task, model, criterion, share(sample, model), beam=args.beam,
                                 prefix=args.prefix, warmup=not args.no_warmup)
        except Exception as error:  # one family's failure is reported, the others still run
            row = {"error": f"{type(error).__name__}: {error}"}
        row["flags"] = " ".join(flags)
        row["parameters"] = sum(p.numel() for p in model.parameters())
        row["seconds"] = round(time.perf_counter() - start, 1)
        rows[arch] = row
        built[arch] = None  # free the model
        print(f"{arch}: {row.get('train_step', {}).get('ops')} ops/step, {row['seconds']} s", file=sys.stderr)
    for arch, row in rows.items():
        base = rows.get(baseline_of(arch), {})
        for key in ("train_step", "decoder_step", "encoder_forward"):
            if key in row and key in base:
                row[key]["ratio"] = _ratio(row[key]["ops"], base[key]["ops"])
                row[key]["baseline"] = baseline_of(arch)
    report = {
        "command": " ".join(["python"] + [shlex.quote(a) for a in sys.argv]),
        "torch": torch.__version__,
        "device": f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads), eager",
        "batch": batch, "beam": args.beam, "prefix": args.prefix, "warmup": not args.no_warmup,
        "rules": {
            "counted": "ATen ops reaching a kernel (TorchDispatchMode, below autograd), views and allocations excluded",
            "views": "OpOverload.is_view, and " + ", ".join(sorted(VIEW_OPS)),
            "allocations": sorted(ALLOCATION_OPS),
            "sync_ops": sorted(SYNC_OPS) + ["aten::index (bool/uint8 index)",
                                            "aten::index_put_ (bool/uint8 index, value of more than 1 element)",
                                            "aten::repeat_interleave (no output_size)", "aten::histc (no range)"],
            "sync_methods": sorted(f"Tensor.{m}" for m in SYNC_METHODS) + ['Tensor.to("cpu")'],
            "ours": "innermost frame outside torch and the standard library under fairseq_syntax/ or "
                    "fairseq_syntax_core/",
        },
        "seconds": round(time.perf_counter() - started, 1),
        "families": rows,
        "goals": explained(goals(rows)),
    }
    text = json.dumps(report, indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(text)
    print(table(rows), file=sys.stderr)


if __name__ == "__main__":
    main()
