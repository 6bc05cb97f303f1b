from . import syntax_transformer  # noqa: F401
