"""examples/custom_models.py and custom_layers.py: user-defined models train via a Task."""

from __future__ import annotations

import custom_layers
import custom_models as example
import pytest
import torch

from torchgarden import data, layers


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("models")))


def test_my_model_outputs_probabilities_and_learns_the_blobs(models):
    run = models["my_model"]
    params = example.blobs_params()
    task = example.BlobsTask(params.task)
    batches = list(task.build_inputs(params.task.validation_data))  # 2 batches of 500
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    with torch.no_grad():
        probabilities = run["model"](x)
    assert torch.allclose(probabilities.sum(1), torch.ones(len(x)))
    accuracy = (probabilities.argmax(1) == y).float().mean().item()
    assert float(run["eval_logs"]["accuracy"]) == pytest.approx(accuracy, abs=1e-6)
    assert accuracy > 0.95
    nll = -torch.log(probabilities[torch.arange(len(y)), y].clamp(1e-7, 1 - 1e-7)).mean()
    assert float(run["eval_logs"]["validation_loss"]) == pytest.approx(nll.item(), rel=1e-4)


def test_resnet_learns_the_digits_and_its_block_is_residual(models):
    run = models["resnet"]
    assert float(run["eval_logs"]["accuracy"]) > 0.8
    block = example.ResidualBlock(4).eval()
    torch.nn.init.zeros_(block.bn2.weight)  # the residual branch now adds 0
    x = torch.randn(2, 4, 8, 8)
    with torch.no_grad():
        assert torch.equal(block(x), torch.relu(x))


def test_variables_constants_and_lazy_custom_layer(tmp_path):
    values = custom_layers.variables_and_constants()
    # d/dv sum(v * c) = c; one SGD step at lr 0.5 moves v by -0.5 * c.
    assert values["variable"] == [0.5, 1.0, 1.5]
    assert values["count"] == 1.0 and values["constant"] == [1.0, 2.0, 3.0]
    assert values["requires_grad"] == {"variable": True, "count": False, "constant": False}
    dense = custom_layers.SimpleDense(3, activation=torch.relu)
    assert dense.has_uninitialized_params()
    out = dense(torch.ones(2, 5))
    assert dense.kernel.shape == (5, 3) and dense.bias.shape == (3,)
    assert (out >= 0).all()


def test_custom_layer_model_trains_through_a_task(tmp_path):
    result = custom_layers.main(str(tmp_path), train_steps=100)
    model = result["model"]
    assert isinstance(model[1], custom_layers.SimpleDense)
    assert isinstance(model[2], layers.Lambda) and not list(model[2].parameters())
    x, y = data.load_digits_arrays("validation")
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    assert float(result["eval_logs"]["accuracy"]) == pytest.approx(accuracy, abs=1e-6)
    assert accuracy > 0.8
