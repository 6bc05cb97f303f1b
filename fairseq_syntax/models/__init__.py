from . import syntax_transformer  # noqa: F401
from . import tree2seq  # noqa: F401
