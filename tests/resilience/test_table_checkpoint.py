"""Adversarial table, checkpoint group: what a model_dir's checkpoints can hold.

A checkpoint is a resume point only if its manifest is well formed, names its step, its
files verify and its weights are finite. Anything else is skipped with exactly one
warning naming it, the newest good one is resumed, and the bad one is set aside (kept)
when its step is saved again (exit 0, model_dir lawfully extended). Where nothing can be
resumed, or the checkpoint belongs to another model, the run stops with exit 2.
"""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest
import torch
from table import DIGITS, SHORT, TO_20, TOY, Case, run_case, write

from torchgarden.checkpoint import CheckpointManager, _direct

EVERY_5 = ",trainer.checkpoint_interval=5"


def toy(model_dir: str, override: str = TO_20 + EVERY_5 + ",trainer.max_to_keep=10") -> list[str]:
    return [*TOY, "--model_dir", model_dir, "--params_override", override]


def meta_path(model_dir: str, number: int = 10) -> str:
    return os.path.join(model_dir, f"ckpt-{number}", "meta.json")


def edit_meta(**changes) -> callable:
    def setup(model_dir: str, _tmp: str) -> None:
        with open(meta_path(model_dir)) as f:
            meta = json.load(f)
        meta.update(changes)
        write(meta_path(model_dir), json.dumps(meta))
    return setup


def rewrite_checkpoint(edit) -> callable:
    """Rewrites ckpt-10 consistently (hashes match) after ``edit(state)``."""
    def setup(model_dir: str, _tmp: str) -> None:
        path = os.path.join(model_dir, "ckpt-10")
        state = torch.load(os.path.join(path, "state.pt"), weights_only=True)
        with open(os.path.join(path, "meta.json")) as f:
            config = json.load(f)["config"]
        edit(state)
        shutil.rmtree(path)
        _direct.write_checkpoint(model_dir, "ckpt", 10, state, config=config, extra=None,
                                 version="x")
    return setup


def flip_byte(model_dir: str, number: int = 10) -> None:
    path = os.path.join(model_dir, f"ckpt-{number}", "state.pt")
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def nan_weights(state) -> None:
    state["model"]["weight"].fill_(float("nan"))


def resumed_from_5(model_dir: str, _tmp: str) -> None:
    """ckpt-10 was set aside (kept) and written again; the run reached step 20."""
    assert [n for n in os.listdir(model_dir) if n.startswith(".ckpt-10.corrupt-")]
    CheckpointManager.verify(os.path.join(model_dir, "ckpt-10"))
    assert "ckpt-20" in os.listdir(model_dir)


def resumed_from_10(model_dir: str, _tmp: str) -> None:
    CheckpointManager.verify(os.path.join(model_dir, "ckpt-20"))
    state = torch.load(os.path.join(model_dir, "ckpt-20", "state.pt"), weights_only=True)
    assert state["global_step"]["value"] == 20


def foreign_checkpoint(model_dir: str, _tmp: str) -> None:
    """A checkpoint (without a recorded config) of another model, as a custom script writes."""
    for name in os.listdir(model_dir):
        if name.startswith("ckpt-"):
            shutil.rmtree(os.path.join(model_dir, name))
    other = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 1))
    state = {"model": other.state_dict(), "global_step": {"value": 10}}
    _direct.write_checkpoint(model_dir, "ckpt", 10, state, config=None, extra=None, version="x")


def other_model_weights(tmp: str) -> str:
    other = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 1))
    path = os.path.join(tmp, "other.pt")
    torch.save(other.state_dict(), path)
    return path


def disk_full_at_the_second_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.save on a full disk fails inside its zip writer with this RuntimeError."""
    real_save = torch.save
    calls = []

    def save(obj, f, *args, **kwargs):
        # torch.save receives torchgarden's hashing file object, whose name is the path.
        if str(getattr(f, "name", f)).endswith("state.pt"):
            calls.append(f)
            if len(calls) == 2:
                f.write(b"PK\x03\x04")
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos "
                                   "576 vs 534")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


def enospc_at_the_second_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    real_save = _direct.save_hashed
    calls = []

    def save_hashed(state, path):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real_save(state, path)

    monkeypatch.setattr(_direct, "save_hashed", save_hashed)


def enospc_at_the_second_best_export(monkeypatch: pytest.MonkeyPatch) -> None:
    real_save = _direct.save_hashed

    def save_hashed(state, path):
        if "best_ckpt-10" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real_save(state, path)

    monkeypatch.setattr(_direct, "save_hashed", save_hashed)


def only_ckpt_5(model_dir: str, _tmp: str) -> None:
    assert sorted(n for n in os.listdir(model_dir) if "ckpt" in n) == ["ckpt-5"]
    CheckpointManager.verify(os.path.join(model_dir, "ckpt-5"))


RESUMES = "skipping corrupt checkpoint"
CASES = [
    # ------------------------------------------------------ skipped with one warning (exit 0)
    Case("newest_without_meta_json", lambda d, t: toy(d), (RESUMES, "ckpt-10", "meta.json is missing"),
         "trained", code=0, setup=lambda d, t: os.remove(meta_path(d)), check=resumed_from_5),
    Case("empty_checkpoint_directory", lambda d, t: toy(d), (RESUMES, "ckpt-15", "incomplete"),
         "trained", code=0, setup=lambda d, t: os.makedirs(f"{d}/ckpt-15"), check=resumed_from_10),
    Case("misnamed_copy", lambda d, t: toy(d),
         ("ckpt-999999999", "records step 10 but the directory is named for step 999999999"),
         "trained", code=0, check=resumed_from_10,
         setup=lambda d, t: shutil.copytree(f"{d}/ckpt-10", f"{d}/ckpt-999999999")),
    Case("plain_file_named_like_a_checkpoint", lambda d, t: toy(d),
         (RESUMES, "ckpt-10", "not a checkpoint directory"), "trained", code=0,
         setup=lambda d, t: (shutil.rmtree(f"{d}/ckpt-10"), write(f"{d}/ckpt-10", "x")),
         check=resumed_from_5),
    Case("meta_without_files", lambda d, t: toy(d), (RESUMES, "does not list state.pt"),
         "trained", code=0, setup=edit_meta(files=[]), check=resumed_from_5),
    Case("meta_file_entry_not_a_mapping", lambda d, t: toy(d),
         (RESUMES, "needs an integer 'bytes' and a hex checksum"), "trained", code=0,
         setup=edit_meta(files={"state.pt": 5}), check=resumed_from_5),
    Case("meta_naming_a_file_outside", lambda d, t: toy(d), (RESUMES, "'../state.pt'"),
         "trained", code=0, check=resumed_from_5,
         setup=edit_meta(files={"state.pt": {"bytes": 1, "sha256": "0" * 64},
                                "../state.pt": {"bytes": 1, "sha256": "0" * 64}})),
    Case("meta_step_is_text", lambda d, t: toy(d), (RESUMES, "records step '10'"),
         "trained", code=0, setup=edit_meta(step="10"), check=resumed_from_5),
    Case("meta_is_a_list", lambda d, t: toy(d), (RESUMES, "no integer 'format_version'"),
         "trained", code=0, setup=lambda d, t: write(meta_path(d), "[1, 2]"),
         check=resumed_from_5),
    Case("garbled_meta", lambda d, t: toy(d), (RESUMES, "is unreadable"), "trained", code=0,
         setup=lambda d, t: write(meta_path(d), '{"format_version": 1, "files": '),
         check=resumed_from_5),
    Case("truncated_state", lambda d, t: toy(d), (RESUMES, "truncated or altered"), "trained",
         code=0, check=resumed_from_5,
         setup=lambda d, t: os.truncate(f"{d}/ckpt-10/state.pt", 100)),
    Case("one_byte_flipped", lambda d, t: toy(d), (RESUMES, "altered on disk"), "trained",
         code=0, setup=lambda d, t: flip_byte(d), check=resumed_from_5),
    Case("state_pt_is_a_directory", lambda d, t: toy(d), (RESUMES, "state.pt' is missing"),
         "trained", code=0, check=resumed_from_5,
         setup=lambda d, t: (os.remove(f"{d}/ckpt-10/state.pt"),
                             os.makedirs(f"{d}/ckpt-10/state.pt"))),
    Case("state_step_disagrees_with_name", lambda d, t: toy(d),
         (RESUMES, "records global step 7"), "trained", code=0, check=resumed_from_5,
         setup=rewrite_checkpoint(lambda s: s["global_step"].update(value=7))),
    Case("nan_weights", lambda d, t: toy(d),
         ("skipping checkpoint", "model['weight'] is NaN or inf", "not a resume point"),
         "trained", code=0, setup=rewrite_checkpoint(nan_weights), check=resumed_from_5),
    Case("optimizer_changed_on_resume",
         lambda d, t: toy(d, TO_20 + ",trainer.optimizer_config.optimizer.type=adam"),
         ("optimizer state does not fit", "moments start fresh"), "trained", code=0,
         check=resumed_from_10),
    # ------------------------------------------------------ refused (exit 2)
    Case("resume_under_another_model",
         lambda d, t: [*DIGITS, "--model_dir", d, "--params_override",
                       f"{TO_20},task.model.hidden_sizes=[32]"],
         ("cannot resume", "ckpt-10", "task.model.hidden_sizes: [8] -> [32]", "new --model_dir"),
         "trained_digits"),
    Case("resume_under_another_task", lambda d, t: toy(d),
         ("cannot resume", "task._type", "ImageClassificationConfig", "ToyRegressionConfig')"),
         "trained_digits"),
    Case("resume_toy_under_another_width", lambda d, t: toy(d, f"{TO_20},task.hidden_size=16"),
         ("ckpt-10", "missing keys (4): '0.weight'", "unexpected keys (2): 'weight'",
          "new model_dir", "task.init_checkpoint="), "trained"),
    Case("checkpoint_of_another_model", lambda d, t: toy(d),
         ("missing keys", "'weight'", "unexpected keys", "'0.weight'",
          "--params_override on the command line, params.task.init_checkpoint in Python"),
         "trained",
         setup=foreign_checkpoint),
    Case("checkpoint_from_a_newer_format", lambda d, t: toy(d),
         ("newer torchgarden", "format 99", "upgrade"), "trained", setup=edit_meta(format_version=99)),
    Case("every_checkpoint_corrupted", lambda d, t: toy(d),
         ("all 2 checkpoints in", "failed verification", "move them aside"), "trained",
         setup=lambda d, t: (flip_byte(d, 5), flip_byte(d, 10))),
    Case("eval_of_corrupt_checkpoints_only",
         lambda d, t: ["eval", "--experiment", "toy_regression", "--model_dir", d],
         ("all 2 checkpoints",), "trained", setup=lambda d, t: (flip_byte(d, 5), flip_byte(d, 10))),
    Case("truncated_best_info_json",
         lambda d, t: [*DIGITS, "--model_dir", d, "--params_override",
                       f"{TO_20},task.model.hidden_sizes=[8]"],
         ("best_ckpt/info.json", "is unreadable", "delete it"), "trained_digits",
         setup=lambda d, t: write(f"{d}/best_ckpt/info.json", '{"accuracy": 0.9')),
    Case("best_info_json_of_another_metric",
         lambda d, t: [*DIGITS, "--model_dir", d, "--params_override",
                       f"{TO_20},task.model.hidden_sizes=[8]"],
         ("best_ckpt/info.json", "records no best 'accuracy'"), "trained_digits",
         setup=lambda d, t: write(f"{d}/best_ckpt/info.json", '{"loss": 0.5}')),
    Case("init_checkpoint_missing", lambda d, t: toy(d, f"{SHORT},task.init_checkpoint={t}/pre"),
         ("task.init_checkpoint", "pre", "does not exist", "ckpt-<N> directory")),
    Case("init_checkpoint_of_another_model",
         lambda d, t: toy(d, f"{SHORT},task.init_checkpoint={other_model_weights(t)}"),
         ("other.pt", "missing keys", "'weight'"), "existing"),
    Case("init_checkpoint_is_not_a_checkpoint",
         lambda d, t: toy(d, f"{SHORT},task.init_checkpoint={write(f'{t}/notes.yaml', 'a: 1')}"),
         ("notes.yaml", "not a readable torch checkpoint", "task.init_checkpoint")),
    # ------------------------------------------------------ a full disk (exit 2, run resumable)
    Case("disk_full_while_saving", lambda d, t: toy(d, f"{SHORT}{EVERY_5}"),
         ("could not write checkpoint ckpt-10", "torch.save failed", "MiB free",
          "free space", "resume from ckpt-5"), "trains",
         patch=disk_full_at_the_second_checkpoint, check=only_ckpt_5),
    Case("disk_full_while_saving_the_best_export",
         lambda d, t: [*DIGITS[:-1], "train_and_eval", "--model_dir", d, "--params_override",
                       f"{SHORT}{EVERY_5},trainer.validation_interval=5,"
                       "task.model.hidden_sizes=[8]"],
         ("could not write checkpoint best_ckpt-10", "No space left on device",
          "rerun to resume from ckpt-"), "trains", patch=enospc_at_the_second_best_export),
    Case("enospc_while_syncing", lambda d, t: toy(d, f"{SHORT}{EVERY_5}"),
         ("could not write checkpoint ckpt-10", "No space left on device", "resume from ckpt-5"),
         "trains", patch=enospc_at_the_second_checkpoint, check=only_ckpt_5),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_checkpoint_row(case, tmp_path, trained, capsys, caplog, monkeypatch):
    print(run_case(case, str(tmp_path), trained, capsys, caplog, monkeypatch))
