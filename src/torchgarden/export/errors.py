"""Why an export was refused. Each is a ``ValueError``: bad input, exit status 2."""

from __future__ import annotations

__all__ = ["ExportError", "UntraceableModelError"]


class ExportError(ValueError):
    """The export cannot be made as asked (no checkpoint, unknown format, output exists)."""


class UntraceableModelError(ExportError):
    """``torch.export`` (or the ONNX exporter) cannot trace the serving module.

    Attributes:
        module: Qualified name of the innermost module being traced when it failed.
        succeeded: The formats that were written before the failure (then removed).
    """

    def __init__(self, message: str, *, module: str = "", succeeded: tuple[str, ...] = ()):
        super().__init__(message)
        self.module = module
        self.succeeded = succeeded
