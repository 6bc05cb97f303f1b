"""What the pipeline and the plugin share, importing neither: tree derivations, the data-bin's
description, the one checkpoint loader (``checkpoint_loader``: torch's weights-only unpickler and
an allow-list), the check of names read from files, and the errors every command reports.

``fairseq_syntax`` (the ``--user-dir``) registers fairseq components when imported, so nothing
the pipeline needs may live under it; ``fairseq_syntax_preprocess`` (the pipeline) imports no
model, task or criterion. Both import this package, which imports only NumPy and PyTorch.
"""
