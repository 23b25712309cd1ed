"""Tests of the experiment tree: defaults, checks, one-of configs, precedence."""

from __future__ import annotations

import pytest

from torchgarden.config import (
    ConfigError,
    CosineLrConfig,
    DataConfig,
    EMAConfig,
    ExperimentConfig,
    OptimizationConfig,
    OptimizerConfig,
    RuntimeConfig,
    SGDConfig,
    TrainerConfig,
    WarmupConfig,
)


def test_defaults_match_model_garden():
    cfg = ExperimentConfig()
    trainer = cfg.trainer
    assert (trainer.steps_per_loop, trainer.summary_interval, trainer.checkpoint_interval) == (
        1000,
        1000,
        1000,
    )
    assert (trainer.max_to_keep, trainer.train_steps, trainer.validation_steps) == (5, 0, -1)
    assert (trainer.loss_upper_bound, trainer.recovery_max_trials) == (1e6, 0)
    assert trainer.best_checkpoint_metric_comp == "higher"
    assert cfg.task.train_data.shuffle_buffer_size == 100 and cfg.task.train_data.drop_remainder
    assert cfg.runtime.distribution_strategy == "auto" and cfg.runtime.mixed_precision_dtype is None
    opt = trainer.optimizer_config
    assert opt.optimizer.type is None and opt.learning_rate.type is None  # as Model Garden's
    assert opt.learning_rate.constant.learning_rate == 0.1
    assert opt.warmup.get() is None and opt.ema is None
    assert OptimizerConfig(type="adam").get().epsilon == 1e-7
    cfg.validate()


def test_summary_interval_must_be_a_multiple_with_suggestion():
    cfg = ExperimentConfig().override("trainer.steps_per_loop=100,trainer.summary_interval=250")
    with pytest.raises(
        ConfigError,
        match=r"trainer\.summary_interval \(250\) must be a multiple of "
        r"trainer\.steps_per_loop \(100\); set it to 200",
    ):
        cfg.validate()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.steps_per_loop=0", r"trainer\.steps_per_loop must be > 0, received 0"),
        ("trainer.train_steps=-5", r"trainer\.train_steps must be >= 0"),
        ("trainer.validation_steps=0", r"trainer\.validation_steps must be > 0, or -1"),
        ("trainer.max_to_keep=0", r"trainer\.max_to_keep must be >= 1"),
        ("trainer.gradient_accumulation_steps=0", r"gradient_accumulation_steps must be >= 1"),
        (
            "trainer.best_checkpoint_metric_comp=hihger",
            r"'hihger' is not one of higher, lower; did you mean 'higher'",
        ),
        (
            "task.train_data.global_batch_size=-1",
            r"task\.train_data\.global_batch_size must be >= 0",
        ),
        ("task.validation_data.num_workers=-1", r"task\.validation_data\.num_workers must be >= 0"),
        (
            "task.train_data.persistent_workers=true",
            r"persistent_workers needs task\.train_data\.num_workers > 0",
        ),
        (
            "runtime.distribution_strategy=parameter_server",
            r"'parameter_server' is not one of auto, off, single, ddp, fsdp; did you mean 'ddp'",
        ),
        ("runtime.distribution_strategy=fsdb", r"did you mean 'fsdp'"),
        ("runtime.device=cdua", r"runtime\.device: 'cdua' is not a device.*did you mean 'cuda'"),
        ("runtime.mixed_precision_dtype=bf16", r"did you mean 'bfloat16'"),
        (
            "runtime.loss_scale=-2",
            r"runtime\.loss_scale must be None, \"dynamic\" or a positive number",
        ),
        ("runtime.loss_scale=dynamc", r"'dynamc' is not one of dynamic"),
        ("runtime.compile_mode=max_autotune", r"did you mean 'max-autotune'"),
        ("runtime.num_threads=0", r"runtime\.num_threads must be >= 1"),
        ("runtime.distributed_timeout=0", r"runtime\.distributed_timeout must be > 0 \(minutes\)"),
    ],
)
def test_checks_reject_bad_values(override, message):
    cfg = ExperimentConfig().override(override)
    with pytest.raises(ConfigError, match=message):
        cfg.validate()


def test_valid_runtime_values_pass():
    RuntimeConfig(device="cuda:1", mixed_precision_dtype="float16", loss_scale=128).validate()
    RuntimeConfig(loss_scale="dynamic", compile_mode="reduce-overhead").validate()
    assert RuntimeConfig(loss_scale=128).loss_scale == 128.0


def test_check_messages_use_local_keys_when_validated_directly():
    with pytest.raises(ConfigError, match=r"^steps_per_loop must be > 0"):
        TrainerConfig(steps_per_loop=0).validate()


def test_one_of_type_errors_and_get():
    assert OptimizerConfig().get() is None  # no type: Model Garden's default too
    opt = OptimizerConfig(type="sgd")
    assert isinstance(opt.get(), SGDConfig)
    opt.type = "adamw"
    assert opt.get() is opt.adamw
    with pytest.raises(
        ConfigError,
        match=r"OptimizerConfig\.type: 'adan' is not one of sgd, sgd_experimental, adam, "
        r"adam_experimental, adamw, adamw_experimental, lamb, rmsprop, lars, adagrad, "
        r"adafactor, sgd_torch; did you mean 'adam'\?",
    ):
        opt.type = "adan"
    with pytest.raises(ConfigError, match=r"trainer\.optimizer_config\.optimizer\.type: 'adan'"):
        ExperimentConfig().override("trainer.optimizer_config.optimizer.type=adan")
    # Model Garden leaves warmup_steps unset: building a warmup without it raises.
    assert WarmupConfig().get() is None and WarmupConfig().get("linear.warmup_steps") is None


def test_one_of_as_dict_exports_only_the_choice_and_round_trips():
    opt = OptimizationConfig()
    opt.override({"learning_rate": {"type": "cosine", "cosine": {"decay_steps": 30}}})
    data = opt.as_dict()
    assert data["learning_rate"] == {
        "type": "cosine",
        "cosine": CosineLrConfig(decay_steps=30).as_dict(),
    }
    assert data["warmup"] == {"type": None}
    assert OptimizationConfig.from_dict(data) == opt


def test_model_garden_optimizer_yaml_shape(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(
        "trainer:\n"
        "  optimizer_config:\n"
        "    optimizer: {type: sgd, sgd: {momentum: 0.9}}\n"
        "    learning_rate: {type: cosine, cosine: {initial_learning_rate: 1.6, decay_steps: 3500}}\n"
        "    warmup: {type: linear, linear: {warmup_steps: 50, warmup_learning_rate: 0.0}}\n"
        "    ema: {average_decay: 0.9999}\n"
    )
    cfg = ExperimentConfig.from_yaml(path)
    opt = cfg.trainer.optimizer_config
    assert opt.optimizer.get().momentum == 0.9
    assert opt.learning_rate.get() == CosineLrConfig(initial_learning_rate=1.6, decay_steps=3500)
    assert opt.warmup.get().warmup_steps == 50
    assert opt.ema == EMAConfig(average_decay=0.9999)


def test_override_precedence_defaults_then_files_then_string(tmp_path):
    first = tmp_path / "a.yaml"
    first.write_text(
        "trainer: {train_steps: 100, steps_per_loop: 10}\ntask: {train_data: {global_batch_size: 8}}\n"
    )
    second = tmp_path / "b.yaml"
    second.write_text("trainer: {train_steps: 200}\n")
    cfg = ExperimentConfig()
    for source in (str(first), str(second), "trainer.train_steps=300"):
        cfg.override(source)
    assert (cfg.trainer.train_steps, cfg.trainer.steps_per_loop) == (300, 10)
    assert cfg.task.train_data.global_batch_size == 8
    assert cfg.trainer.checkpoint_interval == 1000


def test_input_path_accepts_string_or_list():
    data = DataConfig().override({"input_path": ["a", "b"]})
    assert data.input_path == ["a", "b"]
    data.override("input_path=/x/train-*")
    assert data.input_path == "/x/train-*"
