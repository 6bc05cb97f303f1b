"""Recording what a forward and backward dispatch, for ``op_profile.py``: kernel ops, host syncs and the frame
that caused each, and attention-sized tensors saved for the backward (the CPU proxy of GPU cost)."""

import collections
import contextlib
import os
import sys
import sysconfig
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


#: views by name that ``OpOverload.is_view`` misses (no kernel): a schema-less view and in-place metadata changes
VIEW_OPS = frozenset({
    "aten::_unsafe_view", "aten::as_strided_", "aten::squeeze_", "aten::unsqueeze_", "aten::transpose_",
    "aten::t_", "aten::detach_", "aten::swapdims_", "aten::swapaxes_", "aten::set_",
})
#: allocations that launch no kernel (reported apart, not counted)
ALLOCATION_OPS = frozenset({
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
})
#: ops that make the host wait for the device (on a GPU), whatever their arguments
SYNC_OPS = frozenset({
    "aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::equal", "aten::nonzero",
    "aten::nonzero_numpy", "aten::argwhere", "aten::masked_select", "aten::bincount", "aten::_unique",
    "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::unique_dim_consecutive",
})
#: Tensor methods that copy to the host (Python level; no op is dispatched for them on a CPU)
SYNC_METHODS = frozenset({"tolist", "numpy", "cpu", "__array__"})
#: fused attention kernels (``_scaled_dot_product_attention_math`` is the unfused path, decomposed)
SDPA_PREFIX = "aten::_scaled_dot_product_"
SDPA_UNFUSED = frozenset({"aten::_scaled_dot_product_attention_math",
                          "aten::_scaled_dot_product_attention_math_for_mps"})

_STDLIB = tuple(os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib"))
_OURS = ("fairseq_syntax", "fairseq_syntax_core")


def _frame_kind(filename: str) -> Tuple[str, Optional[str]]:
    """('ours' | 'fairseq' | 'torch' | 'stdlib' | 'other', path from the package folder) of a source file."""
    parts = filename.replace("\\", "/").split("/")
    for i in range(len(parts) - 1, -1, -1):  # the innermost package folder decides (site-packages/torch/...)
        if parts[i] in _OURS:
            return "ours", "/".join(parts[i:])
        if parts[i] == "fairseq":
            return "fairseq", "/".join(parts[i:])
        if parts[i] == "torch":
            return "torch", None
    if filename.startswith("<") or os.path.realpath(filename).startswith(_STDLIB):
        return "stdlib", None
    return "other", os.path.relpath(filename) if os.path.isabs(filename) else filename


def sync_site(frame) -> Tuple[str, str, Optional[str]]:
    """(kind, ``path:line``, innermost ``path:line`` of ours) for the Python stack from ``frame`` outward.

    The kind is that of the innermost frame outside torch and the standard library: ``ours`` (under
    ``fairseq_syntax/`` or ``fairseq_syntax_core/``), ``fairseq`` or ``other``.
    """
    kind, site, ours = None, None, None
    while frame is not None:
        k, path = _frame_kind(frame.f_code.co_filename)
        if k not in ("torch", "stdlib") and frame.f_code not in _OWN_CODE:
            where = f"{path}:{frame.f_lineno}"
            if kind is None:
                kind, site = k, where
            if k == "ours":
                ours = where
                break
        frame = frame.f_back
    return kind or "other", site or "?", ours


class OpRecorder(TorchDispatchMode):
    """Counts the ops reaching a kernel, per phase; records syncs and fused attention calls."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "none"
        self.ops: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.views: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.allocations: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.syncs: collections.Counter = collections.Counter()  # (phase, kind, site, op, via) -> calls
        self.fused_sdpa = 0  # fused attention forward kernels so far
        self.sdpa_calls = 0  # F.scaled_dot_product_attention calls so far (set by SyncMethods)

    def record_sync(self, op: str, depth: int = 2) -> None:
        kind, site, via = sync_site(sys._getframe(depth))
        self.syncs[(self.phase, kind, site, op, via if kind != "ours" else None)] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in ALLOCATION_OPS:
            self.allocations[self.phase][name] += 1
        elif name in VIEW_OPS or func.is_view:
            self.views[self.phase][name] += 1
        else:
            self.ops[self.phase][name] += 1
            if name.startswith(SDPA_PREFIX) and name not in SDPA_UNFUSED and "backward" not in name:
                self.fused_sdpa += 1
            if _is_sync(name, func._overloadname, args, kwargs):
                self.record_sync(name if name != "aten::index" and "index_put" not in name else f"{name} (bool mask)")
        return func(*args, **kwargs)


def _is_sync(name: str, overload: str, args, kwargs) -> bool:
    if name in SYNC_OPS:
        return True
    if name == "aten::repeat_interleave":  # the Tensor overload (repeats only) sizes its output from the repeats
        return overload == "Tensor" and kwargs.get("output_size") is None
    if name == "aten::histc":  # no range given: the kernel reads min and max
        lo = args[2] if len(args) > 2 else kwargs.get("min", 0)
        hi = args[3] if len(args) > 3 else kwargs.get("max", 0)
        return lo == hi == 0
    if name in ("aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_"):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        masked = any(t is not None and t.dtype in (torch.bool, torch.uint8) for t in indices)
        if masked and name != "aten::index":
            values = args[2] if len(args) > 2 else kwargs.get("values")
            return not (isinstance(values, torch.Tensor) and values.numel() == 1)
        return masked
    return False


class PythonLevel(TorchFunctionMode):
    """Host copies that dispatch no op on a CPU (``.tolist()``, ``.cpu()``...) and direct SDPA calls."""

    def __init__(self, recorder: OpRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in SYNC_METHODS or (name == "to" and _to_host(args[1:], kwargs)):
            self.recorder.record_sync(f"Tensor.{name}")
        elif func is torch.nn.functional.scaled_dot_product_attention:
            self.recorder.sdpa_calls += 1
        return func(*args, **kwargs)


def _to_host(args, kwargs) -> bool:
    """``.to("cpu")``: a device named by a string (``.to(x.device)`` is no copy on a GPU; a CPU run cannot
    tell a ``torch.device`` of the host from one of the tensor's own device)."""
    return any(isinstance(v, str) and v.split(":")[0] == "cpu" for v in list(args) + [kwargs.get("device")])


#: the frames of this module's modes, skipped when a sync is attributed
_OWN_CODE = frozenset({OpRecorder.record_sync.__code__, OpRecorder.__torch_dispatch__.__code__,
                       PythonLevel.__torch_function__.__code__})


class SavedBHTS:
    """Tensors saved for backward shaped (B, H, T, S) or (B*H, T, S): each storage once."""

    def __init__(self, batch: int, heads: Sequence[int], lengths: Sequence[int]) -> None:
        self.batch, self.heads, self.lengths = batch, set(heads), set(lengths)
        self.storages: Dict[int, int] = {}
        self.shapes: collections.Counter = collections.Counter()

    def pack(self, tensor):
        if isinstance(tensor, torch.Tensor) and self.heads and self._matches(tuple(tensor.shape)):
            nbytes = tensor.numel() * tensor.element_size()
            try:
                storage = tensor.untyped_storage()
                key, nbytes = storage.data_ptr(), min(nbytes, storage.nbytes())
            except (RuntimeError, NotImplementedError):
                key = id(tensor)
            self.storages[key] = max(self.storages.get(key, 0), nbytes)
            self.shapes[f"{tuple(tensor.shape)} {str(tensor.dtype).replace('torch.', '')}"] += 1
        return tensor

    @staticmethod
    def unpack(tensor):
        return tensor

    def _matches(self, shape) -> bool:
        if len(shape) == 4:
            return shape[0] == self.batch and shape[1] in self.heads and shape[2] in self.lengths \
                and shape[3] in self.lengths
        if len(shape) == 3:
            return shape[0] in {self.batch * h for h in self.heads} and shape[1] in self.lengths \
                and shape[2] in self.lengths
        return False

    def report(self) -> Dict:
        return {"bytes": sum(self.storages.values()), "storages": len(self.storages), "shapes": dict(self.shapes)}


def attention_modules(model) -> Dict[str, torch.nn.Module]:
    from fairseq.modules.multihead_attention import MultiheadAttention

    return {name: m for name, m in model.named_modules() if isinstance(m, MultiheadAttention)}


@contextlib.contextmanager
def attention_watch(model, recorder: OpRecorder, calls: Dict[str, List[Dict]]):
    """Per attention module call: whether a fused SDPA kernel ran / SDPA was called; relative values."""
    handles, stack = [], []

    def pre(name):
        def hook(module, args, kwargs):
            relative = kwargs.get("relative") or getattr(module, "_scoped_relative", None) or ()
            values = any(getattr(table, "value_table", None) is not None for table, *_ in relative)
            stack.append((recorder.fused_sdpa, recorder.sdpa_calls, values))
        return hook

    def post(name):
        def hook(module, args, kwargs, output):
            fused, called, values = stack.pop()
            calls[name].append({"fused": recorder.fused_sdpa > fused, "called": recorder.sdpa_calls > called,
                                "relative_values": values})
        return hook

    for name, module in attention_modules(model).items():
        handles.append(module.register_forward_pre_hook(pre(name), with_kwargs=True))
        handles.append(module.register_forward_hook(post(name), with_kwargs=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def recording(recorder: OpRecorder, phase: str):
    recorder.phase = phase
    with PythonLevel(recorder), recorder:
        yield
