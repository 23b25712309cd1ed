"""The language_model experiment end to end on a tiny corpus, in-process, and its config errors."""

from __future__ import annotations

import math
import os

import pytest

import torchgarden as tg
from torchgarden.cli.main import main
from torchgarden.compile import unsupported_reason

pytest.importorskip("transformers")


def _corpus(tmp_path):
    root = tmp_path / "corpus"
    for i in range(30):
        (root / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 3}" / f"m{i}.py").write_text(
            "def f(x):\n    return x + 1\n\n" * 40 + f"# file {i}\n")
    return str(root)


def test_language_model_trains_and_reports_bpb_baseline_and_throughput(tmp_path):
    params = tg.get_experiment("language_model")
    corpus = _corpus(tmp_path)
    params.override({
        "task": {"model": {"library_config": {"n_layer": 1, "n_embd": 32, "n_head": 2},
                           "activation_checkpointing": True},
                 "train_data": {"input_path": corpus, "seq_length": 32,
                                "validation_percent": 20, "global_batch_size": 8},
                 "validation_data": {"input_path": corpus, "seq_length": 32,
                                     "validation_percent": 20, "global_batch_size": 8}},
        "trainer": {"train_steps": 20, "steps_per_loop": 10, "summary_interval": 10,
                    "validation_interval": 20, "checkpoint_interval": 20,
                    "validation_steps": 2, "optimizer_config": {
                        "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.01}},
                        "warmup": {"type": None}}},
    })
    model_dir = str(tmp_path / "run")
    task = tg.get_task(params.task, logging_dir=model_dir)
    model, logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                    model_dir=model_dir)
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    assert float(logs["bits_per_byte"]) == pytest.approx(
        float(logs["validation_loss"]) / math.log(2), rel=1e-5)
    # This repetitive text is far more predictable than its byte frequencies say.
    assert float(logs["bits_per_byte"]) < float(logs["unigram_bits_per_byte"])
    assert os.path.isdir(os.path.join(model_dir, "ckpt-20"))


def test_a_hub_checkpoint_name_is_a_one_line_error_before_any_write(capsys, tmp_path):
    model_dir = str(tmp_path / "run")
    code = main(["train", "--experiment", "image_classification", "--model_dir", model_dir,
                 "--params_override", "task.model.name=transformers/microsoft/resnet-50"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "task.model.name" in err and "names a hub checkpoint" in err
    assert not os.path.exists(model_dir)


def test_language_model_needs_a_transformers_name(capsys, tmp_path):
    code = main(["train", "--experiment", "language_model", "--model_dir", str(tmp_path / "r"),
                 "--params_override", "task.model.name=timm/resnet18"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "must name a transformers causal LM" in err


def test_activation_checkpointing_falls_back_from_the_compiled_whole_step():
    params = tg.get_experiment("language_model")
    params.override({"task": {"model": {"activation_checkpointing": True, "library_config": {
        "n_layer": 1, "n_embd": 16, "n_head": 2}}}})
    task = tg.get_task(params.task)
    model = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, model)
    reason = unsupported_reason(task=task, model=model, optimizer=optimizer)
    assert reason is not None and "activation checkpointing" in reason
