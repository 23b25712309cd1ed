"""Configs become the run's observers: summary managers and trackers, the loop monitor
(throughput, profiler window) and the compile notice.

See docs/observability.md. ``build_controller`` (``wiring``) calls :func:`build_observers`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from torchgarden.config import ExperimentConfig
from torchgarden.core import Trainer
from torchgarden.loop import LoopMonitor, ProfilerWindow, ThroughputMeter
from torchgarden.loop.flops import FirstBatchFlops
from torchgarden.loop.logs import FirstLoopNotice
from torchgarden.loop.throughput import peak_flops_per_device
from torchgarden.summary import (
    METRICS_FILE,
    ImageScalarSummaryManager,
    MetricsFile,
    SummaryManager,
    SummaryManagerInterface,
    Tracker,
)
from torchgarden.train_lib.model_dir import EVAL_SUBDIR

__all__ = [
    "Observers",
    "TrackersClosed",
    "build_loop_monitor",
    "build_observers",
    "build_trackers",
]


def build_trackers(params: ExperimentConfig, model_dir: str) -> list[Tracker]:
    """The MLflow / W&B trackers of ``runtime.trackers`` (imported on first use)."""
    runtime, name = params.runtime, os.path.basename(os.path.abspath(model_dir))
    trackers: list[Tracker] = []
    if "mlflow" in runtime.trackers:
        from torchgarden.summary.mlflow_tracker import MlflowTracker

        cfg = runtime.mlflow
        trackers.append(MlflowTracker(
            tracking_uri=cfg.tracking_uri, experiment_name=cfg.experiment_name,
            run_name=cfg.run_name or name, tags={"model_dir": os.path.abspath(model_dir)}))
    if "wandb" in runtime.trackers:
        from torchgarden.summary.wandb_tracker import WandbTracker

        cfg = runtime.wandb
        trackers.append(WandbTracker(directory=model_dir, project=cfg.project,
                                     entity=cfg.entity, mode=cfg.mode,
                                     run_name=cfg.run_name or name))
    for tracker in trackers:
        tracker.log_params(params.as_dict())
    return trackers


class TrackersClosed:
    """A callback that ends the trackers' runs when the experiment ends."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers

    def on_experiment_end(self, logs: Any = None) -> None:
        for tracker in self.trackers:
            tracker.close()


@dataclasses.dataclass
class Observers:
    """What watches a run (docs/observability.md): summary managers, callbacks, monitor."""

    summary_manager: SummaryManagerInterface
    eval_summary_manager: SummaryManagerInterface
    callbacks: list[Any]
    monitor: LoopMonitor | None


def build_observers(
    params: ExperimentConfig, trainer: Trainer, *, model_dir: str, training: bool,
    save_summary: bool, summary_manager: SummaryManagerInterface | None = None,
    eval_summary_manager: SummaryManagerInterface | None = None,
) -> Observers:
    """The managers that feed TensorBoard (``runtime.trackers``), the metrics file
    (``trainer.metrics_file``) and the trackers from the same writes (the given ones
    instead where given; none on other ranks than the chief or without ``save_summary``);
    when training also the throughput and profiler monitor and the compile notice.

    A training run records into ``model_dir/{train,validation}`` and ``metrics.jsonl``; an
    evaluation job (never writing where a trainer writes) into ``model_dir/eval/``.
    """
    cfg, chief = params.trainer, trainer.runtime.is_chief
    trackers = build_trackers(params, model_dir) if training and save_summary else []
    for tracker in trackers:  # On every rank: checkpoints hold the same items everywhere.
        trainer.checkpoint.add_optional(**{f"tracker_{tracker.name}": tracker})
    callbacks: list[Any] = [TrackersClosed(trackers)] if trackers and chief else []
    if training and chief and params.runtime.enable_xla:
        callbacks.append(FirstLoopNotice("torch.compile"))
    monitor = build_loop_monitor(params, trainer, model_dir) if training else None
    if not (save_summary and chief):
        return Observers(SummaryManager(None), SummaryManager(None), callbacks, monitor)
    eval_dir = os.path.join(model_dir, cfg.validation_summary_subdir if training else EVAL_SUBDIR)
    sinks: list[Tracker] = list(trackers)
    if cfg.metrics_file:
        sinks.insert(0, MetricsFile(os.path.join(model_dir if training else eval_dir,
                                                 METRICS_FILE)))
    tensorboard = "tensorboard" in params.runtime.trackers
    step = trainer.global_step.__int__
    train = summary_manager or SummaryManager(
        os.path.join(model_dir, "train") if tensorboard else None, global_step=step,
        trackers=sinks, split="train")
    eval_cls = ImageScalarSummaryManager if params.task.allow_image_summary else SummaryManager
    evaluation = eval_summary_manager or eval_cls(
        eval_dir if tensorboard else None, global_step=step, trackers=sinks,
        split=os.path.basename(os.path.normpath(eval_dir)))
    return Observers(train, evaluation, callbacks, monitor)


def build_loop_monitor(params: ExperimentConfig, trainer: Trainer, model_dir: str) -> LoopMonitor:
    """``trainer.log_throughput`` and ``trainer.profile_steps`` as a ``LoopMonitor``."""
    cfg, runtime = params.trainer, trainer.runtime
    throughput = None
    if cfg.log_throughput:
        batch = params.task.train_data.global_batch_size
        examples = batch * cfg.gradient_accumulation_steps
        peak = params.runtime.peak_flops or peak_flops_per_device(runtime.device)
        flops: Any = trainer.task.flops_per_example
        if flops is None and peak and examples and not params.runtime.enable_xla:
            flops = FirstBatchFlops(trainer.unwrapped_model, batch // runtime.world_size)
        throughput = ThroughputMeter(
            examples_per_step=examples, tokens_per_example=trainer.task.tokens_per_example,
            flops_per_example=flops, peak_flops=peak * runtime.world_size if peak else None,
            data_wait=lambda: trainer.data_wait_seconds, device=runtime.device,
            data_counters=lambda: trainer.data_counters,
        )
    profiler = None
    if cfg.profile_steps:
        first, last = cfg.profile_steps
        profiler = ProfilerWindow(first_step=first, last_step=last,
                                  trace_dir=os.path.join(model_dir, "profile"),
                                  cuda=runtime.device.type == "cuda",
                                  worker_name=f"rank{runtime.rank}")
    return LoopMonitor(throughput, profiler)
