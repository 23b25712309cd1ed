"""Outgrowing one machine (issue 13), on gloo CPU ranks under torchrun.

* DCP checkpoints: saved by 2 FSDP2 ranks, each writing its shards; resumed at 1, 2 and 4
  ranks; a rank SIGKILLed mid-save leaves the previous checkpoint, and the rerun ends
  bitwise where an uninterrupted run ends;
* streaming data (Hugging Face Arrow files by index and as a stream, WebDataset shards)
  with 2 loader workers, stopped mid-epoch and resumed bitwise at 1 and 2 ranks;
* evaluation at 2 and 3 ranks equal to 1 rank: accuracy (and torchmetrics'), mIoU, COCO AP.

Launches: ``main`` (2 ranks), ``eval`` (3), ``resume`` (4), and the kill test's two.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import dist_scenarios as scenarios
import pytest
import scale_scenarios as scale
import torch
from dist_launch import launch_script

from torchgarden.checkpoint import (
    CheckpointManager,
    convert_to_single,
    read_full_state,
    read_meta,
)

pytestmark = pytest.mark.distributed

WORKER = Path(__file__).with_name("scale_worker.py")
#: Across world sizes weights differ by float summation order only (test_torchrun.py).
WEIGHTS = {"rtol": 1e-6, "atol": 1e-6}


def assert_same(actual: Any, expected: Any, where: str = "state") -> None:
    """Bitwise equality of nested states (tensors, numbers, strings, containers)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and actual.dtype == expected.dtype, where
        assert torch.equal(actual, expected), where
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), where
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, (where, actual, expected)


def training_state(path: Path) -> dict[str, Any]:
    """What must resume: model, optimizer, step and data position."""
    state = read_full_state(path)
    return {key: state[key] for key in ("model", "optimizer", "global_step", "train_iterator")}


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """In this process: the streaming data, and each eval task trained then evaluated."""
    root = tmp_path_factory.mktemp("scale")
    scale.write_stream_data(root / "stream_data")
    logs = {}
    for name in scale.EVAL_TASKS:
        params = scale.eval_params(name, root / "shapes")
        scenarios.run(params, root / "trained" / name, mode="train",
                      task=scale.eval_task(name, params))
        logs[name] = scale.evaluate(name, root / "trained" / name, root / "shapes",
                                    root / "eval")
    return {"root": root, "eval": logs}


@pytest.fixture(scope="session")
def main_run(reference: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("main")
    results = launch_script(WORKER, ["--scenario", "main", "--out", str(out), "--reference",
                                     str(reference["root"])], out, nprocs=2)
    return {"out": out, "results": results}


def test_dcp_checkpoint_holds_each_ranks_shards_under_a_verified_manifest(main_run):
    path = main_run["out"] / "toy" / "ckpt-20"
    assert sorted(os.listdir(path)) == [".metadata", "__0_0.distcp", "__1_0.distcp",
                                        "meta.json"]
    CheckpointManager.verify(path)  # Sizes and checksums of every file.
    meta = read_meta(path)
    assert meta["format"] == "dcp" and meta["world_size"] == 2 and meta["step"] == 20
    assert sorted(meta["files"]) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    leftovers = [p.name for p in (main_run["out"] / "toy").iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_async_dcp_saves_the_same_checkpoints(main_run):
    out = main_run["out"]
    for step in (10, 20):
        assert_same(training_state(out / "toy_async" / f"ckpt-{step}"),
                    training_state(out / "toy" / f"ckpt-{step}"))


def test_dcp_resumes_at_two_ranks_bitwise(main_run):
    out = main_run["out"]
    assert_same(training_state(out / "resume2" / "ckpt-20"),
                training_state(out / "toy" / "ckpt-20"))


def test_dcp_resumes_at_one_rank(main_run, tmp_path):
    """One process, no process group: each tensor is read whole from both ranks' files."""
    model_dir = tmp_path / "r1"
    model_dir.mkdir()
    shutil.copytree(main_run["out"] / "toy" / "ckpt-10", model_dir / "ckpt-10")
    resumed = scenarios.run(scenarios.toy_params("fsdp"), model_dir)
    expected = main_run["results"]["toy"]
    torch.testing.assert_close(resumed["train"][-1]["training_loss"],
                               expected["train"][-1]["training_loss"], **WEIGHTS)
    ours = training_state(model_dir / "ckpt-20")
    theirs = training_state(main_run["out"] / "toy" / "ckpt-20")
    torch.testing.assert_close(ours["model"], theirs["model"], **WEIGHTS)
    torch.testing.assert_close(ours["optimizer"]["state"], theirs["optimizer"]["state"],
                               rtol=1e-5, atol=1e-5)
    assert ours["train_iterator"] == theirs["train_iterator"]
    assert read_full_state(model_dir / "ckpt-20").keys() == read_full_state(
        main_run["out"] / "toy" / "ckpt-20").keys()


def test_dcp_resumes_at_four_ranks(main_run, tmp_path):
    results = launch_script(WORKER, ["--scenario", "resume", "--out", str(tmp_path),
                                     "--reference", str(main_run["out"] / "toy")],
                            tmp_path, nprocs=4)
    assert results["world_size"] == 4
    ours = training_state(tmp_path / "r" / "ckpt-20")
    theirs = training_state(main_run["out"] / "toy" / "ckpt-20")
    torch.testing.assert_close(ours["model"], theirs["model"], **WEIGHTS)
    torch.testing.assert_close(ours["optimizer"]["state"], theirs["optimizer"]["state"],
                               rtol=1e-5, atol=1e-5)


def test_dcp_checkpoint_converts_to_a_single_file(main_run, tmp_path):
    source = main_run["out"] / "toy" / "ckpt-20"
    converted = Path(convert_to_single(source, tmp_path))
    assert converted == tmp_path / "ckpt-20"
    assert sorted(os.listdir(converted)) == ["meta.json", "state.pt"]
    state = torch.load(converted / "state.pt", weights_only=True)
    assert_same(state, read_full_state(source))
    assert sorted(state["optimizer"]["state"]) == [0, 1]  # torch's index-keyed layout
    CheckpointManager.verify(converted)


def test_sigkill_of_one_rank_mid_save_resumes_bitwise(main_run, tmp_path):
    """Rank 1 dies after writing its shards of ckpt-20: nothing is published; the rerun
    resumes ckpt-10 and writes the ckpt-20 an uninterrupted run writes."""
    reference_args = ["--scenario", "kill", "--out", str(tmp_path), "--reference",
                      str(main_run["out"])]
    launch_script(WORKER, [*reference_args, "--kill_at", "20"], tmp_path, nprocs=2,
                  expect_failure=True)
    toy = tmp_path / "toy"
    assert (toy / "ckpt-10").is_dir() and not (toy / "ckpt-20").exists()
    assert [p.name for p in toy.iterdir() if p.name.startswith(".ckpt-20.tmp-")]
    launch_script(WORKER, reference_args, tmp_path, nprocs=2, logs="logs-rerun")
    assert_same(training_state(toy / "ckpt-20"),
                training_state(main_run["out"] / "toy" / "ckpt-20"))
    assert not [p.name for p in toy.iterdir() if p.name.startswith(".")]  # Cleaned up.


@pytest.mark.parametrize("source", scale.STREAM_SOURCES)
def test_streaming_data_resumes_bitwise_at_one_rank(reference, source, tmp_path):
    scale.run_stream(source, reference["root"] / "stream_data", tmp_path)
    step = scale.STREAM_STEPS
    assert_same(training_state(tmp_path / "resumed" / f"ckpt-{step}"),
                training_state(tmp_path / "full" / f"ckpt-{step}"))
    stop = read_full_state(tmp_path / "resumed" / f"ckpt-{scale.STREAM_STOP}")
    assert stop["train_iterator"]["batches_in_epoch"] == 8  # Mid-epoch (of 12).
    assert ("loader" in stop["train_iterator"]) == (source != "datasets")


@pytest.mark.parametrize("source", scale.STREAM_SOURCES)
def test_streaming_data_resumes_bitwise_at_two_ranks(main_run, source):
    out, step = main_run["out"] / "stream" / source, scale.STREAM_STEPS
    full = training_state(out / "full" / f"ckpt-{step}")
    assert_same(training_state(out / "resumed" / f"ckpt-{step}"), full)
    stop = read_full_state(out / "resumed" / f"ckpt-{scale.STREAM_STOP}")["train_iterator"]
    if source == "datasets":  # By index: one position in global batches, for any world size.
        assert stop.pop("data_fingerprint").endswith("/192rows")  # Resumed on the same data only.
        assert stop == {"epoch": 0, "batches_in_epoch": scale.STREAM_STOP}
    else:  # A stream's position is per rank: both ranks' are kept.
        assert stop["world_size"] == 2 and len(stop["ranks"]) == 2
        assert all("loader" in r for r in stop["ranks"])
        assert [r["batches_in_epoch"] for r in stop["ranks"]] == [8, 8]  # Mid-epoch (of 12).


@pytest.fixture(scope="session")
def three_rank_eval(reference, tmp_path_factory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("eval3")
    return launch_script(WORKER, ["--scenario", "eval", "--out", str(out), "--reference",
                                  str(reference["root"])], out, nprocs=3)["eval"]


EXACT = {"digits": ("accuracy", "multiclass_accuracy"), "segmentation": ("mean_iou",),
         "retinanet": ("AP", "AP50", "AP75", "ARmax10")}


@pytest.mark.parametrize("name", scale.EVAL_TASKS)
def test_evaluation_at_two_and_three_ranks_equals_one_rank(reference, main_run,
                                                           three_rank_eval, name):
    one = reference["eval"][name]
    for world_size, logs in ((2, main_run["results"]["eval"][name]), (3, three_rank_eval[name])):
        for key in EXACT[name]:
            assert logs[key] == one[key], (world_size, key, logs[key], one[key])
    if name == "retinanet":
        assert 0 < one["AP50"] < 1  # A number COCO can get wrong, not a trivial 0 or 1.
