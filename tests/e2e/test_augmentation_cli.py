"""Model Garden's augmentation keys through the real CLI: 2 training steps with RandAugment
and Mixup/CutMix on digits and on an .npz source; refused keys stop before any write."""

from __future__ import annotations

import json
import math

import numpy as np

from torchgarden.cli.main import main

_AUGMENT = """\
task:
  train_data:
    aug_type: {type: randaug, randaug: {num_layers: 2, magnitude: 9, exclude_ops: [Cutout]}}
    mixup_and_cutmix: {mixup_alpha: 0.8, cutmix_alpha: 1.0, label_smoothing: 0.1}
    random_erasing: {probability: 0.5}
    color_jitter: 0.4
    aug_policy: randaug
trainer: {train_steps: 2, steps_per_loop: 1, validation_interval: 2, checkpoint_interval: 2}
"""


def _train(tmp_path, *extra: str) -> tuple[int, str]:
    config = tmp_path / "augment.yaml"
    config.write_text(_AUGMENT)
    model_dir = tmp_path / "run"
    code = main(["train", "--experiment", "image_classification", "--model_dir", str(model_dir),
                 "--config_file", str(config), *extra])
    return code, str(model_dir)


def _train_loss(model_dir: str) -> float:
    with open(f"{model_dir}/metrics.jsonl", encoding="utf-8") as lines:
        logs = [json.loads(line) for line in lines if line.strip()]
    return next(log["training_loss"] for log in logs if log["split"] == "train")


def test_two_steps_with_randaug_and_mixup_on_digits(tmp_path, capsys):
    code, model_dir = _train(tmp_path)
    assert code == 0
    out = capsys.readouterr()
    assert "task.train_data.aug_policy ignored" in out.out + out.err
    assert (tmp_path / "run" / "ckpt-2").is_dir()
    # Soft-label cross-entropy of a fresh 10-class model: near ln(10).
    assert abs(_train_loss(model_dir) - math.log(10)) < 0.5
    params = (tmp_path / "run" / "params.yaml").read_text()
    assert "type: randaug" in params and "magnitude: 9.0" in params


def test_two_steps_with_randaug_and_mixup_on_npz(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.random((40, 3, 8, 8), dtype=np.float32)
    np.savez(tmp_path / "train.npz", x=x, y=rng.integers(0, 4, 40))
    code, model_dir = _train(
        tmp_path, "--params_override",
        f"task.train_data.source=npz,task.train_data.input_path={tmp_path}/train.npz,"
        f"task.validation_data.source=npz,task.validation_data.input_path={tmp_path}/train.npz,"
        "task.model.input_size=[8,8,3],task.model.num_classes=4,"
        "task.train_data.global_batch_size=8,task.train_data.dtype=bfloat16")
    assert code == 0
    assert (tmp_path / "run" / "ckpt-2").is_dir()
    assert abs(_train_loss(model_dir) - math.log(4)) < 0.5


def test_refused_key_exits_2_naming_it_before_any_write(tmp_path, capsys):
    code, model_dir = _train(tmp_path, "--params_override", "task.train_data.three_augment=true")
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any("task.train_data.three_augment" in line for line in err)
    assert not (tmp_path / "run").exists()


def test_augmented_runs_are_a_function_of_the_seed(tmp_path):
    losses = []
    for name, data_seed in (("a", 0), ("b", 0), ("c", 1)):
        (tmp_path / name).mkdir()
        code, model_dir = _train(tmp_path / name, "--params_override",
                                 f"task.train_data.num_workers=2,task.train_data.seed={data_seed},"
                                 "task.train_data.aug_type.type=autoaug")
        assert code == 0
        losses.append(_train_loss(model_dir))
    assert losses[0] == losses[1] != losses[2]
