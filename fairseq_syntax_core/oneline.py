"""Text from files, libraries and users shown on one line: in error messages, warnings, tables and terminals.

A value read from a file (a model name in a result JSON, a parser name in ``syntax.json``) or an
error text of a library (spaCy's ``ConfigValidationError`` spans several lines) must not forge
lines of its own or send escape sequences to the terminal. :func:`one_line` spells out line
breaks, control characters and invisible format characters (bidirectional overrides such as
U+202E, zero-width characters); :func:`quoted` is a value's ``repr`` on one line, shortened;
:func:`error_text` is an exception as one line. The pipeline and the plugin both use these
(``fairseq_syntax_analysis.rendering`` builds its Markdown and plot escapes on :func:`one_line`).
"""

import unicodedata

#: what one_line shows instead of a line break or tab
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: Unicode categories spelled out: controls, format characters (bidi overrides, zero-width), surrogates,
#: line and paragraph separators
_SPELLED = ("Cc", "Cf", "Cs", "Zl", "Zp")


def _shown(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    if unicodedata.category(char) in _SPELLED:
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return char


def one_line(text: object) -> str:
    """``text`` on one line: line breaks, tabs, control and format characters spelled out (``\\n``, ``\\x1b``, ``\\u202e``)."""
    return "".join(_shown(c) for c in str(text))


def shortened(text: str, limit: int = 160) -> str:
    """``text`` cut to ``limit`` characters, ``...`` marking the cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def quoted(value: object, limit: int = 160) -> str:
    """``repr(value)`` on one line and at most ``limit`` characters: a value from a file, as a message shows it."""
    return shortened(one_line(repr(value)), limit)


def error_text(error: BaseException, limit: int = 400) -> str:
    """``Type: message`` of ``error`` on one line (its lines joined, runs of blanks as one space), shortened."""
    message = " ".join(str(error).split())
    return shortened(one_line(f"{type(error).__name__}: {message}" if message else type(error).__name__), limit)
