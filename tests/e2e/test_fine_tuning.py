"""Fine-tuning through the real CLI: pretrained weights in, bad input refused in one line."""

from __future__ import annotations

import json
import os

import pytest
import torch

from torchgarden.cli.main import main

transformers = pytest.importorskip("transformers")

TINY_VIT = {"image_size": 8, "patch_size": 2, "hidden_size": 16, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 32, "num_channels": 1,
            "num_labels": 4}
VIT_RUN = ("task.model.name=transformers/vit,trainer.train_steps=4,trainer.steps_per_loop=2,"
           "trainer.summary_interval=2,trainer.checkpoint_interval=2,"
           "task.train_data.global_batch_size=16,task.validation_data.global_batch_size=64")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hf") / "vit"
    torch.manual_seed(0)
    transformers.ViTForImageClassification(transformers.ViTConfig(**TINY_VIT)).save_pretrained(
        directory)
    return str(directory)


@pytest.fixture
def prefix_map(tmp_path):
    """A config file mapping the file's bare keys under the adapter's ``model.``."""
    path = tmp_path / "map.yaml"
    path.write_text("task:\n  init_checkpoint_prefix_map: {'': model.}\n")
    return str(path)


def fails(capsys, *args: str) -> str:
    code = main(list(args))
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    return err


def test_pretrained_path_of_a_hf_directory_trains_with_a_new_head(tmp_path, pretrained, capsys):
    model_dir = str(tmp_path / "run")
    code = main(["train", "--experiment", "image_classification", "--model_dir", model_dir,
                 "--params_override", f"{VIT_RUN},task.model.pretrained_path={pretrained},"
                 "task.model.ignore_mismatched_sizes=true"])
    assert code == 0
    out = capsys.readouterr().out
    assert "task.model.pretrained_path: loaded 38 tensors" in out
    assert "skipped 2 (classifier.bias, classifier.weight: shape differs)" in out
    state = torch.load(os.path.join(model_dir, "ckpt-4", "state.pt"), weights_only=True)
    assert state["model"]["model.classifier.weight"].shape == (10, 16)


def test_init_checkpoint_of_a_hf_directory_with_modules_as_a_string(tmp_path, pretrained, capsys,
                                                                    prefix_map):
    model_dir = str(tmp_path / "run")
    settings = ",".join(f"task.model.library_config.{k}={v}" for k, v in TINY_VIT.items()
                        if k != "num_labels")
    code = main(["train", "--experiment", "image_classification", "--model_dir", model_dir,
                 "--config_file", prefix_map,
                 "--params_override", f"{VIT_RUN},{settings},task.init_checkpoint={pretrained},"
                 "task.init_checkpoint_modules=model.vit"])
    assert code == 0, capsys.readouterr().err
    assert "task.init_checkpoint: loaded 38 tensors" in capsys.readouterr().out


@pytest.mark.parametrize("override, expected", [
    ("task.init_checkpoint={missing}", "does not exist"),
    ("task.model.pretrained_path={missing}", "missing.safetensors"),
    ("task.init_checkpoint={pretrained},task.init_checkpoint_modules=model.vti",
     "did you mean 'model.vit'"),
])
def test_bad_sources_are_one_line_exit_2_model_dir_untouched(tmp_path, pretrained, capsys,
                                                             prefix_map, override, expected):
    model_dir = str(tmp_path / "run")
    missing = str(tmp_path / "missing.safetensors")
    settings = ",".join(f"task.model.library_config.{k}={v}" for k, v in TINY_VIT.items()
                        if k != "num_labels")
    err = fails(capsys, "train", "--experiment", "image_classification", "--model_dir",
                model_dir, "--config_file", prefix_map, "--params_override",
                f"{VIT_RUN},{settings},"
                + override.format(missing=missing, pretrained=pretrained))
    assert expected in err.lower() or expected in err
    assert not os.path.exists(model_dir) or not os.listdir(model_dir)


def test_freeze_and_param_rules_through_the_cli(tmp_path, capsys):
    model_dir = str(tmp_path / "run")
    config = tmp_path / "rules.yaml"
    config.write_text(
        "trainer:\n  freeze: ['^1\\.']\n"
        "  param_rules: [{pattern: '^3\\.', lr_mult: 0.5}]\n"
        "  optimizer_config: {learning_rate: {type: constant, constant: {learning_rate: 0.01}},"
        " warmup: {type: null}}\n")
    code = main(["train", "--experiment", "image_classification", "--model_dir", model_dir,
                 "--config_file", str(config), "--params_override",
                 "trainer.train_steps=4,trainer.steps_per_loop=2,trainer.summary_interval=2,"
                 "trainer.checkpoint_interval=2,task.model.hidden_sizes=[16,8]"])
    assert code == 0, capsys.readouterr().err
    first, last = (torch.load(os.path.join(model_dir, f"ckpt-{n}", "state.pt"), weights_only=True)
                   for n in (2, 4))
    assert torch.equal(first["model"]["1.weight"], last["model"]["1.weight"])  # Frozen.
    assert not torch.equal(first["model"]["3.weight"], last["model"]["3.weight"])
    optimizer = last["optimizer"]
    tensors = sum(len(g["params"]) for g in optimizer["param_groups"])
    assert tensors == len(optimizer["state"]) == 4  # 3.* and 5.*: no state for 1.*.
    rates = sorted(g["lr"] for g in optimizer["param_groups"])
    assert rates == pytest.approx([0.005, 0.01])
    with open(os.path.join(model_dir, "param_groups.json")) as f:
        groups = json.load(f)
    assert {tuple(g["names"]): g["lr_mult"] for g in groups} == {
        ("5.weight", "5.bias"): 1.0, ("3.weight", "3.bias"): 0.5}
