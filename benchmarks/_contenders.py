"""The training loops compared by ``loop_overhead.py`` and ``digits_mlp.py``.

Each contender factory returns ``run(num_steps) -> Timing``: it builds fresh objects
(same seeded weights every time), trains ``num_steps`` steps and returns the CPU and
wall time of the training call. Output (log lines, progress bars) goes to /dev/null.

Contenders (like is compared with like: each pair differs in one thing only):
  (a)  ``hand_written``: a DataLoader over a TensorDataset, torch's default optimizer
       implementation and denormal handling -- what a user writes first.
  (a*) ``hand_written_tuned``: the same loop with torchgarden's data path and settings
       (one index gather per batch on the data's device, denormals flushed) and the
       optimizer kernel of the torchgarden row it is compared with (torch's default;
       ``fused=True`` for the fused rows): the floor for pure framework cost.
  (b)  ``torchgarden_defaults``: Task + Trainer + Controller; no summaries,
       checkpoints or progress bar.
  (c)  ``torchgarden_full``: ``run_experiment`` with TensorBoard summaries every 100
       steps, a progress bar and a checkpoint every 1000 steps (and at the end).
  (d)  ``lightning_contender``: ``lightning.Trainer`` with logger, checkpointing,
       progress bar and model summary off, fed by torchgarden's data path, with denormals
       flushed and the same optimizer kernel as (b) ("matched"); or everything at
       Lightning's and torch's defaults (a DataLoader, denormals kept).
  (e)  ``torchgarden_compiled``: (b) with ``runtime.enable_xla=True``: K whole steps per
       ``torch.compile`` call (``runtime.steps_per_graph``, 10 by default: what a run long
       enough to pay back the unrolled compile gets automatically);
       compile time is excluded by a warm-up of ``COMPILE_WARMUP_STEPS`` steps.
  (h)  ``hand_written_compiled``: the whole step written by hand as one
       ``torch.compile(fullgraph=True)`` graph (``torch.func.grad_and_value`` and torch's
       functional Adam/SGD), torchgarden's data path, guards kept; ``steps_per_call``
       steps unrolled per call.
"""

from __future__ import annotations

import shutil
import tempfile
import types
from typing import Any

import torch
from _common import Contender, Timing, quiet, timed
from _workloads import Workload
from torch.utils.data import DataLoader, TensorDataset

__all__ = [
    "COMPILE_WARMUP_STEPS",
    "continued_pair",
    "hand_written_compiled",
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
COMPILE_WARMUP_STEPS = 100


def hand_written(workload: Workload, device: str = "cpu") -> Contender:
    """(a) The plain PyTorch loop over a ``DataLoader``, all torch defaults.

    On a GPU the DataLoader pins memory and batches are copied with ``non_blocking``.
    """
    cuda = device != "cpu"

    def run(num_steps: int) -> Timing:
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


def _batches(workload: Workload, device: str) -> Any:
    """Endless batches as torchgarden's ``ArrayLoader`` makes them: the data staged on
    ``device``, one ``index_select`` per tensor per batch, a new permutation per epoch."""
    x_all, y_all = workload.features.to(device), workload.labels.to(device)
    size, n = workload.batch_size, x_all.shape[0]
    generator = torch.Generator().manual_seed(0)
    while True:
        order = torch.randperm(n, generator=generator).to(device)
        for index in order[: n - n % size].split(size):
            yield x_all.index_select(0, index), y_all.index_select(0, index)


def hand_written_tuned(
    workload: Workload, device: str = "cpu", fused: bool | None = None
) -> Contender:
    """(a*) A hand-written loop with torchgarden's data path and denormal setting, and
    torch's default optimizer kernel (``fused=True``: the fused one)."""

    def run(num_steps: int) -> Timing:
        train = _tuned_loop(workload, device, fused)
        return timed(lambda: train(num_steps), device)

    return run


def _tuned_loop(workload: Workload, device: str, fused: bool | None) -> Any:
    """The (a*) loop on fresh seeded objects: ``train(num_steps)`` continues it."""
    torch.set_flush_denormal(True)
    model = workload.build_model().to(device)
    optimizer = workload.torch_optimizer(
        model.parameters(), **({} if fused is None else {"fused": fused}))
    batches = _batches(workload, device)
    loss_fn = workload.loss

    def train(num_steps: int) -> None:
        for _ in range(num_steps):
            x, y = next(batches)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return train


def hand_written_compiled(
    workload: Workload, device: str = "cpu", steps_per_call: int = 1
) -> Contender:
    """(h) The whole step as one hand-written ``torch.compile(fullgraph=True)`` graph:
    ``torch.func.grad_and_value`` over ``functional_call`` and torch's own functional
    optimizer (``torch.optim.adam.adam`` / ``sgd.sgd``, per-tensor form), with the
    learning rate as a 0-d tensor; ``steps_per_call`` batches per call, unrolled. The
    guards are kept; compilation is excluded by a warm-up."""
    from torch.func import functional_call, grad_and_value
    from torch.optim import adam, sgd

    def run(num_steps: int) -> Timing:
        torch.set_flush_denormal(True)
        model = workload.build_model().to(device)
        optimizer = workload.torch_optimizer(model.parameters())
        names = [name for name, _ in model.named_parameters()]
        params = [p.detach() for p in model.parameters()]
        lr = torch.tensor(optimizer.param_groups[0]["lr"], device=device)
        group = optimizer.param_groups[0]
        if workload.optimizer == "adam":
            beta1, beta2 = group["betas"]
            state = ([torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params],
                     [], [torch.zeros((), device=device) for _ in params])

            def update(grads: list[torch.Tensor]) -> None:
                adam.adam(params, grads, *state, foreach=False, capturable=device != "cpu",
                          differentiable=False, fused=None, grad_scale=None, found_inf=None,
                          has_complex=False, amsgrad=False, beta1=beta1, beta2=beta2, lr=lr,
                          weight_decay=0.0, eps=group["eps"], maximize=False)
        else:
            def update(grads: list[torch.Tensor]) -> None:
                sgd.sgd(params, grads, [None] * len(params), foreach=False, lr=lr,
                        weight_decay=0.0, momentum=0.0, dampening=0.0, nesterov=False,
                        maximize=False)

        def loss_of(trainable: dict[str, torch.Tensor], x: Any, y: Any) -> torch.Tensor:
            return workload.loss(functional_call(model, trainable, (x,)), y)

        def steps(batches: list[tuple[Any, Any]]) -> torch.Tensor:
            total = torch.zeros((), device=device)
            with torch.no_grad():
                for x, y in batches:
                    grads, loss = grad_and_value(loss_of)(dict(zip(names, params)), x, y)
                    update([grads[name] for name in names])
                    total = total + loss
            return total

        # A fresh code object per run: runs never share (or exhaust) a compile cache.
        graph = torch.compile(types.FunctionType(steps.__code__.replace(), steps.__globals__,
                                                 "steps", None, steps.__closure__),
                              fullgraph=True)
        batches = _batches(workload, device)
        calls = -(-COMPILE_WARMUP_STEPS // steps_per_call)
        for _ in range(calls):
            graph([next(batches) for _ in range(steps_per_call)])

        def train() -> None:
            for _ in range(num_steps // steps_per_call):
                graph([next(batches) for _ in range(steps_per_call)])

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
    runtime = {key: value for key, value in runtime.items() if value is not None}
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

    def run(num_steps: int) -> Timing:
        with quiet():
            _, controller = _trainer_and_controller(workload, num_steps, device, fused)
            return timed(lambda: controller.train(steps=num_steps), device)

    return run


def torchgarden_compiled(
    workload: Workload, device: str = "cpu", mode: str | None = None,
    steps_per_graph: int = 10,
) -> Contender:
    """(e) (b) with ``runtime.enable_xla`` (``steps_per_graph``: K steps per compiled
    call); the first ``COMPILE_WARMUP_STEPS`` steps (compilation, the
    eager first call) are not timed. ``mode="reduce-overhead"`` adds CUDA graphs."""

    def run(num_steps: int) -> Timing:
        with quiet():
            _, controller = _trainer_and_controller(
                workload, COMPILE_WARMUP_STEPS + num_steps, device, enable_xla=True,
                compile_mode=mode, steps_per_graph=steps_per_graph,
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

    def run(num_steps: int) -> Timing:
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


def lightning_contender(workload: Workload, *, matched: bool, device: str = "cpu") -> Contender:
    """(d) ``lightning.Trainer`` on the same model, loss and optimizer.

    ``matched=True``: logger, checkpointing, progress bar and model summary off, batches
    from torchgarden's ``ArrayLoader`` (the data path of (a*) and (b)), denormals
    flushed, torch's default optimizer kernel (as (b)). ``matched=False``: Lightning's
    defaults (all of those on) over a ``DataLoader``, denormals kept (torch's default).
    """
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

    def loader() -> Any:
        if not matched:
            return DataLoader(
                TensorDataset(workload.features, workload.labels),
                batch_size=workload.batch_size, shuffle=True, drop_last=True,
                pin_memory=device != "cpu",
            )
        from torchgarden import data
        from torchgarden.config import DataConfig

        dataset = data.ArrayDataset(workload.features.to(device), workload.labels.to(device))
        return data.build_dataloader(dataset, DataConfig(
            is_training=True, global_batch_size=workload.batch_size, seed=0))

    def run(num_steps: int) -> Timing:
        torch.set_flush_denormal(matched)
        root = tempfile.mkdtemp(prefix="tg-bench-lightning-")
        options: dict[str, Any] = {"max_steps": num_steps, "default_root_dir": root}
        if matched:
            options.update(
                logger=False, enable_checkpointing=False, enable_progress_bar=False,
                enable_model_summary=False,
            )
        try:
            with quiet():
                accelerator = "cpu" if device == "cpu" else "gpu"
                trainer = L.Trainer(accelerator=accelerator, devices=1, **options)
                module = LitModule()
                return timed(lambda: trainer.fit(module, train_dataloaders=loader()), device)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    return run


def continued_pair(
    workload: Workload, device: str = "cpu", fused: bool | None = None
) -> dict[str, Any]:
    """(a*) and (b) built once each and trained on in chunks: ``{label: train(n)}``.

    For :func:`_common.paired_chunks`: both keep their model, optimizer, data position
    and (for (b)) Trainer and Controller from chunk to chunk, so set-up cancels without
    a long-minus-short subtraction, and the two share the process' heap and caches.
    """
    hand = _tuned_loop(workload, device, fused)
    with quiet():
        trainer, controller = _trainer_and_controller(workload, 10**9, device, fused)

    def framework(num_steps: int) -> None:
        with quiet():
            controller.train(steps=trainer.global_step.value + num_steps)

    return {"(a*) hand-written, tuned": hand, "(b) torchgarden defaults": framework}
