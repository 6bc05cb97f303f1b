"""Hostile values for the options of the ``syntax_transformer`` models.

Every bad value must stop the command at start-up with one line that names the flag and what
it expects (:class:`ModelOptionError`, a ``UsageError``: no traceback, or argparse's own
error), never a traceback deep in forward and never a model silently other than the one asked
for. The fast tests go through fairseq's parser and the architecture functions (``parse``)
and ``build_model`` (``build``); one slow test trains through the real CLI with non-default
options and checks that decoding gets the same model back.
"""

import argparse
import os
import subprocess
import sys
import types

import pytest
import torch

from fairseq_syntax_core.errors import UsageError
from fairseq_syntax.models.syntax_transformer.architectures import syntax_base_architecture
from fairseq_syntax.models.syntax_transformer.config import (
    ModelOptionError,
    SyntaxModelConfig,
    parse_layer_list,
    parse_name_list,
)

from . import conftest
from .conftest import REPO, WORDS, batch, build, parse, table1_features, table1_tokens


def refused(arch, extra, match):
    """The command line stops with a ModelOptionError whose message matches ``match``."""
    with pytest.raises(ModelOptionError, match=match) as error:
        build(arch, extra)
    assert isinstance(error.value, UsageError)  # printed as one line by the plugin's error hook
    assert "\n" not in str(error.value)
    return str(error.value)


# (arch, extra arguments, the message must match): each was accepted before (a silent wrong model,
# NaN in forward) or failed with a traceback (ZeroDivisionError, AssertionError, a negative tensor size)
BAD = [
    # clipping distances: negative silently turned the component off; huge ones tried to allocate
    ("transformer_rel", ["--rel-seq-k", "-1"], r"--rel-seq-k -1: expected a clipping distance >= 0"),
    ("transformer_dep", ["--rel-dep-l", "-2"], r"--rel-dep-l -2: expected a clipping distance >= 0"),
    ("transformer_rel", ["--decoder-rel-seq-k", "-3"], r"--decoder-rel-seq-k -3: expected"),
    ("transformer_structural", ["--structural-k", "-1"], r"--structural-k -1: expected"),
    ("transformer_rel", ["--rel-seq-k", "100000000"],
     r"--rel-seq-k 100000000: larger than .*--max-source-positions 1024"),
    ("transformer_rel", ["--decoder-rel-seq-k", "5000"], r"--decoder-rel-seq-k 5000: .*--max-target-positions 1024"),
    ("transformer_structural", ["--structural-k", "2049"], r"--structural-k 2049: .*at most 2048"),
    ("transformer_rel", ["--rel-seq-k", "9", "--max-source-positions", "8"], r"--rel-seq-k 9: .*at most 8"),
    # a relative model with nothing relative
    ("transformer_rel", ["--no-rel-keys", "--no-rel-values"], r"--no-rel-keys with --no-rel-values .*--rel-seq-k 2"),
    ("transformer_dep", ["--no-rel-keys", "--no-rel-values"], r"--no-rel-keys with --no-rel-values .*--rel-dep-l 2"),
    ("transformer_structural", ["--no-rel-keys", "--no-rel-values"], r"--structural-k 8"),
    ("transformer_rel", ["--rel-no-keys", "--rel-no-values"], r"--no-rel-keys with --no-rel-values"),
    ("transformer_rel", ["--rel-no-keys", "--no-rel-values"], r"--no-rel-keys with --no-rel-values"),
    # feature lists
    ("transformer_syntax_embed", ["--syntax-features", "pos,pos"], r"--syntax-features 'pos,pos': 'pos' listed"),
    ("transformer_syntax_embed", ["--syntax-features", "head,parent"],
     r"'head' listed twice \(0\.1's 'parent' is 'head'\)"),
    ("transformer_syntax_embed", ["--syntax-features", "pos,lemma"], r"unknown feature\(s\) \['lemma'\]"),
    ("transformer_syntax_embed", ["--syntax-features", "none,pos"], r"'none' turns the features off"),
    ("transformer_syntax_embed", ["--syntax-features", ""], r"--syntax-features '': expected a comma-separated"),
    ("transformer_syntax_embed", ["--syntax-features", ","], r"--syntax-features ',': expected"),
    ("transformer_syntax_spe", ["--spe-features", "depth,depth"], r"--spe-features 'depth,depth': 'depth' listed"),
    ("transformer_syntax_spe", ["--spe-features", "pos"], r"--spe-features: unknown feature"),
    # layer lists: a repeated layer was dropped silently, an empty list turned the component off
    ("transformer_gps", ["--gps-layers", "0,0"], r"--gps-layers '0,0': layer\(s\) \[0\] listed twice"),
    ("transformer_pascal", ["--pascal-heads", "1", "--pascal-layers", "0,0"], r"--pascal-layers '0,0': .*twice"),
    ("transformer_gps", ["--gps-layers", ""], r"--gps-layers '': expected comma-separated .*'none' turns it off"),
    ("transformer_gps", ["--gps-layers", " , "], r"--gps-layers ' , ': expected"),
    ("transformer_gps", ["--gps-layers", "5"], r"--gps-layers '5': layers \[5\] out of range for 1 encoder layers"),
    ("transformer_gps", ["--gps-layers", "-2"], r"--gps-layers '-2': layers \[-2\] out of range"),
    ("transformer_gps", ["--gps-layers", "none,0"], r"--gps-layers takes comma-separated"),
    ("transformer_pascal", ["--pascal-heads", "1", "--pascal-layers", "1.5"], r"--pascal-layers takes comma-separated"),
    # sizes: zero or negative dims failed deep in torch (ZeroDivisionError, negative tensor sizes)
    ("transformer_gps", ["--gps-label-dim", "0"], r"--gps-label-dim 0: expected a positive integer"),
    ("transformer_gps", ["--gps-path-dim", "0"], r"--gps-path-dim 0: expected a positive integer"),
    ("transformer_gps", ["--gps-path-dim", "-3"], r"--gps-path-dim -3: expected a positive integer"),
    ("transformer_syntax_embed", ["--syntax-feature-dim", "0"], r"--syntax-feature-dim 0: expected a positive integer"),
    ("transformer_nsd", ["--nsd-max-distance", "0"], r"--nsd-max-distance 0: expected a positive integer"),
    ("transformer_nsd", ["--nsd-input", "concat", "--nsd-embed-dim", "-2"], r"--nsd-embed-dim -2: expected"),
    ("transformer_pascal", ["--pascal-heads", "0"], r"--pascal-heads 0: expected a positive integer"),
    ("transformer_pascal", ["--pascal-heads", "3"], r"--pascal-heads 3 must be in \[1, --encoder-attention-heads 2"),
    # floats: NaN/inf gave NaN outputs or a silently disabled component; lambda <= 1 failed in forward
    ("transformer_syntax_spe", ["--spe-head-constant", "nan"], r"--spe-head-constant nan: expected a number > 0 and at most 3.403e\+38, the largest float32"),
    ("transformer_syntax_spe", ["--spe-head-constant", "inf"], r"--spe-head-constant inf: expected a number > 0"),
    ("transformer_syntax_spe", ["--spe-head-constant", "1e300"], r"--spe-head-constant 1e\+300: expected a number > 0 and at most"),
    ("transformer_syntax_spe", ["--spe-depth-constant", "0"], r"--spe-depth-constant 0\.0: expected a number > 0"),
    ("transformer_syntax_spe", ["--spe-head-constant", "-5"], r"--spe-head-constant -5\.0: expected"),
    ("transformer_syntax_spe", ["--spe-parent-constant", "nan"], r"--spe-head-constant nan: expected"),
    ("transformer_nsd", ["--nsd-spe-lambda", "nan"], r"--nsd-spe-lambda nan: expected 0 \(off\) or a finite period"),
    ("transformer_nsd", ["--nsd-spe-lambda", "inf"], r"--nsd-spe-lambda inf: expected"),
    ("transformer_nsd", ["--nsd-spe-lambda", "-1"], r"--nsd-spe-lambda -1\.0: expected"),
    ("transformer_nsd", ["--nsd-spe-lambda", "0.5"], r"--nsd-spe-lambda 0\.5: expected"),
    ("transformer_nsd", ["--nsd-spe-lambda", "1"], r"--nsd-spe-lambda 1\.0: expected"),
    ("transformer_pascal", ["--pascal-heads", "1", "--pascal-variance", "nan"], r"--pascal-variance nan: expected"),
    ("transformer_pascal", ["--pascal-heads", "1", "--pascal-variance", "inf"], r"--pascal-variance inf: expected"),
    ("transformer_pascal", ["--pascal-heads", "1", "--pascal-variance", "0"], r"--pascal-variance 0\.0: expected"),
    ("transformer_pascal", ["--pascal-heads", "1", "--pascal-parent-ignoring", "1"],
     r"--pascal-parent-ignoring 1\.0: .*\[0, 1\)"),
    ("transformer_pascal", ["--pascal-heads", "1", "--pascal-parent-ignoring", "nan"], r"--pascal-parent-ignoring nan"),
    # heads and widths
    ("transformer_dep_rel", ["--encoder-attention-heads", "0"], r"--encoder-attention-heads 0: expected at least 1"),
    ("transformer_dep_rel", ["--encoder-attention-heads", "-2"], r"--encoder-attention-heads -2: expected at least 1"),
    ("transformer_dep_rel", ["--decoder-attention-heads", "3"],
     r"--decoder-embed-dim 16 is not divisible by --decoder-attention-heads 3; e\.g\. --decoder-attention-heads 2"),
    ("transformer_dep_rel", ["--decoder-embed-dim", "15"], r"--decoder-embed-dim 15 is not divisible"),
    ("transformer_syntax_embed", ["--encoder-attention-heads", "5"],
     r"encoder model dimension 28 .*--encoder-attention-heads 5; e\.g\. --encoder-attention-heads 4 would do"),
    ("transformer_nsd", ["--encoder-embed-dim", "15", "--encoder-attention-heads", "3"],
     r"--nsd-spe-lambda 40\.0: .*needs an even encoder model dimension, got 15"),
    ("transformer_syntax_spe", ["--syntax-features", "none", "--encoder-embed-dim", "18"],
     r"--spe-features head,depth: the encoder model dimension 18 .*divisible by 4"),
    ("transformer_structural", ["--encoder-embed-dim", "2", "--decoder-embed-dim", "2", "--encoder-attention-heads",
                                "1", "--decoder-attention-heads", "1", "--encoder-learned-pos", "--decoder-learned-pos"],
     r"--structural-absolute: .*dimension >= 4, got 2"),
]


@pytest.mark.parametrize("arch, extra, match", BAD, ids=[" ".join([a] + e) for a, e, _ in BAD])
def test_bad_values_are_refused_naming_the_flag(arch, extra, match):
    refused(arch, extra, match)


@pytest.mark.parametrize("arch, extra", [
    ("transformer_rel", ["--rel-seq-k", "-1"]),
    ("transformer_gps", ["--gps-layers", "0,0"]),
    ("transformer_nsd", ["--nsd-spe-lambda", "nan"]),
    ("transformer_dep_rel", ["--decoder-attention-heads", "3"]),
    ("transformer_rel", ["--rel-seq-k", "100000000"]),
])
def test_refused_while_fairseq_parses_before_any_data_is_read(arch, extra):
    """The architecture function (run by fairseq's parser) checks, not only build_model."""
    with pytest.raises(ModelOptionError):
        parse(arch, extra)


@pytest.mark.parametrize("extra, message", [
    (["--rel-no-keys", "--rel-keys"], "argument --rel-keys: contradicts --rel-no-keys (--rel-no-keys is 0.1's spelling "
                                      "of --no-rel-keys)"),
    (["--rel-keys", "--rel-no-keys"], "argument --rel-no-keys: contradicts --rel-keys"),
    (["--rel-keys", "true", "--rel-no-keys"], "argument --rel-no-keys: contradicts --rel-keys"),
    (["--rel-no-values", "--rel-values"], "argument --rel-values: contradicts --rel-no-values"),
    (["--spe-parent-constant", "100", "--spe-head-constant", "300"],
     "argument --spe-head-constant: contradicts --spe-parent-constant (--spe-parent-constant is 0.1's spelling of "
     "--spe-head-constant)"),
    (["--spe-head-constant", "300", "--spe-parent-constant", "100"], "argument --spe-parent-constant: contradicts"),
])
def test_old_and_new_spelling_in_contradiction_are_refused(capsys, extra, message):
    """argparse let the last one win: ``--rel-no-keys --rel-keys`` trained with keys, unnoticed."""
    with pytest.raises(SystemExit) as exit_:
        parse("transformer_syntax_spe", extra)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_old_spellings_alone_and_in_agreement_still_work():
    args = parse("transformer_rel", ["--rel-no-keys"])
    assert (args.rel_keys, args.rel_values) == (False, True)
    args = parse("transformer_rel", ["--rel-no-values"])
    assert (args.rel_keys, args.rel_values) == (True, False)
    args = parse("transformer_syntax_spe", ["--spe-parent-constant", "100"])
    assert args.spe_head_constant == 100.0
    # the same value through both spellings is no contradiction
    args = parse("transformer_rel", ["--no-rel-keys", "--rel-no-keys", "--rel-keys", "false"])
    assert args.rel_keys is False
    args = parse("transformer_syntax_spe", ["--spe-head-constant", "300", "--spe-parent-constant", "300"])
    assert args.spe_head_constant == 300.0
    # the new spelling repeated: argparse's last-one-wins, as for every option
    assert parse("transformer_rel", ["--no-rel-keys", "--rel-keys"]).rel_keys is True
    # the parser's note of who set what is no option: it never reaches the checkpoint's args
    assert not [k for k in vars(args) if k.startswith("_syntax")]
    model, _ = build("transformer_rel", ["--rel-no-keys"])
    layer = model.encoder.layers[0].attention_terms["shaw"]
    assert layer.key_table is None and layer.value_table is not None
    assert model.decoder.layers[0].rel_seq_embed.key_table is None


@pytest.mark.parametrize("arch, extra", [
    ("transformer_rel", ["--rel-seq-k", "0"]),  # 0 turns it off, as documented
    ("transformer_rel", ["--rel-seq-k", "1024", "--decoder-rel-seq-k", "1024"]),
    ("transformer_structural", ["--structural-k", "2048"]),
    ("transformer_syntax_embed", ["--no-rel-keys", "--no-rel-values"]),  # nothing relative to turn off
    ("transformer_syntax_embed", ["--syntax-features", "none"]),
    ("transformer_syntax_spe", ["--spe-features", "parent"]),  # 0.1's name
    ("transformer_gps", ["--gps-layers", "none"]),
    ("transformer_gps", ["--gps-layers", "-1"]),
    ("transformer_gps", ["--gps-layers", "ALL"]),
    ("transformer_gps", ["--gps-layers", "0,"]),
    ("transformer_pascal", ["--pascal-heads", "1", "--pascal-variance", "1e-30"]),
    ("transformer_syntax_spe", ["--spe-head-constant", "1e-30", "--spe-depth-constant", "1"]),
    ("transformer_nsd", ["--nsd-spe-lambda", "1e300"]),
])
def test_edge_values_that_are_meaningful_still_build_and_run(arch, extra):
    model, _ = build(arch, extra)
    src, lengths, syntax = batch(model, [(table1_tokens(), table1_features(model.syntax_inputs()))])
    out, _ = model(src, lengths, torch.full((1, 2), WORDS.eos()), src_syntax=syntax)
    assert torch.isfinite(out).all()


def test_argparse_refuses_wrong_types_and_choices(capsys):
    for extra, message in [
        (["--rel-seq-k", "2.5"], "argument --rel-seq-k: invalid int value: '2.5'"),
        (["--rel-keys", "maybe"], "argument --rel-keys: expected a boolean"),
        (["--structural-distance", "euclid"], "argument --structural-distance: invalid choice: 'euclid'"),
        (["--nsd-input", "sum"], "argument --nsd-input: invalid choice: 'sum'"),
        (["--pascal-eos-parent", "root"], "argument --pascal-eos-parent: invalid choice: 'root'"),
    ]:
        with pytest.raises(SystemExit):
            parse("transformer_structural", extra)
        assert message in capsys.readouterr().err


def test_values_set_by_code_are_checked_the_same_way():
    """Hub overrides and checkpoints reach the options without argparse: from_args types and checks them."""
    ok = argparse.Namespace(rel_seq_k="3", pascal_variance="2", rel_keys="false", structural_distance="tree-path")
    cfg = SyntaxModelConfig.from_args(ok)
    assert (cfg.rel_seq_k, cfg.pascal_variance, cfg.rel_keys) == (3, 2.0, False)
    for bad, match in [
        (dict(rel_seq_k=2.5), r"--rel-seq-k: expected an integer, got 2\.5"),  # int() truncated it to 2
        (dict(rel_seq_k="two"), r"--rel-seq-k: expected an integer, got 'two'"),
        (dict(pascal_variance="big"), r"--pascal-variance: expected a number"),
        (dict(nsd_predict="maybe"), r"--nsd-predict: expected a boolean"),
        (dict(structural_distance="euclid"), r"--structural-distance must be one of \['depth-sum', 'tree-path'\]"),
        (dict(syntax_features=["pos", "pos"]), r"'pos' listed twice"),
    ]:
        with pytest.raises(ModelOptionError, match=match):
            SyntaxModelConfig.from_args(argparse.Namespace(**bad))
    assert parse_name_list([], ("pos",), "--syntax-features") == ()  # an empty list set by code: none
    assert parse_layer_list([], 3, "--gps-layers") == ()
    assert parse_layer_list("all", 3, "--gps-layers") == (0, 1, 2)
    with pytest.raises(ModelOptionError, match=r"--gps-layers '3,1': layers \[3\] out of range for 3"):
        parse_layer_list("3,1", 3, "--gps-layers")


def test_a_model_that_reads_syntax_needs_the_syntax_task():
    """``--task translation --arch transformer_dep_rel`` built, then failed in the first forward."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    plain = TranslationTask(TranslationConfig(), WORDS, WORDS)
    args = parse("transformer_dep_rel")
    with pytest.raises(ModelOptionError, match=r"--arch transformer_dep_rel reads the source syntax \(depth\), which "
                                               r"only --task syntax_translation provides"):
        conftest.rt.SyntaxTransformerModel.build_model(args, plain)
    # a model that reads no syntax builds with fairseq's own task
    model = conftest.rt.SyntaxTransformerModel.build_model(parse("transformer_rel"), plain)
    assert model.syntax_inputs() == set()
    # code that passes src_syntax itself may build with a stand-in task (as the unit tests do)
    stand_in = types.SimpleNamespace(source_dictionary=WORDS, target_dictionary=WORDS)
    assert conftest.rt.SyntaxTransformerModel.build_model(parse("transformer_dep_rel"), stand_in).syntax_inputs()


def test_values_0_1_accepted_load_as_the_same_model():
    """A 0.1 checkpoint's args with values the checks now refuse on a command line: spelled as today."""
    old = argparse.Namespace(arch="transformer_dep_rel", rel_no_keys=True, rel_no_values=True, rel_seq_k=2,
                             rel_dep_l=-1, decoder_rel_seq_k=2, structural_k=0, gps_layers="0,0", pascal_layers="",
                             nsd_spe_lambda=-1.0, syntax_features="", spe_features="parent")
    syntax_base_architecture(old)
    # 0.1: no rows in the tables (keys and values off), <= 0 turned a component off, "" was none
    assert (old.rel_seq_k, old.rel_dep_l, old.decoder_rel_seq_k) == (0, 0, 0)
    assert (old.gps_layers, old.pascal_layers, old.nsd_spe_lambda) == ("0", "none", 0.0)
    assert (old.syntax_features, old.spe_features) == ("none", "head")
    # a command line of today gets no such respelling
    with pytest.raises(ModelOptionError):
        syntax_base_architecture(argparse.Namespace(arch="transformer_dep_rel", rel_seq_k=2, rel_keys=False,
                                                    rel_values=False))


# ------------------------------------------------------------------ the real CLI, once
@pytest.mark.slow
def test_non_default_options_survive_into_decoding(tmp_path):
    """Train through fairseq-train (the checkout) with non-default options, old spellings among them, and
    decode with fairseq-generate; the checkpoint loads (as generate and interactive load it) into that model."""
    from .conftest import SRC, TGT, conllu_for, parsed_bin

    src, tgt = SRC * 4, TGT * 4
    data = parsed_bin(tmp_path, {s: (src, tgt, conllu_for(src)) for s in ("train", "valid", "test")})
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    user_dir = os.path.join(REPO, "fairseq_syntax")
    options = ["--rel-seq-k", "3", "--rel-dep-l", "1", "--decoder-rel-seq-k", "4", "--rel-no-values",
               "--syntax-features", "pos", "--syntax-feature-dim", "4", "--spe-features", "head,depth",
               "--spe-parent-constant", "123", "--spe-depth-constant", "77",
               "--pascal-layers", "0", "--pascal-heads", "1", "--pascal-variance", "2",
               "--pascal-eos-parent", "last-root", "--structural-k", "3", "--structural-distance", "tree-path"]
    save = tmp_path / "ckpt"
    subprocess.run(
        [sys.executable, "-m", "fairseq_cli.train", str(data), "--user-dir", user_dir, "--task", "syntax_translation",
         "--arch", "syntax_transformer", *conftest.TINY, "--encoder-embed-dim", "12", "--optimizer", "adam",
         "--lr", "0.001", "--max-tokens", "500", "--max-update", "3", "--cpu", "--save-dir", str(save),
         "--no-epoch-checkpoints", "--no-progress-bar", *options],
        check=True, capture_output=True, text=True, env=env, timeout=600,
    )
    checkpoint = str(save / "checkpoint_last.pt")
    result = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.generate", str(data), "--user-dir", user_dir, "--task",
         "syntax_translation", "--path", checkpoint, "--gen-subset", "test", "--beam", "2", "--max-len-b", "5",
         "--batch-size", "8", "--cpu"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sum(line.startswith("H-") for line in result.stdout.splitlines()) == len(src)

    from fairseq import checkpoint_utils

    models, cfg, _ = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": str(data)})
    stored = cfg.model
    assert not [k for k in vars(stored) if k.startswith("_syntax") or k in ("rel_no_values", "spe_parent_constant")]
    encoder = models[0].encoder
    syntax = encoder.syntax_cfg
    assert (syntax.rel_seq_k, syntax.rel_dep_l, syntax.decoder_rel_seq_k) == (3, 1, 4)
    assert (syntax.rel_keys, syntax.rel_values) == (True, False)
    assert encoder.model_dim == 16 and encoder.input_components["features"].features == ("pos",)
    assert encoder.input_components["spe"].encoding.constants == (123.0, 77.0)
    weights = encoder.attention_components["pascal"].weights
    assert (weights.parent_heads, weights.variance, weights.eos_self) == ([0], 2.0, False)
    assert encoder.attention_components["structural"].off_path == "tree-path"
    terms = encoder.layers[0].attention_terms
    assert terms["shaw"].max_distance == 3 and terms["shaw"].value_table is None
    assert terms["dependency_depth"].max_distance == 1 and terms["structural"].max_distance == 3
    decoder_rel = models[0].decoder.layers[0].rel_seq_embed
    assert decoder_rel.max_distance == 4 and decoder_rel.value_table is None
