"""``torchgarden export`` and ``torchgarden predict``.

``export`` writes a model_dir's checkpoint as safetensors, a ``torch.export`` program and
ONNX (see ``docs/export.md``); ``predict`` runs an image classifier's export on image
files and prints the top-k labels. Torch is imported only when a command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

__all__ = ["COMMANDS", "add_parsers", "command_export", "command_predict"]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Adds the ``export`` and ``predict`` subcommands to ``sub``."""
    export = sub.add_parser(
        "export", help="export a checkpoint: safetensors, torch.export (.pt2), ONNX.")
    export.add_argument("--model_dir", required=True, help="the trained run's directory.")
    export.add_argument("--checkpoint", default="auto", metavar="best|latest|PATH",
                        help="which checkpoint (default: best if the run kept one, else latest).")
    export.add_argument("--format", dest="formats", default=None, metavar="LIST",
                        help="comma-separated subset of safetensors,pt2,onnx,hf (default: the "
                             "first three; ONNX is skipped with a notice when its packages are "
                             "missing; hf: Hugging Face layout of a transformers model).")
    export.add_argument("--merge_adapters", action=argparse.BooleanOptionalAction, default=True,
                        help="hf: merge LoRA adapters into the weights (default), or "
                             "--no-merge_adapters to write the adapter alone in PEFT's layout.")
    ema = export.add_mutually_exclusive_group()
    ema.add_argument("--ema", dest="ema", action="store_true", default=None,
                     help="export the moving-average weights (default when the run kept them).")
    ema.add_argument("--no-ema", dest="ema", action="store_false",
                     help="export the raw weights.")
    export.add_argument("--output", default=None, metavar="DIR",
                        help="export directory (default: MODEL_DIR/exports/<checkpoint name>).")
    export.add_argument("--task", dest="task_name", default=None, metavar="NAME",
                        help="multi-task runs: the task to export (default: the first; "
                             "output: MODEL_DIR/exports/<checkpoint name>/NAME).")
    export.add_argument("--overwrite", action="store_true",
                        help="replace an existing torchgarden export at --output.")
    export.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE", help="module to import first (registers your task).")

    predict = sub.add_parser("predict", help="top-k labels of images from a classifier export.")
    predict.add_argument("--export", dest="export_dir", required=True, metavar="DIR",
                         help="a directory written by `torchgarden export`.")
    predict.add_argument("files", nargs="+", metavar="FILE", help="image files.")
    predict.add_argument("--runtime", choices=("pt2", "onnx"), default="pt2",
                         help="run model.pt2 with torch (default) or model.onnx with "
                              "onnxruntime.")


def _size(num_bytes: int) -> str:
    for unit in ("B", "KB", "MB"):
        if num_bytes < 1024 or unit == "MB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return ""


def command_export(args: argparse.Namespace) -> int:
    """Runs ``export_model`` and prints where the files went, their sizes and checks."""
    from torchgarden import registry
    from torchgarden.export import export_model

    for module in args.imports:
        registry.import_user_module(module)
    result = export_model(args.model_dir, checkpoint=args.checkpoint, formats=args.formats,
                          ema=args.ema, output_dir=args.output, overwrite=args.overwrite,
                          task_name=args.task_name, merge_adapters=args.merge_adapters)
    manifest = result.manifest
    weights = "EMA" if manifest["ema"] else "raw"
    part = f"task {manifest['task_name']} of " if "task_name" in manifest else ""
    print(f"torchgarden: exported {part}{os.path.basename(manifest['checkpoint'])} (step "
          f"{manifest['step']}, {weights} weights) to {result.output_dir} in "
          f"{result.seconds:.1f} s", flush=True)
    checks = manifest.get("verification", {})
    for kind, name in manifest["formats"].items():
        size = sum(info["bytes"] for entry, info in manifest["files"].items()
                   if entry == name or entry.startswith(name + "/"))
        line = f"  {name:<18} {_size(size):>9}"
        if kind in checks:
            line += f"   max |{kind} - eager| = {checks[kind]['max_abs_diff']:.3g}"
            by_output = checks[kind].get("max_abs_diff_by_output", {})
            if checks[kind]["max_abs_diff"] > 1e-4 and len(by_output) > 1:
                line += " (" + ", ".join(f"{k} {v:.3g}" for k, v in by_output.items()) + ")"
        print(line)
    for kind, why in result.skipped.items():
        print(f"torchgarden: {kind} skipped: {why}.", file=sys.stderr)
    if args.task_name is None and len(manifest.get("tasks", ())) > 1:
        print(f"torchgarden: a multi-task run (tasks: {', '.join(manifest['tasks'])}); "
              "--task NAME exports another.")
    return 0


def _load_images(files: list[str], height: int, width: int, channels: int):  # -> np.ndarray
    import numpy as np
    from PIL import Image

    mode = "L" if channels == 1 else "RGB"
    arrays = []
    for path in files:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"image {path} does not exist.")
        try:
            with Image.open(path) as image:
                image = image.convert(mode).resize((width, height), Image.BILINEAR)
                arrays.append(np.asarray(image, dtype=np.uint8).reshape(height, width, channels))
        except OSError as e:
            raise ValueError(f"image {path} cannot be decoded: {e}") from e
    return np.stack(arrays)


def command_predict(args: argparse.Namespace) -> int:
    """Prints ``FILE: label (p), ...`` for each image, best first."""
    manifest_path = os.path.join(args.export_dir, "export.json")
    if not os.path.isfile(manifest_path):
        raise FileNotFoundError(f"--export {args.export_dir} has no export.json; point it at a "
                                "directory written by `torchgarden export`.")
    with open(manifest_path, encoding="utf-8") as f:
        manifest = json.load(f)
    outputs = [o["name"] for o in manifest.get("outputs", [])]
    serving = manifest.get("serving", {})
    if "top_k_classes" not in outputs or "image_size" not in serving:
        raise ValueError(f"--export {args.export_dir} is not an image classifier's export "
                         f"(its outputs are {outputs}); predict prints top-k labels only.")
    if args.runtime not in manifest["formats"]:
        raise ValueError(f"--runtime {args.runtime}: the export has no {args.runtime} file "
                         f"(formats: {', '.join(manifest['formats'])}).")
    images = _load_images(args.files, *serving["image_size"])
    scores, classes = _run_classifier(args.export_dir, manifest, args.runtime, images)
    labels = serving.get("labels") or []
    for path, row_scores, row_classes in zip(args.files, scores, classes):
        ranked = ", ".join(
            f"{labels[c] if c < len(labels) else c} ({s:.3f})"
            for s, c in zip(row_scores.tolist(), row_classes.tolist()))
        print(f"{path}: {ranked}")
    return 0


def _run_classifier(export_dir: str, manifest: dict, runtime: str, images):  # -> (np, np)
    import numpy as np

    path = os.path.join(export_dir, manifest["formats"][runtime])
    if runtime == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        values = dict(zip(names, session.run(None, {manifest["inputs"][0]["name"]: images})))
        return values["top_k_scores"], values["top_k_classes"]
    import torch

    with torch.no_grad():
        outputs = torch.export.load(path).module()(torch.from_numpy(np.ascontiguousarray(images)))
    return outputs["top_k_scores"].numpy(), outputs["top_k_classes"].numpy()


#: Subcommand name -> handler, for ``cli.main``.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "export": command_export, "predict": command_predict}
