"""fairseq's own checkpoint reads admit exactly the globals fairseq checkpoints hold, nothing else.

fairseq 0.12 reads checkpoints with torch's default ``weights_only``, which is ``True`` from
torch 2.6: importing the plugin adds the allow-list of
:mod:`fairseq_syntax_core.checkpoint_loader` (``argparse.Namespace``, NumPy scalars and dtypes)
to torch's process-wide one, before any checkpoint is read. Any other global in a checkpoint
still fails (as a one-line error naming the file, ``fairseq_syntax.compat``). Our own code
reads checkpoints with :func:`~fairseq_syntax_core.checkpoint_loader.load_checkpoint` only.
"""

from fairseq_syntax_core.checkpoint_loader import allow_fairseq_checkpoints, fairseq_checkpoint_globals

__all__ = ["allow_fairseq_checkpoints", "fairseq_checkpoint_globals"]

allow_fairseq_checkpoints()
