"""How a run executes: the Strategy a config resolves to, and the frozen StepPlan."""

from __future__ import annotations

import dataclasses

import pytest

from torchgarden import Trainer, get_experiment, get_task
from torchgarden.config import ConfigError, RuntimeConfig
from torchgarden.config.runtime import STRATEGY_NAMES
from torchgarden.runtime import (
    DDP,
    FSDP,
    LossBound,
    SingleProcess,
    StepPlan,
    register_strategy,
    resolve_strategy,
)
from torchgarden.runtime import strategy as strategy_module


def resolved(name: str, world_size: int):
    return resolve_strategy(RuntimeConfig(distribution_strategy=name), world_size=world_size)


@pytest.mark.parametrize(("name", "world_size", "kind", "checkpoint_format"), [
    ("auto", 1, SingleProcess, "single"),
    ("auto", 2, DDP, "single"),
    ("ddp", 1, SingleProcess, "single"),
    ("ddp", 4, DDP, "single"),
    ("fsdp", 2, FSDP, "dcp"),
    ("fsdp", 1, SingleProcess, "dcp"),  # One process, but a resumable DCP run at any size.
    ("off", 2, SingleProcess, "single"),
    ("single", 2, SingleProcess, "single"),
])
def test_a_strategy_name_resolves_once_to_a_strategy_and_its_checkpoint_format(
        name, world_size, kind, checkpoint_format):
    strategy = resolved(name, world_size)
    assert type(strategy) is kind
    assert strategy.checkpoint_format("auto") == checkpoint_format
    assert strategy.checkpoint_format("single") == "single"  # What the config asks wins.
    assert strategy.checkpoint_format("dcp") == "dcp"


def test_only_one_process_runs_the_compiled_multi_step_graph():
    assert SingleProcess().compiled_step_unsupported() is None
    assert "'ddp'" in DDP().compiled_step_unsupported()
    assert "'fsdp'" in FSDP().compiled_step_unsupported()


def test_a_registered_strategy_is_accepted_by_the_config_and_resolved(monkeypatch):
    monkeypatch.setattr(strategy_module, "_STRATEGIES", dict(strategy_module._STRATEGIES))
    monkeypatch.setattr("torchgarden.config.runtime.STRATEGY_NAMES", list(STRATEGY_NAMES))
    params = get_experiment("toy_regression")
    params.override("runtime.distribution_strategy=ddp_static")
    with pytest.raises(ConfigError, match="'ddp_static' is not one of"):
        params.validate()

    @register_strategy("ddp_static")
    class StaticGraphDDP(DDP):
        pass

    params.validate()
    assert type(resolve_strategy(params.runtime, world_size=2)) is StaticGraphDDP
    assert StaticGraphDDP.name == "ddp_static"
    # On one process a distributed strategy runs as one process.
    assert type(resolve_strategy(params.runtime, world_size=1)) is SingleProcess


def test_what_needs_the_host_between_steps_makes_the_plan_one_step_per_call():
    bound = LossBound(upper_bound=10.0, begin_steps=0)
    assert StepPlan.build(steps_per_call=10).steps_per_call == 10
    assert StepPlan.build(steps_per_call=10, host_between_steps=["the weight EMA"]) == StepPlan()
    checked = StepPlan.build(steps_per_call=10, check_loss=bound)
    assert (checked.steps_per_call, checked.check_loss) == (1, bound)


def test_the_recovery_replay_plan_is_declared_with_the_plan_and_checks_every_step():
    bound = LossBound(upper_bound=10.0, begin_steps=0)
    plan = StepPlan.build(steps_per_call=5, accumulation_steps=2, replay_check=bound)
    assert (plan.steps_per_call, plan.check_loss) == (5, None)
    assert plan.replay == StepPlan(steps_per_call=1, accumulation_steps=2, check_loss=bound)
    assert StepPlan.build(steps_per_call=5).replay is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.steps_per_call = 1  # type: ignore[misc]


def test_a_plan_that_cannot_run_as_stated_is_refused():
    with pytest.raises(ValueError, match="gradient_accumulation_steps must be >= 1, got 0"):
        StepPlan(accumulation_steps=0)
    with pytest.raises(ValueError, match="needs one step per call"):
        StepPlan(steps_per_call=4, check_loss=LossBound(1.0, 0))


def test_a_trainer_refuses_a_plan_it_cannot_run_and_points_moved_arguments_to_the_plan():
    params = get_experiment("toy_regression")
    task = get_task(params.task)
    model = task.build_model()
    with pytest.raises(ValueError, match="steps_per_call=4, but a step_fn without run_steps"):
        Trainer(task=task, model=model, plan=StepPlan(steps_per_call=4))
    with pytest.raises(TypeError, match=r"moved: pass plan=StepPlan\(accumulation_steps=\.\.\.\)"):
        Trainer(task=task, model=model, gradient_accumulation_steps=2)
    assert Trainer(task=task, model=model).plan == StepPlan()
