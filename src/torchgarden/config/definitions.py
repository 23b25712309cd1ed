"""The experiment config tree: `ExperimentConfig(task, trainer, runtime)`.

Field names and defaults follow Model Garden's `official/core/config_definitions`
where they mean something in PyTorch; PyTorch-specific fields are added beside them.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Mapping
from typing import Any, ClassVar

from torchgarden.config.base import Config
from torchgarden.config.errors import ConfigError
from torchgarden.config.errors import choose as _choose
from torchgarden.config.errors import require as _require
from torchgarden.config.finetuning import ParamRuleConfig, UnfreezeStepConfig, check_fine_tuning
from torchgarden.config.notices import ModelGardenKey, ignored, notice
from torchgarden.config.optimization import OptimizationConfig
from torchgarden.config.runtime import RuntimeConfig

__all__ = ["DataConfig", "ExperimentConfig", "RuntimeConfig", "TaskConfig", "TrainerConfig"]

_field = dataclasses.field


@dataclasses.dataclass
class DataConfig(Config):
    """Where the data comes from and how batches are formed."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "enable_tf_data_service": ignored("tf.data service is TensorFlow's; DataLoader workers "
                                          "(num_workers) do the input work here"),
        "tf_data_service_address": ignored("tf.data service is TensorFlow's"),
        "tf_data_service_job_name": ignored("tf.data service is TensorFlow's"),
        "enable_shared_tf_data_service_between_parallel_trainers": ignored(
            "tf.data service is TensorFlow's"),
        "apply_tf_data_service_before_batching": ignored("tf.data service is TensorFlow's"),
        "trainer_id": ignored("names a trainer sharing a tf.data service; there is none here"),
        "ram_budget": ignored("a tf.data service RAM budget; there is no tf.data service here"),
        "autotune_algorithm": ignored("tf.data AUTOTUNE's algorithm; DataLoader does not autotune"),
        "tfds_as_supervised": ignored("the task's decoder reads the features it needs by name"),
        "tfds_skip_decoding_feature": ignored(
            "features are decoded by the task's parser, only those it reads"),
    }

    input_path: str | list[str] = ""
    """File path(s) or pattern(s); a string may list several, comma-separated (Model Garden's
    meaning: globs and comma lists of shards for ``source: tfrecord``)."""
    tfds_name: str = ""
    """A TensorFlow Datasets name (``imagenet2012``, ``coco/2017``) already prepared on disk
    under `tfds_data_dir`; nothing is downloaded. Excludes `input_path`."""
    tfds_split: str = ""
    """The TFDS split to read (``train``, ``validation``); required with `tfds_name`."""
    tfds_data_dir: str = ""
    """Folder holding prepared TFDS datasets (``<dir>/<name>/<version>/``); empty =
    ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``, as in TFDS."""
    file_type: str = "tfrecord"
    """Record format of `input_path` files for ``source: tfrecord``: ``tfrecord`` (Model
    Garden's default; uncompressed TFRecord)."""
    global_batch_size: int = 0
    """Batch size summed over all processes; each rank gets an equal share."""
    is_training: bool | None = None
    """Whether this is training data (shuffling, repeat, augmentation)."""
    drop_remainder: bool = True
    """Drop the last incomplete batch."""
    shuffle_buffer_size: int = 100
    """Records in the shuffle buffer of a streamed source (``tfrecord``), as tf.data's
    ``shuffle``; indexed sources shuffle whole epochs."""
    shuffle: bool | None = None
    """Shuffle each epoch; None follows `is_training`."""
    cache: bool = False
    """Keep decoded examples in memory after the first epoch."""
    cycle_length: int | None = None
    """Files read at once, interleaved, by a streamed source (``tfrecord``), as tf.data's
    ``interleave``; None: the number of CPU cores this process may use (tf.data's
    AUTOTUNE)."""
    block_length: int = 1
    """Consecutive records taken from each interleaved file before moving to the next."""
    skip_bad_records: bool = False
    """For ``tfrecord``: skip a record whose CRC or framing is bad, or that is no valid
    example, with a warning naming its file and offset, and count it
    (``data/skipped_records`` in the train metrics: this epoch, all workers) instead of
    stopping there. For ``webdataset``: skip the rest of a tar shard that is missing,
    truncated or corrupt when it is reached, with a warning naming it and the examples it
    gave, instead of stopping with one line naming it. A torchgarden addition; Model
    Garden stops."""
    seed: int | None = None
    """Seed of the shuffling order; None derives it from the runtime seed."""
    deterministic: bool | None = None
    """Batches in a fixed order even with workers; None keeps the default."""
    sharding: bool = True
    """Give each process a distinct shard of the data."""
    num_workers: int = 0
    """DataLoader worker processes; 0 loads in the main process."""
    pin_memory: bool = False
    """Copy batches into page-locked memory for faster transfer to the GPU."""
    persistent_workers: bool = False
    """Keep workers alive between epochs; needs `num_workers > 0`."""
    prefetch_factor: int | None = None
    """Batches loaded ahead per worker; needs `num_workers > 0`; None uses PyTorch's default."""
    prefetch_buffer_size: int | None = None
    """Model Garden's prefetch depth in batches, in total: with workers, each prefetches
    ``ceil(prefetch_buffer_size / num_workers)`` (unless `prefetch_factor` is set); without
    workers nothing is loaded ahead. None: PyTorch's default."""

    def check(self) -> None:
        """Checks batch size and DataLoader worker settings."""
        _require(self, "global_batch_size", self.global_batch_size >= 0, ">= 0")
        _require(self, "num_workers", self.num_workers >= 0, ">= 0")
        prefetch = self.prefetch_factor
        _require(self, "prefetch_factor", prefetch is None or prefetch > 0, "> 0 or None")
        buffer = self.prefetch_buffer_size
        _require(self, "prefetch_buffer_size", buffer is None or buffer > 0, "> 0 or None")
        cycle = self.cycle_length
        _require(self, "cycle_length", cycle is None or cycle > 0, "> 0 or None")
        _require(self, "block_length", self.block_length > 0, "> 0")
        _require(self, "shuffle_buffer_size", self.shuffle_buffer_size > 0, "> 0")
        _choose(self, "file_type", ("tfrecord",), {"tfrecords": "tfrecord", "tf_record": "tfrecord"})
        if self.tfds_name and self.input_path:
            raise ConfigError(
                f"{self.field_path('tfds_name')} and {self.field_path('input_path')} both name "
                "the data; keep one of them", key=self.field_path("tfds_name"))
        if self.tfds_name and not self.tfds_split:
            raise ConfigError(
                f"{self.field_path('tfds_split')} is required with "
                f"{self.field_path('tfds_name')}; set e.g. tfds_split=train",
                key=self.field_path("tfds_split"))
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

    init_checkpoint: str | None = ""
    """Weights to initialise the model from on a fresh `model_dir`: a torchgarden
    checkpoint (a `ckpt-<N>` directory, a model_dir, a `.pt` state dict), a `.safetensors`
    file, a `model.safetensors.index.json` or a Hugging Face model directory
    (docs/fine_tuning.md); "" or null: none."""
    init_checkpoint_modules: str | list[str] = _field(default_factory=list)
    """Module-name prefixes to restore from `init_checkpoint`: a name (`backbone`) or a
    list (`[backbone, decoder]`); `all`, "" or [] restore everything."""
    init_checkpoint_prefix_map: dict[str, str] = _field(default_factory=dict)
    """`{from_prefix: to_prefix}` renaming the keys of `init_checkpoint` before they are
    matched (`{"": "model."}`: a library model's file into torchgarden's adapter)."""
    model: Config | None = None
    """The model's config; tasks annotate it with their own class."""
    train_data: DataConfig = _field(default_factory=DataConfig)
    """Training data."""
    validation_data: DataConfig | dict[str, DataConfig] = _field(default_factory=DataConfig)
    """Evaluation data, or named evaluation sets (`{clean: {...}, noisy: {...}}`), each
    evaluated at every validation point into `validation/<name>/`. A subclass that
    declares its own data class here accepts named sets of it too."""
    name: str | None = None
    """Name of the task, used in logs."""
    allow_image_summary: bool = False
    """Let the task write image summaries."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass' own data class here takes named sets too: C -> C | dict[str, C].
        own = cls.__dict__.get("__annotations__", {})
        annotation = own.get("validation_data")
        if isinstance(annotation, str) and "dict[" not in annotation:
            own["validation_data"] = f"{annotation} | dict[str, {annotation}]"
        elif isinstance(annotation, type):
            own["validation_data"] = annotation | dict[str, annotation]  # type: ignore[valid-type]

    def _read_model_garden_keys(self, data: dict[str, Any], prefix: str) -> dict[str, Any]:
        """As the base class; Model Garden's ``differential_privacy_config``, which a dumped
        params.yaml holds as null, is ignored when null and refused otherwise."""
        if "differential_privacy_config" in data:
            key = f"{prefix}.differential_privacy_config".lstrip(".")
            if data["differential_privacy_config"] is not None:
                raise ConfigError(f"{key}: differentially private training has no counterpart "
                                  "in torchgarden; remove the key (null is accepted)", key=key)
            data = {k: v for k, v in data.items() if k != "differential_privacy_config"}
            notice(key, "ignored", "null: no differential privacy, as Model Garden's default")
        return super()._read_model_garden_keys(data, prefix)

    def check(self) -> None:
        """Checks that `init_checkpoint_modules` has a checkpoint to restore from."""
        if self.init_checkpoint_modules not in ("", "all", [], ["all"]) \
                and not self.init_checkpoint:
            key = self.field_path("init_checkpoint_modules")
            raise ConfigError(
                f"{key} ({self.init_checkpoint_modules}) restricts what task.init_checkpoint "
                "restores, but task.init_checkpoint is empty; set it or clear the list",
                key=key,
            )


_GRAPH = ("torch runs the step eagerly; runtime.enable_xla compiles it "
          "(runtime.steps_per_graph: steps per compiled call)")


@dataclasses.dataclass
class TrainerConfig(Config):
    """How and when training runs: loop lengths, intervals, checkpoints, recovery.

    Orbit's TensorFlow graph switches (``train_tf_function``, ``train_tf_while_loop``,
    ``eval_tf_function``, ``eval_tf_while_loop``, ``allow_tpu_summary``) are accepted and
    ignored with a notice (`MODEL_GARDEN_KEYS`).
    """

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "train_tf_function": ignored(f"TF graph tracing; {_GRAPH}"),
        "train_tf_while_loop": ignored(f"TF's in-graph step loop; {_GRAPH}"),
        "eval_tf_function": ignored("TF graph tracing; runtime.compile_eval compiles the eval "
                                    "step"),
        "eval_tf_while_loop": ignored("TF's in-graph eval loop; torch evaluates eagerly"),
        "allow_tpu_summary": ignored("summaries inside a TPU program; no TPU here, summaries "
                                     "are written every trainer.summary_interval"),
    }

    optimizer_config: OptimizationConfig = _field(default_factory=OptimizationConfig)
    """Optimizer, learning rate, warmup and EMA."""
    steps_per_loop: int = 1000
    """Steps run between host-side work (logs, checks)."""
    summary_interval: int = 1000
    """Steps between train summaries; a multiple of `steps_per_loop`."""
    checkpoint_interval: int = 1000
    """Minimum steps between checkpoints (rounded up to loop ends)."""
    max_to_keep: int = 5
    """Checkpoints kept on disk."""
    continuous_eval_timeout: int = 3600
    """Seconds continuous eval waits for a new checkpoint."""
    train_steps: int = 0
    """Absolute global step at which training stops."""
    validation_steps: int = -1
    """Eval steps per evaluation; -1 runs the whole eval dataset."""
    validation_interval: int = 1000
    """Training steps between evaluations in `train_and_eval`."""
    best_checkpoint_export_subdir: str = ""
    """Subdirectory of `model_dir` for the best checkpoint; set with the metric to
    enable the export."""
    best_checkpoint_eval_metric: str = ""
    """Eval-log key that ranks checkpoints; `|` separates nesting levels."""
    best_checkpoint_metric_comp: str = "higher"
    """Either "higher" or "lower": which metric values are better."""
    loss_upper_bound: float = 1e6
    """A loss above this (or NaN) counts as a blow-up."""
    recovery_begin_steps: int = 0
    """Blow-ups are checked from this step on."""
    recovery_max_trials: int = 0
    """Below 0: ignore blow-ups; 0: fail on the first; N > 0: restore the latest
    checkpoint up to N times, then fail."""
    recovery_check_every_step: bool = False
    """Check for blow-ups every step, not once per loop (a host sync each)."""
    validation_summary_subdir: str = "validation"
    """Subdirectory of `model_dir` for eval summaries."""
    preemption_on_demand_checkpoint: bool = True
    """Save a checkpoint when the process is asked to stop (see `preemption_signals`) and
    exit with status 143 so a scheduler can requeue the job."""
    preemption_signals: list[str] = _field(default_factory=lambda: ["SIGTERM", "SIGINT"])
    """Signals that request the preemption checkpoint (e.g. add "SIGUSR1" for SLURM).
    A second signal aborts at once."""
    gradient_accumulation_steps: int = 1
    """Micro-batches whose gradients are summed before each optimizer step."""
    enable_async_checkpointing: bool = False
    """Write checkpoints in a background thread."""
    checkpoint_format: str = "auto"
    """How checkpoints are written: "single" (one `state.pt`, gathered onto and written by rank 0),
    "dcp" (every rank writes its own shards with `torch.distributed.checkpoint`; resumes at any
    world size; docs/distributed.md) or "auto" ("dcp" when `runtime.distribution_strategy` is
    "fsdp", else "single"). Both formats are read whatever this says."""
    progress_bar: bool | None = None
    """Show a progress bar; None shows one when stdout is a terminal."""
    export_on_best: bool = False
    """Write an export (safetensors, torch.export, ONNX; docs/export.md) of each new best
    checkpoint to `<best_checkpoint_export_subdir>/export-<step>/`, in a background
    process; the newest `max_to_keep` are kept. Needs the best-checkpoint settings."""
    metrics_file: bool = True
    """Also write every summary as one JSON line to `model_dir/metrics.jsonl` (what
    `torchgarden report` reads)."""
    log_throughput: bool = True
    """Log `throughput/*` (examples/s, tokens/s, MFU, data-wait fraction) and `memory/*`
    (peak CUDA memory, peak RSS) with each train loop."""
    profile_steps: list[int] = _field(default_factory=list)
    """`[first, last]`: record train steps first..last (1-based global steps) with `torch.profiler`
    into `model_dir/profile/` (Chrome trace, TensorBoard profile plugin); [] records nothing."""
    freeze: list[str] = _field(default_factory=list)
    """Regexes (`re.search`) of parameter names that do not train: no gradient, no
    optimizer state (docs/fine_tuning.md). [] trains every parameter."""
    unfreeze_at_step: int | None = None
    """Global step from which every `freeze` parameter trains; None: frozen throughout."""
    unfreeze_schedule: list[UnfreezeStepConfig] = _field(default_factory=list)
    """`[{step, patterns}, ...]`: from each step, the frozen parameters matching its
    patterns (all with []) train."""
    freeze_batch_norm_stats: bool = True
    """A BatchNorm whose parameters are all frozen runs in eval mode (its running
    statistics stay fixed, as Keras' `trainable = False`); False keeps updating them."""
    param_rules: list[ParamRuleConfig] = _field(default_factory=list)
    """`[{pattern, lr_mult, decay_mult}, ...]`: per-parameter multipliers of the learning
    rate and weight decay (MMEngine's `paramwise_cfg`); the first matching rule applies."""
    layerwise_lr_decay: float = 1.0
    """Layer-wise learning-rate decay of transformer encoders: layer i of L (read from the
    parameter name) trains at `decay ** (L + 1 - i)` times the rate; 1.0: off."""

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
        _require(self, "validation_steps", self.validation_steps > 0 or self.validation_steps == -1,
                 "> 0, or -1 for the whole dataset")
        _require(self, "max_to_keep", self.max_to_keep >= 1, ">= 1")
        _require(self, "continuous_eval_timeout", self.continuous_eval_timeout >= 0, ">= 0")
        _require(self, "gradient_accumulation_steps", self.gradient_accumulation_steps >= 1, ">= 1")
        _choose(self, "best_checkpoint_metric_comp", ("higher", "lower"))
        _choose(self, "checkpoint_format", ("auto", "single", "dcp"),
                {"sharded": "dcp", "distributed": "dcp", "torch": "single", "full": "single"})
        for name in ("best_checkpoint_export_subdir", "validation_summary_subdir"):
            _require(self, name, _inside(getattr(self, name)),
                     "a path inside model_dir (relative, without '..')")
        best = self.best_checkpoint_export_subdir and self.best_checkpoint_eval_metric
        if self.export_on_best and not best:
            key = self.field_path("export_on_best")
            raise ConfigError(
                f"{key} exports each new best checkpoint, so it needs "
                f"{self.field_path('best_checkpoint_export_subdir')} (e.g. best_ckpt) and "
                f"{self.field_path('best_checkpoint_eval_metric')} (e.g. accuracy) set", key=key)
        steps = self.profile_steps
        steps_ok = not steps or (len(steps) == 2 and 1 <= steps[0] <= steps[1])
        _require(self, "profile_steps", steps_ok, "[] or [first, last] with 1 <= first <= last "
                 "(e.g. [10, 15] records train steps 10 to 15)")
        check_fine_tuning(self)
        key = self.field_path("preemption_signals")
        for name in self.preemption_signals:
            found = signal_named(name)
            if found is None:
                raise ConfigError(f"{key}: unknown signal {name!r}; use names such as SIGTERM, "
                                  "SIGINT, SIGUSR1", key=key)
            if found in _UNCATCHABLE:
                raise ConfigError(f"{key}: {found.name} cannot be caught by any process, so it "
                                  "can never trigger a checkpoint; use SIGTERM, SIGINT or SIGUSR1",
                                  key=key)


_UNCATCHABLE = frozenset(getattr(signal, n) for n in ("SIGKILL", "SIGSTOP") if hasattr(signal, n))


def _inside(subdir: str) -> bool:
    """Whether a subdirectory name stays inside model_dir."""
    parts = subdir.replace("\\", "/").split("/")
    return not subdir.startswith(("/", "~")) and ".." not in parts


def signal_named(name: str) -> signal.Signals | None:
    """The signal ``name`` names (``"SIGTERM"``, ``"term"``, ``"USR1"``), or None."""
    upper = str(name).upper()
    found = getattr(signal, upper if upper.startswith("SIG") else f"SIG{upper}", None)
    return found if isinstance(found, signal.Signals) else None


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
