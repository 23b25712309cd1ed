"""``torchgarden export`` on bad input: one line, exit 2, nothing half-written."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch
from torch import nn

import torchgarden as tg
from torchgarden.checkpoint import Checkpoint, CheckpointManager
from torchgarden.cli.main import main
from torchgarden.export import formats


@dataclasses.dataclass
class BranchyConfig(tg.TaskConfig):
    """A task whose model branches on the data (torch.export cannot trace it)."""


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent control flow
            return self.linear(x)
        return -self.linear(x)


@tg.register_task(BranchyConfig)
class BranchyTask(tg.Task):
    def build_model(self) -> nn.Module:
        return Branchy()

    def build_inputs(self, params, input_context=None):
        return [(torch.randn(4, 4), torch.zeros(4, 2))]


def _listing(path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), path)
                  for d, dirs, files in os.walk(path) for f in files + dirs)


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    params = tg.get_experiment("toy_regression")
    params.override({"trainer": {"train_steps": 2, "steps_per_loop": 1, "summary_interval": 1,
                                 "checkpoint_interval": 2, "validation_interval": 2,
                                 "progress_bar": False}})
    model_dir = str(tmp_path_factory.mktemp("toy"))
    tg.run_experiment(task=tg.get_task(params.task), mode="train_and_eval",
                      params=params.validate(), model_dir=model_dir)
    return model_dir


def _fails(capsys, argv: list[str], match: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert match in err, err
    return err


def test_no_checkpoint(tmp_path, capsys):
    _fails(capsys, ["export", "--model_dir", str(tmp_path)], "holds no checkpoint")
    assert _listing(tmp_path) == []


def test_unknown_format_names_the_closest(toy_dir, capsys):
    before = _listing(toy_dir)
    _fails(capsys, ["export", "--model_dir", toy_dir, "--format", "safetensors,onx"],
           "--format 'onx' is unknown. Did you mean 'onnx'?")
    assert _listing(toy_dir) == before


def test_existing_output_is_never_overwritten_unless_ours(toy_dir, tmp_path, capsys):
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    argv = ["export", "--model_dir", toy_dir, "--output", str(output), "--format", "safetensors"]
    _fails(capsys, argv, "already exists")
    _fails(capsys, [*argv, "--overwrite"], "is not a torchgarden export")
    assert _listing(tmp_path) == ["out", "out/keep.txt"]

    ours = tmp_path / "ours"
    argv = ["export", "--model_dir", toy_dir, "--output", str(ours), "--format", "safetensors"]
    assert main(argv) == 0
    first = json.loads((ours / "export.json").read_text())["created"]
    _fails(capsys, argv, "already exists")
    assert main([*argv, "--overwrite"]) == 0
    assert json.loads((ours / "export.json").read_text())["created"] >= first
    assert sorted(os.listdir(tmp_path)) == ["ours", "out"]  # no staging left behind


def test_missing_onnx_packages_skip_onnx_or_fail_when_asked(toy_dir, tmp_path, capsys,
                                                            monkeypatch):
    monkeypatch.setattr(formats, "missing_onnx_packages", lambda: ["onnxruntime"])
    output = tmp_path / "out"
    assert main(["export", "--model_dir", toy_dir, "--output", str(output)]) == 0
    assert "onnx skipped: needs onnxruntime" in capsys.readouterr().err
    manifest = json.loads((output / "export.json").read_text())
    assert set(manifest["formats"]) == {"safetensors", "pt2"} and "onnx" in manifest["skipped"]
    _fails(capsys, ["export", "--model_dir", toy_dir, "--output", str(tmp_path / "x"),
                    "--format", "onnx"], "--format onnx needs onnxruntime")
    assert not (tmp_path / "x").exists()


def test_untraceable_model_names_the_module_and_what_worked(tmp_path, capsys):
    params = tg.ExperimentConfig(task=BranchyConfig())
    model_dir = tmp_path / "run"
    CheckpointManager(Checkpoint(model=Branchy()), model_dir).save(7, config=params.as_dict())
    before = _listing(model_dir)
    err = _fails(capsys, ["export", "--model_dir", str(model_dir)],
                 "torch.export cannot trace model (Branchy)")
    assert "formats that still worked: safetensors; export only those with --format " \
           "safetensors" in err
    assert _listing(model_dir) == before  # no exports/ directory, no staging left
    err = _fails(capsys, ["export", "--model_dir", str(model_dir), "--format", "onnx"],
                 "the ONNX exporter cannot trace model (Branchy)")
    assert "nothing was written; --format safetensors exports the weights alone" in err
    assert _listing(model_dir) == before
