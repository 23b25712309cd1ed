"""Opt-in compiled training (``runtime.enable_xla``): K whole default steps as one
``torch.compile`` graph, the Trainer's ``step_fn``; nothing in ``core`` depends on it."""

from torchgarden.compile.train_step import (
    CompiledTrainStep,
    choose_steps_per_call,
    compiled_train_step,
    unsupported_reason,
)

__all__ = [
    "CompiledTrainStep", "choose_steps_per_call", "compiled_train_step", "unsupported_reason",
]
