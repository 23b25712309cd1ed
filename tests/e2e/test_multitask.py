"""Named validation sets and multi-task runs end to end: TensorBoard read back, best
checkpoint and early stopping on a named metric, bad multi-task configs (exit 2)."""

from __future__ import annotations

import json
import os

import numpy
import pytest

from torchgarden import callbacks, get_experiment, get_task
from torchgarden.cli.main import main
from torchgarden.summary import read_metrics
from torchgarden.train_lib import run_experiment

SHORT = ("trainer.train_steps=20,trainer.steps_per_loop=5,trainer.summary_interval=5,"
         "trainer.validation_interval=10,trainer.checkpoint_interval=10,"
         "trainer.progress_bar=false,runtime.device=cpu")


def scalars(directory: str) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of the event files directly in ``directory``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(directory)
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)}
            for tag in events.Tags()["scalars"]}


def subdirectories(directory: str) -> list[str]:
    return sorted(e.name for e in os.scandir(directory) if e.is_dir())


def test_named_validation_sets_each_read_back_from_tensorboard(tmp_path):
    params = get_experiment("image_classification")
    params.override(SHORT).override({
        "task": {"model": {"hidden_sizes": [16]},
                 "validation_data": {"seen": {"split": "train"}, "held_out": {}}},
        "trainer": {"best_checkpoint_eval_metric": "held_out/accuracy"}})
    params.validate()
    assert params.task.validation_data["held_out"].global_batch_size == 256  # From the default.
    model_dir = str(tmp_path / "run")

    _, logs = run_experiment(task=get_task(params.task), mode="train_and_eval", params=params,
                             model_dir=model_dir)

    validation = os.path.join(model_dir, "validation")
    assert subdirectories(validation) == ["held_out", "seen"]
    for name in ("seen", "held_out"):
        found = scalars(os.path.join(validation, name))
        assert set(found) == {"accuracy", "top_5_accuracy", "validation_loss"}
        assert sorted(found["accuracy"]) == [10, 20]
        assert found["accuracy"][20] == pytest.approx(logs[name]["accuracy"], abs=1e-7)
    assert logs["seen"]["accuracy"] != logs["held_out"]["accuracy"]  # Two different sets.
    best = scalars(validation)["best_held_out/accuracy"]
    assert best[20] == pytest.approx(max(scalars(os.path.join(validation, "held_out"))
                                         ["accuracy"].values()), abs=1e-7)
    with open(os.path.join(model_dir, "best_ckpt", "info.json")) as f:
        info = json.load(f)
    assert info["held_out"]["accuracy"] == pytest.approx(best[20], abs=1e-7)
    rows = [r for r in read_metrics(os.path.join(model_dir, "metrics.jsonl"))
            if r["split"] == "validation"]
    assert [r["step"] for r in rows] == [10, 20]
    for name in ("seen", "held_out"):  # metrics.jsonl holds what TensorBoard holds.
        found = scalars(os.path.join(validation, name))["accuracy"]
        assert [numpy.float32(r[f"{name}/accuracy"]) for r in rows] == [found[10], found[20]]


def test_one_validation_set_keeps_the_flat_layout(tmp_path, capsys):
    model_dir = str(tmp_path / "run")
    assert main(["train", "--experiment", "toy_regression", "--model_dir", model_dir,
                 "--params_override", SHORT]) == 0
    validation = os.path.join(model_dir, "validation")
    assert subdirectories(validation) == []
    assert {"validation_loss", "mean_absolute_error"} <= set(scalars(validation))


def test_multitask_cli_run_writes_each_task_under_its_name(tmp_path, capsys):
    model_dir = str(tmp_path / "run")
    assert main(["train", "--experiment", "multitask_digits", "--model_dir", model_dir,
                 "--params_override", SHORT + ",task.model.hidden_sizes=[16]"]) == 0
    assert subdirectories(os.path.join(model_dir, "train")) == ["digits", "parity"]
    assert subdirectories(os.path.join(model_dir, "validation")) == ["digits", "parity"]
    train = scalars(os.path.join(model_dir, "train"))
    assert sorted(train["training_loss"]) == [5, 10, 15, 20]
    digits = scalars(os.path.join(model_dir, "validation", "digits"))
    parity = scalars(os.path.join(model_dir, "validation", "parity"))
    assert set(parity) == {"accuracy", "validation_loss"} and sorted(digits["accuracy"]) == [10, 20]
    best_step = max(digits["accuracy"], key=lambda step: (digits["accuracy"][step], -step))
    with open(os.path.join(model_dir, "best_ckpt", "info.json")) as f:
        info = json.load(f)
    assert info["best_ckpt_global_step"] == best_step
    out = capsys.readouterr().out
    assert "final eval: digits/accuracy=" in out and "parity/accuracy=" in out
    assert "best_digits/accuracy=" in out


def test_multitask_eval_cli_run_evaluates_one_model_with_each_task(tmp_path, capsys):
    model_dir = str(tmp_path / "run")
    assert main(["train", "--experiment", "multitask_digits_eval", "--model_dir", model_dir,
                 "--params_override", SHORT + ",task.model.hidden_sizes=[16]"]) == 0
    validation = os.path.join(model_dir, "validation")
    assert subdirectories(validation) == ["clean", "noisy", "occluded"]
    accuracy = {name: scalars(os.path.join(validation, name))["accuracy"][20]
                for name in ("clean", "noisy", "occluded")}
    assert accuracy["clean"] > accuracy["noisy"] and accuracy["clean"] > accuracy["occluded"]
    assert "best_noisy/accuracy" in scalars(validation)


def test_early_stopping_watches_a_named_task_metric(tmp_path):
    params = get_experiment("multitask_digits")
    params.override(SHORT).override({"task": {"model": {"hidden_sizes": [16]}},
                                     "trainer": {"train_steps": 50, "validation_interval": 5,
                                                 "checkpoint_interval": 5}})
    stop = callbacks.EarlyStopping(monitor="parity/validation_loss", min_delta=100.0,
                                   patience=2)
    model_dir = str(tmp_path / "run")
    run_experiment(task=get_task(params.validate().task), mode="train_and_eval", params=params,
                   model_dir=model_dir, callbacks=[stop])
    assert stop.mode == "min" and stop.best_step == 5 and stop.stopped_step == 15
    assert max(int(n.split("-")[1]) for n in os.listdir(model_dir) if n.startswith("ckpt-")) == 15


ROUTINES = "{task: {task_routines: [%s, %s]}}"


@pytest.mark.parametrize(("override", "expected"), [
    (ROUTINES % ("{task_weight: 0}", "{}"), "task.task_routines[0].task_weight must be a number > 0"),
    (ROUTINES % ("{}", "{task_weight: -1.5}"), "task.task_routines[1].task_weight must be"),
    (ROUTINES % ("{}", "{task_name: digits}"),
     "task.task_routines[1].task_name: 'digits' is also the name of task.task_routines[0]"),
    (ROUTINES % ("{task_config: {_type: torchgarden.config.definitions.TaskConfig}}", "{}"),
     "task.task_routines[0] (digits): no task is registered for config class TaskConfig"),
    ("trainer.best_checkpoint_eval_metric=digts/accuracy",
     "'digts/accuracy' is not in the eval logs (tasks or sets: digits, parity)"),
    ("trainer.trainer_type=jointly", "did you mean 'joint'?"),
], ids=["weight_0", "weight_negative", "name_clash", "unregistered_task", "unknown_task_metric",
        "trainer_type"])
def test_bad_multitask_configs_fail_in_one_line_with_exit_2(capsys, tmp_path, override,
                                                             expected):
    model_dir = str(tmp_path / "run")
    code = main(["train", "--experiment", "multitask_digits", "--model_dir", model_dir,
                 "--params_override", override])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("torchgarden: error: "), err
    assert expected in err
    assert not os.path.exists(model_dir) or os.listdir(model_dir) == []


def test_multitask_shapes_shares_one_encoder_between_segmentation_and_presence(tmp_path):
    params = get_experiment("multitask_shapes")
    tiny = {"generated_data": {"data_dir": str(tmp_path / "data"), "num_train": 16,
                               "num_validation": 8, "image_size": 16},
            "train_data": {"global_batch_size": 4, "output_size": [16, 16]},
            "validation_data": {"global_batch_size": 8}}
    routine = {"task_config": tiny}
    params.override({"task": {"model": {"widths": [4, 8]}, "task_routines": [routine, routine]},
                     "trainer": {"train_steps": 4, "steps_per_loop": 2, "summary_interval": 2,
                                 "validation_interval": 4, "checkpoint_interval": 4,
                                 "progress_bar": False},
                     "runtime": {"device": "cpu"}})
    model_dir = str(tmp_path / "run")
    model, logs = run_experiment(task=get_task(params.validate().task), mode="train_and_eval",
                                 params=params, model_dir=model_dir)

    assert params.task.allow_image_summary  # The segmentation routine writes images.
    segmentation, shapes = model.sub_tasks["segmentation"], model.sub_tasks["shapes"]
    assert shapes.encoder is segmentation.encoder
    assert set(logs) == {"segmentation", "shapes", "best_segmentation/mean_iou"}
    assert {"mean_iou", "pixel_accuracy"} <= set(logs["segmentation"])
    assert 0.0 <= logs["shapes"]["accuracy"] <= 1.0
    validation = os.path.join(model_dir, "validation")
    assert subdirectories(validation) == ["segmentation", "shapes"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    images = EventAccumulator(os.path.join(validation, "segmentation"))
    images.Reload()
    assert {"image/input", "image/prediction"} <= set(images.Tags()["images"])
    assert set(scalars(os.path.join(validation, "shapes"))) == {"accuracy", "validation_loss"}


def test_run_experiment_with_multitask_eval_evaluates_the_trained_model_with_each_task(
        tmp_path):
    from torchgarden.tasks import CorruptedDigitsTask, ImageClassificationTask
    from torchgarden.train_lib import run_experiment_with_multitask_eval

    params = get_experiment("multitask_digits_eval")
    params.override(SHORT).override({"task": {"model": {"hidden_sizes": [16]}}})
    clean, noisy = (routine.task_config for routine in params.validate().eval_tasks[:2])
    eval_tasks = [ImageClassificationTask(clean, name="clean"),
                  CorruptedDigitsTask(noisy, name="noisy")]
    model, logs = run_experiment_with_multitask_eval(
        train_task=get_task(params.task), eval_tasks=eval_tasks, mode="train_and_eval",
        params=params, model_dir=str(tmp_path / "run"), eval_steps={"noisy": 1})
    assert set(logs) == {"clean", "noisy", "best_noisy/accuracy"}
    assert subdirectories(str(tmp_path / "run" / "validation")) == ["clean", "noisy"]
    assert logs["clean"]["accuracy"] > logs["noisy"]["accuracy"]


def test_a_multi_eval_experiment_trains_alone_in_train_mode(tmp_path, capsys):
    model_dir = str(tmp_path / "run")
    assert main(["train", "--experiment", "multitask_digits_eval", "--mode", "train",
                 "--model_dir", model_dir, "--params_override", SHORT]) == 0
    assert not os.path.exists(os.path.join(model_dir, "validation"))
    assert main(["eval", "--model_dir", model_dir]) == 0  # Then the eval tasks, under eval/.
    assert subdirectories(os.path.join(model_dir, "eval")) == ["best_ckpt", "clean", "noisy",
                                                              "occluded"]
