"""``torchgarden tune`` end to end: reproducible trials, pruning, recovery after kill -9,
several processes on one study, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

optuna = pytest.importorskip("optuna")

from torchgarden.cli.main import main  # noqa: E402

LR = "trainer.optimizer_config.learning_rate.constant.learning_rate"
SPACE = f"""{LR}: {{log_uniform: [1.0e-7, 1.0e-1]}}
trainer.optimizer_config.optimizer.sgd.momentum: {{uniform: [0.0, 0.9]}}
"""


def _space(tmp_path, text=SPACE):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def _tune(tmp_path, study_dir, *flags, steps=20):
    return main(["tune", "--experiment", "toy_regression", "--space", _space(tmp_path),
                 "--study_dir", str(study_dir), "--params_override",
                 f"trainer.train_steps={steps},trainer.validation_interval={steps // 2},"
                 f"trainer.checkpoint_interval={steps // 2}", *flags])


def _trials(study_dir):
    return json.loads((study_dir / "trials.json").read_text())["trials"]


def test_a_seeded_study_draws_the_same_trials_and_reports_them(tmp_path, capsys):
    for name in ("a", "b"):
        assert _tune(tmp_path, tmp_path / name, "--trials", "3", "--seed", "7") == 0
    a, b = _trials(tmp_path / "a"), _trials(tmp_path / "b")
    assert [t["params"] for t in a] == [t["params"] for t in b]
    assert [t["objective"] for t in a] == pytest.approx([t["objective"] for t in b])
    assert {t["state"] for t in a} == {"complete"} and len({t[LR] for t in
                                                            (r["params"] for r in a)}) == 3
    # Each trial is an ordinary run; the best one's config is copied to best/.
    best = json.loads((tmp_path / "a" / "best" / "best.json").read_text())
    assert best["objective"] == min(t["objective"] for t in a)
    assert (tmp_path / "a" / "best" / "params.yaml").read_text() == (
        tmp_path / "a" / f"trial-{best['trial']}" / "params.yaml").read_text()
    assert sorted(os.listdir(tmp_path / "a" / "trial-0")) >= ["ckpt-10", "ckpt-20"]
    # --summary and report read the study back.
    capsys.readouterr()
    assert main(["tune", "--study_dir", str(tmp_path / "a"), "--summary"]) == 0
    summary = capsys.readouterr().out
    assert "3 finished (0 pruned) of 3 trials; minimize validation_loss." in summary
    assert main(["report", str(tmp_path / "a"), "--output", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "Objective vs each parameter" in page and page.count("<circle") == 6
    # A different seed draws other trials; the same flags again add none.
    assert _tune(tmp_path, tmp_path / "a", "--trials", "3", "--seed", "7") == 0
    assert len(_trials(tmp_path / "a")) == 3


def test_the_pruner_stops_the_bad_trial_at_a_validation_point_with_its_checkpoint(tmp_path):
    study_dir = tmp_path / "study"
    assert _tune(tmp_path, study_dir, "--trials", "0", steps=100) == 0
    study = optuna.load_study(study_name="study", storage=f"sqlite:///{study_dir}/study.db")
    for lr in (0.05, 0.04, 1e-7):  # The last one barely moves: worse than both at step 50.
        study.enqueue_trial({LR: lr, "trainer.optimizer_config.optimizer.sgd.momentum": 0.5})
    assert _tune(tmp_path, study_dir, "--trials", "3", "--pruner_startup_trials", "2",
                 steps=100) == 0
    trials = _trials(study_dir)
    assert [t["state"] for t in trials] == ["complete", "complete", "pruned"]
    assert trials[2]["steps"] == 50 and trials[2]["params"][LR] == 1e-7
    run = study_dir / "trial-2"
    assert "ckpt-50" in os.listdir(run) and "ckpt-100" not in os.listdir(run)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert max(row["step"] for row in rows) == 50


def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    bad = _space(tmp_path, "task.hidden_sise: {int: [0, 8]}")
    code = main(["tune", "--experiment", "toy_regression", "--space", bad,
                 "--study_dir", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "did you mean 'task.hidden_size'" in err[0]
    assert not (tmp_path / "s").exists()
    code = main(["tune", "--experiment", "toy_regression", "--space", _space(tmp_path),
                 "--study_dir", str(tmp_path / "p"), "--storage",
                 f"sqlite:///{tmp_path}/missing/dir/x.db"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "cannot be opened" in err[0]
    assert not (tmp_path / "p").exists()


def test_a_study_dir_of_another_experiment_is_refused_before_any_trial(tmp_path, capsys):
    assert _tune(tmp_path, tmp_path / "s", "--trials", "0") == 0
    code = main(["tune", "--experiment", "image_classification", "--space",
                 _space(tmp_path), "--study_dir", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "holds a study of experiment 'toy_regression', not 'image_classification'" in err[0]
    assert not [n for n in os.listdir(tmp_path / "s") if n.startswith("trial-")]


def _command(tmp_path, study_dir, trials, *flags, steps=200, keep=3):
    return [sys.executable, "-m", "torchgarden", "tune", "--experiment", "toy_regression",
            "--space", _space(tmp_path), "--study_dir", str(study_dir), "--trials", str(trials),
            "--params_override", f"trainer.train_steps={steps},trainer.validation_interval=50,"
            f"trainer.checkpoint_interval=50,trainer.max_to_keep={keep}", *flags]


def _alive(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" not in status.read().lower()
    except FileNotFoundError:
        return False


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_kill_9_then_rerun_gives_the_trials_of_an_uninterrupted_study(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    # 2,000 steps: the toy trains ~6,000 steps/s, so the kill lands mid-trial, not after it;
    # every checkpoint is kept, so a kill that lags the log line still finds ckpt-100.
    subprocess.run(_command(tmp_path, whole, 4, steps=2000, keep=40), check=True, env=_env(),
                   capture_output=True)
    log = tmp_path / "killed.log"
    with open(log, "w") as out:
        process = subprocess.Popen(_command(tmp_path, killed, 4, steps=2000, keep=40),
                                   stdout=out, stderr=subprocess.STDOUT, env=_env())
        deadline = time.monotonic() + 300
        while "trial-1/ckpt-100" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
    names = os.listdir(killed / "trial-1")
    assert "ckpt-100" in names and "ckpt-2000" not in names  # Killed inside trial 1.
    rerun = subprocess.run(_command(tmp_path, killed, 4, steps=2000, keep=40), env=_env(),
                           capture_output=True, text=True, check=True)
    assert "trial 1 (resumed)" in rerun.stdout
    assert "restored model from" in rerun.stdout + rerun.stderr
    a, b = _trials(whole), _trials(killed)
    assert [(t["number"], t["state"], t["params"], t["steps"]) for t in a] == [
        (t["number"], t["state"], t["params"], t["steps"]) for t in b]
    assert [t["objective"] for t in a] == pytest.approx([t["objective"] for t in b], rel=1e-6)


@pytest.mark.slow
def test_two_processes_on_one_sqlite_study_run_disjoint_trials(tmp_path):
    study_dir = tmp_path / "shared"
    # No pruning: which trials finish first (and so which a median pruner may stop) is
    # up to the two processes' timing; this test is about who runs which trial.
    command = _command(tmp_path, study_dir, 6, "--workers", "2", "--pruner", "none", steps=1500)
    first = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=_env())
    second = subprocess.Popen(_command(tmp_path, study_dir, 6, "--pruner", "none", steps=1500),
                              stdout=subprocess.PIPE, text=True, env=_env())
    outputs = [p.communicate(timeout=600)[0] for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0]
    ran = [{line.split()[2] for line in out.splitlines() if line.startswith("torchgarden: trial")
            and " in " in line} for out in outputs]
    assert ran[0] and ran[1] and not ran[0] & ran[1]
    assert ran[0] | ran[1] == {str(n) for n in range(6)}
    trials = _trials(study_dir)
    assert [t["state"] for t in trials] == ["complete"] * 6


def test_a_trial_whose_heartbeat_stopped_on_another_host_is_requeued_into_its_run(tmp_path):
    study_dir = tmp_path / "study"
    assert _tune(tmp_path, study_dir, "--trials", "0", "--heartbeat", "1") == 0
    storage = optuna.storages.RDBStorage(f"sqlite:///{study_dir}/study.db",
                                         heartbeat_interval=1, grace_period=2)
    study = optuna.load_study(study_name="study", storage=storage)
    trial = study.ask()  # A process on another machine draws a trial, then dies.
    params = {LR: trial.suggest_float(LR, 1e-7, 1e-1, log=True),
              "trainer.optimizer_config.optimizer.sgd.momentum":
                  trial.suggest_float("trainer.optimizer_config.optimizer.sgd.momentum", 0.0,
                                      0.9)}
    storage.set_trial_system_attr(trial._trial_id, "torchgarden.host", "elsewhere")
    storage.record_heartbeat(trial._trial_id)
    time.sleep(3.5)  # SQLite keeps whole seconds: more than the 2 s grace period.
    assert _tune(tmp_path, study_dir, "--trials", "1", "--heartbeat", "1") == 0
    trials = _trials(study_dir)
    assert [t["state"] for t in trials] == ["fail", "complete"]
    assert trials[1]["params"] == params and trials[1]["dir"] == "trial-0"
    assert not (study_dir / "trial-1").exists()


@pytest.mark.slow
def test_kill_9_of_a_command_with_workers_kills_them_and_the_rerun_resumes_both(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(_command(tmp_path, whole, 5, steps=400), check=True, env=_env(),
                   capture_output=True)
    process = subprocess.Popen(_command(tmp_path, killed, 5, "--workers", "2", steps=400),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    deadline = time.monotonic() + 300
    while not (killed / "trial-0" / "ckpt-200").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True,
                              text=True).stdout.split()
    process.send_signal(signal.SIGKILL)
    process.wait()
    time.sleep(1.0)
    assert children and not [pid for pid in children if _alive(pid)]  # Died with it.
    rerun = subprocess.run(_command(tmp_path, killed, 5, "--workers", "2", steps=400),
                           env=_env(), capture_output=True, text=True, check=True)
    assert "trial 0 (resumed)" in rerun.stdout
    a, b = _trials(whole), _trials(killed)
    assert [(t["number"], t["state"], t["params"], t["steps"]) for t in a] == [
        (t["number"], t["state"], t["params"], t["steps"]) for t in b]
    assert [t["objective"] for t in a] == pytest.approx([t["objective"] for t in b], rel=1e-6)
