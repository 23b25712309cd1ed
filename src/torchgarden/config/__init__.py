"""Typed experiment configs: dataclasses with strict overrides, YAML round trip, validation.

This package imports only the standard library and PyYAML (never torch), so the
CLI's `--help` and `config` commands stay fast.
"""

from torchgarden.config.base import Config
from torchgarden.config.definitions import (
    DataConfig,
    ExperimentConfig,
    RuntimeConfig,
    TaskConfig,
    TrainerConfig,
)
from torchgarden.config.diff import MISSING, diff
from torchgarden.config.errors import ConfigError
from torchgarden.config.finetuning import ParamRuleConfig, UnfreezeStepConfig
from torchgarden.config.multitask import (
    MultiEvalExperimentConfig,
    MultiTaskConfig,
    MultiTaskExperimentConfig,
    MultiTaskTrainerConfig,
    TaskRoutine,
    TaskSamplingConfig,
)
from torchgarden.config.oneof import OneOfConfig
from torchgarden.config.optimization import (
    ConstantLrConfig,
    CosineLrConfig,
    EMAConfig,
    ExponentialLrConfig,
    LinearWarmupConfig,
    LrConfig,
    OptimizationConfig,
    PolynomialLrConfig,
    PolynomialWarmupConfig,
    PowerLrConfig,
    StepwiseLrConfig,
    WarmupConfig,
)
from torchgarden.config.optimizers import (
    AdagradConfig,
    AdamConfig,
    AdamWConfig,
    BaseOptimizerConfig,
    OptimizerConfig,
    RMSpropConfig,
    SGDConfig,
)
from torchgarden.config.overrides import dump_yaml, load_yaml_file, parse_override
from torchgarden.config.runtime import MlflowConfig, WandbConfig

__all__ = [
    "MISSING", "AdagradConfig", "AdamConfig", "AdamWConfig", "BaseOptimizerConfig", "Config",
    "ConfigError", "ConstantLrConfig", "CosineLrConfig", "DataConfig", "EMAConfig",
    "ExperimentConfig", "ExponentialLrConfig", "LinearWarmupConfig", "LrConfig",
    "MultiEvalExperimentConfig", "MultiTaskConfig", "MultiTaskExperimentConfig",
    "MultiTaskTrainerConfig", "MlflowConfig", "OneOfConfig", "OptimizationConfig",
    "OptimizerConfig", "ParamRuleConfig", "PolynomialLrConfig", "PolynomialWarmupConfig",
    "PowerLrConfig",
    "RMSpropConfig", "RuntimeConfig", "SGDConfig", "StepwiseLrConfig", "TaskRoutine",
    "TaskSamplingConfig", "TaskConfig", "TrainerConfig", "UnfreezeStepConfig", "WandbConfig",
    "WarmupConfig", "diff",
    "dump_yaml", "load_yaml_file", "parse_override",
]
