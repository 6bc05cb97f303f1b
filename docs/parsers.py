"""The argparse parsers the option reference renders (sphinx-argparse), built by the code's own functions.

Each function returns a parser holding exactly the options the plugin adds, with the help the code
gives them: the model options from the composed options dataclass (``add_syntax_args``), the
task's, criteria's and scorer's from their fairseq dataclasses (less the fields of the fairseq
class they extend), ``tree2seq``'s from its ``add_args``, and the commands' (``fairseq-syntax-preprocess``
and the others) from their ``get_parser``.
"""

import argparse
import re
from dataclasses import fields

# sphinx-argparse reads help as reStructuredText: a word ending in "_" (spaCy's ``pos_``) would be a
# reference, "*" emphasis and "|" a substitution; escaped, they render as --help prints them
_RST_SPECIAL = re.compile(r"(?<=\w)_(?=\W|$)|[*|]")


def _escaped(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with every option's help escaped for reStructuredText (subcommands' too)."""
    for action in parser._actions:
        if isinstance(action.help, str) and action.help != argparse.SUPPRESS:
            action.help = _RST_SPECIAL.sub(lambda m: "\\" + m.group(0), action.help)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _escaped(sub)
    return parser


def _dataclass_parser(prog: str, config, base=None) -> argparse.ArgumentParser:
    """The options fairseq generates from ``config`` (an instance), without those of ``base`` (a class)."""
    from fairseq.dataclass.utils import gen_parser_from_dataclass

    parser = argparse.ArgumentParser(prog=prog, add_help=False)
    gen_parser_from_dataclass(parser, config)
    inherited = {f.name for f in fields(base)} if base is not None else set()
    for action in list(parser._actions):
        if action.dest in inherited or action.dest == "_name":
            parser._remove_action(action)
            for flag in action.option_strings:
                parser._option_string_actions.pop(flag, None)
    return _escaped(parser)


def syntax_transformer() -> argparse.ArgumentParser:
    """``--arch syntax_transformer`` and its presets: the options of every component."""
    import fairseq_syntax  # noqa: F401  (registers the models)
    from fairseq_syntax.models.syntax_transformer.config import add_syntax_args

    parser = argparse.ArgumentParser(prog="fairseq-train --user-dir fairseq_syntax --arch transformer_...",
                                     add_help=False)
    add_syntax_args(parser)
    return _escaped(parser)


def tree2seq() -> argparse.ArgumentParser:
    import fairseq_syntax  # noqa: F401
    from fairseq_syntax.models.tree2seq.model import Tree2SeqModel

    parser = argparse.ArgumentParser(prog="fairseq-train --user-dir fairseq_syntax --arch tree2seq", add_help=False)
    Tree2SeqModel.add_args(parser)
    return _escaped(parser)


def task() -> argparse.ArgumentParser:
    import fairseq_syntax  # noqa: F401
    from fairseq.tasks.translation import TranslationConfig
    from fairseq_syntax.tasks.config import SyntaxTranslationConfig

    return _dataclass_parser("fairseq-train --user-dir fairseq_syntax --task syntax_translation",
                             SyntaxTranslationConfig(), TranslationConfig)


def nsd_criterion() -> argparse.ArgumentParser:
    import fairseq_syntax  # noqa: F401
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterionConfig
    from fairseq_syntax.criterions.label_smoothed_cross_entropy_with_nsd import LabelSmoothedCrossEntropyWithNSDConfig

    return _dataclass_parser("fairseq-train ... --criterion label_smoothed_cross_entropy_with_nsd",
                             LabelSmoothedCrossEntropyWithNSDConfig(), LabelSmoothedCrossEntropyCriterionConfig)


def blackout_criterion() -> argparse.ArgumentParser:
    import fairseq_syntax  # noqa: F401
    from fairseq_syntax.criterions.blackout import BlackOutConfig

    return _dataclass_parser("fairseq-train ... --criterion blackout", BlackOutConfig())


def ribes_scorer() -> argparse.ArgumentParser:
    import fairseq_syntax  # noqa: F401
    from fairseq_syntax.scoring.ribes import RibesScorerConfig

    return _dataclass_parser("fairseq-generate ... --scoring ribes", RibesScorerConfig())


def _command(module: str) -> argparse.ArgumentParser:
    import importlib

    return _escaped(importlib.import_module(module).get_parser())


def preprocess() -> argparse.ArgumentParser:
    return _command("fairseq_syntax_preprocess.options")


def preprocess_cluster() -> argparse.ArgumentParser:
    return _command("fairseq_syntax_preprocess.cluster")


def perturb() -> argparse.ArgumentParser:
    return _command("fairseq_syntax_preprocess.perturb")


def evaluate() -> argparse.ArgumentParser:
    return _command("fairseq_syntax_analysis.evaluate")


def report() -> argparse.ArgumentParser:
    return _command("fairseq_syntax_analysis.results")


def show() -> argparse.ArgumentParser:
    return _command("fairseq_syntax_analysis.show")


def awsl() -> argparse.ArgumentParser:
    return _command("fairseq_syntax_analysis.awsl")
