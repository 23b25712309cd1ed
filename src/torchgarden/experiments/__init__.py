"""Built-in experiment configs, registered by name. Torch-free: importing this module
only defines dataclasses and registers factories (``torchgarden list`` stays fast).

The matching Task classes live in ``torchgarden.tasks`` and register for these config
classes when that package is imported (``get_task`` does it on demand).
"""

from torchgarden.experiments.augmentation import (
    AugmentationConfig,
    AutoAugmentConfig,
    MixupAndCutmixConfig,
    RandAugmentConfig,
    RandomErasingConfig,
)
from torchgarden.experiments.deeplab import deeplab_experiment
from torchgarden.experiments.image_classification import (
    ImageClassificationConfig,
    ImageClassificationDataConfig,
    ImageClassificationModelConfig,
    image_classification,
)
from torchgarden.experiments.imagenet import imagenet_experiment
from torchgarden.experiments.language_model import (
    LanguageModelConfig,
    LanguageModelDataConfig,
    LanguageModelModelConfig,
    language_model,
)
from torchgarden.experiments.multitask_digits import (
    CorruptedDigitsConfig,
    DigitParityConfig,
    DigitsMultiTaskConfig,
    SharedBackboneConfig,
    multitask_digits,
    multitask_digits_eval,
)
from torchgarden.experiments.multitask_shapes import (
    ShapePresenceConfig,
    ShapesMultiTaskConfig,
    multitask_shapes,
)
from torchgarden.experiments.retinanet import RetinaNetConfig, RetinaNetDataConfig, retinanet
from torchgarden.experiments.semantic_segmentation import (
    GeneratedShapesConfig,
    SegmentationDataConfig,
    SegmentationModelConfig,
    SemanticSegmentationConfig,
    semantic_segmentation,
)
from torchgarden.experiments.toy import ToyRegressionConfig, toy_regression

__all__ = [
    "AugmentationConfig",
    "AutoAugmentConfig",
    "MixupAndCutmixConfig",
    "RandAugmentConfig",
    "RandomErasingConfig",
    "ImageClassificationConfig",
    "ImageClassificationDataConfig",
    "ImageClassificationModelConfig",
    "image_classification",
    "imagenet_experiment",
    "deeplab_experiment",
    "ToyRegressionConfig",
    "toy_regression",
    "GeneratedShapesConfig",
    "SegmentationDataConfig",
    "SegmentationModelConfig",
    "SemanticSegmentationConfig",
    "semantic_segmentation",
    "LanguageModelConfig",
    "LanguageModelDataConfig",
    "LanguageModelModelConfig",
    "language_model",
    "RetinaNetConfig",
    "RetinaNetDataConfig",
    "retinanet",
    "CorruptedDigitsConfig",
    "DigitParityConfig",
    "DigitsMultiTaskConfig",
    "SharedBackboneConfig",
    "multitask_digits",
    "multitask_digits_eval",
    "ShapePresenceConfig",
    "ShapesMultiTaskConfig",
    "multitask_shapes",
]
