"""Trainer behaviour on the toy task: parity with a hand-written loop, window averages,
the eval contract (passthrough -> aggregate -> reduce), accumulation and precision."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from torchgarden import get_experiment, get_task
from torchgarden.core import Task, Trainer
from torchgarden.train_lib import create_trainer


def toy(overrides=None):
    params = get_experiment("toy_regression")
    params.override({"trainer": {"train_steps": 20, "steps_per_loop": 5, "summary_interval": 5}})
    if overrides:
        params.override(overrides)
    return params


def build(params, task=None, **kwargs):
    task = task or get_task(params.task)
    return create_trainer(params, task, train=True, evaluate=True, **kwargs)


def test_default_train_step_is_bitwise_equal_to_a_hand_written_loop():
    params = toy()
    torch.manual_seed(0)
    trainer = build(params)
    model = copy.deepcopy(trainer.unwrapped_model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = iter(get_task(params.task).build_inputs(params.task.train_data))
    for _ in range(7):  # The hand-written loop: fetch, forward, loss, backward, step.
        x, y = next(batches)
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    trainer.train(7)
    for (name, ours), theirs in zip(trainer.unwrapped_model.state_dict().items(),
                                    model.state_dict().values()):
        assert torch.equal(ours, theirs), name


class RecordingTask(Task):
    """Wraps the toy task to record per-step losses and eval logs."""

    def __init__(self, inner):
        super().__init__(inner.task_config)
        self.inner = inner
        self.step_losses: list[float] = []
        self.aggregated: list[dict] = []
        self.reduced_with = None
        for name in ("build_model", "build_inputs", "build_losses", "build_metrics"):
            setattr(self, name, getattr(inner, name))

    def train_step(self, inputs, model, optimizer, metrics=None):
        logs = super().train_step(inputs, model, optimizer, metrics)
        self.step_losses.append(float(logs["loss"]))
        return logs

    def aggregate_logs(self, state=None, step_logs=None):
        self.aggregated.append(step_logs)
        return (state or 0) + 1

    def reduce_aggregated_logs(self, aggregated_logs, global_step=None):
        self.reduced_with = (aggregated_logs, global_step)
        return {"num_eval_steps": float(aggregated_logs)}


def test_training_loss_is_the_mean_of_the_loop_window_and_resets():
    params = toy()
    task = RecordingTask(get_task(params.task))
    trainer = build(params, task=task)
    first = trainer.train(5)
    second = trainer.train(5)
    assert float(first["training_loss"]) == pytest.approx(sum(task.step_losses[:5]) / 5)
    assert float(second["training_loss"]) == pytest.approx(sum(task.step_losses[5:]) / 5)
    assert first["learning_rate"] == pytest.approx(0.05)
    assert "mean_absolute_error" in first
    assert int(trainer.global_step) == 10


def test_eval_passthrough_reaches_aggregate_and_reduce_runs_on_truthy_state():
    params = toy()
    task = RecordingTask(get_task(params.task))

    class PassthroughTrainer(Trainer):
        def next_eval_inputs(self, iterator):
            inputs, _ = super().next_eval_inputs(iterator)
            return inputs, {"batch_size": inputs[0].shape[0]}

    trainer = build(params, task=task, trainer_cls=PassthroughTrainer)
    logs = trainer.evaluate(-1)
    assert len(task.aggregated) == 4  # 256 validation examples / 64.
    assert task.aggregated[0]["batch_size"] == 64 and "loss" in task.aggregated[0]
    assert task.reduced_with == (4, 0)
    assert logs["num_eval_steps"] == 4.0
    assert "validation_loss" in logs and "mean_absolute_error" in logs
    assert trainer.evaluate(2)["num_eval_steps"] == 2.0


def test_falsy_aggregate_state_skips_reduce():
    params = toy()
    task = RecordingTask(get_task(params.task))
    task.aggregate_logs = lambda state=None, step_logs=None: None
    trainer = build(params, task=task)
    trainer.evaluate(-1)
    assert task.reduced_with is None


def test_validation_never_changes_weights():
    trainer = build(toy())
    before = {k: v.clone() for k, v in trainer.unwrapped_model.state_dict().items()}
    trainer.evaluate(-1)
    for key, value in trainer.unwrapped_model.state_dict().items():
        assert torch.equal(before[key], value)


def test_gradient_accumulation_matches_one_big_batch():
    small = toy({"trainer": {"gradient_accumulation_steps": 2,
                             "optimizer_config": {"optimizer": {"sgd": {"momentum": 0.0}}}},
                 "task": {"train_data": {"global_batch_size": 16, "shuffle": False}}})
    big = toy({"trainer": {"optimizer_config": {"optimizer": {"sgd": {"momentum": 0.0}}}},
               "task": {"train_data": {"global_batch_size": 32, "shuffle": False}}})
    torch.manual_seed(0)
    a = build(small)
    torch.manual_seed(0)
    b = build(big)
    a.train(3)
    b.train(3)
    assert int(a.global_step) == 3
    for x, y in zip(a.unwrapped_model.parameters(), b.unwrapped_model.parameters()):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_bfloat16_autocast_trains_with_float32_outputs():
    params = toy({"runtime": {"mixed_precision_dtype": "bfloat16"}})
    trainer = build(params)
    logs = trainer.train(10)
    assert logs["training_loss"].dtype == torch.float32
    assert torch.isfinite(logs["training_loss"])
    out = trainer.model(torch.randn(2, 8))
    assert out.dtype == torch.float32


def test_float16_uses_the_loss_scale_optimizer():
    from torchgarden.optim import LossScaleOptimizer

    params = toy({"runtime": {"mixed_precision_dtype": "float16", "loss_scale": 128.0}})
    trainer = build(params)
    assert isinstance(trainer.optimizer, LossScaleOptimizer)
    before = [p.clone() for p in trainer.unwrapped_model.parameters()]
    trainer.train(5)
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.unwrapped_model.parameters()))
    assert trainer.optimizer.loss_scale == 128.0


def test_ema_weights_are_swapped_in_for_evaluation_only():
    params = toy({"trainer": {"optimizer_config": {"ema": {"average_decay": 0.9}}}})
    trainer = build(params)
    trainer.train(10)
    raw = [p.clone() for p in trainer.unwrapped_model.parameters()]
    with trainer.ema_weights():
        averaged = [p.clone() for p in trainer.unwrapped_model.parameters()]
    assert any(not torch.equal(a, r) for a, r in zip(averaged, raw))
    trainer.evaluate(1)
    for r, p in zip(raw, trainer.unwrapped_model.parameters()):
        assert torch.equal(r, p)
