"""The experiment config tree: `ExperimentConfig(task, trainer, runtime)`.

Field names and defaults follow Model Garden's `official/core/config_definitions`
where they mean something in PyTorch; PyTorch-specific fields are added beside them.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Iterable

from torchgarden.config.base import Config
from torchgarden.config.errors import ConfigError, did_you_mean
from torchgarden.config.optimization import OptimizationConfig
from torchgarden.config.trackers import MlflowConfig, WandbConfig

__all__ = ["DataConfig", "ExperimentConfig", "RuntimeConfig", "TaskConfig", "TrainerConfig"]

_field = dataclasses.field


def _require(config: Config, name: str, ok: bool, requirement: str) -> None:
    if not ok:
        key = config.field_path(name)
        raise ConfigError(
            f"{key} must be {requirement}, received {getattr(config, name)!r}", key=key
        )


def _choose(
    config: Config, name: str, choices: Iterable[str], hints: dict[str, str] | None = None
) -> None:
    value = getattr(config, name)
    choices = tuple(choices)
    if value is None or value in choices:
        return
    key = config.field_path(name)
    hint = (
        f"; did you mean {hints[value]!r}?"
        if hints and value in hints
        else did_you_mean(value, choices)
    )
    raise ConfigError(f"{key}: {value!r} is not one of {', '.join(choices)}{hint}", key=key)


@dataclasses.dataclass
class DataConfig(Config):
    """Where the data comes from and how batches are formed."""

    input_path: str | list[str] = ""
    """File path(s) or pattern(s); a string may list several separated by commas.
    Defaults to ""."""
    global_batch_size: int = 0
    """Batch size summed over all processes; each rank gets an equal share. Defaults to 0."""
    is_training: bool | None = None
    """Whether this is training data (shuffling, repeat, augmentation). Defaults to None."""
    drop_remainder: bool = True
    """Drop the last incomplete batch. Defaults to True."""
    shuffle_buffer_size: int = 100
    """Kept for parity with Model Garden; PyTorch shuffles whole epochs. Defaults to 100."""
    shuffle: bool | None = None
    """Shuffle each epoch; None follows `is_training`. Defaults to None."""
    cache: bool = False
    """Keep decoded examples in memory after the first epoch. Defaults to False."""
    seed: int | None = None
    """Seed of the shuffling order; None derives it from the runtime seed. Defaults to None."""
    deterministic: bool | None = None
    """Produce batches in a fixed order even with workers; None keeps the default.
    Defaults to None."""
    sharding: bool = True
    """Give each process a distinct shard of the data. Defaults to True."""
    num_workers: int = 0
    """DataLoader worker processes; 0 loads in the main process. Defaults to 0."""
    pin_memory: bool = False
    """Copy batches into page-locked memory for faster transfer to the GPU. Defaults to False."""
    persistent_workers: bool = False
    """Keep workers alive between epochs; needs `num_workers > 0`. Defaults to False."""
    prefetch_factor: int | None = None
    """Batches loaded ahead per worker; needs `num_workers > 0`; None uses PyTorch's
    default. Defaults to None."""

    def check(self) -> None:
        """Checks batch size and DataLoader worker settings."""
        _require(self, "global_batch_size", self.global_batch_size >= 0, ">= 0")
        _require(self, "num_workers", self.num_workers >= 0, ">= 0")
        if self.prefetch_factor is not None:
            _require(self, "prefetch_factor", self.prefetch_factor > 0, "> 0 or None")
        if self.num_workers == 0 and (self.persistent_workers or self.prefetch_factor is not None):
            option = "persistent_workers" if self.persistent_workers else "prefetch_factor"
            raise ConfigError(
                f"{self.field_path(option)} needs {self.field_path('num_workers')} > 0; "
                f"set num_workers or unset {option}",
                key=self.field_path(option),
            )


@dataclasses.dataclass
class TaskConfig(Config):
    """What is trained: model, data and initial weights. Subclass it per task."""

    init_checkpoint: str = ""
    """Checkpoint to initialise weights from on a fresh `model_dir`. Defaults to ""."""
    init_checkpoint_modules: list[str] = _field(default_factory=list)
    """Module-name prefixes to restore from `init_checkpoint` (e.g. `["backbone"]`);
    empty restores everything. Defaults to []."""
    model: Config | None = None
    """The model's config; tasks annotate it with their own class. Defaults to None."""
    train_data: DataConfig = _field(default_factory=DataConfig)
    """Training data. Defaults to DataConfig()."""
    validation_data: DataConfig = _field(default_factory=DataConfig)
    """Evaluation data. Defaults to DataConfig()."""
    name: str | None = None
    """Name of the task, used in logs. Defaults to None."""
    allow_image_summary: bool = False
    """Let the task write image summaries. Defaults to False."""

    def check(self) -> None:
        """Checks that `init_checkpoint_modules` has a checkpoint to restore from."""
        if self.init_checkpoint_modules and not self.init_checkpoint:
            key = self.field_path("init_checkpoint_modules")
            raise ConfigError(
                f"{key} ({self.init_checkpoint_modules}) restricts what task.init_checkpoint "
                "restores, but task.init_checkpoint is empty; set it or clear the list",
                key=key,
            )


@dataclasses.dataclass
class TrainerConfig(Config):
    """How and when training runs: loop lengths, intervals, checkpoints, recovery."""

    optimizer_config: OptimizationConfig = _field(default_factory=OptimizationConfig)
    """Optimizer, learning rate, warmup and EMA."""
    steps_per_loop: int = 1000
    """Steps run between host-side work (logs, checks). Defaults to 1000."""
    summary_interval: int = 1000
    """Steps between train summaries; a multiple of `steps_per_loop`. Defaults to 1000."""
    checkpoint_interval: int = 1000
    """Minimum steps between checkpoints (rounded up to loop ends). Defaults to 1000."""
    max_to_keep: int = 5
    """Checkpoints kept on disk. Defaults to 5."""
    continuous_eval_timeout: int = 3600
    """Seconds continuous eval waits for a new checkpoint. Defaults to 3600."""
    train_steps: int = 0
    """Absolute global step at which training stops. Defaults to 0."""
    validation_steps: int = -1
    """Eval steps per evaluation; -1 runs the whole eval dataset. Defaults to -1."""
    validation_interval: int = 1000
    """Training steps between evaluations in `train_and_eval`. Defaults to 1000."""
    best_checkpoint_export_subdir: str = ""
    """Subdirectory of `model_dir` for the best checkpoint; set with the metric to
    enable the export. Defaults to ""."""
    best_checkpoint_eval_metric: str = ""
    """Eval-log key that ranks checkpoints; `|` separates nesting levels. Defaults to ""."""
    best_checkpoint_metric_comp: str = "higher"
    """Either "higher" or "lower": which metric values are better. Defaults to "higher"."""
    loss_upper_bound: float = 1e6
    """A loss above this (or NaN) counts as a blow-up. Defaults to 1e6."""
    recovery_begin_steps: int = 0
    """Blow-ups are checked from this step on. Defaults to 0."""
    recovery_max_trials: int = 0
    """Below 0: ignore blow-ups; 0: fail on the first; N > 0: restore the latest
    checkpoint up to N times, then fail. Defaults to 0."""
    recovery_check_every_step: bool = False
    """Check for blow-ups every step instead of once per loop (one host sync per step).
    Defaults to False."""
    validation_summary_subdir: str = "validation"
    """Subdirectory of `model_dir` for eval summaries. Defaults to "validation"."""
    preemption_on_demand_checkpoint: bool = True
    """Save a checkpoint when the process is asked to stop (see `preemption_signals`) and
    exit with status 143 so a scheduler can requeue the job. Defaults to True."""
    preemption_signals: list[str] = _field(default_factory=lambda: ["SIGTERM", "SIGINT"])
    """Signals that request the preemption checkpoint (e.g. add "SIGUSR1" for SLURM).
    A second signal aborts at once. Defaults to ["SIGTERM", "SIGINT"]."""
    gradient_accumulation_steps: int = 1
    """Micro-batches whose gradients are summed before each optimizer step. Defaults to 1."""
    enable_async_checkpointing: bool = False
    """Write checkpoints in a background thread. Defaults to False."""
    checkpoint_format: str = "auto"
    """How checkpoints are written: "single" (one `state.pt`, gathered onto and written by
    rank 0), "dcp" (every rank writes its own shards with `torch.distributed.checkpoint`;
    resumes at any world size; docs/distributed.md) or "auto" ("dcp" when
    `runtime.distribution_strategy` is "fsdp", else "single"). Both formats are read
    whatever this says. Defaults to "auto"."""
    progress_bar: bool | None = None
    """Show a progress bar; None shows one when stdout is a terminal. Defaults to None."""
    export_on_best: bool = False
    """Write an export (safetensors, torch.export, ONNX; docs/export.md) of each new best
    checkpoint to `<best_checkpoint_export_subdir>/export-<step>/`, in a background
    process; the newest `max_to_keep` are kept. Needs the best-checkpoint settings.
    Defaults to False."""
    metrics_file: bool = True
    """Also write every summary as one JSON line to `model_dir/metrics.jsonl` (what
    `torchgarden report` reads). Defaults to True."""
    log_throughput: bool = True
    """Log `throughput/*` (examples/s, tokens/s, MFU, data-wait fraction) and `memory/*`
    (peak CUDA memory, peak RSS) with each train loop. Defaults to True."""
    profile_steps: list[int] = _field(default_factory=list)
    """`[first, last]`: record train steps first..last (1-based global steps) with
    `torch.profiler` into `model_dir/profile/` (Chrome trace, TensorBoard profile plugin);
    [] records nothing. Defaults to []."""

    def check(self) -> None:
        """Checks intervals, step counts and the best-checkpoint comparison."""
        _require(self, "steps_per_loop", self.steps_per_loop > 0, "> 0")
        _require(self, "summary_interval", self.summary_interval > 0, "> 0")
        if self.summary_interval % self.steps_per_loop:
            n, k = self.summary_interval, self.steps_per_loop
            raise ConfigError(
                f"{self.field_path('summary_interval')} ({n}) must be a multiple of "
                f"{self.field_path('steps_per_loop')} ({k}); set it to {k * max(1, n // k)}",
                key=self.field_path("summary_interval"),
            )
        _require(self, "checkpoint_interval", self.checkpoint_interval > 0, "> 0")
        _require(self, "validation_interval", self.validation_interval > 0, "> 0")
        _require(self, "train_steps", self.train_steps >= 0, ">= 0")
        _require(
            self,
            "validation_steps",
            self.validation_steps > 0 or self.validation_steps == -1,
            "> 0, or -1 for the whole dataset",
        )
        _require(self, "max_to_keep", self.max_to_keep >= 1, ">= 1")
        _require(self, "continuous_eval_timeout", self.continuous_eval_timeout >= 0, ">= 0")
        _require(self, "gradient_accumulation_steps", self.gradient_accumulation_steps >= 1, ">= 1")
        _choose(self, "best_checkpoint_metric_comp", ("higher", "lower"))
        _choose(self, "checkpoint_format", ("auto", "single", "dcp"),
                {"sharded": "dcp", "distributed": "dcp", "torch": "single", "full": "single"})
        for name in ("best_checkpoint_export_subdir", "validation_summary_subdir"):
            _require(self, name, _inside(getattr(self, name)),
                     "a path inside model_dir (relative, without '..')")
        if self.export_on_best and not (
            self.best_checkpoint_export_subdir and self.best_checkpoint_eval_metric
        ):
            key = self.field_path("export_on_best")
            raise ConfigError(
                f"{key} exports each new best checkpoint, so it needs "
                f"{self.field_path('best_checkpoint_export_subdir')} (e.g. best_ckpt) and "
                f"{self.field_path('best_checkpoint_eval_metric')} (e.g. accuracy) set",
                key=key,
            )
        self._check_preemption_signals()
        self._check_profile_steps()

    def _check_profile_steps(self) -> None:
        steps = self.profile_steps
        if steps and not (len(steps) == 2 and 1 <= steps[0] <= steps[1]):
            key = self.field_path("profile_steps")
            raise ConfigError(
                f"{key} must be [] or [first, last] with 1 <= first <= last, received "
                f"{list(steps)!r}; e.g. [10, 15] records train steps 10 to 15", key=key,
            )

    def _check_preemption_signals(self) -> None:
        key = self.field_path("preemption_signals")
        for name in self.preemption_signals:
            found = getattr(signal, _signal_name(name), None)
            if not isinstance(found, signal.Signals):
                raise ConfigError(
                    f"{key}: unknown signal {name!r}; use names such as SIGTERM, SIGINT, SIGUSR1",
                    key=key,
                )
            if found in _UNCATCHABLE:
                raise ConfigError(
                    f"{key}: {found.name} cannot be caught by any process, so it can never "
                    "trigger a checkpoint; use SIGTERM, SIGINT or SIGUSR1",
                    key=key,
                )


_UNCATCHABLE = frozenset(
    getattr(signal, name) for name in ("SIGKILL", "SIGSTOP") if hasattr(signal, name)
)


def _inside(subdir: str) -> bool:
    """Whether a subdirectory name stays inside model_dir."""
    parts = subdir.replace("\\", "/").split("/")
    return not subdir.startswith(("/", "~")) and ".." not in parts


def _signal_name(name: str) -> str:
    upper = str(name).upper()
    return upper if upper.startswith("SIG") else f"SIG{upper}"


_TRACKERS = ("tensorboard", "mlflow", "wandb")


def _choose_item(config: Config, name: str, item: str, choices: tuple[str, ...]) -> None:
    if item not in choices:
        key = config.field_path(name)
        raise ConfigError(
            f"{key}: {item!r} is not one of {', '.join(choices)}{did_you_mean(item, choices)}",
            key=key,
        )


_STRATEGIES = ("auto", "off", "single", "ddp", "fsdp")
_STRATEGY_HINTS = {
    "mirrored": "ddp",
    "multi_worker_mirrored": "ddp",
    "one_device": "single",
    "tpu": "fsdp",
    "parameter_server": "ddp",
}
_DTYPES = ("float32", "float16", "bfloat16")
_DTYPE_HINTS = {
    "fp32": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "mixed_float16": "float16",
    "mixed_bfloat16": "bfloat16",
}
_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_DEVICE = re.compile(r"^(?:auto|cpu|mps|meta|(?:cuda|xpu|hpu|npu|xla)(?::\d+)?)$")
_DEVICE_NAMES = ("auto", "cpu", "cuda", "mps", "xpu", "hpu", "npu", "xla")
#: Names people mean by other words: spelling alone would suggest 'xpu' for 'gpu'.
_DEVICE_HINTS = {
    "gpu": "cuda", "gpus": "cuda", "nvidia": "cuda", "cuda_gpu": "cuda", "rocm": "cuda",
    "hip": "cuda", "tpu": "xla", "metal": "mps", "apple": "mps", "m1": "mps", "m2": "mps",
    "mac": "mps", "default": "auto", "any": "auto", "host": "cpu",
}


def _device_hint(device: str) -> str:
    """`; did you mean 'cuda:1'?` for `gpu:1`: meaning first, then spelling."""
    name, colon, index = device.strip().lower().partition(":")
    match = re.fullmatch(r"([a-z_]+?)(\d+)", name)
    if match and not colon:  # cuda0, gpu1
        name, colon, index = match.group(1), ":", match.group(2)
    target = _DEVICE_HINTS.get(name) or (name if name in _DEVICE_NAMES else None)
    if target is None:
        return did_you_mean(name, _DEVICE_NAMES)
    if colon and index.isdigit() and target not in ("auto", "cpu", "mps"):
        target = f"{target}:{index}"
    return f"; did you mean {target!r}?"


@dataclasses.dataclass
class RuntimeConfig(Config):
    """Where and how the process runs: device, distribution, precision, compilation."""

    distribution_strategy: str = "auto"
    """One of "auto" (ddp when torchrun starts more than one process, else single),
    "off"/"single", "ddp" or "fsdp". Defaults to "auto"."""
    device: str = "auto"
    """Either "auto" (cuda if available, else cpu), "cpu", "cuda", "cuda:1", "mps", ...
    Defaults to "auto"."""
    mixed_precision_dtype: str | None = None
    """Autocast dtype: None or "float32" (off), "float16" (with loss scaling) or
    "bfloat16". Defaults to None."""
    loss_scale: float | str | None = None
    """float16 loss scaling: None or "dynamic" for dynamic scaling, or a fixed positive
    scale. Defaults to None."""
    enable_xla: bool = False
    """Model Garden's name for compiling the train step; here it turns on
    `torch.compile`. Defaults to False."""
    compile_mode: str | None = None
    """`mode` passed to `torch.compile` ("default", "reduce-overhead", "max-autotune",
    ...); None uses torch's default. Defaults to None."""
    compile_eval: bool = False
    """Also compile the eval step when `enable_xla` is set. Defaults to False."""
    steps_per_graph: int | None = None
    """With `enable_xla`: training steps one compiled call runs, unrolled in one graph
    (Orbit's in-graph loop); at most `trainer.steps_per_loop`. None chooses: the largest
    divisor of `trainer.steps_per_loop` up to 10 for models of at most 1M parameters,
    else 1. Defaults to None."""
    seed: int | None = None
    """Seed for Python, NumPy and torch RNGs; None leaves them unseeded. Defaults to None."""
    deterministic: bool = False
    """Use deterministic algorithms (slower; errors on ops without one). Defaults to False."""
    num_threads: int | None = None
    """`torch.set_num_threads` value; None chooses half the CPU cores (at least 1;
    torch's own default is all of them), logged at start-up. Defaults to None."""
    flush_denormal: bool = True
    """Flush denormal floats to zero on CPU (avoids slow paths). Defaults to True."""
    matmul_precision: str | None = None
    """`torch.set_float32_matmul_precision`: "highest", "high" or "medium"; None keeps
    torch's default. Defaults to None."""
    backend: str | None = None
    """Process-group backend; None picks nccl on CUDA, else gloo. Defaults to None."""
    trackers: list[str] = _field(default_factory=lambda: ["tensorboard"])
    """Where summaries go: any of "tensorboard" (event files under `model_dir`), "mlflow"
    (`pip install torchgarden[mlflow]`) and "wandb" (`pip install torchgarden[wandb]`).
    Defaults to ["tensorboard"]."""
    mlflow: MlflowConfig = _field(default_factory=MlflowConfig)
    """The MLflow back-end's settings."""
    wandb: WandbConfig = _field(default_factory=WandbConfig)
    """The Weights & Biases back-end's settings."""
    peak_flops: float | None = None
    """Peak FLOP/s of one device, for `throughput/mfu`; None uses the bf16 data-sheet peak
    of a known GPU (H100, A100, ...) and reports no MFU on a CPU. Defaults to None."""

    def check(self) -> None:
        """Checks the strategy, device, dtype, loss scale, compile mode and threads."""
        _choose(self, "distribution_strategy", _STRATEGIES, _STRATEGY_HINTS)
        if not _DEVICE.match(self.device):
            key = self.field_path("device")
            raise ConfigError(
                f"{key}: {self.device!r} is not a device such as auto, cpu, cuda, cuda:1, mps"
                f"{_device_hint(self.device)}",
                key=key,
            )
        _choose(self, "mixed_precision_dtype", _DTYPES, _DTYPE_HINTS)
        scale = self.loss_scale
        if isinstance(scale, str):
            _choose(self, "loss_scale", ("dynamic",))
        elif scale is not None:
            _require(self, "loss_scale", scale > 0, 'None, "dynamic" or a positive number')
        _choose(self, "compile_mode", _COMPILE_MODES)
        _choose(self, "matmul_precision", ("highest", "high", "medium"))
        if self.num_threads is not None:
            _require(self, "num_threads", self.num_threads >= 1, ">= 1 or None")
        if self.seed is not None:
            _require(self, "seed", 0 <= self.seed < 2**32, "in [0, 2**32 - 1] or None")
        for name in self.trackers:
            _choose_item(self, "trackers", name, _TRACKERS)
        if self.peak_flops is not None:
            _require(self, "peak_flops", self.peak_flops > 0, "> 0 or None")
        if self.steps_per_graph is not None:
            _require(self, "steps_per_graph", self.steps_per_graph >= 1, ">= 1 or None")


@dataclasses.dataclass
class ExperimentConfig(Config):
    """A whole experiment: what is trained, how it is trained, where it runs.

    Example:
        >>> cfg = ExperimentConfig().override("trainer.train_steps=100")
        >>> cfg.trainer.train_steps
        100
    """

    task: TaskConfig = _field(default_factory=TaskConfig)
    """What is trained."""
    trainer: TrainerConfig = _field(default_factory=TrainerConfig)
    """How and when training runs."""
    runtime: RuntimeConfig = _field(default_factory=RuntimeConfig)
    """Device, distribution and precision."""
