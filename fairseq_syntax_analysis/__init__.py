"""The analysis commands of fairseq-syntax: ``fairseq-syntax-evaluate``, ``-report``, ``-show``, ``-awsl``.

A package of its own, outside the ``--user-dir`` plugin: scoring and tables import no fairseq
(``fairseq-syntax-report``, ``fairseq-syntax-evaluate``); the commands that read checkpoints or
data-bins through the task import the plugin where they do.
"""

from fairseq_syntax_core.startup import install_startup_handler

install_startup_handler()  # first: Ctrl-C during the imports that follow is one line (startup.py)
