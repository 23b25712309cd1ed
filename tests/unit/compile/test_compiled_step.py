"""The compiled whole-step path (``runtime.enable_xla``): same numbers as the eager step,
one graph for the whole run, rebinding after a restore, and the fallbacks.

Fast tests compile with the ``aot_eager`` backend (Dynamo capture + AOT autograd, no
C++ code generation), which checks what this path adds: full-graph capture,
functionalised in-place updates, guards. The inductor run is marked slow.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch._dynamo.utils import counters

from torchgarden import get_experiment, get_task
from torchgarden.compile import CompiledTrainStep, unsupported_reason
from torchgarden.core import Task
from torchgarden.train_lib import create_trainer

# Eager and compiled steps round differently: the compiled Adam computes its bias
# corrections from the float32 step tensor (eager: Python floats), and kernels fuse.
# After a dozen steps at lr 0.05 on the toy task they agree to this tolerance (measured:
# 1.5e-5 relative on the loss, 4e-6 absolute on the weights).
RTOL, ATOL = 5e-5, 2e-5


@pytest.fixture
def aot_eager(monkeypatch):
    """Makes every torch.compile in this test use the fast aot_eager backend."""
    compile_ = torch.compile

    def compile_aot_eager(function, fullgraph=False, mode=None, options=None):
        del mode, options  # Inductor settings.
        return compile_(function, fullgraph=fullgraph, backend="aot_eager")

    monkeypatch.setattr(torch, "compile", compile_aot_eager)


def toy(optimizer="adam", xla=True, **runtime):
    params = get_experiment("toy_regression")
    params.override(
        {
            "task": {"hidden_size": 16},
            "trainer": {
                "steps_per_loop": 4,
                "optimizer_config": {
                    "optimizer": {"type": optimizer},
                    # A moving schedule: the rate must enter the graph without recompiling.
                    "learning_rate": {
                        "type": "cosine",
                        "cosine": {"initial_learning_rate": 0.05, "decay_steps": 40},
                    },
                },
            },
            "runtime": {"enable_xla": xla, **runtime},
        }
    )
    return params


def build(params, task=None):
    torch.manual_seed(0)
    return create_trainer(params, task or get_task(params.task), train=True, evaluate=True)


def graphs() -> int:
    return counters["stats"]["unique_graphs"]


def assert_weights_close(a, b):
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(x, y, rtol=RTOL, atol=ATOL, msg=name)


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_compiled_step_trains_like_the_eager_step_in_one_graph(aot_eager, optimizer):
    options = {"momentum": 0.9, "nesterov": True} if optimizer == "sgd" else {
        "weight_decay" if optimizer == "adam" else "weight_decay_rate": 0.01
    }
    overrides = {"trainer": {"optimizer_config": {"optimizer": {optimizer: options}}}}
    eager_params, compiled_params = toy(optimizer, xla=False), toy(optimizer)
    eager_params.override(overrides)
    compiled_params.override(overrides)
    eager, compiled = build(eager_params), build(compiled_params)
    before = graphs()
    eager_logs = [eager.train(4) for _ in range(3)]
    compiled_logs = [compiled.train(4) for _ in range(3)]

    assert isinstance(compiled.step_fn, CompiledTrainStep)
    assert graphs() - before == 1  # One graph for 12 steps, 3 loops and 12 learning rates.
    for key in ("training_loss", "mean_absolute_error"):  # Metrics read the graph's outputs.
        assert [float(logs[key]) for logs in compiled_logs] == pytest.approx(
            [float(logs[key]) for logs in eager_logs], rel=RTOL
        )
    assert_weights_close(compiled.unwrapped_model, eager.unwrapped_model)
    eager_state = eager.optimizer.state_dict()["state"]
    for index, state in compiled.optimizer.state_dict()["state"].items():
        for key, value in state.items():
            torch.testing.assert_close(value, eager_state[index][key], rtol=RTOL, atol=ATOL)
    assert int(compiled.global_step) == 12


def test_restored_optimizer_state_is_read_by_the_graph(aot_eager):
    trainer = build(toy())
    trainer.train(4)
    snapshot = copy.deepcopy(trainer.checkpoint.state_dict())
    trainer.train(4)
    first = copy.deepcopy(trainer.unwrapped_model.state_dict())
    before = graphs()

    trainer.checkpoint.load_state_dict(snapshot)  # New optimizer.state tensors.
    trainer.train(4)

    for name, value in trainer.unwrapped_model.state_dict().items():
        assert torch.equal(value, first[name]), name
    assert graphs() == before  # Same shapes: the graph is reused, not recompiled.


def test_a_batch_of_another_shape_is_checked_by_the_guards_not_trusted(aot_eager):
    eager, compiled = build(toy(xla=False)), build(toy())
    eager.train(8)
    compiled.train(8)  # Later calls with this batch shape skip the guards.
    features, labels = next(iter(get_task(toy().task).build_inputs(toy().task.train_data)))
    small = (features[:5], labels[:5])
    before = graphs()

    eager_loss = eager.task.train_step(small, eager.model, eager.optimizer)["loss"]
    compiled_loss = compiled.step_fn(small, metrics=[])["loss"]

    assert graphs() - before == 1  # A second graph for 5 examples, not the 32-example one.
    assert float(compiled_loss) == pytest.approx(float(eager_loss), rel=RTOL)
    assert_weights_close(compiled.unwrapped_model, eager.unwrapped_model)


def test_batch_norm_statistics_are_updated_by_the_graph(aot_eager):
    def cnn(xla):
        params = get_experiment("image_classification")
        params.override({
            "task": {"model": {"architecture": "cnn", "hidden_sizes": [4]}},
            "runtime": {"enable_xla": xla},
        })
        return build(params)

    eager, compiled = cnn(False), cnn(True)
    eager_logs = [eager.train(3) for _ in range(2)]
    compiled_logs = [compiled.train(3) for _ in range(2)]

    assert isinstance(compiled.step_fn, CompiledTrainStep)
    for key in ("training_loss", "accuracy"):
        assert [float(logs[key]) for logs in compiled_logs] == pytest.approx(
            [float(logs[key]) for logs in eager_logs], rel=RTOL
        )
    ours, theirs = compiled.unwrapped_model.state_dict(), eager.unwrapped_model.state_dict()
    assert int(ours["1.num_batches_tracked"]) == int(theirs["1.num_batches_tracked"]) == 6
    torch.testing.assert_close(ours["1.running_var"], theirs["1.running_var"], rtol=RTOL,
                               atol=ATOL)


@pytest.mark.parametrize("compile_eval", [False, True])
def test_evaluation_runs_the_compiled_model_only_when_asked(aot_eager, compile_eval):
    trainer = build(toy(compile_eval=compile_eval))
    trainer.train(1)
    assert isinstance(trainer.model, torch._dynamo.eval_frame.OptimizedModule) is compile_eval
    assert "validation_loss" in trainer.evaluate(-1)


class OwnStepTask(Task):
    """A task with its own train_step: the whole-step graph must not replace it."""

    def __init__(self, inner):
        super().__init__(inner.task_config)
        for name in ("build_model", "build_inputs", "build_losses", "build_metrics"):
            setattr(self, name, getattr(inner, name))
        self.calls = 0

    def train_step(self, inputs, model, optimizer, metrics=None):
        self.calls += 1
        return super().train_step(inputs, model, optimizer, metrics)


def test_a_task_with_its_own_train_step_keeps_it_on_the_compiled_model(aot_eager):
    params = toy()
    task = OwnStepTask(get_task(params.task))
    trainer = build(params, task=task)
    trainer.train(3)
    assert not isinstance(trainer.step_fn, CompiledTrainStep)
    assert task.calls == 3
    assert isinstance(trainer.model, torch._dynamo.eval_frame.OptimizedModule)


def test_unsupported_setups_name_their_reason():
    params = toy()
    task = get_task(params.task)
    model = torch.nn.Linear(2, 1)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    common = {"task": task, "model": model}
    assert unsupported_reason(**common, optimizer=sgd) is None
    assert "overrides train_step" in unsupported_reason(
        task=OwnStepTask(task), model=model, optimizer=sgd
    )
    assert "ddp" in unsupported_reason(**common, optimizer=sgd, strategy="ddp")
    assert "gradient_accumulation_steps=2" in unsupported_reason(
        **common, optimizer=sgd, accumulation_steps=2
    )
    rmsprop = torch.optim.RMSprop(model.parameters())
    assert "RMSprop" in unsupported_reason(**common, optimizer=rmsprop)
    handle = sgd.register_step_pre_hook(lambda *args: None)
    assert "step hooks" in unsupported_reason(**common, optimizer=sgd)
    handle.remove()
    other = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    assert "not the model's" in unsupported_reason(**common, optimizer=other)


def test_gradient_clipping_falls_back_to_the_eager_step(aot_eager, caplog):
    params = toy()
    params.override({"trainer": {"optimizer_config": {"optimizer": {"adam": {"clipnorm": 1.0}}}}})
    with caplog.at_level("INFO", logger="torchgarden"):
        trainer = build(params)
    trainer.train(2)
    assert not isinstance(trainer.step_fn, CompiledTrainStep)
    (line,) = [r.getMessage() for r in caplog.records if "runtime.enable_xla" in r.getMessage()]
    assert "compiling the model only, not the whole step" in line and "step hooks" in line
    assert int(trainer.global_step) == 2


@pytest.mark.slow
def test_inductor_whole_step_matches_eager_without_recompiling():
    eager, compiled = build(toy(xla=False)), build(toy())
    before = graphs()
    eager_losses = [float(eager.train(4)["training_loss"]) for _ in range(5)]
    compiled_losses = [float(compiled.train(4)["training_loss"]) for _ in range(5)]
    assert graphs() - before == 1
    assert compiled_losses == pytest.approx(eager_losses, rel=RTOL)
    assert_weights_close(compiled.unwrapped_model, eager.unwrapped_model)
