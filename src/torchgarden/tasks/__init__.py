"""Built-in tasks. Importing this package registers each Task for its config class
(``MultiTask`` for ``MultiTaskConfig`` included)."""

from torchgarden.config.multitask import MultiTaskConfig
from torchgarden.multitask import MultiTask
from torchgarden.registry import register_task
from torchgarden.tasks.image_classification import ImageClassificationTask
from torchgarden.tasks.language_model import LanguageModelTask
from torchgarden.tasks.multitask_digits import (
    CorruptedDigitsTask,
    DigitParityTask,
    DigitsMultiTask,
)
from torchgarden.tasks.multitask_shapes import ShapePresenceTask, ShapesMultiTask
from torchgarden.tasks.retinanet import RetinaNetTask
from torchgarden.tasks.semantic_segmentation import SemanticSegmentationTask
from torchgarden.tasks.toy import ToyRegressionTask

register_task(MultiTaskConfig)(MultiTask)

__all__ = ["ImageClassificationTask", "ToyRegressionTask", "SemanticSegmentationTask",
           "RetinaNetTask", "LanguageModelTask", "CorruptedDigitsTask", "DigitParityTask",
           "DigitsMultiTask", "ShapePresenceTask", "ShapesMultiTask"]
