"""argparse types shared by the pipeline's commands: numbers checked when the command line is read."""

import argparse
from typing import Callable


#: the largest count any option takes (BPE merges, workers, lines...): a larger one is a typo that would fail
#: deep inside a library (subword-nmt's C sizes) or fork without end
MAXIMUM = 10 ** 9


def at_least(minimum: int, maximum: int = MAXIMUM) -> Callable[[str], int]:
    """An integer in ``[minimum, maximum]``, or argparse's usage error naming the flag."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, found {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, found {number}")
        if number > maximum:
            raise argparse.ArgumentTypeError(f"expected a number <= {maximum}, found {number}")
        return number

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive = at_least(1)
non_negative = at_least(0)
#: processes to fork: more than this is a typo that would exhaust the machine's process table
MAX_WORKERS = 256
workers = at_least(1, MAX_WORKERS)


class Once(argparse.Action):
    """``store``, but a second value for the option is a usage error naming it (argparse keeps the last
    silently: ``--baseline A --baseline B`` would score B alone without a word)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, f"_given_{self.dest}", False):
            parser.error(f"{option_string}: given twice ({getattr(namespace, self.dest)!r}, then {values!r}); "
                         "it takes one value")
        setattr(namespace, f"_given_{self.dest}", True)
        setattr(namespace, self.dest, values)


class _StoreOnce(argparse._StoreAction):
    __call__ = Once.__call__


def refuse_repeats(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Every single-valued option of ``parser`` and of its subcommands becomes :class:`Once`: given twice, it is a
    usage error naming it, not its last value kept silently (``--splits test --splits train``)."""
    for action in parser._actions:
        if type(action) is argparse._StoreAction and action.option_strings:
            action.__class__ = _StoreOnce
        elif isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                refuse_repeats(sub)
    return parser
