"""fairseq-syntax: source-side syntax for fairseq NMT, loaded with ``--user-dir fairseq_syntax``.

Importing the package registers the ``syntax_translation`` task, the syntax models and
their architectures, and the syntax criterions with fairseq, and admits the globals that
fairseq checkpoints hold to torch's ``weights_only`` loader (see ``checkpoints.py``).
"""

from fairseq_syntax_core.version import __version__  # noqa: E402,F401

from fairseq_syntax_core.startup import install_startup_handler

install_startup_handler()  # before torch and fairseq: Ctrl-C while they import is one line (startup.py)

from . import checkpoints  # noqa: F401  (before any checkpoint is loaded)
from . import compat

compat.install()
from . import criterions, models, tasks  # noqa: F401
from . import scoring  # noqa: F401  (--scoring ribes)
