"""The Task (what is trained) and the Trainer (how N steps run)."""

from torchgarden.core.state import GlobalStep, LossMean, RngState
from torchgarden.core.task import Logs, Task
from torchgarden.core.trainer import Trainer

__all__ = ["Task", "Trainer", "GlobalStep", "LossMean", "RngState", "Logs"]
