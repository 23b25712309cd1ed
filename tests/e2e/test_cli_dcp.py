"""A run saved in the sharded format (``trainer.checkpoint_format=dcp``) through the CLI:
resumed, converted to one file with ``torchgarden convert``, exported."""

from __future__ import annotations

import os

import torch

from torchgarden.checkpoint import read_full_state, read_meta
from torchgarden.cli.main import main

OVERRIDES = ("trainer.train_steps={steps},trainer.steps_per_loop=5,trainer.summary_interval=5,"
             "trainer.checkpoint_interval=5,trainer.checkpoint_format=dcp,"
             "trainer.optimizer_config.ema.average_decay=0.9")


def _train(model_dir: str, steps: int) -> int:
    return main(["train", "--experiment", "toy_regression", "--mode", "train",
                 "--model_dir", model_dir, "--params_override", OVERRIDES.format(steps=steps)])


def test_dcp_run_resumes_converts_and_exports(tmp_path, capsys):
    model_dir = str(tmp_path / "run")
    assert _train(model_dir, 5) == 0 and _train(model_dir, 10) == 0
    assert "restored model from" in capsys.readouterr().out
    checkpoint = os.path.join(model_dir, "ckpt-10")
    assert read_meta(checkpoint)["format"] == "dcp"
    assert sorted(os.listdir(checkpoint)) == [".metadata", "__0_0.distcp", "meta.json"]

    assert main(["convert", checkpoint, "--output", str(tmp_path / "single")]) == 0
    converted = tmp_path / "single" / "ckpt-10" / "state.pt"
    state = torch.load(converted, weights_only=True)
    assert state["global_step"] == {"value": 10} and "ema" in state
    torch.testing.assert_close(state["model"], read_full_state(checkpoint)["model"], rtol=0,
                               atol=0)
    assert main(["convert", str(tmp_path / "missing"), "--output", str(tmp_path)]) == 2
    assert "is not a directory" in capsys.readouterr().err

    assert main(["export", "--model_dir", model_dir, "--format", "safetensors",
                 "--output", str(tmp_path / "export")]) == 0
    assert (tmp_path / "export" / "model.safetensors").is_file()
