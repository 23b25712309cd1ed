"""``export_model``: a model_dir's checkpoint -> a directory people can serve from.

```
<output>/model.safetensors   the weights + metadata (experiment, step, config hash, metrics)
<output>/model.pt2           torch.export program of the Task's serving module (dynamic batch)
<output>/model.onnx          the same through torch's ONNX exporter
<output>/hf/                 --format hf: save_pretrained's layout (torchgarden.export.hf)
<output>/params.yaml         the experiment config the checkpoint was trained with
<output>/export.json         manifest: formats, inputs/outputs (names, shapes, dtypes),
                             sha256 + size of each file, measured max |export - eager|
```

The directory is assembled in a hidden sibling and renamed into place (complete or
absent). An existing ``<output>`` is refused; ``overwrite=True`` replaces only an export.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Sequence
from typing import Any

import torch

from torchgarden import registry
from torchgarden.core.serving import Serving
from torchgarden.export import formats as fmt
from torchgarden.export import verify
from torchgarden.export.errors import ExportError
from torchgarden.export.hf import find_library_model, write_hf
from torchgarden.export.source import ExportSource, resolve_source
from torchgarden.multitask import MultiTask, sub_model
from torchgarden.utils.files import atomic_write_json, atomic_write_text, fsync_dir
from torchgarden.utils.suggest import did_you_mean

__all__ = ["EXPORT_FILE", "ExportResult", "default_output_dir", "export_model", "write_export"]

_logger = logging.getLogger("torchgarden")
EXPORT_FILE = "export.json"
_MANIFEST_VERSION = 1
_HASH_CHUNK = 1 << 20


@dataclasses.dataclass
class ExportResult:
    """What :func:`export_model` wrote.

    Args:
        output_dir: The export directory.
        manifest: The content of its ``export.json``.
        skipped: ``{format: why}`` for formats left out (ONNX without its packages).
        seconds: Wall time of the export, verification included.
    """

    output_dir: str
    manifest: dict[str, Any]
    skipped: dict[str, str]
    seconds: float


def default_output_dir(source: ExportSource) -> str:
    """``<model_dir>/exports/<checkpoint name>``, e.g. ``runs/ic/exports/best_ckpt-2000``;
    an ``ExportError`` if a directory on the way is a link (it stays in the model_dir)."""
    exports = os.path.join(source.model_dir, "exports")
    path = os.path.join(exports, os.path.basename(source.checkpoint_path))
    for part in (exports, path):
        if os.path.islink(part):
            raise ExportError(f"{part} is a symbolic link (to {os.readlink(part)}); the default "
                              "export stays in the model_dir: name one with --output.")
    return path


def _is_our_export(path: str) -> bool:
    try:
        with open(os.path.join(path, EXPORT_FILE), encoding="utf-8") as f:
            return "torchgarden_export" in json.load(f)
    except (OSError, ValueError, TypeError):
        return False


def _check_output(path: str, overwrite: bool) -> None:
    if not os.path.lexists(path):
        parent = os.path.dirname(os.path.abspath(path))
        probe = parent
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        if not os.path.isdir(probe) or not os.access(probe, os.W_OK):
            raise ExportError(f"--output {path} cannot be created under {probe}.")
        return
    if not overwrite:
        raise ExportError(f"--output {path} already exists; choose another directory, or pass "
                          "--overwrite to replace the torchgarden export there.")
    if not os.path.isdir(path) or not _is_our_export(path):
        raise ExportError(f"--output {path} exists and is not a torchgarden export (no "
                          f"{EXPORT_FILE} written by torchgarden export); not overwriting it.")


def _make_parents(directory: str) -> list[str]:
    """``os.makedirs(directory)``; returns the directories it created, outermost first."""
    missing = []
    while not os.path.isdir(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for path in reversed(missing):
        os.mkdir(path)
    return list(reversed(missing))


def _file_info(path: str) -> dict[str, Any]:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
        os.fsync(f.fileno())
    return {"sha256": digest.hexdigest(), "bytes": os.path.getsize(path)}


def _formats_to_write(formats: Sequence[str] | str, explicit: bool) -> tuple[tuple[str, ...],
                                                                           dict[str, str]]:
    chosen = fmt.check_formats(formats)
    missing = fmt.missing_onnx_packages() if "onnx" in chosen else []
    if not missing:
        return chosen, {}
    why = f"needs {', '.join(missing)} (pip install 'torchgarden[export]')"
    if explicit:
        raise ExportError(f"--format onnx {why}.")
    return tuple(f for f in chosen if f != "onnx"), {"onnx": why}


def _run(kind: str, path: str, inputs: tuple[torch.Tensor, ...], serving: Serving,
         names: tuple[str, ...]) -> dict[str, Any]:
    if kind == "pt2":
        return verify.run_pt2(path, inputs, names)
    return verify.run_onnx(path, inputs, serving)


def _measure(stage: str, written: Sequence[str], serving: Serving,
             expected: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    """Max |export - eager| per format, on the example batch and on a batch of 3."""
    other = verify.batch_of(serving.example_inputs, 3)
    names = tuple(expected)
    with torch.no_grad():
        expected_other = verify.flatten_outputs(serving.module(*other), names)
    measured: dict[str, dict[str, float]] = {}
    for kind in (k for k in written if k in ("pt2", "onnx")):
        path = os.path.join(stage, fmt.FILE_NAMES[kind])
        outputs = _run(kind, path, serving.example_inputs, serving, names)
        per_output = {name: verify.max_abs_difference({name: expected[name]}, outputs)
                      for name in names}
        measured[kind] = {
            "max_abs_diff": max(per_output.values(), default=0.0),
            "max_abs_diff_by_output": per_output,
            "max_abs_diff_batch_3": verify.max_abs_difference(
                expected_other, _run(kind, path, other, serving, names)),
        }
    return measured


def write_export(
    serving: Serving,
    weights: dict[str, torch.Tensor],
    output_dir: str,
    *,
    formats: Sequence[str] | str = fmt.FORMATS,
    metadata: dict[str, Any] | None = None,
    params_yaml: str | None = None,
    overwrite: bool = False,
    explicit_formats: bool = False,
    merge_adapters: bool = True,
) -> ExportResult:
    """Writes ``serving`` (and ``weights``) as an export directory, atomically.

    Args:
        serving: From ``Task.build_serving_module(model)``; put in ``eval()`` mode here.
        weights: The state dict written to ``model.safetensors``.
        output_dir: The directory to create.
        formats: Any of ``safetensors``, ``pt2``, ``onnx``. Defaults to all three.
        metadata: JSON-serialisable facts for the safetensors header and the manifest.
        params_yaml: The config as YAML text, written to ``params.yaml``. Default None.
        overwrite: Replace ``output_dir`` if it holds a torchgarden export.
        explicit_formats: The caller named ``formats``: a missing ONNX package is then an
            error rather than a skipped format. Defaults to False.
        merge_adapters: ``hf``: merge LoRA adapters into the weights (True, the default)
            or write the adapter alone in PEFT's layout.

    Raises:
        ExportError: Unknown format, existing output, missing ONNX packages (explicit).
        UntraceableModelError: ``torch.export`` or the ONNX exporter failed; nothing is
            left behind.
    """
    started = time.perf_counter()
    chosen, skipped = _formats_to_write(formats, explicit_formats)
    output_dir = os.path.abspath(output_dir)
    _check_output(output_dir, overwrite)
    metadata = dict(metadata or {})
    serving.module.eval()
    with torch.no_grad():
        expected = verify.flatten_outputs(serving.module(*serving.example_inputs),
                                          serving.output_names)
    parent, name = os.path.split(output_dir)
    created = _make_parents(parent)
    stage = os.path.join(parent, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    os.makedirs(stage)
    try:
        written, checks = _write_formats(stage, chosen, serving, weights, metadata,
                                         list(expected), merge_adapters)
        if params_yaml is not None:
            atomic_write_text(os.path.join(stage, "params.yaml"), params_yaml)
        manifest = _manifest(serving, expected, written, skipped, metadata, stage)
        manifest["verification"] = {**_measure(stage, written, serving, expected), **checks}
        manifest["export_seconds"] = round(time.perf_counter() - started, 3)
        atomic_write_json(os.path.join(stage, EXPORT_FILE), manifest)  # synced with its dir
        _place(stage, output_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for directory in reversed(created):  # the parents this export made, if still empty
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise
    return ExportResult(output_dir=output_dir, manifest=manifest, skipped=skipped,
                        seconds=time.perf_counter() - started)


def _write_formats(stage: str, chosen: Sequence[str], serving: Serving,
                   weights: dict[str, torch.Tensor], metadata: dict[str, Any],
                   output_names: list[str], merge_adapters: bool
                   ) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Writes each chosen format into ``stage``; returns them and the checks made while
    writing (``hf``'s reload)."""
    written: list[str] = []
    checks: dict[str, dict[str, float]] = {}
    for kind in chosen:
        path = os.path.join(stage, fmt.FILE_NAMES[kind])
        if kind == "safetensors":
            fmt.write_safetensors(path, weights, metadata)
        elif kind == "pt2":
            fmt.write_pt2(path, serving, tuple(written))
        elif kind == "hf":
            checks["hf"] = write_hf(path, serving.module, serving.example_inputs,
                                    merge_adapters=merge_adapters)
        else:
            fmt.write_onnx(path, serving, output_names, tuple(written))
        written.append(kind)
    return written, checks


def _manifest(serving: Serving, expected: dict[str, torch.Tensor], written: Sequence[str],
              skipped: dict[str, str], metadata: dict[str, Any], stage: str) -> dict[str, Any]:
    files = {os.path.relpath(os.path.join(top, entry), stage): _file_info(os.path.join(top, entry))
             for top, _, names in os.walk(stage) for entry in sorted(names)}
    return {
        "torchgarden_export": _MANIFEST_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "formats": {kind: fmt.FILE_NAMES[kind] for kind in written},
        "skipped": skipped,
        "inputs": verify.describe(dict(zip(serving.input_names, serving.example_inputs)),
                                  serving.dynamic_batch),
        "outputs": verify.describe(expected, serving.dynamic_batch),
        "serving": serving.metadata,
        "files": files,
        **metadata,
    }


def _place(stage: str, output_dir: str) -> None:
    """Renames the finished stage to ``output_dir`` (replacing our own export there)."""
    aside = None
    if os.path.lexists(output_dir):  # _check_output allowed it: our export, overwrite=True
        aside = f"{stage}.old"
        os.rename(output_dir, aside)
    os.rename(stage, output_dir)
    fsync_dir(os.path.dirname(output_dir))
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def export_model(
    model_dir: str | os.PathLike[str],
    *,
    checkpoint: str = "auto",
    formats: Sequence[str] | str | None = None,
    ema: bool | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    task_name: str | None = None,
    merge_adapters: bool = True,
) -> ExportResult:
    """Exports a checkpoint of ``model_dir`` (see the module docstring).

    A multi-task run is exported one task at a time: that task's sub-model (shared
    modules included) with the task's own serving module, its weights alone in the
    safetensors file, by default under ``<model_dir>/exports/<checkpoint name>/<task>``.

    Example:
        >>> result = export_model("runs/ic")              # best, else latest; EMA if kept
        >>> result.output_dir                             # runs/ic/exports/best_ckpt-2000

    Args:
        model_dir: The run's directory.
        checkpoint: ``"auto"`` (best if any, else latest), ``"best"``, ``"latest"`` or a
            checkpoint directory. Defaults to ``"auto"``.
        formats: Any of ``safetensors``, ``pt2``, ``onnx`` (a list or ``"a,b"``). Defaults
            to all three, leaving ONNX out with a notice when its packages are missing.
        ema: True/False for averaged/raw weights; None: averaged when the run kept them.
        output_dir: Defaults to ``<model_dir>/exports/<checkpoint name>``.
        overwrite: Replace an existing torchgarden export at ``output_dir``.
        task_name: The task of a multi-task run to export (a ``task_routines`` name).
            Defaults to the first; the manifest's ``tasks`` lists them all.
        merge_adapters: As in :func:`write_export`. Defaults to True.

    Returns:
        An :class:`ExportResult`.

    Raises:
        ExportError: Bad input (no checkpoint, unknown format, existing output...), one
            line; nothing is written.
    """
    model_dir = os.fspath(model_dir)
    explicit = formats is not None
    fmt.check_formats(formats if explicit else fmt.FORMATS)  # before reading anything
    source = resolve_source(model_dir, checkpoint, ema)
    task = registry.get_task(source.params.task, logging_dir=model_dir)
    model, source = _load_model(task, source, merge_adapters)
    names = list(task.tasks) if isinstance(task, MultiTask) else []
    task, model, weights, task_name = _one_task(task, model, source, task_name)
    target = os.fspath(output_dir) if output_dir is not None else default_output_dir(source)
    if output_dir is None and task_name is not None:
        target = os.path.join(target, task_name)
    _check_output(os.path.abspath(target), overwrite)
    if "hf" in fmt.check_formats(formats if explicit else fmt.FORMATS):
        find_library_model(model)  # A model without one is refused before anything is written.
    serving = task.build_serving_module(model)
    metadata = {
        "experiment": source.experiment, "task": type(task).__name__, "step": source.step,
        "checkpoint": os.path.abspath(source.checkpoint_path), "ema": source.ema,
        "config_sha256": source.config_sha256, "metrics": source.metrics,
    }
    if task_name is not None:
        metadata["task_name"], metadata["tasks"] = task_name, names
    return write_export(serving, weights, target,
                        formats=formats if explicit else fmt.FORMATS, metadata=metadata,
                        params_yaml=source.params.to_yaml(), overwrite=overwrite,
                        explicit_formats=explicit, merge_adapters=merge_adapters)


def _load_model(task: Any, source: ExportSource, merge: bool
                ) -> tuple[torch.nn.Module, ExportSource]:
    """The task's model with the checkpoint's weights; LoRA adapters applied (and merged
    with ``merge``), the source's weights then the whole model's."""
    model, item = task.build_model(), None
    adapter = getattr(getattr(source.params.task, "model", None), "adapter", None)
    if getattr(adapter, "type", ""):
        from torchgarden.models.lora import adapt_model, merge_adapters

        model, item = adapt_model(model, source.params.task)
    try:
        (item or model).load_state_dict(source.weights)
    except (RuntimeError, ValueError) as e:
        raise ExportError(f"{source.checkpoint_path} does not fit the model its config builds: "
                          f"{' '.join(str(e).split())[:300]}") from e
    if item is None:
        return model, source
    model = merge_adapters(model) if merge else model
    weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return model, dataclasses.replace(source, weights=weights)


def _one_task(task: Any, model: torch.nn.Module, source: ExportSource, task_name: str | None
              ) -> tuple[Any, torch.nn.Module, dict[str, torch.Tensor], str | None]:
    """``(task, model, weights, task name)`` to export: a multi-task run's chosen task and
    its sub-model, else everything as given (and no name)."""
    if not isinstance(task, MultiTask):
        if task_name is not None:
            raise ExportError(f"--task {task_name}: {source.experiment} is not a multi-task run; "
                              "leave --task out.")
        return task, model, source.weights, None
    names = list(task.tasks)
    if task_name is None:
        task_name = names[0]
    elif task_name not in names:
        raise ExportError(f"--task {task_name}: the run's tasks are {names}."
                          f"{did_you_mean(task_name, names)}")
    part = sub_model(model, task_name)
    weights = {key: value.detach().cpu() for key, value in part.state_dict().items()}
    return task.tasks[task_name], part, weights, task_name
