"""argparse types shared by the pipeline's commands: numbers checked when the command line is read."""

import argparse
from typing import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """An integer of at least ``minimum``, or argparse's usage error naming the flag."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, found {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, found {number}")
        return number

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive = at_least(1)
non_negative = at_least(0)


class Once(argparse.Action):
    """``store``, but a second value for the option is a usage error naming it (argparse keeps the last
    silently: ``--baseline A --baseline B`` would score B alone without a word)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, f"_given_{self.dest}", False):
            parser.error(f"{option_string}: given twice ({getattr(namespace, self.dest)!r}, then {values!r}); "
                         "it takes one value")
        setattr(namespace, f"_given_{self.dest}", True)
        setattr(namespace, self.dest, values)
