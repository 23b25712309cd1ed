"""examples/auxiliary_losses.py: add_loss collected by hand-written and default steps."""

from __future__ import annotations

import auxiliary_losses as example
import pytest
import torch
import torch.nn.functional as F

from torchgarden import data, layers


def expected_loss(model, x, y, rate):
    with torch.no_grad():
        activations = model.hidden(x)
        logits = model.head(activations)
    return F.cross_entropy(logits, y).item() + rate * activations.sum().item()


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("aux")))


def test_hand_written_step_adds_sum_of_model_losses(result):
    torch.manual_seed(0)
    model = example.DigitsClassifier()
    x, y = data.load_digits_arrays("train")
    expected = expected_loss(model, x[:64].float(), y[:64], 1e-2)
    assert result["hand_written_loss"] == pytest.approx(expected, rel=1e-5)


def test_default_task_steps_pass_layer_losses_to_build_losses():
    params = example.build_params()
    task = example.AuxiliaryLossTask(params.task)
    task.rate = 0.5
    model = task.build_model()
    x, y = data.load_digits_arrays("validation")
    x = x[:32].float()
    expected = expected_loss(model, x, y[:32], 0.5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    logs = task.train_step((x, y[:32]), model, optimizer)
    assert logs["loss"].item() == pytest.approx(expected, rel=1e-5)
    with torch.no_grad():
        logs = task.validation_step((x, y[:32]), model.eval())
    assert logs["loss"].item() == pytest.approx(expected, rel=1e-5)


def test_the_auxiliary_loss_shapes_training(result):
    plain, regularized = result["runs"][0.0], result["runs"][1e-4]
    assert regularized["mean_activation"] < 0.6 * plain["mean_activation"]
    for run in (plain, regularized):
        assert float(run["eval_logs"]["accuracy"]) > 0.8


def test_keras_spellings_model_losses_and_training_argument():
    class WithDropout(layers.Layer):
        def __init__(self):
            super().__init__()
            self.drop = torch.nn.Dropout(0.5)
            self.reg = example.ActivityRegularization(rate=1.0)

        def forward(self, x):
            return self.reg(self.drop(x))

    model = WithDropout().eval()
    ones = torch.ones(4000)
    dropped = model(ones, training=True)
    assert 0.4 < (dropped == 0).float().mean().item() < 0.6
    assert not model.training and not model.drop.training  # modes restored
    assert torch.equal(model(ones), ones)  # eval mode: dropout off
    assert len(model.losses) == 1 and model.losses[0].item() == pytest.approx(4000.0)
    assert torch.equal(model(ones, training=False), ones)

