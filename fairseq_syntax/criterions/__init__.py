from . import label_smoothed_cross_entropy_with_auxiliary, label_smoothed_cross_entropy_with_nsd  # noqa: F401
from . import blackout  # noqa: F401
