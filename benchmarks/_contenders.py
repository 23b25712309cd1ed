"""The training loops compared by ``loop_overhead.py`` and ``digits_mlp.py``.

Each ``*_contender(workload)`` returns ``run(num_steps) -> seconds``: it builds fresh
objects (same seeded weights every time), trains ``num_steps`` steps and returns the
wall time of the training call. Output (log lines, progress bars) goes to /dev/null.

Contenders:
  (a)  ``hand_written``: a DataLoader over a TensorDataset, torch's default optimizer
       implementation and denormal handling -- what a user writes first.
  (a*) ``hand_written_tuned``: the same loop with torchgarden's data path and settings
       (one index gather per batch, fused optimizer, denormals flushed): the floor
       against which pure framework cost is measured.
  (b)  ``torchgarden_defaults``: Task + Trainer + Controller; no summaries,
       checkpoints or progress bar.
  (c)  ``torchgarden_full``: ``run_experiment`` with TensorBoard summaries every 100
       steps, a progress bar and a checkpoint every 1000 steps (and at the end).
  (d)  ``lightning_minimal`` / ``lightning_default``: ``lightning.Trainer`` with
       logger, checkpointing, progress bar and model summary off / at their defaults.
  (e)  ``torchgarden_compiled``: (b) with ``runtime.enable_xla=True`` (the whole step
       as one ``torch.compile`` graph); compile time is excluded by a warm-up of
       ``COMPILE_WARMUP_STEPS`` steps before the timed call.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import torch
from _common import Contender, quiet, timed
from _workloads import Workload
from torch.utils.data import DataLoader, TensorDataset

__all__ = [
    "COMPILE_WARMUP_STEPS",
    "STEPS_PER_LOOP",
    "hand_written",
    "hand_written_tuned",
    "lightning_available",
    "lightning_contender",
    "torchgarden_compiled",
    "torchgarden_defaults",
    "torchgarden_full",
]

STEPS_PER_LOOP = 100
COMPILE_WARMUP_STEPS = 20


def hand_written(workload: Workload, device: str = "cpu") -> Contender:
    """(a) The plain PyTorch loop over a ``DataLoader``, all torch defaults.

    On a GPU the DataLoader pins memory and batches are copied with ``non_blocking``.
    """
    cuda = device != "cpu"

    def run(num_steps: int) -> float:
        torch.set_flush_denormal(False)  # PyTorch's default on CPU.
        model = workload.build_model().to(device)
        optimizer = workload.torch_optimizer(model.parameters())
        loader = DataLoader(
            TensorDataset(workload.features, workload.labels),
            batch_size=workload.batch_size, shuffle=True, drop_last=True, pin_memory=cuda,
        )
        loss_fn = workload.loss

        def train() -> None:
            step = 0
            while step < num_steps:
                for x, y in loader:
                    if cuda:
                        x = x.to(device, non_blocking=True)
                        y = y.to(device, non_blocking=True)
                    loss = loss_fn(model(x), y)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    step += 1
                    if step == num_steps:
                        break

        return timed(train, device)

    return run


def hand_written_tuned(workload: Workload, device: str = "cpu") -> Contender:
    """(a*) A hand-written loop with torchgarden's data path, fused optimizer and FTZ.

    The data sits on ``device``; each batch is one ``index_select`` per tensor there,
    as torchgarden's ``ArrayLoader`` does.
    """

    def run(num_steps: int) -> float:
        torch.set_flush_denormal(True)
        model = workload.build_model().to(device)
        optimizer = workload.torch_optimizer(model.parameters(), fused=True)
        x_all, y_all = workload.features.to(device), workload.labels.to(device)
        size, n = workload.batch_size, x_all.shape[0]
        generator = torch.Generator().manual_seed(0)
        loss_fn = workload.loss

        def train() -> None:
            step = 0
            while step < num_steps:
                order = torch.randperm(n, generator=generator).to(device)
                for index in order[: n - n % size].split(size):
                    x, y = x_all.index_select(0, index), y_all.index_select(0, index)
                    loss = loss_fn(model(x), y)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    step += 1
                    if step == num_steps:
                        break

        return timed(train, device)

    return run


def _bench_task(workload: Workload, params: Any, device: str = "cpu") -> Any:
    from torchgarden import Task, data

    class BenchTask(Task):
        """The workload as a torchgarden Task: model, in-memory data and loss."""

        def build_model(self) -> torch.nn.Module:
            return workload.build_model()

        def build_inputs(self, data_params: Any, input_context: Any = None) -> Any:
            # Staged on the device: the ArrayLoader then gathers batches there.
            dataset = data.ArrayDataset(workload.features.to(device), workload.labels.to(device))
            return data.build_dataloader(dataset, data_params, input_context=input_context)

        def build_losses(self, labels: Any, model_outputs: Any, aux_losses: Any = None) -> Any:
            return workload.loss(model_outputs, labels)

    return BenchTask(params)


def _config(
    workload: Workload, train_steps: int, device: str, fused: bool | None = None, **runtime: Any
) -> Any:
    from torchgarden.config import (
        DataConfig,
        ExperimentConfig,
        OptimizationConfig,
        RuntimeConfig,
        TaskConfig,
        TrainerConfig,
    )

    return ExperimentConfig(
        task=TaskConfig(
            train_data=DataConfig(
                is_training=True, global_batch_size=workload.batch_size, seed=0
            ),
        ),
        trainer=TrainerConfig(
            train_steps=train_steps,
            steps_per_loop=STEPS_PER_LOOP,
            summary_interval=STEPS_PER_LOOP,
            checkpoint_interval=1000,
            max_to_keep=2,
            progress_bar=True,
            optimizer_config=OptimizationConfig.from_dict(workload.optimizer_config(fused)),
        ),
        runtime=RuntimeConfig(seed=0, device=device, **runtime),
    )


def _trainer_and_controller(
    workload: Workload, num_steps: int, device: str, fused: bool | None = None, **runtime: Any
) -> Any:
    from torchgarden.loop import Controller
    from torchgarden.train_lib import create_trainer

    params = _config(workload, num_steps, device, fused, **runtime)
    task = _bench_task(workload, params.task, device)
    trainer = create_trainer(params, task, train=True, evaluate=False)
    controller = Controller(
        global_step=trainer.global_step,
        trainer=trainer,
        steps_per_loop=STEPS_PER_LOOP,
        progress_bar=False,
    )
    return trainer, controller


def torchgarden_defaults(
    workload: Workload, device: str = "cpu", fused: bool | None = None
) -> Contender:
    """(b) Task + Trainer + Controller, nothing written, no progress bar; ``fused=True``
    asks for torch's fused optimizer kernel (the one (a*) uses)."""

    def run(num_steps: int) -> float:
        with quiet():
            _, controller = _trainer_and_controller(workload, num_steps, device, fused)
            return timed(lambda: controller.train(steps=num_steps), device)

    return run


def torchgarden_compiled(
    workload: Workload, device: str = "cpu", mode: str | None = None
) -> Contender:
    """(e) (b) with ``runtime.enable_xla``; the first steps (compilation) are not timed.

    ``mode="reduce-overhead"`` adds CUDA-graph replay of the step on a GPU.
    """

    def run(num_steps: int) -> float:
        with quiet():
            _, controller = _trainer_and_controller(
                workload, num_steps, device, enable_xla=True, compile_mode=mode
            )
            controller.train(steps=COMPILE_WARMUP_STEPS)
            return timed(
                lambda: controller.train(steps=COMPILE_WARMUP_STEPS + num_steps), device
            )

    return run


def torchgarden_full(workload: Workload, device: str = "cpu", observe: bool = True) -> Contender:
    """(c) ``run_experiment``: summaries, progress bar and checkpoints on; ``observe=False``
    turns off ``metrics.jsonl`` and the throughput figures (issue 12's overhead check)."""
    from torchgarden.train_lib import run_experiment

    def run(num_steps: int) -> float:
        params = _config(workload, num_steps, device)
        if not observe:  # (Older revisions have neither field: their (c) runs as is.)
            params.override({"trainer": {"metrics_file": False, "log_throughput": False}})
        task = _bench_task(workload, params.task, device)
        model_dir = tempfile.mkdtemp(prefix="tg-bench-")
        try:
            with quiet():
                return timed(
                    lambda: run_experiment(
                        task=task, mode="train", params=params, model_dir=model_dir
                    ),
                    device,
                )
        finally:
            shutil.rmtree(model_dir, ignore_errors=True)

    return run


def lightning_available() -> bool:
    try:
        import lightning  # noqa: F401
    except ImportError:
        return False
    return True


def lightning_contender(workload: Workload, *, minimal: bool, device: str = "cpu") -> Contender:
    """(d) ``lightning.Trainer`` on the same model, loss, optimizer and DataLoader."""
    import logging
    import warnings

    import lightning as L  # noqa: N812

    # Lightning's advice (workers, log intervals) is printed through handlers bound to
    # the real stderr at import time; silence it rather than time it.
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")

    class LitModule(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = workload.build_model()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return workload.loss(self.model(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return workload.torch_optimizer(self.parameters())

    def run(num_steps: int) -> float:
        torch.set_flush_denormal(False)
        loader = DataLoader(
            TensorDataset(workload.features, workload.labels),
            batch_size=workload.batch_size, shuffle=True, drop_last=True,
            pin_memory=device != "cpu",
        )
        root = tempfile.mkdtemp(prefix="tg-bench-lightning-")
        options: dict[str, Any] = {"max_steps": num_steps, "default_root_dir": root}
        if minimal:
            options.update(
                logger=False, enable_checkpointing=False, enable_progress_bar=False,
                enable_model_summary=False,
            )
        try:
            with quiet():
                accelerator = "cpu" if device == "cpu" else "gpu"
                trainer = L.Trainer(accelerator=accelerator, devices=1, **options)
                module = LitModule()
                return timed(lambda: trainer.fit(module, train_dataloaders=loader), device)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    return run
