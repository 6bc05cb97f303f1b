"""Reading a JSON file that may come from anywhere, with every failure one line naming the file.

``json.load`` fails in several ways besides ``JSONDecodeError``: ``UnicodeDecodeError`` (not
UTF-8), ``RecursionError`` (``"[" * 100000``), ``ValueError`` (an integer of more than 4300
digits), ``OSError``. Every reader of a JSON file in the package (``syntax.json``, length
tables, evaluation and result files, reports of child processes) calls :func:`read_json_file`,
so none of these reaches the user as a traceback::

    data-bin/syntax.json: is JSON nested too deeply to read; re-run fairseq-syntax-preprocess ...
"""

import os
import json
from typing import Any, Optional, Type

from .errors import InputError
from .oneline import error_text, one_line


def parse_json(text: str, path: str, line: Optional[int] = None, error: Type[InputError] = InputError,
               remedy: str = "") -> Any:
    """The JSON value of ``text`` (line ``line`` of ``path``, or the whole file); else ``error`` naming them."""
    suffix = f"; {remedy}" if remedy else ""
    try:
        return json.loads(text)
    except json.JSONDecodeError as failure:
        where = line if line is not None else failure.lineno
        raise error(path, where, f"is not valid JSON ({failure.msg}){suffix}") from None
    except RecursionError:
        raise error(path, line, f"is JSON nested too deeply to read{suffix}") from None
    except ValueError as failure:  # an integer of more digits than Python converts
        raise error(path, line, f"is JSON that cannot be read ({error_text(failure, 160)}){suffix}") from None


def read_json_file(path: str, error: Type[InputError] = InputError, remedy: str = "") -> Any:
    """The JSON value in the file at ``path``: ``error`` naming it when it cannot be read, and (with
    ``remedy``) when it is not UTF-8, not JSON, nested too deeply or holds a number too long to convert."""
    suffix = f"; {remedy}" if remedy else ""
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise error(path, None, "is not a regular file (a FIFO, socket or device): expected a JSON file")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except UnicodeDecodeError:
        raise error(path, None, f"is not UTF-8 text{suffix}") from None
    except OSError as failure:  # the remedy is for the content: not said of a file that cannot be opened
        raise error(path, None, f"cannot be read: {one_line(failure.strerror or failure)}") from None
    return parse_json(text, path, None, error, remedy)
