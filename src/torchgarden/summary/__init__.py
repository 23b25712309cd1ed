"""TensorBoard summary managers (Orbit's ``SummaryManager`` family)."""

from torchgarden.summary.manager import (
    ImageScalarSummaryManager,
    SummaryFn,
    SummaryManager,
    SummaryManagerInterface,
    scalar_summary,
)

__all__ = [
    "ImageScalarSummaryManager",
    "SummaryFn",
    "SummaryManager",
    "SummaryManagerInterface",
    "scalar_summary",
]
