from . import relative_transformer  # noqa: F401
