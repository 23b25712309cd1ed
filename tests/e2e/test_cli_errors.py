"""Bad input: one line on stderr naming the problem and the fix, exit 2, model_dir untouched."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from torchgarden.cli.main import main


def fails(capsys, *args: str) -> str:
    code = main(list(args))
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("torchgarden: error: ")
    return err


@pytest.fixture
def model_dir(tmp_path):
    return str(tmp_path / "run")


def test_unknown_experiment_names_the_closest(capsys, model_dir):
    err = fails(capsys, "train", "--experiment", "image_clasification", "--model_dir", model_dir)
    assert "Did you mean 'image_classification'?" in err
    assert not os.path.exists(model_dir)


def test_unknown_key_names_the_dotted_path_and_closest_key(capsys, model_dir):
    err = fails(capsys, "train", "--experiment", "toy_regression", "--model_dir", model_dir,
                "--params_override", "trainer.train_stpes=10")
    assert "trainer.train_stpes" in err and "trainer.train_steps" in err
    assert not os.path.exists(model_dir)


def test_wrong_type_names_the_expected_type(capsys, model_dir):
    err = fails(capsys, "train", "--experiment", "toy_regression", "--model_dir", model_dir,
                "--params_override", "trainer.train_steps=ten")
    assert "trainer.train_steps" in err and "int" in err


def test_malformed_yaml_file_names_the_file_and_line(capsys, tmp_path, model_dir):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  train_steps: [1, 2\n")
    err = fails(capsys, "train", "--experiment", "toy_regression", "--model_dir", model_dir,
                "--config_file", str(bad))
    assert "bad.yaml" in err and "line" in err


def test_unreadable_config_file(capsys, tmp_path, model_dir):
    err = fails(capsys, "train", "--experiment", "toy_regression", "--model_dir", model_dir,
                "--config_file", str(tmp_path / "missing.yaml"))
    assert "missing.yaml" in err


def test_missing_model_dir(capsys):
    err = fails(capsys, "train", "--experiment", "toy_regression")
    assert "--model_dir" in err


def test_unknown_mode_names_the_closest(capsys, model_dir):
    err = fails(capsys, "train", "--experiment", "toy_regression", "--model_dir", model_dir,
                "--mode", "train_and_evaluate")
    assert "train_and_eval" in err


def test_summary_interval_mismatch_suggests_a_value(capsys, model_dir):
    err = fails(capsys, "train", "--experiment", "toy_regression", "--model_dir", model_dir,
                "--params_override", "trainer.summary_interval=15")
    assert "summary_interval" in err and "steps_per_loop" in err


def test_existing_model_dir_is_not_damaged(capsys, tmp_path):
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    (model_dir / "params.yaml").write_text("keep: me\n")
    fails(capsys, "train", "--experiment", "toy_regression", "--model_dir", str(model_dir),
          "--params_override", "task.train_data.global_batch_size=-3")
    assert (model_dir / "params.yaml").read_text() == "keep: me\n"
    assert sorted(os.listdir(model_dir)) == ["params.yaml"]


def test_help_and_list_do_not_import_torch():
    code = (
        "import sys\n"
        "from torchgarden.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "main(['list'])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "image_classification" in out.stdout and "toy_regression" in out.stdout


def test_a_busy_model_dir_is_refused_before_torch_is_imported(tmp_path):
    """run_experiment takes the lock before it builds anything (torch included): a second
    `train` on a model_dir in use is refused at once, not after the model is built."""
    model_dir = str(tmp_path / "run")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from torchgarden.train_lib.run_lock import RunLock\n"
         "RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(120)",
         model_dir], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        cli = ("import sys\nfrom torchgarden.cli.main import main\nstatus = main(sys.argv[1:])\n"
               "print('torch imported:', 'torch' in sys.modules)\nsys.exit(status)")
        done = subprocess.run(
            [sys.executable, "-c", cli, "train", "--experiment", "toy_regression",
             "--model_dir", model_dir], capture_output=True, text=True, timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 2, done.stderr
    assert f"is in use: pid {holder.pid} on host" in done.stderr
    assert "torch imported: False" in done.stdout


def test_a_failed_collective_under_torchrun_is_one_line_naming_rank_and_timeout(monkeypatch):
    """What a rank prints when the others stopped answering (exit 4; torchrun restarts).
    (Where torchgarden called the collective is named too: see test_elastic_restart.)"""
    import torch.distributed as dist  # noqa: F401  (the CLI recognises its errors)

    from torchgarden.cli.main import _collective_failure

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    timed_out = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78]"
                             " Timed out waiting 600000ms for recv operation to complete")
    assert _collective_failure(timed_out, 10) == (
        "rank 1: a collective with the other ranks failed: Timed out waiting 600000ms for recv "
        "operation to complete (runtime.distributed_timeout=10 min); with torchrun "
        "--max-restarts the job restarts from its newest checkpoint.")
    assert _collective_failure(RuntimeError("an ordinary bug"), 10) is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert _collective_failure(timed_out, 10) is None
