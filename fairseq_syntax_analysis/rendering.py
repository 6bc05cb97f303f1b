"""Text from users and files (model and system names, test-set names, fields of result JSON) made
safe for each output the analysis commands write, so that rendering is escaped by construction.

* Markdown: :func:`md_text` (plain text: no emphasis, link, code, HTML tag, entity or math
  can start in it), :func:`md_code` (one code span, whatever backticks it holds) and
  :func:`md_row` (a table row: every cell's pipes escaped, GitHub's rule, code spans included).
  A name with a newline, ``|``, backticks or ``<script>`` keeps the table one row of its cells.
* matplotlib: :func:`plot_text` (``$`` escaped: no mathtext, so ``$\\frac$`` is drawn as it
  is instead of failing when the figure is saved) and :func:`legend` (labels given
  explicitly: matplotlib leaves a label that starts with ``_`` out of an automatic legend).
* Terminal and one-line outputs: :func:`one_line` (line breaks, control and format characters shown
  as ``\\n``, ``\\x1b``, ``\\u202e``, ...: :mod:`fairseq_syntax_core.oneline`, shared with the
  pipeline's messages), which every function above applies first.
"""

import re
from typing import Iterable, List, Sequence

from fairseq_syntax_core.oneline import one_line

__all__ = ["one_line", "md_text", "md_code", "md_row", "plot_text", "legend"]

#: characters that would start Markdown syntax inside a line (``|`` is escaped per table cell by md_row)
_MARKDOWN_SPECIAL = set("\\`*_[]<>&~$")


#: what GitHub's autolink extension (and linkifiers) turn into a link in plain text: www., a scheme's
#: ``://``, mailto:/xmpp:, an e-mail address. A backslash cannot stop them; a code span does.
_AUTOLINK = re.compile(r"(?i)www\.|[a-z][a-z0-9+.-]*://|\b(?:mailto|xmpp):|[\w.+-]@[\w-]+\.")


def md_text(text: str) -> str:
    """``text`` as Markdown that shows exactly it, on one line: every character that could start
    syntax is backslash-escaped (``_`` between two letters or digits cannot, and is left as it is).
    Text an autolinker would make a link of (``www.``, ``https://``, an e-mail address) becomes one
    code span (:func:`md_code`) instead: no link can start in it."""
    text = one_line(text)
    if _AUTOLINK.search(text):
        return md_code(text)
    out = []
    for i, c in enumerate(text):
        intraword = c == "_" and 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
        out.append("\\" + c if c in _MARKDOWN_SPECIAL and not intraword else c)
    return "".join(out)


def md_code(text: str) -> str:
    """``text`` as one Markdown code span on one line, whatever backticks it holds (CommonMark: a longer
    fence, padded where the text starts or ends with a backtick or with spaces at both ends)."""
    text = one_line(text)
    if not text:
        return ""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    spaced = text.startswith(" ") and text.endswith(" ") and text.strip(" ")
    pad = " " if text.startswith("`") or text.endswith("`") or spaced else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_row(cells: Iterable[str]) -> str:
    """A Markdown table row of ``cells`` (each already Markdown: md_text, md_code, numbers), every ``|`` in
    them escaped as GitHub's tables require, inside code spans too, and each kept on one line."""
    return "| " + " | ".join(one_line(cell).replace("|", "\\|") for cell in cells) + " |"


def plot_text(text: str) -> str:
    """``text`` as matplotlib draws it literally: on one line, every ``$`` escaped so no mathtext is parsed
    (matplotlib turns ``\\$`` back into ``$`` in text that is not math)."""
    return one_line(text).replace("$", "\\$")


def legend(ax, handles: Sequence, labels: Sequence[str], **kwargs) -> None:
    """``ax.legend`` with every label through :func:`plot_text`, given explicitly (so none starting with
    ``_`` is dropped)."""
    texts: List[str] = [plot_text(label) for label in labels]
    ax.legend(list(handles), texts, **kwargs)
