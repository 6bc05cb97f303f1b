"""Errors raised by the preprocessing pipeline: every one names a file and a line."""

from typing import Optional


class InputError(ValueError):
    """Bad input: names the file, the 1-based line and what was expected."""

    def __init__(self, path: str, line: Optional[int], message: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.message = message
