"""The plugin's only patches of fairseq, each wrapping one fairseq function at import time.

Some bad inputs fail inside fairseq before any plugin code runs, with a message that names
no file. The wrappers here turn exactly those failures into one-line errors
(:class:`~fairseq_syntax_preprocess.errors.UserError`, printed without a traceback by the hook
that :func:`install` sets) and change nothing else. Each names the fairseq version it was
written against and has a test (``tests/test_reliability.py``); a fairseq whose function no
longer has the expected signature is left unpatched, with a warning.

=====================================  ======================================  ===========
fairseq function                        what the wrapper adds                   fairseq
=====================================  ======================================  ===========
``checkpoint_utils.load_checkpoint_to_cpu``  an empty, truncated or non-checkpoint   0.12.2,
                                        file is a :class:`CheckpointError`      0.12.3 (main)
                                        naming it (fairseq: ``EOFError: Ran out
                                        of input`` or a zip error, no file), as
                                        is one holding an object not on the
                                        allow-list, or one that loads but is
                                        not shaped as fairseq indexes it (a
                                        list, a string, no settings: fairseq's
                                        TypeError or RuntimeError naming no
                                        file); refuses to read when torch
                                        would not load weights-only
                                        (``checkpoint_loader``)
``checkpoint_utils.torch_persistent_save``  a checkpoint that cannot be written    0.12.2,
``checkpoint_utils.PathManager.copy``   is an OSError naming it, and leaves no  0.12.3 (main)
                                        partial file; checkpoint_best/_last
                                        are copied atomically
                                        (:mod:`.checkpoint_writes`)
``checkpoint_utils.load_checkpoint``    warns when an NSD model would choose    0.12.2,
                                        ``checkpoint_best.pt`` on the loss      0.12.3 (main)
                                        with the distance terms (or a target
                                        reader on gold distances), naming the
                                        metric to use
``fairseq_cli.interactive.buffered_read``  a line of the input that is not UTF-8  0.12.2,
                                        is an :class:`InputError` naming the    0.12.3 (main)
                                        input and the line (fairseq: a bare
                                        ``UnicodeDecodeError`` after decoding
                                        a whole chunk)
``fairseq_cli.interactive.make_batches``  hands each batch's sample ids to the  0.12.2,
                                        task before fairseq calls               0.12.3 (main)
                                        ``inference_step`` (which gets ids
                                        only): rows are matched to their
                                        lines' texts by id, not by equal ids
``fairseq_cli.generate._main``          a failed write of ``--results-path``    0.12.2,
                                        names the file and removes the partial  0.12.3 (main)
                                        one (fairseq: an OSError naming no
                                        file, the partial file left), as does
                                        a refusal (no empty results file)
``fairseq_cli.generate.main``           refuses ``--num-shards``/``--shard-id``,  0.12.2,
                                        which fairseq-generate does not read    0.12.3 (main)
                                        (``fairseq_settings``)
``optim.FairseqOptimizer.load_state_dict``  optimizer state that does not fit   0.12.2,
                                        the parameters (Adam's ``exp_avg`` of   0.12.3 (main)
                                        another shape) is a CheckpointError
                                        naming the file (fairseq: a
                                        RuntimeError in the first update)
``trainer.Trainer.save_checkpoint``     no ``crash.pt`` for a UserError (our    0.12.2,
                                        refusal: nothing to debug); another     0.12.3 (main)
                                        error's line names the crash.pt
``distributed.utils.call_main``         on a machine without GPU (or with     0.12.2,
                                        ``--cpu``): refuses the settings that   0.12.3 (main)
                                        fairseq would run as a silent no-op
                                        (its spawn starts min(GPUs, world
                                        size) = 0 processes and exits 0) or
                                        fail obscurely (nccl, ``pytorch_ddp``'s
                                        GPU device ids, an assertion on the
                                        GPU count), naming the flags that
                                        work; under ``torchrun`` it takes rank
                                        and world size from the environment
                                        (fairseq divides the rank by the GPU
                                        count); fairseq-train's ``--lr -1``,
                                        ``--clip-norm nan``, ``--keep-* -2``
                                        are refused (``fairseq_settings``)
=====================================  ======================================  ===========
"""

import functools
import inspect
import logging
import os
import re
import sys
from typing import Iterator, List

from fairseq_syntax_core import checkpoint_loader, decoding_record
from fairseq_syntax_core.checkpoint_loader import (
    READ_ERRORS, check_optimizer_state, checkpoint_read_error, default_load_problem, load_fairseq_checkpoint,
    size_problem,
)
from fairseq_syntax_core.errors import CheckpointError, InputError, UsageError, UserError
from fairseq_syntax_core.fileio import check_input_file
from fairseq_syntax_core.interrupts import add_error_note, install_error_hook
from fairseq_syntax_core.signal_exceptions import signals_raised
from fairseq_syntax_core.startup import ensure_open_files, ensure_standard_output, program_name

from .checkpoints import caller_only_settings, model_class_problem, stored_task_problem
from .results_file import earlier_results_kept, generate_main
from .fairseq_settings import (  # the checks the wrappers apply
    adopt_torchrun_on_cpu, distributed_cpu_error, generation_shards_error, install_setting_guards,
)
from .checkpoint_writes import wrap_checkpoint_writes
from .command_settings import command_settings_error
from .rank_settings import wrap_distributed_init

#: files fairseq's commands may need open at once (data loader workers pass tensors through descriptors)
OPEN_FILES_NEEDED = 256

logger = logging.getLogger(__name__)

#: the parameters of the wrapped fairseq function, as of fairseq 0.12.2 and main (0.12.3)
_LOAD_CHECKPOINT_PARAMS = ("path", "arg_overrides", "load_on_all_ranks")


def _wrap_load_checkpoint_to_cpu(checkpoint_utils) -> bool:
    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "_fairseq_syntax", False):
        return True
    if tuple(inspect.signature(original).parameters)[:3] != _LOAD_CHECKPOINT_PARAMS:
        logger.warning("fairseq's load_checkpoint_to_cpu has changed: checkpoint errors will not name the file")
        return False

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        unsafe = default_load_problem()  # fairseq leaves weights_only to torch's default
        if unsafe is not None:
            raise CheckpointError(path, None, unsafe)
        if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would block fairseq's read forever
            raise CheckpointError(path, None, "is not a regular file: expected a checkpoint file (.pt)")
        if os.path.isfile(path):  # a local file (fairseq also reads URLs): its structure, before fairseq's
            state = load_fairseq_checkpoint(path, mmap=True)  # upgrade code indexes it (the weights stay on disk)
            problem = model_class_problem(state) or stored_task_problem(state) or \
                (size_problem(state, arg_overrides) if arg_overrides else None)
            if problem is not None:  # a model that evals its settings; --model-overrides sizes fairseq would build
                raise CheckpointError(path, None, problem)
        try:
            state = original(path, arg_overrides, load_on_all_ranks)
            checkpoint_loader.last_read = os.fspath(path)  # names the file if its weights do not fit
            decoding_record.note_read(path, state)  # the run it belongs to, which fairseq-generate's log names
            state = checkpoint_loader.drop_file_settings(state)  # pretrained-embedding files: never opened
            return caller_only_settings(state, arg_overrides)  # its stored --allow-other-data-bin: not obeyed
        except READ_ERRORS as error:
            if isinstance(error, FileNotFoundError):
                raise
            raise checkpoint_read_error(path, error) from error

    load_checkpoint_to_cpu._fairseq_syntax = True  # type: ignore[attr-defined]
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
    return True


_EDGE_SPACE = re.compile(r"^[^\S\t]+|[^\S\t]+$")  # white space but tabs, at either end of a line


def buffered_read(input: str, buffer_size: int) -> Iterator[List[str]]:
    """``fairseq_cli.interactive.buffered_read``, decoding each line alone so errors name it.

    Same contract as fairseq's: ``input`` is a path or ``-`` (standard input); yields lists of
    at most ``buffer_size`` stripped lines.
    """
    name = "<stdin>" if input == "-" else input
    if input != "-":
        check_input_file(input, "--input file")
    stream = sys.stdin.buffer if input == "-" else open(input, "rb")
    buffer: List[str] = []
    try:
        for number, raw in enumerate(stream, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputError(
                    name, number,
                    f"not UTF-8: byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line; "
                    "fairseq-interactive reads UTF-8 text (convert it first, e.g. iconv -f latin1 -t utf-8)",
                ) from None
            buffer.append(_EDGE_SPACE.sub("", line))  # a tab stays: it separates --constraints
            if len(buffer) >= buffer_size:
                yield buffer
                buffer = []
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if buffer:
        yield buffer


def _command_modules(command: str) -> list:
    """fairseq's module of ``command`` (``fairseq_cli.generate``), and its second copy, ``__main__``, when it runs
    as ``python -m fairseq_cli.generate``: that copy's ``main`` looks its helpers up in its own globals, so both
    get the wrappers (the module run kept fairseq's: a refused run emptied earlier results, no decoded line)."""
    import importlib

    try:
        modules = [importlib.import_module(f"fairseq_cli.{command}")]
    except ImportError:
        return []
    running = sys.modules.get("__main__")
    if getattr(getattr(running, "__spec__", None), "name", None) == f"fairseq_cli.{command}":
        modules.append(running)
    return modules


def _wrap_buffered_read(interactive) -> bool:
    original = getattr(interactive, "buffered_read", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None
    if tuple(inspect.signature(original).parameters) != ("input", "buffer_size"):
        logger.warning("fairseq-interactive's buffered_read has changed: input decoding errors will not name the line")
        return False
    buffered_read._fairseq_syntax = True  # type: ignore[attr-defined]
    interactive.buffered_read = buffered_read
    return True


#: the parameters of fairseq_cli.interactive.make_batches, as of fairseq 0.12.2 and main (0.12.3)
_MAKE_BATCHES_PARAMS = ("lines", "cfg", "task", "max_positions", "encode_fn")


def _wrap_make_batches(interactive) -> bool:
    """``fairseq_cli.interactive.make_batches``, handing each batch's sample ids to the task.

    ``interactive.main`` keeps a batch's ids in its ``Batch.ids`` and calls ``inference_step``
    with the source ids only; the task needs the sample ids to match each row with the text it
    keeps for it (:mod:`fairseq_syntax.data.online_parser`): rows with equal ids but different
    texts would otherwise be told apart by nothing. The wrapper calls ``task.set_inference_ids``
    just before it yields a batch, which ``main`` then decodes (it looks ``make_batches`` up as
    a module global, so replacing that global is enough); tasks without it are left alone.
    """
    original = getattr(interactive, "make_batches", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None
    if tuple(inspect.signature(original).parameters) != _MAKE_BATCHES_PARAMS:
        logger.warning(
            "fairseq-interactive's make_batches has changed: source rows whose ids equal another line's "
            "are parsed from dictionary ids"
        )
        return False

    @functools.wraps(original)
    def make_batches(lines, cfg, task, max_positions, encode_fn):
        hand_ids = getattr(task, "set_inference_ids", None)
        for batch in original(lines, cfg, task, max_positions, encode_fn):
            if hand_ids is not None:
                hand_ids(batch.ids)
            yield batch

    make_batches._fairseq_syntax = True  # type: ignore[attr-defined]
    interactive.make_batches = make_batches
    return True


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _wrap_call_main(distributed_utils) -> bool:
    original = getattr(distributed_utils, "call_main", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None
    if tuple(inspect.signature(original).parameters) != ("cfg", "main", "kwargs"):
        logger.warning("fairseq's call_main has changed: multi-rank runs on CPU are not checked")
        return False

    @functools.wraps(original)
    def call_main(cfg, main, **kwargs):
        gpus = _gpu_count()
        dt = cfg.distributed_training
        on_cpu = gpus == 0 or getattr(cfg.common, "cpu", False)
        if on_cpu and not getattr(cfg.common, "tpu", False) and adopt_torchrun_on_cpu(dt, os.environ, max(1, gpus)):
            logger.info(
                f"torchrun without GPU: rank {dt.distributed_rank} of {dt.distributed_world_size} "
                "from the environment (fairseq would divide the rank by the GPU count)"
            )
        error = distributed_cpu_error(cfg, gpus)
        module = getattr(main, "__module__", None)
        if module == "__main__":  # python -m fairseq_cli.train: the module run is named by its spec
            module = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", module)
        if error is None:
            error = command_settings_error(cfg, module)
        if error is not None:
            raise UsageError(error)
        with signals_raised():  # SIGTERM/SIGHUP unwind as Ctrl-C does: one line, exit 128 + N
            return original(cfg, main, **kwargs)

    call_main._fairseq_syntax = True  # type: ignore[attr-defined]
    distributed_utils.call_main = call_main
    return True


def _wrap_load_checkpoint(checkpoint_utils) -> bool:
    """fairseq-train's first call with the checkpoint settings and the model: warn about a misleading
    ``--best-checkpoint-metric`` for NSD models (:func:`~fairseq_syntax.criterions.fed_back_validation.selection_advice`),
    and lock ``--save-dir`` for this run (:mod:`~fairseq_syntax.save_dir_lock`)."""
    original = getattr(checkpoint_utils, "load_checkpoint", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None
    if tuple(inspect.signature(original).parameters)[:2] != ("cfg", "trainer"):
        logger.warning("fairseq's load_checkpoint has changed: NSD checkpoint selection is not checked")
        return False

    @functools.wraps(original)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        from fairseq_syntax.criterions.fed_back_validation import selection_advice, selection_error
        from fairseq_syntax.resume_settings import current_run_id
        from fairseq_syntax.save_dir_lock import lock_save_dir

        model = trainer.get_model() if callable(getattr(trainer, "get_model", None)) else None
        error = selection_error(getattr(cfg, "best_checkpoint_metric", ""), model)
        if error is not None:
            raise UsageError(error)
        advice = selection_advice(getattr(cfg, "best_checkpoint_metric", ""), model)
        if advice is not None:
            logger.warning(advice)
        error = lock_save_dir(getattr(cfg, "save_dir", None), getattr(trainer, "data_parallel_world_size", 1),
                              bool(getattr(cfg, "no_save", False)))
        if error is not None:
            raise UsageError(error)
        run_id = current_run_id()
        if run_id is not None:  # after the settings line: report record tells runs logged into one file apart
            logger.info(f"run {run_id}: the identifier its checkpoints carry")
        return original(cfg, trainer, **passthrough_args)

    load_checkpoint._fairseq_syntax = True  # type: ignore[attr-defined]
    checkpoint_utils.load_checkpoint = load_checkpoint
    return True


def _wrap_generate_main(generate) -> bool:
    """fairseq-generate ``--results-path``: a write that fails (disk full, file too large) names the results
    file, and the partial file this run wrote is removed (fairseq: an OSError naming no file, the half-written
    ``generate-SPLIT.txt`` left behind); so is the empty or partial file of a run that a :class:`UserError`
    stops (a search setting refused when the generator is built, a damaged data-bin file)."""
    original = getattr(generate, "_main", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None
    if tuple(inspect.signature(original).parameters) != ("cfg", "output_file"):
        logger.warning("fairseq-generate's _main has changed: a failed write of --results-path will not name it")
        return False

    @functools.wraps(original)
    def _main(cfg, output_file):
        return generate_main(original, cfg, output_file)

    _main._fairseq_syntax = True  # type: ignore[attr-defined]
    generate._main = _main
    return True


def _wrap_generate_entry(generate) -> bool:
    """``fairseq_cli.generate.main``: refuse :func:`generation_shards_error` before fairseq opens the results file."""
    original = getattr(generate, "main", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None
    if tuple(inspect.signature(original).parameters) != ("cfg",):
        logger.warning("fairseq-generate's main has changed: --num-shards and --shard-id are not checked")
        return False

    @functools.wraps(original)
    def main(cfg):
        error = generation_shards_error(cfg) or command_settings_error(cfg, "fairseq_cli.generate")
        if error is not None:
            raise UsageError(error)
        with signals_raised(), earlier_results_kept(cfg):
            return original(cfg)

    main._fairseq_syntax = True  # type: ignore[attr-defined]
    generate.main = main
    return True


def _wrap_optimizer_load_state_dict(fairseq_optimizer) -> bool:
    """``FairseqOptimizer.load_state_dict``, which fairseq-train's restore calls with the checkpoint's
    ``last_optimizer_state``: state that does not fit the parameters is refused, naming the checkpoint
    (:func:`~fairseq_syntax_core.checkpoint_loader.optimizer_state_problem`), before the first update fails on it."""
    cls = getattr(fairseq_optimizer, "FairseqOptimizer", None)
    original = getattr(cls, "load_state_dict", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None
    if tuple(inspect.signature(original).parameters)[:3] != ("self", "state_dict", "optimizer_overrides"):
        logger.warning("fairseq's FairseqOptimizer.load_state_dict has changed: a checkpoint's optimizer state is "
                       "not checked against the model")
        return False

    @functools.wraps(original)
    def load_state_dict(self, state_dict, optimizer_overrides=None):
        groups = getattr(getattr(self, "_optimizer", None), "param_groups", None)
        if isinstance(groups, list) and all(isinstance(g, dict) and "params" in g for g in groups):
            shapes = [[tuple(p.shape) for p in group["params"]] for group in groups]
            check_optimizer_state(checkpoint_loader.last_read, state_dict, shapes)
        return original(self, state_dict, optimizer_overrides)

    load_state_dict._fairseq_syntax = True  # type: ignore[attr-defined]
    cls.load_state_dict = load_state_dict
    return True


#: the file fairseq's trainer saves its state to when a training step fails
CRASH_FILE = "crash.pt"


def _wrap_crash_save(trainer_module) -> bool:
    """``Trainer.save_checkpoint`` as fairseq's ``train_step`` calls it for ``crash.pt`` (on an error other than a
    RuntimeError in the forward and backward passes, and on NaN gradients): the state at the failure, kept on
    purpose to debug the model with. A :class:`UserError` is our refusal of the inputs or settings, with nothing
    to debug: no crash.pt is written for it (one already there is left alone). For any other error the crash.pt
    is written and named in the error's line."""
    cls = getattr(trainer_module, "Trainer", None)
    original = getattr(cls, "save_checkpoint", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None
    if tuple(inspect.signature(original).parameters)[:3] != ("self", "filename", "extra_state"):
        logger.warning("fairseq's Trainer.save_checkpoint has changed: a refused training step may leave a crash.pt")
        return False

    @functools.wraps(original)
    def save_checkpoint(self, filename, extra_state, *args, **kwargs):
        if os.path.basename(os.fspath(filename)) != CRASH_FILE:
            return original(self, filename, extra_state, *args, **kwargs)
        error = sys.exc_info()[1]  # the error fairseq's train_step is handling
        if isinstance(error, UserError):
            logger.info(f"not saving {filename}: the error is a refusal of the inputs or settings, nothing to debug")
            return None
        if os.path.lexists(filename):  # an earlier crash.pt (or a file of the user's) is never replaced
            stem, suffix = os.path.splitext(os.fspath(filename))
            filename = next(f"{stem}-{n}{suffix}" for n in range(1, 10**6) if not os.path.lexists(f"{stem}-{n}{suffix}"))
        result = original(self, filename, extra_state, *args, **kwargs)
        if error is not None and os.path.isfile(filename):
            add_error_note(error, f"fairseq saved the training state at the failure to {filename} "
                                  "(its debugging aid; delete it when done)")
        return result

    save_checkpoint._fairseq_syntax = True  # type: ignore[attr-defined]
    cls.save_checkpoint = save_checkpoint
    return True


def _nan_detector_without_module_backward_hooks(trainer_module) -> bool:
    """fairseq reruns a step whose gradients are NaN/Inf under its NanDetector, whose module backward hooks make
    torch fail (StopIteration) on outputs that are dicts without tensors (our models' extra outputs): a second
    traceback over the first. The forward hooks alone still name the first module with NaN/Inf outputs."""
    original = getattr(trainer_module, "NanDetector", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None

    class NanDetector(original):  # type: ignore[misc,valid-type]
        _fairseq_syntax = True

        def __init__(self, model, forward=True, backward=True):
            super().__init__(model, forward=forward, backward=False)

    trainer_module.NanDetector = NanDetector
    return True


def install() -> None:
    """Apply every wrapper, and print this project's errors without tracebacks."""
    from fairseq import checkpoint_utils
    from fairseq import trainer as trainer_module
    from fairseq.distributed import utils as distributed_utils
    from fairseq.optim import fairseq_optimizer

    _wrap_load_checkpoint_to_cpu(checkpoint_utils)
    _wrap_optimizer_load_state_dict(fairseq_optimizer)
    _wrap_crash_save(trainer_module)
    _nan_detector_without_module_backward_hooks(trainer_module)
    _wrap_load_checkpoint(checkpoint_utils)
    wrap_checkpoint_writes(checkpoint_utils)
    for interactive in _command_modules("interactive"):
        _wrap_buffered_read(interactive)
        _wrap_make_batches(interactive)
    for generate in _command_modules("generate"):
        _wrap_generate_main(generate)
        _wrap_generate_entry(generate)
    _wrap_call_main(distributed_utils)
    wrap_distributed_init(distributed_utils)
    install_setting_guards()
    install_error_hook()
    ensure_open_files(OPEN_FILES_NEEDED)  # after the hook: a refusal is one line
    if program_name().startswith("fairseq-"):  # a command (not the hub in a service without a terminal)
        ensure_standard_output()
