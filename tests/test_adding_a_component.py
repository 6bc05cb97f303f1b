"""The documentation's "Adding a component" (docs/design.md), walked literally: a new idea is one module dropped into
``components/`` and one preset row, nothing else of the plugin touched.

The toy component is a learned bias per pair of dependency labels, added to the attention logits
of chosen encoder layers. The test copies the plugin, writes that module and the row, and runs
the copy through fairseq-train, fairseq-generate, fairseq-interactive and a checkpoint reload
(``--user-dir`` pointing at the copy), as a researcher extending the toolkit would. A training-only
output with its loss (label tagging) and a decoder component (a position-phase embedding that widens
the decoder) are walked the same way.
"""

import os
import shutil
import subprocess
import sys

import pytest

from .conftest import CLI_TINY, REPO, tool

COMPONENT = '''"""A learned bias per pair of dependency labels on the encoder's attention logits (a toy)."""

from dataclasses import dataclass
from typing import Optional, Set, Tuple

from torch import Tensor, nn

from ..options import check_positive, opt, parse_layer_list
from .base import AttentionComponent, AttentionTerms, BuildContext, EncoderBatch, LayerTerm, register_attention


@dataclass
class LabelPairBiasOptions:
    label_bias_layers: str = opt("none", "0-based encoder layers whose self-attention adds a learned bias per "
                                 "pair of dependency labels ('all', 'none' or a comma list)", metavar="LIST")
    label_bias_scale: int = opt(1, "a second option, to show that a component may have several", metavar="N")

    def check(self) -> None:
        check_positive(self, ("label_bias_scale",))
        parse_layer_list(self.label_bias_layers, None, "--label-bias-layers")


class LabelPairBiasTerm(LayerTerm):
    def __init__(self, num_labels: int, heads: int) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.bias = nn.Embedding(num_labels * num_labels, heads)
        nn.init.zeros_(self.bias.weight)

    def term(self, labels: Tensor) -> AttentionTerms:
        pairs = labels.unsqueeze(2) * self.num_labels + labels.unsqueeze(1)  # (B, T, T)
        return AttentionTerms(attn_bias=self.bias(pairs).permute(0, 3, 1, 2))  # (B, H, T, T)


@register_attention
class LabelPairBias(AttentionComponent):
    name = "label_bias"
    options = LabelPairBiasOptions

    def __init__(self, ctx: BuildContext, layers: Tuple[int, ...]) -> None:
        super().__init__()
        self._layers = layers
        self.num_labels = ctx.require_vocab(("syntax_num_labels",), "--label-bias-layers")["syntax_num_labels"]

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["LabelPairBias"]:
        layers = parse_layer_list(ctx.cfg.label_bias_layers, ctx.num_layers, "--label-bias-layers")
        return cls(ctx, layers) if layers else None

    def inputs(self) -> Set[str]:
        return {"labels"}

    def layers(self) -> Tuple[int, ...]:
        return self._layers

    def layer_term(self, layer_idx: int, embed_dim: int, num_heads: int) -> LabelPairBiasTerm:
        return LabelPairBiasTerm(self.num_labels, num_heads)

    def prepare(self, batch: EncoderBatch) -> Tensor:
        return batch.get("labels", "the label-pair bias")
'''

OUTPUT_WITH_LOSS = '''"""Predicting each source token's dependency label from the encoder states (a toy auxiliary task)."""

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Set

import math
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq.logging import metrics

from ..options import opt
from .auxiliary import AuxiliaryLoss, OutputComponent, SOURCE_PADDING_KEY, register_loss, register_output
from .base import BuildContext, EncoderBatch


@dataclass
class LabelTaggingOptions:
    label_tagging: bool = opt(False, "predict each source token's dependency label from the encoder states")


@dataclass
class LabelTaggingLossOptions:
    label_tagging_weight: float = opt(1.0, "weight of the label-tagging cross-entropy")


@register_output
class LabelTagger(OutputComponent):
    name = "label_tagger"
    output_key = "src_label_logits"
    options = LabelTaggingOptions

    def __init__(self, dim: int, num_labels: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, num_labels)

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["LabelTagger"]:
        if not ctx.cfg.label_tagging:
            return None
        return cls(ctx.model_dim, ctx.require_vocab(("syntax_num_labels",), "--label-tagging")["syntax_num_labels"])

    def inputs(self) -> Set[str]:
        return {"labels"}

    def forward(self, states: Tensor, batch: EncoderBatch) -> Tensor:
        return self.proj(states).transpose(0, 1)


@register_loss
class LabelTaggingLoss(AuxiliaryLoss):
    output_key = "src_label_logits"
    prefix = "label_"
    options = LabelTaggingLossOptions

    def terms(self, model: Any, net_output: Any, sample: Dict[str, Any], task: Any, settings: Any) -> Dict[str, Tensor]:
        logits = net_output[1][self.output_key][0]
        gold = sample["net_input"]["src_syntax"]["labels"].to(logits.device)
        counted = ~net_output[1][SOURCE_PADDING_KEY][0]
        loss = F.cross_entropy(logits[counted].float(), gold[counted], reduction="sum")
        return {"xent": loss, "correct": (logits.argmax(-1).eq(gold) & counted).sum(), "tokens": counted.sum()}

    def weighted(self, terms: Mapping[str, Tensor], settings: Any) -> Dict[str, Tensor]:
        return {"label_xent": settings.label_tagging_weight * terms["xent"]}

    def reduce_metrics(self, logging_outputs: List[Dict[str, Any]]) -> None:
        tokens = sum(log.get("label_tokens", 0) for log in logging_outputs)
        if tokens > 0:
            correct = sum(log.get("label_correct", 0) for log in logging_outputs)
            metrics.log_scalar("label_acc", 100.0 * correct / tokens, tokens, round=2)
'''

DECODER_COMPONENT = '''"""A learned embedding of each target position modulo 4, concatenated to the decoder input (a toy)."""

from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch
from torch import Tensor, nn

from ..options import ModelOptionError, opt
from .decoder_side import DecoderBuildContext, DecoderComponent, register_decoder


@dataclass
class TargetPhaseOptions:
    target_phase_dim: int = opt(0, "width of a learned embedding of each target position modulo 4, concatenated "
                                "to the decoder input (0: off)", metavar="N")

    def check(self) -> None:
        if self.target_phase_dim < 0:
            raise ModelOptionError(f"--target-phase-dim {self.target_phase_dim}: expected a width >= 0")


@register_decoder
class TargetPhase(DecoderComponent):
    name = "target_phase"
    options = TargetPhaseOptions

    def __init__(self, dim: int) -> None:
        self.embed_phase = nn.Embedding(4, dim)

    @classmethod
    def build(cls, ctx: DecoderBuildContext) -> Optional["TargetPhase"]:
        return cls(ctx.cfg.target_phase_dim) if ctx.cfg.target_phase_dim > 0 else None

    @classmethod
    def added_width(cls, cfg: Any) -> int:
        return cfg.target_phase_dim

    def modules(self) -> Dict[str, Optional[nn.Module]]:
        return {"target_phase": self.embed_phase}

    def prepare(self, decoder, prev_output_tokens: Tensor, incremental_state, tgt_syntax) -> Tensor:
        phase = torch.arange(prev_output_tokens.size(1), device=prev_output_tokens.device) % 4
        phase = phase[-1:] if incremental_state is not None else phase  # generation: this step's position
        return phase.unsqueeze(0).expand(prev_output_tokens.size(0), -1)

    def embed(self, x: Tensor, phase: Tensor, padding_mask: Tensor):
        return torch.cat([x, self.embed_phase(phase).to(x.dtype)], dim=-1), None
'''

PRESET_ROW = '''    ("transformer_label_bias_iwslt_de_en", small, "A learned bias per dependency label pair, layer 0.",
     {"label_bias_layers": "0"}),
    ("transformer_label_tagging_iwslt_de_en", small, "Tagging dependency labels from the encoder states.",
     {"label_tagging": True}),
    ("transformer_target_phase_iwslt_de_en", small, "A position-phase embedding on the decoder input.",
     {"target_phase_dim": 8}),
'''


@pytest.fixture(scope="module")
def extended_plugin(tmp_path_factory):
    """A copy of the plugin with the toy component's module and its preset row, and nothing else changed."""
    root = tmp_path_factory.mktemp("extended")
    plugin = root / "fairseq_syntax"
    shutil.copytree(os.path.join(REPO, "fairseq_syntax"), plugin,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (plugin / "models" / "syntax_transformer" / "components" / "label_pair_bias.py").write_text(COMPONENT)
    (plugin / "models" / "syntax_transformer" / "components" / "label_tagging.py").write_text(OUTPUT_WITH_LOSS)
    (plugin / "models" / "syntax_transformer" / "components" / "target_phase.py").write_text(DECODER_COMPONENT)
    architectures = plugin / "models" / "syntax_transformer" / "architectures.py"
    text = architectures.read_text()
    end = "\n]\n\n\ndef _architecture("
    assert text.count(end) == 1, "the preset table of architectures.py ends the way this test expects"
    architectures.write_text(text.replace(end, "\n" + PRESET_ROW.rstrip("\n") + end, 1))
    return str(plugin)


def _run(args, cwd, stdin=None):
    env = dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1")  # the installed packages, the copied plugin
    result = subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(args)} failed ({result.returncode}):\n{result.stderr[-4000:]}"
    return result


def _train_argv(data, common, arch, save, *extra):
    """A tiny fairseq-train of the copied plugin's ``arch``."""
    return [tool("fairseq-train"), data, *common, "--arch", arch, *CLI_TINY, "--optimizer", "adam", "--lr", "0.002",
            "--max-tokens", "1500", "--save-dir", save, "--no-epoch-checkpoints", "--no-progress-bar", "--seed", "1",
            *extra]


def _decodes(data, common, checkpoint, tmp_path) -> None:
    """``checkpoint`` translates the test split through fairseq-generate and a raw line through fairseq-interactive."""
    generated = _run([tool("fairseq-generate"), data, *common, "--path", checkpoint, "--gen-subset", "test",
                      "--beam", "2", "--max-len-b", "10", "--batch-size", "8", "--cpu"], cwd=str(tmp_path))
    assert any(line.startswith("H-") for line in generated.stdout.splitlines())
    interactive = _run([tool("fairseq-interactive"), data, *common, "--path", checkpoint, "--beam", "2",
                        "--max-len-b", "10", "--cpu", "--source-lang", "en", "--target-lang", "de",
                        "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes",
                        os.path.join(data, "bpe.codes")], cwd=str(tmp_path), stdin="A dog runs .\n")
    assert any(line.startswith("H-") for line in interactive.stdout.splitlines())


@pytest.mark.slow
def test_one_module_and_one_preset_row_train_decode_save_and_load(multi30k_bin, extended_plugin, tmp_path):
    data, save = str(multi30k_bin), str(tmp_path / "ck")
    common = ["--user-dir", extended_plugin, "--task", "syntax_translation"]
    train = _train_argv(data, common, "transformer_label_bias_iwslt_de_en", save, "--label-bias-scale", "2")
    _run(train + ["--max-update", "6"], cwd=str(tmp_path))
    checkpoint = os.path.join(save, "checkpoint_last.pt")

    # the component's parameters are in the checkpoint, under its name, and its options in the args
    probe = _run([sys.executable, "-c", (
        "import sys, torch; from fairseq_syntax_core.checkpoint_loader import load_checkpoint\n"
        "state = load_checkpoint(sys.argv[1])\n"
        "print(sorted(k for k in state['model'] if 'label_bias' in k))\n"
        "args = state['args'] if state.get('args') is not None else state['cfg']['model']\n"
        "print(getattr(args, 'label_bias_layers', None) if not isinstance(args, dict) else args['label_bias_layers'])"),
        checkpoint], cwd=str(tmp_path)).stdout.splitlines()
    assert probe[0] == "['encoder.layers.0.attention_terms.label_bias.bias.weight']" and probe[1] == "0"

    # reload: training resumes from the checkpoint
    resumed = _run(train + ["--max-update", "8"], cwd=str(tmp_path))
    assert "loaded checkpoint" in resumed.stderr.lower() + resumed.stdout.lower()

    _decodes(data, common, checkpoint, tmp_path)  # fairseq-generate and fairseq-interactive each translate


@pytest.mark.slow
def test_an_output_and_its_loss_are_one_module_the_criterion_adds_generically(multi30k_bin, extended_plugin, tmp_path):
    """A training-only output with its own loss and weight: the criterion adds it without knowing it."""
    data, save = str(multi30k_bin), str(tmp_path / "ck")
    common = ["--user-dir", extended_plugin, "--task", "syntax_translation"]
    train = _train_argv(data, common, "transformer_label_tagging_iwslt_de_en", save, "--log-format", "simple",
                        "--log-interval", "1", "--criterion", "label_smoothed_cross_entropy_with_auxiliary",
                        "--label-smoothing", "0.1", "--label-tagging-weight", "0.5", "--max-update", "4")
    trained = _run(train, cwd=str(tmp_path))
    assert "label_acc=" in trained.stderr + trained.stdout  # its metric, reduced by the loss itself
    refused = subprocess.run(train[:-1] + ["5", "--label-tagging-weight", "x"], cwd=str(tmp_path),
                             env=dict(os.environ, PYTHONPATH=""), capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "--label-tagging-weight" in refused.stderr
    checkpoint = os.path.join(save, "checkpoint_last.pt")
    generated = _run([tool("fairseq-generate"), data, *common, "--path", checkpoint, "--gen-subset", "test",
                      "--beam", "2", "--max-len-b", "10", "--batch-size", "8", "--cpu"], cwd=str(tmp_path))
    assert any(line.startswith("H-") for line in generated.stdout.splitlines())  # decoding asks for no outputs


@pytest.mark.slow
def test_a_decoder_component_is_one_module_the_decoder_builds_widens_and_decodes_with(multi30k_bin, extended_plugin,
                                                                                       tmp_path):
    """A target-side idea: one module (its width summed into the decoder's), one preset row, through every command."""
    data, save = str(multi30k_bin), str(tmp_path / "ck")
    common = ["--user-dir", extended_plugin, "--task", "syntax_translation"]
    train = _train_argv(data, common, "transformer_target_phase_iwslt_de_en", save)
    _run(train + ["--max-update", "4"], cwd=str(tmp_path))
    checkpoint = os.path.join(save, "checkpoint_last.pt")
    probe = _run([sys.executable, "-c", (
        "import sys; from fairseq_syntax_core.checkpoint_loader import load_checkpoint\n"
        "state = load_checkpoint(sys.argv[1])\n"
        "print(tuple(state['model']['decoder.target_phase.weight'].shape), "
        "tuple(state['model']['decoder.layers.0.self_attn.k_proj.weight'].shape))"), checkpoint],
        cwd=str(tmp_path)).stdout.split()
    assert " ".join(probe) == "(4, 8) (40, 40)"  # its own parameters; the decoder 32 + 8 wide
    resumed = _run(train + ["--max-update", "6"], cwd=str(tmp_path))
    assert "loaded checkpoint" in resumed.stderr.lower() + resumed.stdout.lower()
    _decodes(data, common, checkpoint, tmp_path)  # fairseq-generate and fairseq-interactive each translate
    refused = subprocess.run(_train_argv(data, common, "transformer_target_phase_iwslt_de_en", str(tmp_path / "x"),
                                         "--target-phase-dim", "7", "--max-update", "1"), cwd=str(tmp_path),
                             env=dict(os.environ, PYTHONPATH=""), capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "the decoder model dimension 39" in refused.stderr, refused.stderr[-2000:]


def test_an_option_name_taken_by_another_component_is_refused():
    from dataclasses import dataclass

    from fairseq_syntax.models.syntax_transformer.components.base import register_options
    from fairseq_syntax.models.syntax_transformer.options import opt

    @dataclass
    class Clash:
        gps_layers: str = opt("none", "the same name as the GPS component's option")

    with pytest.raises(ValueError, match="gps_layers.*already defined by GpsOptions"):
        register_options(Clash)


def test_the_encoder_width_is_what_the_components_add():
    from fairseq_syntax.models.syntax_transformer.config import SyntaxModelConfig, encoder_width
    from argparse import Namespace

    cfg = SyntaxModelConfig.from_args(Namespace(syntax_features="pos,label", syntax_feature_dim=16,
                                                nsd_input="concat", nsd_embed_dim=8))
    assert encoder_width(cfg, 64) == 64 + 2 * 16 + 8  # paper 003 Table IV and paper 002 eq. 8
