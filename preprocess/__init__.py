"""The parsing and side-file pipeline (installed as ``fairseq_syntax_preprocess``)."""

from fairseq_syntax_core.startup import install_startup_handler

install_startup_handler()  # first: Ctrl-C during the imports that follow is one line (startup.py)
