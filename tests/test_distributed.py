"""Issue 15: several ranks on CPU (gloo), equal to one rank with ``--update-freq``; exact resume.

Every family of the plugin trains with 2 ranks, one process per rank, as a user on CPU would
start them (docs/scale_out.md): ``--distributed-world-size 2 --distributed-rank R
--distributed-no-spawn --distributed-backend gloo --distributed-init-method tcp://127.0.0.1:PORT
--ddp-backend legacy_ddp --cpu``. With dropout 0, fairseq gives rank R the batches R, R + 2, ...
and sums the gradients, so the updates of 2 ranks equal those of 1 rank with ``--update-freq 2``
over the same batches: the logged losses and the updated parameters are compared.
"""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch

from .conftest import CLI_TINY, REPO, call, tool
from .helpers import COMMON, FAMILIES, NSD, RNN_TINY, built_as_fairseq_train_builds  # noqa: F401

DRIVER = os.path.join(REPO, "tests", "rank_driver.py")

UPDATES = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_flags(rank: int, port: int):
    return ["--distributed-world-size", "2", "--distributed-rank", str(rank), "--distributed-no-spawn",
            "--distributed-backend", "gloo", "--distributed-init-method", f"tcp://127.0.0.1:{port}",
            "--ddp-backend", "legacy_ddp"]


def start(work, name: str, runs):
    """One driver process (tests/rank_driver.py) running ``runs`` in ``work``, as the installed plugin."""
    path = work / f"{name}.json"
    path.write_text(json.dumps(runs), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1")
    out = open(work / f"{name}.out", "w", encoding="utf-8")
    return subprocess.Popen([sys.executable, DRIVER, str(path)], cwd=work, stdout=out, stderr=subprocess.STDOUT,
                            env=env), out


def finish(processes, work, timeout=900):
    for name, (process, out) in processes.items():
        try:
            code = process.wait(timeout=timeout)
        finally:
            out.close()
        if code != 0:
            for other, _ in processes.values():
                other.kill()
            raise AssertionError(f"{name} failed ({code}):\n{(work / f'{name}.out').read_text()[-4000:]}")


def train_losses(log) -> list:
    """The loss of every update, from the ``train_inner`` JSON records of a run's log."""
    losses = {}
    for line in open(log, encoding="utf-8"):
        start = line.find('{"epoch"')
        if start >= 0:
            record = json.loads(line[start:])
            if "num_updates" in record and "loss" in record and "ppl" in record and "train_wall" in record:
                losses[int(record["num_updates"])] = float(record["loss"])
    return [losses[k] for k in sorted(losses)]


def parameters(checkpoint):
    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    return load_checkpoint(str(checkpoint))["model"]


def assert_same_parameters(a, b, what, atol=2e-5):
    assert a.keys() == b.keys(), what
    for key in a:
        assert torch.allclose(a[key].float(), b[key].float(), atol=atol, rtol=1e-4), \
            f"{what}: {key} differs by {(a[key].float() - b[key].float()).abs().max():.3g}"


@pytest.fixture(scope="module")
def work(tmp_path_factory, en_fr_bin):
    """A working directory outside the checkout with the en-fr data-bin (both sides parsed)."""
    work = tmp_path_factory.mktemp("distributed")
    shutil.copytree(en_fr_bin, work / "data-bin")
    return work


@pytest.mark.slow
def test_two_ranks_on_cpu_equal_one_rank_with_update_freq_2_for_every_family(work):
    port = free_port()
    ranks = {r: [] for r in (0, 1)}
    reference = []
    for family, flags in FAMILIES.items():
        base = COMMON + flags + ["--max-update", str(UPDATES), "--dropout", "0"]
        for r in (0, 1):
            ranks[r].append({"argv": base + ["--save-dir", f"ranks/{family}"] + rank_flags(r, port),
                             "log": str(work / f"ranks.{family}.{r}.log")})
        reference.append({"argv": base + ["--save-dir", f"freq/{family}", "--update-freq", "2"],
                          "log": str(work / f"freq.{family}.log")})
    finish({"rank0": start(work, "rank0", ranks[0]), "rank1": start(work, "rank1", ranks[1]),
            "update-freq-2": start(work, "freq", reference)}, work)
    for family in FAMILIES:
        two_ranks, one_rank = train_losses(work / f"ranks.{family}.0.log"), train_losses(work / f"freq.{family}.log")
        assert len(two_ranks) == UPDATES and len(one_rank) == UPDATES, family
        assert two_ranks == pytest.approx(one_rank, rel=1e-4, abs=1e-3), family
        assert_same_parameters(parameters(work / "ranks" / family / "checkpoint_last.pt"),
                               parameters(work / "freq" / family / "checkpoint_last.pt"), family)


@pytest.mark.slow
def test_a_resumed_run_continues_exactly_for_every_family(work):
    """Interrupted after 2 updates and resumed by the same fairseq-train command (checkpoint_last.pt),
    a run gives the losses and parameters of the uninterrupted run, dropout on (fairseq seeds every
    update with --seed + update; BlackOut's negatives are drawn per batch from the same seed)."""
    straight, interrupted = [], []
    for family, flags in FAMILIES.items():
        base = COMMON + flags + ["--dropout", "0.1"]
        straight.append({"argv": base + ["--save-dir", f"straight/{family}", "--max-update", "4"],
                         "log": str(work / f"straight.{family}.log")})
        for updates in (2, 4):
            interrupted.append({"argv": base + ["--save-dir", f"resumed/{family}", "--max-update", str(updates)],
                                "log": str(work / f"resumed.{family}.{updates}.log")})
    finish({"straight": start(work, "straight", straight), "resumed": start(work, "resumed", interrupted)}, work)
    for family in FAMILIES:
        whole = train_losses(work / f"straight.{family}.log")
        first, rest = train_losses(work / f"resumed.{family}.2.log"), train_losses(work / f"resumed.{family}.4.log")
        assert len(whole) == 4 and len(first) == 2 and len(rest) == 2, family
        assert "Loaded checkpoint" in (work / f"resumed.{family}.4.log").read_text(encoding="utf-8"), family
        assert first + rest == whole, family
        assert_same_parameters(parameters(work / "straight" / family / "checkpoint_last.pt"),
                               parameters(work / "resumed" / family / "checkpoint_last.pt"), family, atol=1e-6)


def plugin_architectures():
    import fairseq_syntax  # noqa: F401  (registers them)
    from fairseq.models import ARCH_MODEL_REGISTRY

    return sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m.__module__.startswith("fairseq_syntax"))


def tiny_flags(arch: str):
    """The tiny flags of ``arch``'s family (FAMILIES), its own --arch."""
    base = arch.replace("_iwslt_de_en", "").replace("_large", "").replace("syntax_transformer", "transformer_dep_rel")
    family = next((f for f in FAMILIES.values() if f[1] == base), None)
    if family is None:  # another model of the relative/dependency family (transformer_rel, transformer_dep)
        family = FAMILIES["relative+dependency"]
    if base in ("transformer_nsd_target",):
        family = FAMILIES["nsd-both-sides"]
    if base == "transformer_syntax_embed":
        family = FAMILIES["features+spe"]
    return ["--arch", arch, *family[2:]]


@pytest.mark.parametrize("arch", plugin_architectures())
def test_every_trainable_parameter_gets_a_gradient_in_one_step(work, arch):
    """What fairseq's pytorch_ddp wrapper (GPU) needs without --find-unused-parameters: one training
    step of every architecture, built by fairseq as fairseq-train builds it (tiny sizes, the criterion
    it is trained with), leaves no trainable parameter without a gradient."""
    unused = parameters_without_gradient(work, tiny_flags(arch))
    assert not unused, f"{arch}: no gradient for {unused}"


def test_an_nsd_model_with_a_criterion_that_scores_no_distance_is_refused_at_start_up(work):
    """Why docs/scale_out.md needs no --find-unused-parameters: transformer_nsd* with a criterion that adds no
    distance loss would leave eq. 11's classifier without gradient (which pytorch_ddp refuses), and never
    train it; the task refuses that pair at start-up, and --no-nsd-predict leaves no parameter unused."""
    from fairseq_syntax_core.errors import UsageError

    flags = ["--arch", "transformer_nsd", *CLI_TINY, "--criterion", "label_smoothed_cross_entropy"]
    with pytest.raises(UsageError, match="--criterion label_smoothed_cross_entropy: --arch transformer_nsd predicts "
                                         "src_nsd_logits for a loss this criterion does not add"):
        parameters_without_gradient(work, flags)
    assert not parameters_without_gradient(work, flags + ["--no-nsd-predict"])


def parameters_without_gradient(work, flags):
    task, model, criterion, batch = built_as_fairseq_train_builds(work / "data-bin", [*flags, "--dropout", "0.1"])
    model.train()
    backward = type("Backward", (), {"backward": staticmethod(lambda loss: loss.backward())})()  # fairseq's optimizer API
    task.train_step(batch, model, criterion, backward, 0)
    return [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]


# ----------------------------------------------------------- what fairseq would do silently on CPU
@pytest.mark.slow
def test_two_fairseq_train_processes_train_one_model_with_gloo(work):
    """The command of docs/scale_out.md, as a user types it: two fairseq-train processes, one per rank."""
    port = free_port()
    flags = COMMON + FAMILIES["relative+dependency"] + ["--max-update", "2", "--save-dir", "cli"]
    env = dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1")
    ranks = [subprocess.Popen([tool("fairseq-train"), *flags, *rank_flags(r, port)], cwd=work, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    outputs = [p.communicate(timeout=300)[0] for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    assert "num_updates\": \"2\"" in outputs[0] and (work / "cli" / "checkpoint_last.pt").exists()


@pytest.mark.slow
def test_without_gpu_fairseq_train_with_a_world_size_stops_instead_of_exiting_0_untrained(work):
    """fairseq's spawn starts min(GPUs, N) = 0 processes and exits 0, nothing trained: the plugin
    stops first, naming the per-rank CPU flags, with no traceback and no checkpoint."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: fairseq's own spawning applies")
    result = call([tool("fairseq-train"), *COMMON, *FAMILIES["relative+dependency"], "--max-update", "1",
                   "--save-dir", "refused", "--distributed-world-size", "2", "--distributed-init-method",
                   "tcp://127.0.0.1:1"], cwd=work, expect_ok=False)
    assert result.returncode != 0 and "would start none and exit without training" in result.stderr
    assert "--distributed-no-spawn" in result.stderr and "--distributed-backend gloo" in result.stderr
    assert "Traceback" not in result.stderr and not (work / "refused").exists()


def cpu_cfg(**distributed):
    from types import SimpleNamespace

    dt = dict(distributed_world_size=2, distributed_no_spawn=True, distributed_backend="gloo",
              ddp_backend="legacy_ddp", pipeline_model_parallel=False, distributed_init_method="tcp://127.0.0.1:1")
    dt.update(distributed)
    return SimpleNamespace(distributed_training=SimpleNamespace(**dt), common=SimpleNamespace(cpu=True, tpu=False))


@pytest.mark.parametrize("settings, gpus, message", [
    ({"distributed_no_spawn": False}, 0, "would start none and exit without training"),
    ({"distributed_backend": "nccl"}, 0, "--distributed-backend nccl needs GPUs"),
    ({"ddp_backend": "pytorch_ddp"}, 0, "--ddp-backend pytorch_ddp wraps the model with GPU device ids"),
    ({"ddp_backend": "c10d"}, 2, "--ddp-backend c10d wraps"),  # --cpu on a machine with GPUs
    ({}, 0, None),  # the CPU flags of docs/scale_out.md
    ({"distributed_init_method": None}, 0, "--distributed-no-spawn without --distributed-init-method"),
    ({"distributed_world_size": 1, "distributed_no_spawn": False, "distributed_backend": "nccl"}, 0, None),
    ({"distributed_no_spawn": False, "distributed_backend": "nccl", "ddp_backend": "pytorch_ddp"}, 8, "nccl"),
])
def test_cpu_settings_fairseq_would_ignore_or_trip_on_are_named(settings, gpus, message):
    from fairseq_syntax.compat import distributed_cpu_error

    error = distributed_cpu_error(cpu_cfg(**settings), gpus)
    assert (error is None) if message is None else (message in error), error


def test_gpu_runs_are_left_to_fairseq():
    from fairseq_syntax.compat import distributed_cpu_error

    cfg = cpu_cfg(distributed_no_spawn=False, distributed_backend="nccl", ddp_backend="pytorch_ddp")
    cfg.common.cpu = False
    assert distributed_cpu_error(cfg, 8) is None


def test_torchrun_environment_gives_rank_and_world_size_on_cpu():
    from types import SimpleNamespace

    from fairseq_syntax.compat import adopt_torchrun_on_cpu
    from fairseq_syntax_core.errors import UsageError

    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}
    dt = SimpleNamespace(distributed_init_method=None, distributed_world_size=1, distributed_rank=0, device_id=0,
                         distributed_no_spawn=False)
    assert adopt_torchrun_on_cpu(dt, env)
    assert (dt.distributed_init_method, dt.distributed_world_size, dt.distributed_rank, dt.device_id,
            dt.distributed_no_spawn) == ("env://", 4, 3, 1, True)
    untouched = SimpleNamespace(distributed_init_method=None, distributed_world_size=1)
    assert not adopt_torchrun_on_cpu(untouched, {"RANK": "0"})  # not under torchrun
    given = SimpleNamespace(distributed_init_method="tcp://h:1", distributed_world_size=2)
    assert not adopt_torchrun_on_cpu(given, env)  # the user's own init method wins
    with pytest.raises(UsageError, match="disagrees with torchrun's WORLD_SIZE=4"):
        adopt_torchrun_on_cpu(SimpleNamespace(distributed_init_method=None, distributed_world_size=2), env)
    # one process under torchrun (or a pod that sets the variables): a single run, as fairseq would do
    alone = SimpleNamespace(distributed_init_method=None, distributed_world_size=1)
    assert not adopt_torchrun_on_cpu(alone, dict(env, WORLD_SIZE="1", RANK="0"))
    # --cpu on a machine with 2 GPUs: fairseq's default world size is 2, not a user's choice
    with_gpus = SimpleNamespace(distributed_init_method=None, distributed_world_size=2, distributed_rank=0,
                                device_id=0, distributed_no_spawn=False)
    assert adopt_torchrun_on_cpu(with_gpus, env, default_world_size=2) and with_gpus.distributed_world_size == 4
