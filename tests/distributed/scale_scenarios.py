"""Runs of the scale tests (issue 13), shared by ``scale_worker.py`` and the references.

* streaming: the digits as a Hugging Face dataset on disk (4 Arrow files) and as 4
  WebDataset tar shards, trained with 2 loader workers; a run stopped at step
  ``STREAM_STOP`` and resumed must end where an uninterrupted one ends, bit for bit;
* evaluation: digits (with a torchmetrics accuracy beside torchgarden's), semantic
  segmentation (mIoU) and RetinaNet (COCO AP) evaluated on the same weights at 1, 2 and
  3 ranks; their validation sets (359, 7 and 7 examples) do not divide evenly.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torchgarden as tg
from torchgarden.tasks.image_classification import ImageClassificationTask

#: Streaming runs: 192 examples, global batch 16, checkpoint every 8 steps.
STREAM_STEPS, STREAM_STOP, STREAM_EXAMPLES, STREAM_SHARDS = 20, 8, 192, 4
STREAM_SOURCES = ("datasets", "datasets_streaming", "webdataset")
EVAL_TASKS = ("digits", "segmentation", "retinanet")


def write_stream_data(root: Path) -> Path:
    """Writes the first 192 digits as ``root/arrow`` (save_to_disk, 4 files) and
    ``root/shard-<i>.tar`` (4 WebDataset shards of ``<key>.npy`` + ``<key>.cls``)."""
    from digits_streams import write_digits_streams  # The test process only.

    return write_digits_streams(root, shards=STREAM_SHARDS,
                                per_shard=STREAM_EXAMPLES // STREAM_SHARDS)


def stream_params(source: str, data_root: Path, steps: int,
                  strategy: str = "single") -> tg.ExperimentConfig:
    """Digits from ``source`` with 2 loader workers; checkpoints every ``STREAM_STOP`` steps."""
    data: dict[str, Any] = {"global_batch_size": 16, "num_workers": 2}
    if source == "webdataset":
        data.update(source="webdataset", input_path=str(data_root / "shard-*.tar"),
                    x_key="npy", y_key="cls")
    else:
        data.update(source="datasets", input_path=str(data_root / "arrow"), x_key="image",
                    y_key="label", streaming=source == "datasets_streaming")
    params = tg.get_experiment("image_classification")
    params.override({
        "task.train_data": data,
        "trainer.train_steps": steps, "trainer.steps_per_loop": 4,
        "trainer.summary_interval": 4, "trainer.checkpoint_interval": STREAM_STOP,
        "trainer.optimizer_config.learning_rate.cosine.decay_steps": STREAM_STEPS,
        "trainer.optimizer_config.warmup.linear.warmup_steps": 2,
        "runtime.distribution_strategy": strategy, "runtime.num_threads": 1,
    })
    return params


def run_stream(source: str, data_root: Path, out: Path, strategy: str = "single") -> None:
    """An uninterrupted run to ``STREAM_STEPS`` in ``out/full``, and one stopped at
    ``STREAM_STOP`` then resumed in a new Trainer (new loader, new workers) in ``out/resumed``."""
    import gc

    from dist_scenarios import run

    for model_dir, steps in ((out / "full", STREAM_STEPS), (out / "resumed", STREAM_STOP),
                             (out / "resumed", STREAM_STEPS)):
        run(stream_params(source, data_root, steps, strategy), model_dir, mode="train")
        gc.collect()  # Drop the finished loader's workers before the next run forks more.


class TorchmetricsDigitsTask(ImageClassificationTask):
    """Digits with a torchmetrics accuracy beside torchgarden's (synced by torchmetrics)."""

    def build_metrics(self, training: bool = True) -> list[Any]:
        import torchmetrics

        built = super().build_metrics(training)
        if not training:
            built.append(torchmetrics.classification.MulticlassAccuracy(
                num_classes=10, average="micro"))
        return built


def eval_params(name: str, data_dir: Path, strategy: str = "single") -> tg.ExperimentConfig:
    """A small trained-then-evaluated config of each task; global eval batch 6."""
    trainer = {"steps_per_loop": 2, "summary_interval": 2, "checkpoint_interval": 4,
               "validation_interval": 4, "train_steps": 4, "progress_bar": False,
               "best_checkpoint_export_subdir": "", "best_checkpoint_eval_metric": ""}
    params = tg.get_experiment({"digits": "image_classification",
                                "segmentation": "semantic_segmentation",
                                "retinanet": "retinanet"}[name])
    generated = {"data_dir": str(data_dir), "num_train": 8, "num_validation": 7,
                 "max_objects": 2}
    if name == "digits":
        task: dict[str, Any] = {"train_data": {"global_batch_size": 32},
                                "validation_data": {"global_batch_size": 6}}
    elif name == "segmentation":
        task = {"model": {"widths": [4, 8]}, "generated_data": {**generated, "image_size": 16},
                "train_data": {"global_batch_size": 4, "output_size": [16, 16]},
                "validation_data": {"global_batch_size": 6}, "num_image_summaries": 0}
    else:  # Every candidate box scored (no threshold): a COCO AP that is neither 0 nor 1.
        task = {"model": {"input_size": [32, 32], "max_level": 3,
                          "backbone_channels": [4, 8, 8], "decoder": {"fpn": {"num_filters": 8}},
                          "head": {"num_filters": 8, "num_convs": 1}, "detection_generator": {"pre_nms_score_threshold": 0.0}},
                "generated_data": {**generated, "image_size": 32},
                "train_data": {"global_batch_size": 4},
                "validation_data": {"global_batch_size": 6}, "num_image_summaries": 0}
    params.override({"task": task, "trainer": trainer,
                     "trainer.optimizer_config.learning_rate.cosine.decay_steps":
                         trainer["train_steps"],
                     "runtime.distribution_strategy": strategy, "runtime.num_threads": 1})
    return params


def eval_task(name: str, params: tg.ExperimentConfig) -> Any:
    if name == "digits":
        return TorchmetricsDigitsTask(params.task)
    return tg.get_task(params.task)


#: The strategy each task is evaluated under at 2 and 3 ranks (FSDP2 needs every rank
#: to run each forward: its RetinaNet shards end one batch apart).
EVAL_STRATEGIES = {"digits": "fsdp", "segmentation": "ddp", "retinanet": "fsdp"}


def evaluate(name: str, trained_dir: Path, data_dir: Path, out: Path,
             strategy: str = "single") -> dict[str, float]:
    """Evaluates a copy of ``trained_dir``'s checkpoint (mode ``eval``) and returns its logs."""
    from dist_scenarios import run

    from torchgarden import distribute

    model_dir = out / name
    if distribute.get_rank() == 0:
        shutil.copytree(trained_dir, model_dir)
    distribute.barrier()
    params = eval_params(name, data_dir, strategy)
    return run(params, os.fspath(model_dir), mode="eval", task=eval_task(name, params))["eval"]
