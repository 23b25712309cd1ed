"""Reports and exports of a run that is still training (issue 22 §3).

A real trainer subprocess saves a checkpoint every step and keeps only the newest two
(``max_to_keep=2``), so retention deletes checkpoints about as fast as it can while this
process runs ``torchgarden export`` and ``torchgarden report`` on its model_dir over and
over. Every call must exit 0 (or, before the first checkpoint, 2 with one line), every
export must be complete and hold the weights of exactly one checkpoint step, and every
report must show steps the run really logged, in order.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time

import pytest
import torch
from resilience_tools import child_env, process_state_restored
from safetensors.torch import load_file

from torchgarden.cli.main import main

TRAIN = ["train", "--experiment", "toy_regression", "--mode", "train", "--params_override",
         "trainer.train_steps=100000,trainer.steps_per_loop=1,trainer.summary_interval=1,"
         "trainer.checkpoint_interval=1,trainer.max_to_keep=2,runtime.seed=3,"
         "runtime.num_threads=1"]
ROUNDS = 25


def _call(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    with process_state_restored():
        code = main(argv)
    return code, capsys.readouterr().err.strip()


def _wait_for(pattern: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not glob.glob(pattern):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{pattern} never appeared"
        time.sleep(0.2)


@pytest.fixture
def live_run(tmp_path):
    model_dir = str(tmp_path / "run")
    process = subprocess.Popen(
        [sys.executable, "-m", "torchgarden", *TRAIN[:5], "--model_dir", model_dir,
         *TRAIN[5:]], env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        _wait_for(os.path.join(model_dir, "ckpt-*"), process)
        yield model_dir, process
    finally:
        process.kill()
        process.wait()


def _check_export(output: str, weights_by_step: dict[int, dict[str, torch.Tensor]]) -> int:
    with open(os.path.join(output, "export.json")) as f:
        manifest = json.load(f)
    assert set(os.listdir(output)) == {*manifest["files"], "export.json"}
    for name, info in manifest["files"].items():
        assert os.path.getsize(os.path.join(output, name)) == info["bytes"]
    weights = load_file(os.path.join(output, "model.safetensors"))
    weights_by_step[manifest["step"]] = weights
    return manifest["step"]


@pytest.mark.slow
def test_export_and_report_of_a_run_that_is_training(live_run, tmp_path, capsys):
    model_dir, process = live_run
    steps, exported, reported = [], {}, []
    for i in range(ROUNDS):
        output = str(tmp_path / f"export-{i}")
        code, err = _call(["export", "--model_dir", model_dir, "--format", "safetensors",
                           "--output", output], capsys)
        assert code == 0 and "Traceback" not in err, err
        steps.append(_check_export(output, exported))
        page = str(tmp_path / f"report-{i}.html")
        code, err = _call(["report", model_dir, "--output", page], capsys)
        assert code == 0 and "Traceback" not in err, err
        with open(page) as f:
            text = f.read()
        data = json.loads(text.split('id="tg-data" type="application/json">')[1]
                          .split("</script>")[0])
        loss = next(c for c in data["charts"] if c["title"] == "train/training_loss")
        assert loss["steps"] == list(range(1, len(loss["steps"]) + 1))
        reported.append(loss["steps"][-1])
    assert process.poll() is None, "the trainer ended while it was read"
    process.kill()
    process.wait()
    assert steps == sorted(steps) and steps[-1] > steps[0], steps
    assert reported == sorted(reported) and reported[-1] > reported[0], reported
    # Each export holds exactly the weights of the step it names: those of an identical
    # run (same seed) that kept every checkpoint.
    reference = str(tmp_path / "reference")
    override = TRAIN[-1].replace("train_steps=100000", f"train_steps={steps[-1]}").replace(
        "max_to_keep=2", "max_to_keep=100000")
    assert _call([*TRAIN[:5], "--model_dir", reference, "--params_override", override],
                 capsys)[0] == 0
    for step, weights in exported.items():
        state = torch.load(os.path.join(reference, f"ckpt-{step}", "state.pt"),
                           weights_only=True)
        assert weights.keys() == state["model"].keys()
        assert all(torch.equal(weights[k], state["model"][k]) for k in weights), step


def test_an_export_whose_checkpoint_is_deleted_while_read_chooses_again(
        trained, tmp_path, capsys, caplog, monkeypatch):
    """Retention deletes ckpt-10 between the export's choice and its read (as a live run
    does): the export takes ckpt-5, the newest left, and warns of nothing."""
    import shutil

    from torchgarden.export import source

    model_dir = str(tmp_path / "run")
    shutil.copytree(trained["trained"], model_dir)
    real = source.read_full_state

    def deleted_first(path):
        if path.endswith("ckpt-10"):
            shutil.rmtree(path)
            raise FileNotFoundError(2, "No such file or directory", f"{path}/state.pt")
        return real(path)

    monkeypatch.setattr(source, "read_full_state", deleted_first)
    with caplog.at_level("WARNING", logger="torchgarden"):
        code, err = _call(["export", "--model_dir", model_dir, "--format", "safetensors"],
                          capsys)
    assert code == 0, err
    assert [r for r in caplog.records if r.levelname == "WARNING"] == []
    assert os.listdir(os.path.join(model_dir, "exports")) == ["ckpt-5"]
