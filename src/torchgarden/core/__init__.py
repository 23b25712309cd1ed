"""The Task (what is trained), the Trainer (how N steps run) and the Evaluator."""

from torchgarden.core.evaluator import Evaluator
from torchgarden.core.state import GlobalStep, LossMean, RngState
from torchgarden.core.task import Logs, Task
from torchgarden.core.trainer import StepFunction, Trainer

__all__ = ["Evaluator", "GlobalStep", "Logs", "LossMean", "RngState", "StepFunction", "Task",
           "Trainer"]
