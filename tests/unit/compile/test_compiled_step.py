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
from torchgarden import metrics as metrics_lib
from torchgarden.compile import CompiledTrainStep, choose_steps_per_call, unsupported_reason
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
    eager, compiled = build(toy(xla=False)), build(toy(steps_per_graph=1))
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
            "task": {"model": {"backbone": {"type": "cnn"}, "hidden_sizes": [4]}},
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


@pytest.mark.parametrize("clips", [
    {"adamw": {"gradient_clip_norm": 0.05}},  # Model Garden's adamw clip (default 1.0).
    {"adam": {"global_clipnorm": 0.05}},
    {"adam": {"clipnorm": 0.02}},
    {"sgd": {"clipvalue": 0.002, "momentum": 0.9}},
    {"adamw": {"gradient_clip_norm": 0.05, "clipvalue": 0.002}},  # Model Garden's, then Keras'.
], ids=["gradient_clip_norm", "global_clipnorm", "clipnorm", "clipvalue", "two_clips"])
def test_gradient_clips_run_inside_the_graph_as_the_eager_step_applies_them(aot_eager, clips):
    (optimizer,) = clips
    unclipped = toy(optimizer, xla=False)
    if optimizer == "adamw":
        unclipped.override({"trainer": {"optimizer_config": {"optimizer": {
            "adamw": {"gradient_clip_norm": 0.0}}}}})
    runs = {}
    for name, params in (("eager", toy(optimizer, xla=False)), ("compiled", toy(optimizer)),
                         ("unclipped", unclipped)):
        if name != "unclipped":
            params.override({"trainer": {"optimizer_config": {"optimizer": clips}}})
        runs[name] = build(params)
        for _ in range(3):
            runs[name].train(4)
    assert isinstance(runs["compiled"].step_fn, CompiledTrainStep)
    assert_weights_close(runs["compiled"].unwrapped_model, runs["eager"].unwrapped_model)
    # The clips bind: without them the weights end elsewhere.
    difference = max((a - b).abs().max() for a, b in zip(
        runs["eager"].unwrapped_model.parameters(), runs["unclipped"].unwrapped_model.parameters()))
    assert difference > 100 * ATOL


class HookedTask(Task):
    """A task whose optimizer has a step hook of its own (not one of torchgarden's clips)."""

    def __init__(self, inner):
        super().__init__(inner.task_config)
        for name in ("build_model", "build_inputs", "build_losses", "build_metrics"):
            setattr(self, name, getattr(inner, name))

    def create_optimizer(self, *args, **kwargs):
        optimizer = super().create_optimizer(*args, **kwargs)
        optimizer.register_step_pre_hook(lambda *hook_args: None)
        return optimizer


def test_an_optimizer_hook_that_is_not_a_clip_falls_back_to_the_eager_step(aot_eager, caplog):
    params = toy()
    with caplog.at_level("INFO", logger="torchgarden"):
        trainer = build(params, task=HookedTask(get_task(params.task)))
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


# ---------------------------------------------------------------- the in-graph loop


def test_k_steps_per_call_train_like_k_single_compiled_steps_in_one_graph(aot_eager):
    single, looped = build(toy(steps_per_graph=1)), build(toy(steps_per_graph=4))
    calls = []
    graph = looped.step_fn._graph
    looped.step_fn._graph = lambda *args: calls.append(len(args[5])) or graph(*args)
    before = graphs()
    looped_logs = [looped.train(4) for _ in range(3)]
    after_looped = graphs()
    single_logs = [single.train(4) for _ in range(3)]

    assert looped.step_fn.steps_per_call == 4
    assert after_looped - before == 1  # One 4-step graph for 8 steps, 2 loops, 8 rates.
    assert calls == [4, 4]  # The first 4 steps ran eagerly (the optimizer's state).
    assert looped.step_fn.metrics_in_graph
    for key in ("training_loss", "mean_absolute_error", "learning_rate"):
        assert [float(logs[key]) for logs in looped_logs] == pytest.approx(
            [float(logs[key]) for logs in single_logs], rel=RTOL)
    assert_weights_close(looped.unwrapped_model, single.unwrapped_model)
    assert looped.optimizer.param_groups[0]["lr"] == single.optimizer.param_groups[0]["lr"]
    steps = {int(s["step"]) for s in looped.optimizer.state_dict()["state"].values()}
    assert steps == {12} and int(looped.global_step) == 12


def test_resuming_between_graph_calls_gives_the_uninterrupted_weights(aot_eager):
    whole = build(toy(steps_per_graph=2))
    for _ in range(4):
        whole.train(4)
    first = build(toy(steps_per_graph=2))
    first.train(4)
    first.train(4)
    snapshot = copy.deepcopy(first.checkpoint.state_dict())
    resumed = build(toy(steps_per_graph=2))
    resumed.checkpoint.load_state_dict(snapshot)
    logs = [resumed.train(4) for _ in range(2)]

    for name, value in resumed.unwrapped_model.state_dict().items():
        assert torch.equal(value, whole.unwrapped_model.state_dict()[name]), name
    assert int(resumed.global_step) == 16 and float(logs[-1]["training_loss"]) > 0


class HostOnlyMetric(metrics_lib.Mean):
    """A metric whose update torch.compile cannot capture in one graph."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        torch._dynamo.graph_break()
        super().update_state((y_true - y_pred).abs().max())


def test_metrics_the_graph_cannot_trace_are_updated_by_the_host(aot_eager, caplog):
    def with_metric(xla):
        params = toy(xla=xla, steps_per_graph=2)
        task = get_task(params.task)
        task.build_metrics = lambda training=True: [HostOnlyMetric(name="worst")]
        return build(params, task=task)

    eager, compiled = with_metric(False), with_metric(True)
    with caplog.at_level("INFO", logger="torchgarden"):
        compiled_logs = [compiled.train(4) for _ in range(2)]
    eager_logs = [eager.train(4) for _ in range(2)]

    assert not compiled.step_fn.metrics_in_graph
    assert any("update outside the compiled step" in r.getMessage() for r in caplog.records)
    assert [float(logs["worst"]) for logs in compiled_logs] == pytest.approx(
        [float(logs["worst"]) for logs in eager_logs], rel=1e-4)


def test_steps_per_call_is_chosen_from_the_model_and_steps_per_loop():
    small, large = torch.nn.Linear(8, 8), torch.nn.Linear(1024, 1024)
    assert choose_steps_per_call(small, 100, None) == 10
    assert choose_steps_per_call(small, 12, None) == 6
    assert choose_steps_per_call(small, 7, None) == 7
    assert choose_steps_per_call(large, 100, None) == 1  # 1M parameters and more.
    assert choose_steps_per_call(large, 100, 5) == 5
    # Each unrolled step pays for its compile: 15,000 training steps per step in the graph.
    assert choose_steps_per_call(small, 100, None, train_steps=20_000) == 1
    assert choose_steps_per_call(small, 100, None, train_steps=80_000) == 5
    assert choose_steps_per_call(small, 100, None, train_steps=1_000_000) == 10
    assert choose_steps_per_call(small, 100, 10, train_steps=20_000) == 10  # as configured
    with pytest.raises(ValueError, match=r"steps_per_graph must be between 1 and .*\(4\)"):
        choose_steps_per_call(small, 4, 8)


def test_ema_and_per_step_loss_checks_run_one_step_per_call(aot_eager):
    params = toy()
    params.override({"trainer": {"optimizer_config": {"ema": {"average_decay": 0.9}}}})
    trainer = build(params)
    assert trainer.step_fn.steps_per_call == 1
    trainer.train(3)
    assert int(trainer.global_step) == 3


class GraphBreakModel(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        torch._dynamo.graph_break()
        return self.inner(x)


def test_a_step_that_cannot_be_one_graph_runs_eagerly_with_one_log_line(aot_eager, caplog):
    params = toy(steps_per_graph=2)
    task = get_task(params.task)
    build_model = task.build_model
    task.build_model = lambda: GraphBreakModel(build_model())
    trainer = build(params, task=task)
    with caplog.at_level("INFO", logger="torchgarden"):
        logs = [trainer.train(4) for _ in range(2)]
    lines = [r.getMessage() for r in caplog.records if "cannot be compiled" in r.getMessage()]
    assert len(lines) == 1 and int(trainer.global_step) == 8
    assert float(logs[1]["training_loss"]) < float(logs[0]["training_loss"])


def test_plain_sgd_without_state_runs_in_the_graph(aot_eager):
    def plain(xla):
        params = toy("sgd", xla=xla, steps_per_graph=2)
        params.override({"trainer": {"optimizer_config": {"optimizer": {"sgd": {"momentum": 0.0}}}}})
        return build(params)

    eager, compiled = plain(False), plain(True)
    calls = []
    graph = compiled.step_fn._graph
    compiled.step_fn._graph = lambda *args: calls.append(len(args[5])) or graph(*args)
    for _ in range(2):
        eager.train(4)
        compiled.train(4)
    assert calls == [2, 2, 2]  # The first 2 steps are eager; no optimizer state after them.
    assert_weights_close(compiled.unwrapped_model, eager.unwrapped_model)
