"""Where BlackOut finds a model's output layer (Eriguchi et al. 2016, sec. 3.4; Ji et al. 2016): the projection
weights and bias of fairseq's Transformer and LSTM decoders and of ``tree2seq``, tied or not, so that
the criterion scores only the true target and the sampled negatives."""

from contextlib import contextmanager
from typing import Dict, Iterator, Optional

from torch import Tensor, nn

from fairseq_syntax_core.errors import UsageError

__all__ = ["BlackOutError", "OutputAdapter", "output_adapter", "unwrap_model"]


class BlackOutError(UsageError, ValueError):
    """A BlackOut option, model or data-bin that cannot work: one line naming the flag or file."""


class OutputAdapter:
    """Where one decoder keeps its output layer, and how to get the features it projects.

    ``family``: ``"transformer"`` or ``"lstm"``; ``weight`` ``(V, d)`` and ``bias`` ``(V,)``/None are
    the output layer's parameters (the same tensors, so gradients land on them); ``tied``: the
    weight is also the decoder's input embedding (see the module docstring).
    """

    def __init__(self, decoder: nn.Module, family: str, weight: Tensor, bias: Optional[Tensor], tied: bool) -> None:
        self.decoder, self.family, self.weight, self.bias, self.tied = decoder, family, weight, bias, tied

    @contextmanager
    def features(self) -> Iterator[Dict[str, bool]]:
        """While active, the decoder's ``output_layer`` returns its input: the model's forward
        yields ``(features, extra)`` instead of logits. Yields a dict whose ``"used"`` tells
        whether the forward went through ``output_layer`` at all."""
        state = {"used": False}
        had_own = "output_layer" in vars(self.decoder)
        own = vars(self.decoder).get("output_layer")

        def output_layer(features, *args, **kwargs):
            state["used"] = True
            return features

        self.decoder.output_layer = output_layer
        try:
            yield state
        finally:
            if had_own:
                self.decoder.output_layer = own
            else:
                del self.decoder.output_layer


def unwrap_model(model: nn.Module) -> nn.Module:
    """The fairseq model inside data-parallel wrappers (``.module``), to find its decoder."""
    while not hasattr(model, "decoder") and isinstance(getattr(model, "module", None), nn.Module):
        model = model.module
    return model


def output_adapter(model: nn.Module) -> OutputAdapter:
    """The adapter for ``model``'s decoder (rules in the module docstring), or a :class:`BlackOutError`."""
    inner = unwrap_model(model)
    decoder = getattr(inner, "decoder", None)
    name = type(inner).__name__
    if decoder is None:
        raise BlackOutError(f"--criterion blackout: model {name} has no `decoder`; BlackOut needs an encoder-decoder "
                            "or decoder model with a plain output layer")
    dname = type(decoder).__name__
    if getattr(decoder, "adaptive_softmax", None) is not None:
        raise BlackOutError(f"--criterion blackout: decoder {dname} uses an adaptive softmax "
                            "(--adaptive-softmax-cutoff); BlackOut replaces a plain softmax: drop one of the two")
    if not callable(getattr(decoder, "output_layer", None)):
        raise BlackOutError(f"--criterion blackout: decoder {dname} has no `output_layer(features)` method, "
                            "which the criterion bypasses to get the features")
    embed = getattr(getattr(decoder, "embed_tokens", None), "weight", None)
    projection = getattr(decoder, "output_projection", None)
    if isinstance(projection, nn.Linear):  # transformer family
        return OutputAdapter(decoder, "transformer", projection.weight, projection.bias,
                             tied=embed is not None and projection.weight is embed)
    fc_out = getattr(decoder, "fc_out", None)
    if isinstance(fc_out, nn.Linear):  # lstm family, untied
        return OutputAdapter(decoder, "lstm", fc_out.weight, fc_out.bias, tied=False)
    if getattr(decoder, "share_input_output_embed", False) and isinstance(embed, Tensor):  # lstm family, tied
        return OutputAdapter(decoder, "lstm", embed, None, tied=True)
    raise BlackOutError(
        f"--criterion blackout: decoder {dname} of model {name} has no output layer BlackOut knows: "
        "neither `output_projection` (nn.Linear; fairseq's TransformerDecoder family), nor `fc_out` (nn.Linear; "
        "fairseq's LSTMDecoder family, tree2seq), nor a tied `embed_tokens` with `share_input_output_embed`"
    )
