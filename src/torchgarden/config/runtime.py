"""``RuntimeConfig``: where and how the process runs (device, distribution, precision,
threads, compilation, trackers), with the settings of the MLflow and W&B trackers."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from torchgarden.config.base import Config
from torchgarden.config.errors import ConfigError, choose, not_one_of, require
from torchgarden.config.notices import ModelGardenKey, ignored, mapped, notice
from torchgarden.utils.suggest import did_you_mean

__all__ = ["STRATEGY_NAMES", "MlflowConfig", "RuntimeConfig", "WandbConfig"]

_field = dataclasses.field

_TRACKERS = ("tensorboard", "mlflow", "wandb")


#: Accepted `distribution_strategy` names; `runtime.register_strategy` adds to it.
STRATEGY_NAMES = ["auto", "off", "single", "ddp", "fsdp"]
_STRATEGY_HINTS = {"parameter_server": "ddp", "central_storage": "ddp"}
_LAUNCH = ("launch with `torchrun --nproc_per_node=N` for N processes (DDP, one device each); "
           "one process otherwise")
#: Model Garden's synchronous data-parallel strategies and what runs them here.
_MG_STRATEGIES = {"mirrored": "auto", "multi_worker_mirrored": "auto", "tpu": "auto",
                  "one_device": "single"}
#: Model Garden's strategies that do not read `num_gpus` (they use every device there is).
_WITHOUT_NUM_GPUS = ("multi_worker_mirrored", "tpu")
_DTYPES = ("float32", "float16", "bfloat16")
_DTYPE_HINTS = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}
#: Keras' mixed-precision policy names: the same autocast dtype.
_KERAS_POLICIES = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_INDEXED_DEVICES = ("cuda", "xpu", "hpu", "npu", "xla")  # the types that take `:<index>`
_DEVICE_NAMES = ("auto", "cpu", "mps", *_INDEXED_DEVICES)
#: Names people mean by other words: spelling alone would suggest 'xpu' for 'gpu'.
_DEVICE_HINTS = {
    "gpu": "cuda", "gpus": "cuda", "nvidia": "cuda", "cuda_gpu": "cuda", "rocm": "cuda",
    "hip": "cuda", "tpu": "xla", "metal": "mps", "apple": "mps", "m1": "mps", "m2": "mps",
    "mac": "mps", "default": "auto", "any": "auto", "host": "cpu",
}


def _is_device(device: str) -> bool:
    name, colon, index = device.partition(":")
    if colon:
        return name in _INDEXED_DEVICES and index.isdecimal()
    return name in _DEVICE_NAMES or name == "meta"


def _device_hint(device: str) -> str:
    """`; did you mean 'cuda:1'?` for `gpu:1`: meaning first, then spelling."""
    name, colon, index = device.strip().lower().partition(":")
    match = re.fullmatch(r"([a-z_]+?)(\d+)", name)
    if match and not colon:  # cuda0, gpu1
        name, colon, index = match.group(1), ":", match.group(2)
    target = _DEVICE_HINTS.get(name) or (name if name in _DEVICE_NAMES else None)
    if target is None:
        return did_you_mean(name, _DEVICE_NAMES, style="clause")
    if colon and index.isdigit() and target in _INDEXED_DEVICES:
        target = f"{target}:{index}"
    return f"; did you mean {target!r}?"


@dataclasses.dataclass
class MlflowConfig(Config):
    """Where `runtime.trackers: [..., mlflow]` logs (docs/observability.md)."""

    tracking_uri: str = ""
    """MLflow tracking URI (`http://host:5000`, `sqlite:///mlflow.db`, `file:./mlruns`);
    "" uses MLflow's own default (`$MLFLOW_TRACKING_URI`, else `./mlruns`)."""
    experiment_name: str = "torchgarden"
    """MLflow experiment the run belongs to (created if missing)."""
    run_name: str = ""
    """Name of the MLflow run; "" uses the model_dir's name."""


@dataclasses.dataclass
class WandbConfig(Config):
    """Where `runtime.trackers: [..., wandb]` logs (docs/observability.md)."""

    project: str = "torchgarden"
    """W&B project."""
    entity: str = ""
    """W&B entity (user or team); "" uses your default entity."""
    mode: str = ""
    """"online", "offline" (files under `model_dir/wandb/`, upload later with `wandb sync`)
    or "disabled"; "" follows `$WANDB_MODE` (W&B's default: online)."""
    run_name: str = ""
    """Name of the W&B run; "" uses the model_dir's name."""

    def check(self) -> None:
        """Checks the mode."""
        if self.mode:  # "" follows $WANDB_MODE
            choose(self, "mode", ("online", "offline", "disabled"))


def _num_gpus(value: Any) -> str:
    """Model Garden's ``num_gpus`` as a device: 0 runs on the CPU, N >= 1 on a GPU per process."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"runtime.num_gpus: expected an int >= 0, received {value!r}",
                          key="runtime.num_gpus")
    return "cpu" if value == 0 else "auto"


_TF_ONLY = "a TensorFlow runtime setting with no torch counterpart"


def _model_garden_keys() -> dict[str, ModelGardenKey]:
    """Model Garden's RuntimeConfig keys that have no field of the same name here."""
    return {
        "distribution_strategy": mapped(values=_MG_STRATEGIES, note=_LAUNCH),
        "mixed_precision_dtype": mapped(values=_KERAS_POLICIES,
                                        note="Keras' policy name for the same autocast dtype"),
        "num_gpus": mapped("device", convert=_num_gpus, note=(
            "0 runs on the CPU as in Model Garden; N GPUs are N processes: "
            "`torchrun --nproc_per_node=N`, one GPU each")),
        "tpu": ignored("the address of a Cloud TPU; torchgarden runs on the devices torchrun "
                       "gives it (runtime.device)"),
        "all_reduce_alg": ignored("DDP all-reduces with the process group's backend "
                                  "(runtime.backend: nccl on CUDA, gloo otherwise)"),
        "num_packs": ignored("DDP buckets gradients itself (MirroredStrategy's packing)"),
        "gpu_thread_mode": ignored(f"{_TF_ONLY} (TF's per-GPU thread pools)"),
        "per_gpu_thread_count": ignored(f"{_TF_ONLY} (TF's per-GPU thread pools)"),
        "dataset_num_private_threads": ignored(
            "tf.data's private thread pool; loading runs in task.*_data.num_workers processes"),
        "worker_hosts": ignored("torchrun says where the workers are (--nnodes, --node_rank, "
                                "--rdzv_endpoint)"),
        "task_index": ignored("torchrun gives each worker its rank (--node_rank)"),
        "run_eagerly": ignored("torch always runs eagerly; runtime.enable_xla compiles"),
        "batchnorm_spatial_persistent": ignored(f"{_TF_ONLY} (a cuDNN batch-norm mode of TF)"),
        "tpu_enable_xla_dynamic_padder": ignored("an XLA-on-TPU option; no TPU here"),
        "num_cores_per_replica": ignored(
            "TPU model parallelism (where a replica runs, not what it computes); "
            "distribution_strategy: fsdp shards a model"),
        "default_shard_dim": ignored("TPU model parallelism (where a replica runs)"),
        "use_tpu_mp_strategy": ignored("TPU model parallelism (where a replica runs)"),
    }


@dataclasses.dataclass
class RuntimeConfig(Config):
    """Where and how the process runs: device, distribution, precision, compilation.

    Model Garden's runtime keys with no field here are read as `MODEL_GARDEN_KEYS` says:
    ``distribution_strategy: mirrored / multi_worker_mirrored / tpu`` run as ``auto``
    (DDP under torchrun, one process otherwise), ``one_device`` as ``single``,
    ``num_gpus: 0`` as ``device: cpu``; TensorFlow- and TPU-only keys are ignored, each
    with a notice (docs/porting_from_model_garden.md).
    """

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = _model_garden_keys()

    distribution_strategy: str = "auto"
    """One of "auto" (ddp when torchrun starts more than one process, else single),
    "off"/"single", "ddp" or "fsdp"; Model Garden's "mirrored", "multi_worker_mirrored" and
    "tpu" read as "auto", "one_device" as "single" (with a notice)."""
    device: str = "auto"
    """Either "auto" (cuda if available, else cpu), "cpu", "cuda", "cuda:1", "mps", ..."""
    mixed_precision_dtype: str | None = None
    """Autocast dtype: None or "float32" (off), "float16" (with loss scaling) or "bfloat16"."""
    loss_scale: float | str | None = None
    """float16 loss scaling: None or "dynamic" for dynamic scaling, or a fixed positive scale."""
    enable_xla: bool = False
    """Model Garden's name for compiling the train step; here it turns on `torch.compile`."""
    compile_mode: str | None = None
    """`mode` passed to `torch.compile` ("default", "reduce-overhead", "max-autotune",
    ...); None uses torch's default."""
    compile_eval: bool = False
    """Also compile the eval step when `enable_xla` is set."""
    steps_per_graph: int | None = None
    """With `enable_xla`: training steps one compiled call runs, unrolled in one graph (Orbit's
    in-graph loop); at most `trainer.steps_per_loop`. None chooses from the model's size
    and what the compile of each unrolled step pays back over `trainer.train_steps`
    (`torchgarden.compile.choose_steps_per_call`)."""
    seed: int | None = None
    """Seed for Python, NumPy and torch RNGs; None leaves them unseeded."""
    deterministic: bool = False
    """Use deterministic algorithms (slower; errors on ops without one)."""
    num_threads: int | None = None
    """`torch.set_num_threads` value; None chooses half the CPU cores (at least 1;
    torch's own default is all of them), logged at start-up."""
    flush_denormal: bool = True
    """Flush denormal floats to zero on CPU (avoids slow paths)."""
    matmul_precision: str | None = None
    """`torch.set_float32_matmul_precision`: "highest", "high" or "medium"; None keeps
    torch's default."""
    backend: str | None = None
    """Process-group backend; None picks nccl on CUDA, else gloo."""
    distributed_timeout: float = 10.0
    """Minutes a rank waits for the others in any collective (joining the process group,
    all-reduces, checkpoint gathers) before it fails with one line, so a hang becomes an
    exit that `torchrun --max-restarts` restarts from; raise it when one rank may work
    alone that long between collectives (docs/distributed.md)."""
    trackers: list[str] = _field(default_factory=lambda: ["tensorboard"])
    """Where summaries go: any of "tensorboard" (event files under `model_dir`), "mlflow"
    (`pip install torchgarden[mlflow]`) and "wandb" (`pip install torchgarden[wandb]`)."""
    mlflow: MlflowConfig = _field(default_factory=MlflowConfig)
    """The MLflow back-end's settings."""
    wandb: WandbConfig = _field(default_factory=WandbConfig)
    """The Weights & Biases back-end's settings."""
    peak_flops: float | None = None
    """Peak FLOP/s of one device, for `throughput/mfu`; None uses the bf16 data-sheet peak
    of a known GPU (H100, A100, ...) and reports no MFU on a CPU."""

    def check(self) -> None:
        """Checks the strategy, device, dtype, loss scale, compile mode and threads."""
        choose(self, "distribution_strategy", STRATEGY_NAMES, _STRATEGY_HINTS)
        if not _is_device(self.device):
            key = self.field_path("device")
            raise ConfigError(
                f"{key}: {self.device!r} is not a device such as auto, cpu, cuda, cuda:1, mps"
                f"{_device_hint(self.device)}",
                key=key,
            )
        choose(self, "mixed_precision_dtype", _DTYPES, _DTYPE_HINTS)
        scale = self.loss_scale
        if isinstance(scale, str):
            choose(self, "loss_scale", ("dynamic",))
        elif scale is not None:
            require(self, "loss_scale", scale > 0, 'None, "dynamic" or a positive number')
        choose(self, "compile_mode", _COMPILE_MODES)
        choose(self, "matmul_precision", ("highest", "high", "medium"))
        require(self, "distributed_timeout", self.distributed_timeout > 0, "> 0 (minutes)")
        threads, seed = self.num_threads, self.seed
        require(self, "num_threads", threads is None or threads >= 1, ">= 1 or None")
        require(self, "seed", seed is None or 0 <= seed < 2**32, "in [0, 2**32 - 1] or None")
        for name in self.trackers:
            if name not in _TRACKERS:
                raise not_one_of(self.field_path("trackers"), name, _TRACKERS)
        flops, steps = self.peak_flops, self.steps_per_graph
        require(self, "peak_flops", flops is None or flops > 0, "> 0 or None")
        require(self, "steps_per_graph", steps is None or steps >= 1, ">= 1 or None")

    def _read_model_garden_keys(self, data: dict[str, Any], prefix: str) -> dict[str, Any]:
        """As the base class; ``num_gpus`` beside a strategy that does not read it (Model
        Garden's ``tpu``, ``multi_worker_mirrored``) is ignored, as there."""
        strategy = data.get("distribution_strategy")
        if "num_gpus" in data and strategy in _WITHOUT_NUM_GPUS:
            data = {k: v for k, v in data.items() if k != "num_gpus"}
            notice(f"{prefix}.num_gpus".lstrip("."), "ignored",
                   f"Model Garden's {strategy} strategy does not read it either")
        return super()._read_model_garden_keys(data, prefix)
