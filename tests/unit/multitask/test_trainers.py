"""Joint and interleaving trainers on the digits: loss sums, single-task parity, checkpoints."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from torchgarden import get_experiment, get_task
from torchgarden.config import MultiTaskConfig, MultiTaskExperimentConfig, TaskRoutine
from torchgarden.config.multitask import MultiTaskTrainerConfig
from torchgarden.multitask import MultiTask, MultiTaskBaseModel
from torchgarden.runtime import RuntimeContext
from torchgarden.train_lib import run_experiment
from torchgarden.train_lib.multitask import create_multitask_trainer

SHORT = {"trainer": {"train_steps": 20, "steps_per_loop": 5, "summary_interval": 5,
                     "validation_interval": 10, "checkpoint_interval": 10, "progress_bar": False},
         "runtime": {"device": "cpu", "deterministic": True}}


def multitask_params(**trainer) -> MultiTaskExperimentConfig:
    params = get_experiment("multitask_digits")
    params.override(SHORT).override({"task": {"model": {"hidden_sizes": [16]}},
                                     "trainer": trainer})
    return params.validate()


def build(params):
    return create_multitask_trainer(params, get_task(params.task), train=True,
                                    runtime=RuntimeContext())


def test_joint_loss_is_the_weighted_sum_of_each_task_loss_on_the_same_batch():
    params = multitask_params(trainer_type="joint")
    trainer = build(params)
    tasks: dict = trainer.multi_task.tasks
    model = copy.deepcopy(trainer.multi_task_model)
    batches = {name: next(iter(trainer.train_dataset[name])) for name in tasks}
    single = {name: task.build_losses(batches[name][1], model.sub_tasks[name](batches[name][0]))
              for name, task in tasks.items()}
    weighted = sum(trainer.multi_task.task_weight(name) * loss for name, loss in single.items())

    logs = trainer.train(1)

    assert list(trainer.multi_task.task_weights.values()) == [2.0, 1.0]
    assert torch.equal(logs["training_loss"], weighted.detach())
    for name, loss in single.items():
        assert torch.equal(logs[name]["training_loss"], loss.detach())


def test_shared_backbone_gets_the_gradient_of_every_task():
    params = multitask_params(trainer_type="joint")
    trainer = build(params)
    model: MultiTaskBaseModel = trainer.multi_task_model
    digits, parity = model.sub_tasks["digits"], model.sub_tasks["parity"]
    assert digits[0] is parity[0]  # One backbone object in both sub-models.
    before = copy.deepcopy(model.state_dict())
    trainer.train(2)  # The warmup's learning rate is 0 at step 0.
    after = model.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before)  # Every part moved.
    names = {name for name, _ in model.named_parameters()}
    assert len(names) == len(list(model.parameters())) == 2 + 2 + 2  # Backbone + 2 heads.


def test_interleaving_with_one_task_is_bitwise_equal_to_a_single_task_run(tmp_path):
    single = get_experiment("image_classification")
    single.override(SHORT).override({
        "task": {"model": {"hidden_sizes": [16], "dropout_rate": 0.1}},
        "trainer": {"optimizer_config": {"learning_rate": {"cosine": {"decay_steps": 20}}}}})
    single.validate()
    multi = MultiTaskExperimentConfig(
        task=MultiTaskConfig(task_routines=[TaskRoutine(task_name="digits",
                                                        task_config=single.task.copy())]),
        trainer=MultiTaskTrainerConfig.from_dict(single.trainer.as_dict()),
        runtime=single.runtime.copy(),
    )
    multi.trainer.best_checkpoint_eval_metric = "digits/accuracy"
    multi.validate()
    single_dir, multi_dir = str(tmp_path / "single"), str(tmp_path / "multi")

    _, single_logs = run_experiment(task=get_task(single.task), mode="train_and_eval",
                                    params=single, model_dir=single_dir)
    _, multi_logs = run_experiment(task=get_task(multi.task), mode="train_and_eval",
                                   params=multi, model_dir=multi_dir)

    assert isinstance(get_task(multi.task), MultiTask)
    ours, theirs = _state(multi_dir, 20), _state(single_dir, 20)
    prefix = "sub_tasks.digits."
    assert {k.removeprefix(prefix) for k in ours["model"]} == set(theirs["model"])
    for key, value in ours["model"].items():
        assert torch.equal(value, theirs["model"][key.removeprefix(prefix)]), key
    assert _same(ours["optimizer"], theirs["optimizer"])
    assert ours["rng"]["torch"].equal(theirs["rng"]["torch"])
    single_logs.pop("best_accuracy")
    assert _floats(multi_logs["digits"]) == _floats(single_logs)
    scalars = _scalars(multi_dir, "train/digits")
    assert scalars["training_loss"] == _scalars(single_dir, "train")["training_loss"]
    assert scalars["accuracy"] == _scalars(single_dir, "train")["accuracy"]


def test_the_checkpoint_holds_the_sampler_and_every_task_data_position(tmp_path):
    params = multitask_params()
    model_dir = str(tmp_path / "run")
    run_experiment(task=get_task(params.task), mode="train", params=params, model_dir=model_dir)

    state = _state(model_dir, 20)
    steps = state["task_steps"]
    assert set(steps) == {"digits", "parity"} and sum(steps.values()) == 20
    assert 0 < steps["parity"] < steps["digits"]  # Drawn 1:2, by the weights.
    for name, position in state["train_iterator"].items():
        assert position == {"epoch": 0, "batches_in_epoch": steps[name]}, name
    assert set(state["task_sampler"]) == {"rng"}
    assert set(state["task_windows"]) == {"digits", "parity"}


def test_a_resumed_joint_run_ends_bitwise_where_an_uninterrupted_one_does(tmp_path):
    params = multitask_params(trainer_type="joint")
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    run_experiment(task=get_task(params.task), mode="train", params=params, model_dir=straight)
    half = params.replace(trainer={"train_steps": 10})
    run_experiment(task=get_task(half.task), mode="train", params=half, model_dir=resumed)
    run_experiment(task=get_task(params.task), mode="train", params=params, model_dir=resumed)
    assert _same(_state(straight, 20), _state(resumed, 20))


def _state(model_dir: str, step: int) -> dict:
    return torch.load(os.path.join(model_dir, f"ckpt-{step}", "state.pt"), weights_only=True)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _floats(logs: dict) -> dict:
    return {k: float(v) for k, v in logs.items()}


def _scalars(model_dir: str, sub: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(os.path.join(model_dir, sub))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


@pytest.mark.parametrize("trainer_type", ["joint", "interleaving"])
def test_train_logs_nest_by_task(trainer_type):
    trainer = build(multitask_params(trainer_type=trainer_type))
    logs = trainer.train(4)
    assert {"digits", "parity", "training_loss", "learning_rate"} <= set(logs)
    assert {"accuracy", "training_loss"} <= set(logs["digits"])
    assert ("num_steps" in logs["digits"]) == (trainer_type == "interleaving")


def test_a_routine_init_checkpoint_loads_a_single_task_checkpoint_into_its_sub_model(tmp_path):
    single = get_experiment("image_classification")
    single.override(SHORT).override({"task": {"model": {"hidden_sizes": [16]}},
                                     "trainer": {"train_steps": 10}})
    single_dir = str(tmp_path / "single")
    trained, _ = run_experiment(task=get_task(single.validate().task), mode="train",
                                params=single, model_dir=single_dir)
    routine = single.task.copy()
    routine.init_checkpoint = single_dir
    multi = MultiTaskExperimentConfig(
        task=MultiTaskConfig(task_routines=[
            TaskRoutine(task_name="pretrained", task_config=routine),
            TaskRoutine(task_name="fresh", task_config=single.task.copy())]),
        trainer=MultiTaskTrainerConfig.from_dict(single.trainer.as_dict()))
    multi.trainer.train_steps = 0
    model, _ = run_experiment(task=get_task(multi.validate().task), mode="train", params=multi,
                              model_dir=str(tmp_path / "multi"))
    loaded, fresh = model.sub_tasks["pretrained"], model.sub_tasks["fresh"]
    for key, value in trained.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    assert not torch.equal(fresh.state_dict()["1.weight"], trained.state_dict()["1.weight"])
