"""Sphinx configuration of the fairseq-syntax documentation.

Build (warnings are errors, every cross-reference must resolve)::

    pip install -c constraints.txt ".[docs]"
    python -m sphinx -W --keep-going -n -b html docs docs/_build/html
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # parsers.py: the option parsers the reference pages render

project = "fairseq-syntax"
author = "the fairseq-syntax authors"
copyright = "the fairseq-syntax authors"
with open(os.path.join(HERE, "..", "fairseq_syntax_core", "version.py"), encoding="utf-8") as handle:
    release = next(line.split('"')[1] for line in handle if line.startswith("__version__"))
version = release

extensions = [
    "myst_parser",
    "sphinxarg.ext",
    "sphinxcontrib.bibtex",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "refresh_tables.py", "parsers.py"]

myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 4  # [text](page.md#a-heading) links resolve, and are checked

bibtex_bibfiles = ["references.bib"]
bibtex_default_style = "plain"
bibtex_reference_style = "author_year"

html_theme = "furo"
html_title = f"fairseq-syntax {release}"
html_static_path = []
smartquotes = False  # option help keeps its "--" and quotes as --help prints them
