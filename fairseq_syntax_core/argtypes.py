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
