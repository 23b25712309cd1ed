"""The bad-input table: every case is exit 2, one stderr line, and model_dir untouched.

Each row runs the real CLI in process (``torchgarden.cli.main.main``) against a
model_dir that is either fresh (it must still not exist afterwards), holds an
unrelated file, or holds a short trained toy run; afterwards every file in it must be
byte-identical. The one stderr line starts ``torchgarden: error:`` and must name what
is wrong (the key, file or shape) and the fix, which each row checks by substrings.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable

import numpy as np
import pytest
import torch
from resilience_tools import process_state_restored

from torchgarden.checkpoint import CheckpointManager, _storage
from torchgarden.cli.main import main

TOY = ["train", "--experiment", "toy_regression", "--mode", "train"]
DIGITS = ["train", "--experiment", "image_classification", "--mode", "train"]
SHORT = "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.summary_interval=5"
EVERY_5 = ",trainer.checkpoint_interval=5"

USER_TASK = '''
"""A user project whose model outputs 3 values where the labels have 1."""
import dataclasses

import torch

from torchgarden import DataConfig, ExperimentConfig, Task, TaskConfig, TrainerConfig
from torchgarden import losses, register_experiment, register_task


@dataclasses.dataclass
class WideConfig(TaskConfig):
    width: int = 3


@register_task(WideConfig)
class WideTask(Task):
    def build_model(self):
        return torch.nn.Linear(4, self.task_config.width)

    def build_inputs(self, params, input_context=None):
        x = torch.randn(32, 4)
        return [(x[i:i + 8], x[i:i + 8].sum(1, keepdim=True)) for i in range(0, 32, 8)]

    def build_losses(self, labels, model_outputs, aux_losses=None):
        return losses.MeanSquaredError()(labels, model_outputs)


@register_experiment("user/wide")
def wide():
    return ExperimentConfig(
        task=WideConfig(train_data=DataConfig(is_training=True, global_batch_size=8)),
        trainer=TrainerConfig(train_steps=4, steps_per_loop=2, summary_interval=2),
    )
'''


@dataclasses.dataclass
class Case:
    """One row: how to build the command, what the line must say, where model_dir is."""

    name: str
    argv: Callable[[str, str], list[str]]  # (model_dir, tmp dir) -> argv
    says: tuple[str, ...]  # Substrings of the error line (after "torchgarden: error: ").
    #: "fresh" (must stay absent), "existing" (holds an unrelated file), "trained" /
    #: "trained_digits" (10 steps trained), or "trains" (fresh; fails after training began).
    model_dir: str = "fresh"
    setup: Callable[[str, str], None] | None = None  # (model_dir, tmp dir) -> None
    patch: Callable[[pytest.MonkeyPatch], None] | None = None


def write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def npz(path: str, x: np.ndarray, y: np.ndarray) -> str:
    np.savez(path, x=x, y=y)
    return path


def latest(model_dir: str) -> str:
    names = sorted((n for n in os.listdir(model_dir) if n.startswith("ckpt-")),
                   key=lambda n: int(n.split("-")[1]))
    return os.path.join(model_dir, names[-1])


def rewrite_meta(checkpoint: str, **changes) -> None:
    path = os.path.join(checkpoint, "meta.json")
    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    meta.update(changes)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f)


def flip_byte(checkpoint: str) -> None:
    path = os.path.join(checkpoint, "state.pt")
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def corrupt_all(model_dir: str, _tmp: str) -> None:
    for name in os.listdir(model_dir):
        if name.startswith("ckpt-"):
            flip_byte(os.path.join(model_dir, name))


def write_foreign_checkpoint(model_dir: str, _tmp: str) -> None:
    """A checkpoint (without a recorded config) of another model, as a custom script writes."""
    for name in os.listdir(model_dir):
        if name.startswith("ckpt-"):
            shutil.rmtree(os.path.join(model_dir, name))
    other = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 1))
    state = {"model": other.state_dict(), "global_step": {"value": 10}}
    _storage.write_checkpoint(model_dir, "ckpt", 10, state, config=None, extra=None, version="x")


def init_from_other_model(tmp: str) -> str:
    other = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 1))
    path = os.path.join(tmp, "other.pt")
    torch.save(other.state_dict(), path)
    return path


def disk_full_at_the_second_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.save on a full disk fails inside its zip writer with this RuntimeError."""
    real_save = torch.save
    calls = []

    def save(obj, f, *args, **kwargs):
        if str(getattr(f, "name", f)).endswith("state.pt"):
            calls.append(f)
            if len(calls) == 2:
                f.write(b"PK\x03\x04")
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos "
                                   "576 vs 534")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


def enospc_at_the_second_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    real_save = _storage._save_hashed
    calls = []

    def save_hashed(state, path):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real_save(state, path)

    monkeypatch.setattr(_storage, "_save_hashed", save_hashed)


def digits_npz(tmp: str, *, x_shape=(20, 1, 8, 8), labels=None, n=20) -> str:
    rng = np.random.default_rng(0)
    y = np.asarray(labels if labels is not None else rng.integers(0, 10, size=n))
    return npz(os.path.join(tmp, "data.npz"), rng.random(x_shape, dtype=np.float32), y)


def digits_source(path: str, extra: str = "") -> list[str]:
    return ["--params_override",
            f"{SHORT},task.train_data.source=npz,task.train_data.input_path={path}"
            f",task.train_data.global_batch_size=4{extra}"]


CASES = [
    # ---------------------------------------------------------------- config
    Case("malformed_yaml_file",
         lambda d, t: [*TOY, "--model_dir", d, "--config_file",
                       write(f"{t}/bad.yaml", "trainer:\n  train_steps: [1, 2\n")],
         ("bad.yaml", "line")),
    Case("malformed_yaml_override",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override", "{trainer: {train_steps: 5"],
         ("override string", "malformed YAML", "line")),
    Case("unknown_key", lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                                      "trainer.train_stpes=10"],
         ("trainer.train_stpes", "trainer.train_steps"), "existing"),
    Case("unknown_key_in_file",
         lambda d, t: [*TOY, "--model_dir", d, "--config_file",
                       write(f"{t}/c.yaml", "task:\n  train_data:\n    global_bath_size: 4\n")],
         ("task.train_data.global_bath_size", "global_batch_size")),
    Case("wrong_type", lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                                     "trainer.train_steps=ten"],
         ("trainer.train_steps", "int")),
    Case("wrong_type_in_file",
         lambda d, t: [*TOY, "--model_dir", d, "--config_file",
                       write(f"{t}/c.yaml", "runtime:\n  deterministic: [yes]\n")],
         ("runtime.deterministic", "bool")),
    Case("bad_distribution_strategy", lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                                                    "runtime.distribution_strategy=mirrored"],
         ("runtime.distribution_strategy", "'mirrored'", "ddp")),
    Case("bad_mixed_precision_dtype", lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                                                    "runtime.mixed_precision_dtype=fp16"],
         ("runtime.mixed_precision_dtype", "float16")),
    Case("bad_optimizer_type",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                       "trainer.optimizer_config.optimizer.type=adamm"],
         ("trainer.optimizer_config.optimizer", "adamm", "adam")),
    Case("bad_learning_rate_type",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                       "trainer.optimizer_config.learning_rate.type=cosin"],
         ("trainer.optimizer_config.learning_rate", "cosin", "cosine")),
    Case("bad_metric_comp", lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                                          "trainer.best_checkpoint_metric_comp=bigger"],
         ("trainer.best_checkpoint_metric_comp", "higher", "lower"), "existing"),
    Case("negative_train_steps", lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                                               "trainer.train_steps=-5"],
         ("trainer.train_steps", ">= 0", "-5")),
    Case("zero_steps_per_loop", lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                                              "trainer.steps_per_loop=0"],
         ("trainer.steps_per_loop", "> 0")),
    Case("summary_loop_interval_mismatch",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override", "trainer.summary_interval=15"],
         ("trainer.summary_interval", "trainer.steps_per_loop", "set it to 10")),
    Case("override_without_value", lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                                                 "trainer.train_steps"],
         ("trainer.train_steps", "key=value")),
    Case("unknown_experiment", lambda d, t: ["train", "--experiment", "image_clasification",
                                             "--model_dir", d],
         ("image_clasification", "Did you mean 'image_classification'?")),
    Case("unknown_mode", lambda d, t: ["train", "--experiment", "toy_regression",
                                       "--mode", "train_and_evaluate", "--model_dir", d],
         ("--mode", "train_and_evaluate", "train_and_eval")),
    Case("missing_experiment", lambda d, t: ["train", "--model_dir", d],
         ("--experiment", "torchgarden list")),
    Case("missing_model_dir", lambda d, t: [*TOY], ("--model_dir", "required")),
    Case("missing_config_file", lambda d, t: [*TOY, "--model_dir", d, "--config_file",
                                              f"{t}/nope.yaml"],
         ("nope.yaml",)),
    Case("unknown_signal_name",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                       "trainer.preemption_signals=[SIGTERM,SIGFOO]"],
         ("trainer.preemption_signals", "SIGFOO", "SIGUSR1"), "existing"),
    Case("unavailable_device", lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                                             "runtime.device=cuda:0"],
         ("runtime.device", "CUDA is not available", "cpu")),
    # ---------------------------------------------------------------- data
    Case("missing_npz_path",
         lambda d, t: [*DIGITS, "--model_dir", d, *digits_source(f"{t}/missing.npz")],
         ("missing.npz", "task.train_data.input_path")),
    Case("missing_image_folder",
         lambda d, t: [*DIGITS, "--model_dir", d, "--params_override",
                       f"{SHORT},task.train_data.source=folder,"
                       f"task.train_data.input_path={t}/no_such_folder"],
         ("no_such_folder", "task.train_data.input_path")),
    Case("empty_image_folder",
         lambda d, t: [*DIGITS, "--model_dir", d, "--params_override",
                       f"{SHORT},task.train_data.source=folder,task.train_data.input_path={t}"],
         ("empty_class", "holds no images", ".png"),
         setup=lambda d, t: os.makedirs(f"{t}/empty_class", exist_ok=True)),
    Case("empty_npz",
         lambda d, t: [*DIGITS, "--model_dir", d,
                       *digits_source(digits_npz(t, x_shape=(0, 1, 8, 8), labels=[]))],
         ("data.npz", "empty")),
    Case("label_out_of_range",
         lambda d, t: [*DIGITS, "--model_dir", d,
                       *digits_source(digits_npz(t, labels=[12] + [1] * 19))],
         ("data.npz", "[1, 12]", "task.model.num_classes", "[0, 9]"), "existing"),
    Case("image_shape_vs_input_size",
         lambda d, t: [*DIGITS, "--model_dir", d,
                       *digits_source(digits_npz(t, x_shape=(20, 3, 8, 8)))],
         ("data.npz", "(3, 8, 8)", "task.model.input_size=[3, 8, 8]")),
    Case("npz_without_the_image_key",
         lambda d, t: [*DIGITS, "--model_dir", d,
                       *digits_source(npz(f"{t}/data.npz", np.zeros((4, 8, 8)), np.zeros(4)),
                                      ",task.train_data.x_key=images")],
         ("data.npz", "images")),
    Case("batch_larger_than_dataset",
         lambda d, t: [*DIGITS, "--model_dir", d,
                       *digits_source(digits_npz(t), ",task.train_data.global_batch_size=64")],
         ("task.train_data yields no batch", "20 examples", "data.npz", "global_batch_size=64",
          "drop_remainder=false")),
    Case("user_model_output_width_vs_loss",
         lambda d, t: ["train", "--import", write(f"{t}/user_wide.py", USER_TASK),
                       "--experiment", "user/wide", "--mode", "train", "--model_dir", d],
         ("MeanSquaredError", "(8, 1)", "(8, 3)")),
    # ---------------------------------------------------------------- checkpoints
    Case("resume_under_another_model",
         lambda d, t: [*DIGITS, "--model_dir", d, "--params_override",
                       f"{SHORT},trainer.train_steps=20,task.model.hidden_sizes=[32]"],
         ("cannot resume", "ckpt-10", "task.model.hidden_sizes: [8] -> [32]", "new --model_dir"),
         "trained_digits"),
    Case("resume_toy_under_another_width",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                       f"{SHORT},trainer.train_steps=20,task.hidden_size=16"],
         ("ckpt-10", "missing keys (4): '0.weight'", "unexpected keys (2): 'weight'",
          "new model_dir", "task.init_checkpoint="), "trained"),
    Case("checkpoint_of_another_model",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                       f"{SHORT},trainer.train_steps=20"],
         ("missing keys", "'weight'", "unexpected keys", "'0.weight'"), "trained",
         setup=write_foreign_checkpoint),
    Case("checkpoint_from_a_newer_format",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                       f"{SHORT},trainer.train_steps=20"],
         ("newer torchgarden", "format 99", "upgrade"), "trained",
         setup=lambda d, t: rewrite_meta(latest(d), format_version=99)),
    Case("every_checkpoint_corrupted",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                       f"{SHORT},trainer.train_steps=20"],
         ("all 2 checkpoints in", "failed verification", "move them aside"), "trained",
         setup=corrupt_all),
    Case("init_checkpoint_missing",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                       f"{SHORT},task.init_checkpoint={t}/pretrained"],
         ("task.init_checkpoint", "pretrained", "does not exist", "ckpt-<N> directory")),
    Case("init_checkpoint_of_another_model",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override",
                       f"{SHORT},task.init_checkpoint={init_from_other_model(t)}"],
         ("other.pt", "missing keys", "'weight'"), "existing"),
    # ---------------------------------------------------------------- environment
    Case("model_dir_is_a_file",
         lambda d, t: [*TOY, "--model_dir", write(f"{t}/a_file", "x")],
         ("a_file", "not a directory")),
    Case("model_dir_under_a_file",
         lambda d, t: [*TOY, "--model_dir", os.path.join(write(f"{t}/a_file", "x"), "run")],
         ("a_file", "not a directory")),
    Case("disk_full_while_saving",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override", f"{SHORT}{EVERY_5}"],
         ("could not write checkpoint ckpt-10", "torch.save failed", "MiB free",
          "free space", "resume from ckpt-5"), "trains",
         patch=disk_full_at_the_second_checkpoint),
    Case("enospc_while_syncing",
         lambda d, t: [*TOY, "--model_dir", d, "--params_override", f"{SHORT}{EVERY_5}"],
         ("could not write checkpoint ckpt-10", "No space left on device", "resume from ckpt-5"),
         "trains", patch=enospc_at_the_second_checkpoint),
    Case("unknown_import_module",
         lambda d, t: ["train", "--import", "no_such_project.registry", *TOY[1:], "--model_dir", d],
         ("--import no_such_project.registry", "PYTHONPATH")),
    Case("missing_import_file",
         lambda d, t: ["train", "--import", f"{t}/nope.py", *TOY[1:], "--model_dir", d],
         ("nope.py", "not found")),
]


def tree(path: str) -> dict[str, str]:
    """relative path -> sha256 of every file (and "dir" for every directory) under path."""
    if not os.path.exists(path):
        return {}
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), path)] = "dir"
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), path)] = hashlib.sha256(
                    f.read()).hexdigest()
    return out


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> dict[str, str]:
    """Short runs (checkpoints at steps 5 and 10) copied into the cases that resume."""
    runs = {}
    for kind, command, extra in (("trained", TOY, ""),
                                 ("trained_digits", DIGITS, ",task.model.hidden_sizes=[8]")):
        model_dir = str(tmp_path_factory.mktemp(kind) / "run")
        code = run_in_process_quietly([*command, "--model_dir", model_dir, "--params_override",
                                       f"{SHORT}{EVERY_5}{extra}"])
        assert code == 0
        runs[kind] = model_dir
    return runs


def run_in_process_quietly(argv: list[str]) -> int:
    with process_state_restored():
        return main(argv)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_exit_2_and_model_dir_untouched(
    case, tmp_path, trained, capsys, monkeypatch
):
    tmp = str(tmp_path)
    model_dir = os.path.join(tmp, "run")
    if case.model_dir == "existing":
        write(os.path.join(model_dir, "notes.txt"), "my notes\n")
    elif case.model_dir in trained:
        shutil.copytree(trained[case.model_dir], model_dir)
    if case.setup is not None:
        case.setup(model_dir, tmp)
    argv = case.argv(model_dir, tmp)
    before = tree(model_dir)
    capsys.readouterr()
    if case.patch is not None:
        case.patch(monkeypatch)

    code = run_in_process_quietly(argv)

    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("torchgarden: error: "), err
    for expected in case.says:
        assert expected in lines[0], f"{expected!r} not in {lines[0]!r}"
    if case.model_dir == "trains":
        # Training began before the failure: what is on disk is a valid run to resume.
        assert sorted(n for n in os.listdir(model_dir) if "ckpt" in n) == ["ckpt-5"]
        CheckpointManager.verify(os.path.join(model_dir, "ckpt-5"))
    elif case.model_dir == "fresh":
        assert not os.path.exists(model_dir), os.listdir(model_dir)
    else:
        assert tree(model_dir) == before
    print(f"{case.name}: {lines[0]}")


def test_the_table_has_at_least_30_cases():
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)
