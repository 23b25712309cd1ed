"""Opt-in compiled training: K whole default steps as one ``torch.compile`` graph.

``train_lib.create_trainer`` hands a :class:`CompiledTrainStep` to the Trainer as its
``step_fn`` when ``runtime.enable_xla`` is set and the setup is covered; nothing in
``core`` depends on this package.
"""

from torchgarden.compile.train_step import (
    CompiledTrainStep,
    choose_steps_per_call,
    compiled_train_step,
    unsupported_reason,
)

__all__ = [
    "CompiledTrainStep", "choose_steps_per_call", "compiled_train_step", "unsupported_reason",
]
