"""examples/custom_steps.py: hand-written train/validation steps through run_experiment."""

from __future__ import annotations

import math
import os

import custom_steps
import pytest
import torch
import torch.nn.functional as F

from torchgarden import data


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return custom_steps.main(str(tmp_path_factory.mktemp("custom_steps") / "run"))


def test_custom_train_step_trains_and_logs_its_gradient_norm(result, read_scalars):
    steps = [step for step, _ in result["train_logs"]]
    losses = [float(logs["training_loss"]) for _, logs in result["train_logs"]]
    assert steps == [25, 50, 75, 100]
    assert losses[-1] < losses[0] - 0.1
    norms = [float(logs["gradient_norm"]) for _, logs in result["train_logs"]]
    assert all(0.0 < n < math.inf for n in norms)
    summaries = read_scalars(os.path.join(result["model_dir"], "train"))
    assert [s for s, _ in summaries["gradient_norm"]] == steps
    assert [v for _, v in summaries["gradient_norm"]] == pytest.approx(norms, rel=1e-6)


def test_custom_validation_step_logs_equal_a_hand_computation(result):
    x, y = data.load_digits_arrays("validation")
    model = result["model"].eval()
    with torch.no_grad():
        logits = model(x.float())
    eval_logs = result["eval_logs"]
    assert float(eval_logs["validation_loss"]) == pytest.approx(
        F.cross_entropy(logits, y).item(), rel=1e-5)
    assert float(eval_logs["accuracy"]) == pytest.approx(
        (logits.argmax(1) == y).float().mean().item(), abs=1e-6)


def test_validation_never_changes_weights_or_batch_norm_statistics(result):
    trainer, model = result["trainer"], result["model"]
    assert result["weights_unchanged"] is True
    before = {k: v.clone() for k, v in model.state_dict().items()}
    logs = trainer.evaluate(-1)
    assert float(logs["validation_loss"]) == pytest.approx(
        float(result["eval_logs"]["validation_loss"]), rel=1e-6)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # The same batch in train mode would have moved the batch-norm statistics.
    norm = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    running_mean = norm.running_mean.clone()
    model.train()
    with torch.no_grad():
        model(data.load_digits_arrays("validation")[0].float())
    assert not torch.equal(norm.running_mean, running_mean)
    model.load_state_dict(before)
