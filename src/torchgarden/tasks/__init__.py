"""Built-in tasks. Importing this package registers each Task for its config class."""

from torchgarden.tasks.image_classification import ImageClassificationTask
from torchgarden.tasks.language_model import LanguageModelTask
from torchgarden.tasks.retinanet import RetinaNetTask
from torchgarden.tasks.semantic_segmentation import SemanticSegmentationTask
from torchgarden.tasks.toy import ToyRegressionTask

__all__ = ["ImageClassificationTask", "ToyRegressionTask", "SemanticSegmentationTask",
           "RetinaNetTask", "LanguageModelTask"]
