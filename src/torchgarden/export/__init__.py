"""``torchgarden export``: a checkpoint -> safetensors, a ``torch.export`` program, ONNX.

Model Garden's ``export_saved_model`` twin. The Task says what serving means
(``Task.build_serving_module`` returns a :class:`Serving`, the ``ExportModule`` twin);
:func:`export_model` reads a model_dir's checkpoint, builds that module with the
checkpoint's weights and writes an export directory a consumer loads without
torchgarden (see ``docs/export.md``).

Example:
    >>> from torchgarden.export import export_model
    >>> export_model("runs/ic").output_dir
    '.../runs/ic/exports/best_ckpt-2000'
"""

from torchgarden.core.serving import InferenceStepModule, Serving, normalize_images
from torchgarden.export.errors import ExportError, UntraceableModelError
from torchgarden.export.exporter import (
    EXPORT_FILE,
    ExportResult,
    default_output_dir,
    export_model,
    write_export,
)
from torchgarden.export.formats import FORMATS, missing_onnx_packages
from torchgarden.export.process import PendingExport, start_export
from torchgarden.export.source import ExportSource, find_checkpoint, resolve_source, select_weights

__all__ = [
    "EXPORT_FILE",
    "FORMATS",
    "ExportError",
    "ExportResult",
    "ExportSource",
    "InferenceStepModule",
    "PendingExport",
    "Serving",
    "UntraceableModelError",
    "default_output_dir",
    "export_model",
    "find_checkpoint",
    "missing_onnx_packages",
    "normalize_images",
    "resolve_source",
    "select_weights",
    "start_export",
    "write_export",
]
