"""Every built-in experiment: a fresh 20-step run, ``torchgarden export``, and a consumer
in a fresh process (no torchgarden) loading the three formats.

The toy run is in the default suite; the image tasks (heavier traces) are slow.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import torchgarden as tg
from torchgarden.checkpoint import load_model_weights
from torchgarden.cli.main import main
from torchgarden.export import normalize_images

CONSUMER = pathlib.Path(__file__).with_name("consumer.py")
_TRAINER = {"train_steps": 20, "steps_per_loop": 10, "summary_interval": 10,
            "checkpoint_interval": 20, "validation_interval": 20, "progress_bar": False}
_DETECTIONS = ("detection_boxes", "detection_scores", "detection_classes", "num_detections")


def _overrides(name: str, data_dir: pathlib.Path) -> dict:
    if name == "semantic_segmentation":
        return {"task": {
            "model": {"widths": [4, 8]},
            "generated_data": {"data_dir": str(data_dir), "num_train": 8, "num_validation": 4,
                               "image_size": 16, "max_objects": 2},
            "train_data": {"global_batch_size": 4, "output_size": [16, 16]},
            "validation_data": {"global_batch_size": 4}}}
    if name == "retinanet":  # score_threshold 0: every candidate goes through NMS
        return {"task": {
            "model": {"input_size": [32, 32], "max_level": 3, "backbone_channels": [4, 8, 8],
                      "decoder": {"fpn": {"num_filters": 8}}, "head": {"num_filters": 8, "num_convs": 1},
                      "detection_generator": {"pre_nms_score_threshold": 0.0}},
            "generated_data": {"data_dir": str(data_dir), "num_train": 8, "num_validation": 4,
                               "image_size": 32, "max_objects": 2},
            "train_data": {"global_batch_size": 4},
            "validation_data": {"global_batch_size": 4}}}
    return {}


def train_fresh(name: str, tmp_path: pathlib.Path) -> str:
    """A fresh 20-step ``train_and_eval`` run of experiment ``name``; returns model_dir."""
    params = tg.get_experiment(name)
    params.override(_overrides(name, tmp_path / "data"))
    params.override({"trainer": _TRAINER})
    params.validate()
    model_dir = str(tmp_path / name)
    task = tg.get_task(params.task, logging_dir=model_dir)
    tg.run_experiment(task=task, mode="train_and_eval", params=params, model_dir=model_dir)
    return model_dir


def eager_reference(task, model, inputs: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """What the serving outputs should be, from ``task.inference_step`` on the raw inputs."""
    config = task.task_config
    with torch.no_grad():
        if not hasattr(config, "image_mean") and inputs[0].dtype != torch.uint8:
            return {"predictions": task.inference_step(inputs[0], model)}
        mean, std = getattr(config, "image_mean", None), getattr(config, "image_std", None)
        outputs = task.inference_step(normalize_images(inputs[0], mean, std), model)
    if isinstance(outputs, dict):
        return {k: outputs[k] for k in _DETECTIONS}
    probabilities = torch.softmax(outputs, dim=1)
    if outputs.ndim == 4:
        scores, masks = probabilities.max(dim=1)
        return {"masks": masks, "scores": scores}
    scores, classes = torch.topk(probabilities, 5, dim=1)
    return {"probabilities": probabilities, "top_k_scores": scores, "top_k_classes": classes}


def export_and_consume(model_dir: str, tmp_path: pathlib.Path) -> tuple[dict, dict]:
    """``torchgarden export`` then the fresh-process consumer; returns (manifest, diffs)."""
    output = tmp_path / "export"
    assert main(["export", "--model_dir", model_dir, "--output", str(output)]) == 0
    manifest = json.loads((output / "export.json").read_text())
    assert set(manifest["formats"]) == {"safetensors", "pt2", "onnx"}
    params = tg.ExperimentConfig.from_yaml(output / "params.yaml")
    task = tg.get_task(params.task)
    model = task.build_model()
    load_model_weights(model, manifest["checkpoint"])
    model.eval()
    example = task.build_serving_module(model).example_inputs
    generator = torch.Generator().manual_seed(1)
    inputs = tuple(  # a batch of 3 other inputs: the batch dimension is dynamic
        torch.randint(0, 256, (3, *x.shape[1:]), generator=generator, dtype=x.dtype)
        if x.dtype == torch.uint8 else torch.randn(3, *x.shape[1:], generator=generator)
        for x in example)
    reference = tmp_path / "reference.pt"
    torch.save({"inputs": list(inputs), "outputs": eager_reference(task, model, inputs)},
               reference)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(CONSUMER), str(output), str(reference)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return manifest, json.loads(done.stdout.strip().splitlines()[-1])


def _check(manifest: dict, diffs: dict, experiment: str) -> None:
    assert manifest["experiment"] == experiment
    assert manifest["step"] == 20
    assert diffs["weights"] > 0
    for kind in ("pt2", "onnx"):
        diffs_by_output = manifest["verification"][kind]["max_abs_diff_by_output"]
        if "detection_scores" in diffs_by_output:  # near-tied detections may swap places
            diffs_by_output = {"detection_scores": diffs_by_output["detection_scores"]}
        assert max(diffs_by_output.values()) < 1e-4, (kind, diffs_by_output)
    for name, info in manifest["files"].items():
        assert info["bytes"] > 0 and len(info["sha256"]) == 64, name


def test_toy_regression_exports_and_loads_without_torchgarden(tmp_path):
    model_dir = train_fresh("toy_regression", tmp_path)
    manifest, diffs = export_and_consume(model_dir, tmp_path)
    _check(manifest, diffs, "toy_regression")
    assert manifest["inputs"] == [{"name": "features", "shape": ["batch", 8], "dtype": "float32"}]
    assert manifest["metrics"]["validation_loss"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["image_classification", "semantic_segmentation",
                                        "retinanet"])
def test_image_experiment_exports_and_loads_without_torchgarden(experiment, tmp_path):
    model_dir = train_fresh(experiment, tmp_path)
    manifest, diffs = export_and_consume(model_dir, tmp_path)
    _check(manifest, diffs, experiment)
    assert manifest["inputs"][0]["dtype"] == "uint8"
    assert os.path.basename(manifest["checkpoint"]) == "best_ckpt-20"


@pytest.mark.slow
def test_export_on_best_writes_an_export_that_predict_reads(tmp_path, capsys):
    from PIL import Image
    from sklearn.datasets import load_digits

    params = tg.get_experiment("image_classification")
    params.override({"trainer": {**_TRAINER, "validation_interval": 10, "export_on_best": True,
                                 "max_to_keep": 1}})
    model_dir = tmp_path / "ic"
    tg.run_experiment(task=tg.get_task(params.task), mode="train_and_eval",
                      params=params.validate(), model_dir=str(model_dir))
    best_step = json.loads((model_dir / "best_ckpt" / "info.json").read_text())[
        "best_ckpt_global_step"]
    exports = sorted(p.name for p in (model_dir / "best_ckpt").glob("export-*"))
    assert exports == [f"export-{best_step}"]  # max_to_keep=1, the newest best
    export_dir = model_dir / "best_ckpt" / exports[0]

    digits = load_digits()
    files = []
    for i in range(3):
        files.append(str(tmp_path / f"digit_{i}.png"))
        Image.fromarray((digits.images[i] * 255 / 16).astype("uint8")).save(files[-1])
    capsys.readouterr()
    for runtime in ("pt2", "onnx"):
        assert main(["predict", "--export", str(export_dir), *files, "--runtime", runtime]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert [line.split(":")[0] for line in lines] == files
        if runtime == "pt2":
            first = lines
    assert lines == first  # both runtimes print the same labels and scores
    task = tg.get_task(params.task)
    model = task.build_model()
    load_model_weights(model, str(model_dir / "best_ckpt" / f"best_ckpt-{best_step}"))
    pixels = torch.stack([torch.from_numpy(digits.images[i] * 255 / 16).to(torch.uint8)
                          for i in range(3)]).unsqueeze(-1)
    expected = eager_reference(task, model.eval(), (pixels,))["top_k_classes"][:, 0]
    assert [int(line.split(": ")[1].split(" ")[0]) for line in lines] == expected.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["language_model", "multitask_digits",
                                        "multitask_digits_eval", "multitask_shapes",
                                        "retinanet_resnet18"])
def test_every_other_builtin_experiment_exports_to_the_three_formats(experiment, tmp_path):
    """The experiments added after the export work: a 4-step run, then `torchgarden export`,
    whose manifest records each format's largest difference from the eager model."""
    model_dir, output = str(tmp_path / "run"), tmp_path / "export"
    overrides = "trainer.train_steps=4,trainer.steps_per_loop=2,trainer.checkpoint_interval=4"
    assert main(["train", "--experiment", experiment, "--mode", "train", "--model_dir",
                 model_dir, "--params_override", overrides]) == 0
    assert main(["export", "--model_dir", model_dir, "--output", str(output)]) == 0
    manifest = json.loads((output / "export.json").read_text())
    assert manifest["step"] == 4
    assert set(manifest["formats"]) == {"safetensors", "pt2", "onnx"}
    for kind in ("pt2", "onnx"):
        differences = manifest["verification"][kind]["max_abs_diff_by_output"]
        assert differences and max(differences.values()) < 1e-4, (kind, differences)
    for info in manifest["files"].values():
        assert info["bytes"] > 0
