"""Adversarial table, security group: paths that lead out of the directories a user named.

The promise (docs/robustness.md, "Security"): a path the user names (``--model_dir``,
``--output``, ``--checkpoint PATH``, ``task.init_checkpoint``) is used as named, links and
``..`` included. Below it, torchgarden writes only real files and directories of its own:
an entry it writes that is a symbolic link is refused before anything is written (writing
through it would write, or truncate, what it points at), a checkpoint that is a link or
holds one is not resumed, retention removes a link and never what it points at, and names
that come from a config (task names, subdirectories) never hold a path. Every row checks
that the file or directory outside is byte-identical afterwards.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from table import SHORT, TO_20, TOY, Case, run_case, tree, write

OUTSIDE = "outside"  # under the test's tmp dir, next to the model_dir "run"


def toy(model_dir: str, override: str = TO_20) -> list[str]:
    return [*TOY, "--model_dir", model_dir, "--params_override", override]


def evaluate(model_dir: str) -> list[str]:
    return ["eval", "--experiment", "toy_regression", "--model_dir", model_dir]


def export(model_dir: str, *extra: str) -> list[str]:
    return ["export", "--model_dir", model_dir, "--format", "safetensors", *extra]


def _outside(tmp: str) -> str:
    return os.path.join(tmp, OUTSIDE)


def link_to_outside_file(entry: str):
    """Setup: ``<model_dir>/<entry>`` becomes a link to a file outside holding a secret."""
    def setup(model_dir: str, tmp: str) -> None:
        target = write(os.path.join(_outside(tmp), "secret.txt"), "do not touch\n")
        path = os.path.join(model_dir, entry)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.remove(path)
        os.symlink(target, path)
    return setup


def link_to_outside_dir(entry: str, copy_of: str | None = None):
    """Setup: ``<model_dir>/<entry>`` becomes a link to a directory outside (a copy of
    ``<model_dir>/<copy_of>``, or empty)."""
    def setup(model_dir: str, tmp: str) -> None:
        target = os.path.join(_outside(tmp), os.path.basename(entry))
        path = os.path.join(model_dir, entry)
        if copy_of is not None:
            shutil.copytree(os.path.join(model_dir, copy_of), target)
        else:
            os.makedirs(target)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(target, path)
        write(os.path.join(_outside(tmp), "snapshot"), json.dumps(tree(_outside(tmp))))
    return setup


def link_a_checkpoint_file(model_dir: str, tmp: str) -> None:
    """ckpt-10/state.pt becomes a link to a byte-identical copy outside (it verifies)."""
    target = os.path.join(_outside(tmp), "state.pt")
    os.makedirs(_outside(tmp))
    shutil.move(os.path.join(model_dir, "ckpt-10", "state.pt"), target)
    os.symlink(target, os.path.join(model_dir, "ckpt-10", "state.pt"))
    write(os.path.join(_outside(tmp), "snapshot"), json.dumps(tree(_outside(tmp))))


def outside_untouched(model_dir: str, tmp: str) -> None:
    outside = tree(_outside(tmp))
    if "snapshot" in outside:
        with open(os.path.join(_outside(tmp), "snapshot")) as f:
            before = json.load(f)
        outside.pop("snapshot")
        assert outside == before
    else:
        with open(os.path.join(_outside(tmp), "secret.txt")) as f:
            assert f.read() == "do not touch\n"


def resumed_past_the_link(model_dir: str, tmp: str) -> None:
    outside_untouched(model_dir, tmp)
    assert "ckpt-20" in os.listdir(model_dir)
    assert not os.path.islink(os.path.join(model_dir, "ckpt-10"))
    assert not os.path.islink(os.path.join(model_dir, "ckpt-10", "state.pt"))


def symlinked_model_dir(model_dir: str, tmp: str) -> None:
    os.makedirs(os.path.join(tmp, "real"))
    os.symlink(os.path.join(tmp, "real"), model_dir)


def wrote_into_the_link_target(model_dir: str, tmp: str) -> None:
    assert os.path.islink(model_dir)
    assert "ckpt-20" in os.listdir(os.path.join(tmp, "real"))


def wrote_where_dotdot_leads(model_dir: str, tmp: str) -> None:
    assert "ckpt-20" in os.listdir(model_dir)
    assert os.listdir(os.path.join(tmp, "sub")) == []


def export_wrote_only_its_output(model_dir: str, tmp: str) -> None:
    assert os.path.isfile(os.path.join(tmp, "elsewhere", "out", "export.json"))
    assert not os.path.exists(os.path.join(model_dir, "exports"))


def multitask_config(tmp: str, name: str) -> str:
    return write(os.path.join(tmp, "mt.yaml"), f"task:\n  task_routines:\n  - task_name: {name}\n"
                                               "  - task_name: parity\n")


CASES = [
    # Entries the run writes inside the model_dir, made links out of it: refused.
    Case("lock_file_is_a_link_out", lambda d, t: toy(d), (".torchgarden.lock", "symbolic link",
                                                          "never through a link"),
         "trained", setup=link_to_outside_file(".torchgarden.lock"), check=outside_untouched),
    Case("metrics_jsonl_is_a_link_out", lambda d, t: toy(d), ("metrics.jsonl", "symbolic link"),
         "trained", setup=link_to_outside_file("metrics.jsonl"), check=outside_untouched),
    Case("params_yaml_is_a_link_out", lambda d, t: toy(d), ("params.yaml", "symbolic link"),
         "trained", setup=link_to_outside_file("params.yaml"), check=outside_untouched),
    Case("params_yaml_of_a_fresh_dir_is_a_link_out", lambda d, t: toy(d, SHORT),
         ("params.yaml", "symbolic link"), "existing",
         setup=link_to_outside_file("params.yaml"), check=outside_untouched),
    Case("train_dir_is_a_link_out", lambda d, t: toy(d), ("/train", "symbolic link"),
         "trained", setup=link_to_outside_dir("train"), check=outside_untouched),
    Case("eval_dir_is_a_link_out", lambda d, t: evaluate(d), ("/eval", "symbolic link"),
         "trained", setup=link_to_outside_dir("eval"), check=outside_untouched),
    Case("eval_lock_is_a_link_out", lambda d, t: evaluate(d),
         ("eval/.torchgarden.lock", "symbolic link"), "trained",
         setup=link_to_outside_file("eval/.torchgarden.lock"), check=outside_untouched),
    Case("export_dir_is_a_link_out", lambda d, t: export(d), ("/exports", "symbolic link",
                                                              "--output"),
         "trained", setup=link_to_outside_dir("exports"), check=outside_untouched),
    # Names from a config or a flag are never paths.
    Case("multitask_task_name_with_dotdot",
         lambda d, t: ["train", "--experiment", "multitask_digits", "--model_dir", d,
                       "--config_file", multitask_config(t, "../../escaped")],
         ("task.task_routines[0].task_name", "letters, digits", "'../../escaped'")),
    Case("export_task_with_dotdot", lambda d, t: export(d, "--task", "../../escaped"),
         ("--task ../../escaped", "not a multi-task run"), "trained"),
    Case("experiment_with_dotdot", lambda d, t: [*TOY[:1], "--experiment", "../../etc",
                                                 "--model_dir", d],
         ("unknown experiment '../../etc'", "Registered:")),
    # Checkpoints that are links, or hold one: not resumed (one warning), never followed
    # when set aside.
    Case("newest_checkpoint_file_is_a_link", lambda d, t: toy(d),
         ("ckpt-10", "state.pt", "symbolic link", "only its own files"), "trained", code=0,
         setup=link_a_checkpoint_file, check=resumed_past_the_link),
    Case("newest_checkpoint_is_a_link", lambda d, t: toy(d),
         ("ckpt-10", "symbolic link", "task.init_checkpoint"), "trained", code=0,
         setup=link_to_outside_dir("ckpt-10", copy_of="ckpt-10"), check=resumed_past_the_link),
    # Paths the user names are used as named.
    Case("model_dir_is_a_link_the_user_named", lambda d, t: toy(d), (), code=0, warnings=0,
         setup=symlinked_model_dir, check=wrote_into_the_link_target),
    Case("model_dir_with_dotdot", lambda d, t: toy(os.path.join(t, "sub", "..", "run")), (),
         "existing", code=0, warnings=0, setup=lambda d, t: os.makedirs(os.path.join(t, "sub")),
         check=wrote_where_dotdot_leads),
    Case("export_output_with_dotdot_outside_the_model_dir",
         lambda d, t: export(d, "--output", os.path.join(d, "..", "elsewhere", "out")), (),
         "trained", code=0, warnings=0, check=export_wrote_only_its_output),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_security_row(case, tmp_path, trained, capsys, caplog, monkeypatch):
    print(run_case(case, str(tmp_path), trained, capsys, caplog, monkeypatch))


def test_retention_removes_a_linked_checkpoint_not_what_it_points_at(tmp_path, trained,
                                                                     capsys):
    """max_to_keep deletes the oldest entry, a link: the link goes, its target stays."""
    model_dir = str(tmp_path / "run")
    shutil.copytree(trained["trained"], model_dir)
    link_to_outside_dir("ckpt-5", copy_of="ckpt-5")(model_dir, str(tmp_path))
    from table import run_quietly

    assert run_quietly(toy(model_dir, f"{TO_20},trainer.max_to_keep=2")) == 0
    assert sorted(n for n in os.listdir(model_dir) if "ckpt" in n) == ["ckpt-10", "ckpt-20"]
    outside_untouched(model_dir, str(tmp_path))
    assert tree(os.path.join(tmp_path, OUTSIDE, "ckpt-5")) == tree(
        os.path.join(trained["trained"], "ckpt-5"))
