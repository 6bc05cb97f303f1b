"""Issue 15: every family's forward stays finite in half precision (``--fp16``/``--amp`` on GPU).

Module-level checks on CPU: the tiny model of each family, as fairseq-train builds it, cast to
bfloat16 and float16, on a batch with left padding (the source side) and right padding (the
target side): the decoder's outputs are finite, so masks (``-inf`` before a softmax that fairseq
computes in float32, zeros elsewhere) never turn a row into NaN.
"""

import pytest
import torch

from .helpers import FAMILIES, built_as_fairseq_train_builds


def to_device_dtype(batch, dtype):
    return {k: (v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in batch.items()}


@pytest.fixture(scope="module")
def data_bin(en_fr_bin):
    return en_fr_bin


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_forward_is_finite_in_half_precision(data_bin, family, dtype):
    task, model, _, _ = built_as_fairseq_train_builds(data_bin, [*FAMILIES[family], "--dropout", "0"])
    dataset = task.dataset("train")
    batch = dataset.collater([dataset[i] for i in range(8)])  # lines of different lengths
    assert (batch["net_input"]["src_tokens"][:, 0] == task.source_dictionary.pad()).any(), "no left padding"
    model.eval()
    with torch.no_grad():
        full = model(**batch["net_input"])[0].float()
        model = model.to(dtype)
        half = model(**to_device_dtype(batch["net_input"], dtype))[0]
    assert half.dtype == dtype
    assert torch.isfinite(half).all(), f"{family} in {dtype}: non-finite outputs"
    # the same translation model up to rounding: the most probable word mostly agrees
    agree = (half.float().argmax(-1) == full.argmax(-1)).float().mean()
    assert agree > 0.9, f"{family} in {dtype}: argmax agrees on {agree:.0%} of positions"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_training_step_in_bf16_autocast_has_finite_loss_and_gradients(data_bin, family):
    """``--amp`` in bf16 on CPU: the loss (with paper 002's distance losses, BlackOut's sampled
    softmax) and every gradient stay finite, dropout on, the padded batch of the test above."""
    task, model, criterion, _ = built_as_fairseq_train_builds(data_bin, FAMILIES[family])
    dataset = task.dataset("train")
    batch = dataset.collater([dataset[i] for i in range(8)])
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, sample_size, logging = criterion(model, batch)
    assert torch.isfinite(loss).all(), f"{family}: loss {loss} in bf16 autocast"
    loss.backward()
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, f"{family}: non-finite gradients in bf16 autocast: {bad[:5]}"
    assert any(p.grad is not None for p in model.parameters())
    assert all(torch.isfinite(torch.as_tensor(v, dtype=torch.float64)).all()
               for v in logging.values() if isinstance(v, (int, float)) or torch.is_tensor(v))
