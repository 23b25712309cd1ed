"""examples/mixed_precision.py: LossScaleOptimizer from a custom step; bf16 unscaled."""

from __future__ import annotations

import mixed_precision
import pytest
import torch

import torchgarden as tg
from torchgarden import optim


def test_dynamic_scale_skips_the_overflowing_step_and_halves():
    mechanics = mixed_precision.loss_scaling_mechanics()
    assert mechanics["dynamic"] == {
        "finite_updated": True, "finite_scale": 2.0**15,
        "overflow_updated": False, "overflow_scale": 2.0**14,
    }
    assert mechanics["fixed"] == {
        "finite_updated": True, "finite_scale": 128.0,
        "overflow_updated": False, "overflow_scale": 128.0,
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed_precision")
    return {dtype: mixed_precision.train(dtype, str(root / dtype))
            for dtype in ("float16", "bfloat16")}


def test_float16_trains_through_a_loss_scale_optimizer(runs):
    run = runs["float16"]
    assert run["optimizer"] == "LossScaleOptimizer"
    scale = run["loss_scale"]
    assert 1.0 <= scale <= 2.0**15 and scale == 2.0 ** round(torch.log2(torch.tensor(scale)).item())
    assert run["last_loss"] < run["first_loss"] / 10
    assert float(run["eval_logs"]["validation_loss"]) < 0.1


def test_bfloat16_trains_without_loss_scaling(runs):
    run = runs["bfloat16"]
    assert run["optimizer"] == "Adam"
    assert run["loss_scale"] is None
    assert run["last_loss"] < run["first_loss"] / 10


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_forward_runs_in_the_autocast_dtype_and_returns_float32(dtype, tmp_path):
    params = mixed_precision.build_params(dtype).override("task.hidden_size=4")
    task = mixed_precision.ScaledStepTask(params.task)
    trainer = tg.create_trainer(params, task, train=True, evaluate=False,
                                model_dir=str(tmp_path))
    seen = []
    inner = trainer.unwrapped_model[0]  # Linear 8 -> 4 inside the autocast forward
    inner.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    output = trainer.model(torch.randn(4, 8))
    assert seen == [getattr(torch, dtype)]
    assert output.dtype == torch.float32
    assert isinstance(trainer.optimizer, optim.LossScaleOptimizer) == (dtype == "float16")
