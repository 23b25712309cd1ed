"""2-process CPU (gloo) runs under torchrun, DDP and FSDP2, against one process.

One torchrun launch per strategy runs every scenario (``dist_worker.py``); each test
checks one behaviour of its output against a single-process run with the same global
batch (the ``reference`` fixture).

Tolerances: with gradients mean-reduced across ranks, weights after 20 steps differ from
one process only by float summation order. Measured (torch 2.13, CPU): max |Δ| of
weights 1.2e-7 (toy SGD, DDP and FSDP) and 1.5e-8 (digits Adam); of optimizer state
1.4e-6 (momentum buffers of magnitude ~1). The tests allow 1e-6 on weights and losses
and 1e-5 on optimizer state.
"""

from __future__ import annotations

import json
import re
from typing import Any

import dist_scenarios as scenarios
import pytest
import torch
from dist_launch import copy_checkpoint, launch, rank_log

pytestmark = pytest.mark.distributed

WEIGHTS = {"rtol": 1e-6, "atol": 1e-6}
OPTIMIZER = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture(scope="module", params=["ddp", "fsdp"])
def launched(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             reference: dict[str, Any]) -> dict[str, Any]:
    """One 2-rank launch; resumes a copy of the reference's step-10 checkpoint."""
    strategy = request.param
    out = tmp_path_factory.mktemp(strategy)
    resume_dir = copy_checkpoint(
        reference["root"] / "toy", scenarios.RESUME_STEP, out.parent / f"{out.name}-resume"
    )
    results = launch(strategy, out, resume_dir)
    return {"strategy": strategy, "out": out, "resume_dir": resume_dir, "results": results}


def assert_close_state(actual: dict[str, Any], expected: dict[str, Any], **tolerance: Any) -> None:
    torch.testing.assert_close(actual, expected, **tolerance)


def losses(run: dict[str, Any]) -> list[float]:
    return [loop["training_loss"] for loop in run["train"]]


def test_runs_on_two_ranks(launched: dict[str, Any]) -> None:
    results = launched["results"]
    assert results["world_size"] == 2
    assert results["strategy"] == launched["strategy"]
    assert len(set(results["pids"])) == 2


def test_toy_losses_and_weights_match_one_process(launched, reference) -> None:
    results, out = launched["results"], launched["out"]
    expected = reference["toy"]
    assert len(losses(results["toy"])) == 4
    torch.testing.assert_close(losses(results["toy"]), losses(expected), **WEIGHTS)
    ours = scenarios.checkpoint_state(out / "toy", scenarios.TRAIN_STEPS)
    theirs = scenarios.checkpoint_state(reference["root"] / "toy", scenarios.TRAIN_STEPS)
    assert ours["global_step"] == theirs["global_step"] == {"value": scenarios.TRAIN_STEPS}
    assert_close_state(ours["model"], dict(theirs["model"]), **WEIGHTS)
    # The optimizer state has torch's layout whatever the strategy (read_full_state maps
    # a DCP checkpoint's names back to indices).
    assert sorted(ours["optimizer"]["state"]) == sorted(theirs["optimizer"]["state"]) == [0, 1]
    assert_close_state(ours["optimizer"]["state"], theirs["optimizer"]["state"], **OPTIMIZER)
    assert ours["train_iterator"] == theirs["train_iterator"]


def test_digits_mlp_matches_one_process(launched, reference) -> None:
    results, out = launched["results"], launched["out"]
    torch.testing.assert_close(
        losses(results["digits"]), losses(reference["digits"]), **WEIGHTS
    )
    ours = scenarios.checkpoint_state(out / "digits", scenarios.TRAIN_STEPS)
    theirs = scenarios.checkpoint_state(reference["root"] / "digits", scenarios.TRAIN_STEPS)
    assert_close_state(ours["model"], dict(theirs["model"]), **WEIGHTS)
    assert_close_state(ours["optimizer"]["state"], theirs["optimizer"]["state"], **OPTIMIZER)


def test_digits_accuracy_counts_each_of_the_359_validation_images_once(launched) -> None:
    """359 validation images on 2 ranks: 180 and 179, none padded or counted twice."""
    from torchgarden import data
    from torchgarden.tasks.image_classification import build_classifier

    params = scenarios.digits_params()
    model = build_classifier(params.task.model)
    state = scenarios.checkpoint_state(launched["out"] / "digits", scenarios.TRAIN_STEPS)
    model.load_state_dict(state["model"])
    images, labels = data.load_digits_arrays("validation")
    with torch.no_grad():
        correct = (model(images.float()).argmax(-1) == labels).float()
    assert len(correct) == 359
    accuracy = launched["results"]["digits"]["eval"]["accuracy"]
    assert accuracy == pytest.approx(float(correct.mean()), abs=1e-7)
    # The best checkpoint is exported once, by rank 0.
    best = launched["out"] / "digits" / "best_ckpt"
    assert [p.name for p in best.iterdir() if p.name.startswith("best_ckpt-")] == ["best_ckpt-20"]
    info = json.loads((best / "info.json").read_text())
    assert info["accuracy"] == pytest.approx(accuracy)


def test_each_rank_reads_a_disjoint_shard_of_every_global_batch(launched, reference) -> None:
    per_rank = launched["results"]["rank_batches"]
    single = [b.tolist() for b in reference["batches"]]
    assert len(per_rank) == 2 and all(len(batches) == 16 for batches in per_rank)
    for step in range(16):
        rows = [{tuple(row) for row in per_rank[r][step]} for r in (0, 1)]
        assert len(rows[0]) == len(rows[1]) == 16  # per-replica batch = 32 / 2
        assert not rows[0] & rows[1]
        assert rows[0] | rows[1] == {tuple(row) for row in single[step]}
    for epoch in (0, 1):  # 256 examples / global batch 32 = 8 steps per epoch
        steps = range(8 * epoch, 8 * epoch + 8)
        seen = {tuple(row) for r in (0, 1) for s in steps for row in per_rank[r][s]}
        assert len(seen) == 256
    assert per_rank[0][0] != per_rank[0][8]  # reshuffled in the second epoch


def test_eval_metrics_are_reduced_over_the_full_validation_set(launched, reference) -> None:
    ours, theirs = launched["results"]["toy"]["eval"], reference["toy"]["eval"]
    assert ours.keys() == theirs.keys() == {"mean_absolute_error", "validation_loss"}
    for key in ours:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-6, abs=1e-6)


def test_python_evaluator_gathers_every_rank(launched, reference) -> None:
    ours, theirs = launched["results"]["evaluator"], reference["evaluator"]
    assert ours["num_examples_gathered"] == theirs["num_examples_gathered"] == 256
    assert ours["median_absolute_error"] == pytest.approx(
        theirs["median_absolute_error"], rel=1e-6
    )


def test_only_rank_zero_writes_checkpoints_and_info(launched) -> None:
    """DDP: rank 0 writes state.pt. FSDP2 (DCP): each rank writes its shards, rank 0
    publishes the checkpoint directory."""
    writes = launched["results"]["writes"]
    assert writes[0]["checkpoints"] >= 6 and writes[0]["json_files"] == 1
    assert writes[1] == {"checkpoints": 0, "json_files": 0}


def test_rank_one_writes_no_event_files_and_prints_nothing(launched) -> None:
    out, pids = launched["out"], launched["results"]["pids"]
    event_files = list(out.rglob("events.out.tfevents.*"))
    writers = {int(re.search(r"\.(\d+)\.\d+$", p.name).group(1)) for p in event_files}
    assert len(event_files) >= 6
    assert writers == {pids[0]}
    assert "train | step" in rank_log(out, 0, "stdout")
    assert rank_log(out, 1, "stdout") == ""


def test_resume_at_two_ranks_from_a_one_process_checkpoint(launched, reference) -> None:
    resumed = launched["results"]["resume"]
    torch.testing.assert_close(losses(resumed), losses(reference["toy"])[2:], **WEIGHTS)
    ours = scenarios.checkpoint_state(launched["resume_dir"], scenarios.TRAIN_STEPS)
    theirs = scenarios.checkpoint_state(reference["root"] / "toy", scenarios.TRAIN_STEPS)
    assert_close_state(ours["model"], dict(theirs["model"]), **WEIGHTS)
    assert_close_state(ours["optimizer"]["state"], theirs["optimizer"]["state"], **OPTIMIZER)


def test_resume_in_one_process_from_a_two_rank_checkpoint(launched, reference, tmp_path) -> None:
    model_dir = copy_checkpoint(launched["out"] / "toy", scenarios.RESUME_STEP, tmp_path / "r")
    resumed = scenarios.run(scenarios.toy_params(), model_dir)
    torch.testing.assert_close(losses(resumed), losses(reference["toy"])[2:], **WEIGHTS)
    ours = scenarios.checkpoint_state(model_dir, scenarios.TRAIN_STEPS)
    theirs = scenarios.checkpoint_state(reference["root"] / "toy", scenarios.TRAIN_STEPS)
    assert_close_state(ours["model"], dict(theirs["model"]), **WEIGHTS)
    assert_close_state(ours["optimizer"]["state"], theirs["optimizer"]["state"], **OPTIMIZER)


def test_gradient_accumulation_matches_one_process(launched, reference) -> None:
    results = launched["results"]
    torch.testing.assert_close(
        losses(results["accumulation"]), losses(reference["accumulation"]), **WEIGHTS
    )
    ours = scenarios.checkpoint_state(launched["out"] / "accum", scenarios.TRAIN_STEPS)
    theirs = scenarios.checkpoint_state(reference["root"] / "accum", scenarios.TRAIN_STEPS)
    assert_close_state(ours["model"], dict(theirs["model"]), **WEIGHTS)
    if launched["strategy"] == "ddp":
        # 20 steps x 2 micro-steps, one bucket: an all-reduce on the last micro-step only.
        assert results["accumulation_allreduces"] == scenarios.TRAIN_STEPS


def test_gradient_sync_switch_defers_communication(launched) -> None:
    """Two backward passes, sync off then on: ranks' inputs are all 1s and all 2s."""
    observed = launched["results"]["gradient_sync"]
    if launched["strategy"] == "ddp":
        assert (observed["allreduces_off"], observed["allreduces_on"]) == (0, 1)
    else:  # FSDP2 keeps the unsynced gradient unsharded; the shard gets it at sync.
        assert (observed["grad_set_off"], observed["grad_set_on"]) == (False, True)
    # Both passes summed locally (4 rows each) then averaged over ranks: 2*4*(1+2)/2.
    assert observed["weight_grad"] == [12.0] * 8


def test_fsdp_ema_matches_one_process(launched, reference) -> None:
    if launched["strategy"] != "fsdp":
        pytest.skip("EMA under DDP is replicated state; FSDP shards it")
    results = launched["results"]
    torch.testing.assert_close(losses(results["ema"]), losses(reference["ema"]), **WEIGHTS)
    for key in ("mean_absolute_error", "validation_loss"):
        assert results["ema"]["eval"][key] == pytest.approx(
            reference["ema"]["eval"][key], rel=1e-5
        )
    ours = scenarios.checkpoint_state(launched["out"] / "ema", scenarios.TRAIN_STEPS)
    theirs = scenarios.checkpoint_state(reference["root"] / "ema", scenarios.TRAIN_STEPS)
    assert_close_state(ours["ema"], theirs["ema"], **WEIGHTS)
    assert_close_state(ours["model"], dict(theirs["model"]), **WEIGHTS)

