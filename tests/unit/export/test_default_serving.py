"""The default ``Task.build_serving_module``: ``inference_step`` on validation examples."""

from __future__ import annotations

import json

import torch

import torchgarden as tg
from torchgarden.export import InferenceStepModule, write_export


class PairModel(torch.nn.Module):
    """Takes ``(x, y)`` features, as a task with two inputs would."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, features):
        x, y = features
        return self.linear(x) * y


class PairTask(tg.Task):
    def build_model(self):
        return PairModel()

    def build_inputs(self, params, input_context=None):
        x, y = torch.randn(8, 3), torch.rand(8, 1)
        return [((x[i:i + 4], y[i:i + 4]), torch.zeros(4, 1)) for i in (0, 4)]


def test_default_serving_module_wraps_inference_step_and_exports(tmp_path):
    task = PairTask(tg.TaskConfig())
    model = task.build_model().eval()
    serving = task.build_serving_module(model)
    assert isinstance(serving.module, InferenceStepModule)
    assert serving.input_names == ("inputs_0", "inputs_1")
    assert [tuple(x.shape) for x in serving.example_inputs] == [(2, 3), (2, 1)]
    x, y = torch.randn(5, 3), torch.rand(5, 1)
    assert torch.equal(serving.module(x, y), task.inference_step((x, y), model))

    result = write_export(serving, model.state_dict(), str(tmp_path / "out"),
                          formats="safetensors,pt2")
    manifest = json.loads((tmp_path / "out" / "export.json").read_text())
    assert manifest["inputs"][1] == {"name": "inputs_1", "shape": ["batch", 1],
                                     "dtype": "float32"}
    assert result.manifest["verification"]["pt2"]["max_abs_diff_batch_3"] == 0.0
    program = torch.export.load(str(tmp_path / "out" / "model.pt2"))
    with torch.no_grad():
        assert torch.equal(program.module()(x, y), task.inference_step((x, y), model))
