"""The real CLI on the toy task: metrics.jsonl and throughput, a finished run's rerun, the
learning-rate warning and `decay_steps: -1`, `torchgarden report`, the profiler window."""

from __future__ import annotations

import glob
import logging
import math
import os

import pytest

from torchgarden.cli.main import main
from torchgarden.summary import read_metrics

SHORT = "trainer.train_steps=40,trainer.validation_interval=20,trainer.summary_interval=20"
COSINE = (",trainer.optimizer_config.learning_rate.type=cosine,"
          "trainer.optimizer_config.learning_rate.cosine.initial_learning_rate=0.1")


def train(model_dir, override: str = SHORT) -> int:
    return main(["train", "--experiment", "toy_regression", "--model_dir", str(model_dir),
                 "--params_override", override])


def test_a_run_records_every_summary_with_throughput_in_metrics_jsonl(tmp_path):
    assert train(tmp_path / "run") == 0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [(r["split"], r["step"]) for r in rows] == [
        ("train", 20), ("validation", 20), ("train", 40), ("validation", 40)]
    train_row = rows[0]
    assert train_row["throughput/examples_per_second"] == pytest.approx(
        32 * train_row["steps_per_second"])
    assert 0.0 <= train_row["throughput/data_wait_fraction"] <= 1.0
    assert train_row["memory/rss_peak_gib"] > 0
    assert "throughput/mfu" not in train_row  # No peak FLOP/s known for a CPU.


def test_rerunning_a_finished_run_says_so_and_prints_the_final_eval(tmp_path, capsys):
    assert train(tmp_path / "run") == 0
    first = capsys.readouterr().out
    assert train(tmp_path / "run") == 0
    out = capsys.readouterr().out
    assert "already at train_steps=40, nothing to train." in out
    final = [line for line in first.splitlines() if line.startswith("torchgarden: final eval")]
    assert final and final[0] in out.splitlines()  # The same numbers, not re-evaluated.
    assert "running complete evaluation" not in out
    assert len(read_metrics(tmp_path / "run" / "metrics.jsonl")) == 4


def test_a_schedule_that_ends_before_train_steps_warns_once(tmp_path, caplog):
    override = SHORT + COSINE + ",trainer.optimizer_config.learning_rate.cosine.decay_steps=20"
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert train(tmp_path / "run", override) == 0
    warnings = [r.getMessage() for r in caplog.records if "learning-rate schedule" in r.message]
    assert len(warnings) == 1
    assert "ends at step 20" in warnings[0] and "train_steps=40" in warnings[0]
    assert "-1" in warnings[0]


def test_decay_steps_minus_one_follows_train_steps(tmp_path, caplog):
    override = SHORT + COSINE + ",trainer.optimizer_config.learning_rate.cosine.decay_steps=-1"
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert train(tmp_path / "run", override) == 0
        # Raised train_steps on resume: the decay stretches to the new end.
        assert train(tmp_path / "run", override.replace("train_steps=40", "train_steps=80")) == 0
    assert not [r for r in caplog.records if "learning-rate schedule" in r.message]
    rates = {r["step"]: r["learning_rate"] for r in read_metrics(tmp_path / "run/metrics.jsonl")
             if r["split"] == "train"}
    assert rates[20] == pytest.approx(0.05)  # Half-way through a 40-step cosine.
    assert rates[40] == pytest.approx(0.0, abs=1e-12)  # Its end.
    assert rates[60] == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi * 60 / 80)))
    assert rates[80] == pytest.approx(0.0, abs=1e-12)


def test_report_command_writes_one_html_file(tmp_path, capsys):
    assert train(tmp_path / "a") == 0
    assert train(tmp_path / "b", SHORT + ",task.noise=0.5") == 0
    capsys.readouterr()
    output = tmp_path / "out" / "report.html"
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "--output", str(output)]) == 0
    assert f"report of 2 run(s), 9 charts: {output}" in capsys.readouterr().out
    page = output.read_text()
    assert "task.noise" in page and "validation/validation_loss" in page
    assert "src=\"http" not in page and "href=\"http" not in page  # Nothing to fetch.


def test_report_of_a_directory_that_is_not_a_run_fails_in_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), "--output", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds no metrics.jsonl" in err
    assert not os.path.exists(tmp_path / "r.html")


def test_profile_steps_write_a_trace_of_the_window(tmp_path):
    assert train(tmp_path / "run", SHORT + ",trainer.profile_steps=[12,14]") == 0
    traces = glob.glob(str(tmp_path / "run" / "profile" / "rank0.*.pt.trace.json"))
    assert len(traces) == 1
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows if r["split"] == "train"] == [20, 40]  # Cadence unchanged.
