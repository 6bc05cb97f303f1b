"""The release of fairseq-syntax (``setup.py`` reads it; ``fairseq_syntax.__version__`` is it).

Formats carry versions of their own, changed only when the format changes: the data-bin's
``syntax.json`` ``format_version`` (:data:`fairseq_syntax_core.databin.FORMAT_VERSION`) and a
model's stored ``syntax_format_version`` (``fairseq_syntax/models/syntax_transformer/legacy.py``).
CHANGELOG.md says what each release changed.
"""

__version__ = "0.2.0"
