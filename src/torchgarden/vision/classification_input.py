"""Model Garden's classification parser (``classification_input.Parser``) in torch and OpenCV.

For one encoded image (JPEG or PNG) and its label:

* training: with ``aug_crop``, a random crop drawn as ``tf.image.sample_distorted_bounding_box``
  draws it (`sample_distorted_box`: aspect ratio in [3/4, 4/3], area fraction in
  ``crop_area_range``, 10 attempts); when that crop is the whole image (every attempt
  failed), the ``center_crop_fraction`` center crop instead; then ``aug_rand_hflip``
  (probability 1/2); then a bilinear resize to the model's input size
  (``tf.image.resize``: half-pixel centers, no antialiasing);
* evaluation: the ``center_crop_fraction`` center crop of the shorter side, then the resize;
* both: normalized with ImageNet's mean and standard deviation (Model Garden's
  ``MEAN_RGB`` / ``STDDEV_RGB``), as a float ``[3, H, W]`` tensor.

JPEGs are decoded with libjpeg-turbo as ``tf.io.decode_jpeg`` decodes them by default (fast
integer DCT, fancy upsampling: pixels equal to TensorFlow's; ``simplejpeg``), other formats
with OpenCV (EXIF orientation ignored, as TensorFlow ignores it); the crop is resized in
float32 by OpenCV, as ``tf.image.resize`` returns float (both from the ``tfrecord`` extra).
JPEGs decode at a reduced scale (libjpeg's DCT scaling) when the crop stays at least as
large as the output at that scale, which is faster and differs from decoding in full by
resampling error only (``draft_decode=False`` decodes in full). Hooks for further
augmentation, each a function of the image and the record's ``numpy.random.Generator``
returning the image, in Model Garden's order: ``pre_resize`` (the flipped crop, float
``[3, h, w]`` in 0..255: color jitter), ``post_resize`` (the resized image, 0..255:
RandAugment / AutoAugment), ``post_normalize`` (the normalized image: random erasing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "ClassificationParser",
    "ClassificationRecord",
    "center_crop_box",
    "decode_image",
    "image_shape",
    "sample_distorted_box",
]

MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)
_MEAN = torch.tensor(MEAN_RGB).view(3, 1, 1)
_STD = torch.tensor(STDDEV_RGB).view(3, 1, 1)
Box = tuple[int, int, int, int]  # (top, left, height, width)
Hook = Callable[[torch.Tensor, np.random.Generator], torch.Tensor]


def image_shape(model_config: Any) -> tuple[int, int, int]:
    """``(height, width, channels)`` of ``task.model.input_size`` (Model Garden's order)."""
    height, width, channels = model_config.input_size
    return int(height), int(width), int(channels)


def sample_distorted_box(
    height: int, width: int, rng: np.random.Generator, *,
    area_range: Sequence[float] = (0.08, 1.0),
    aspect_ratio_range: Sequence[float] = (3 / 4, 4 / 3), max_attempts: int = 10,
) -> Box:
    """A random crop as ``tf.image.sample_distorted_bounding_box`` draws it for Model
    Garden's ``random_crop_image`` (the whole image as the box, ``min_object_covered =
    area_range[0]``): per attempt an aspect ratio, then a height uniform among those whose
    area fits, then a uniform position; the whole image when every attempt fails."""
    total = float(height * width)
    min_area, max_area = area_range[0] * total, area_range[1] * total
    for _ in range(max_attempts):
        ratio = float(rng.uniform(aspect_ratio_range[0], aspect_ratio_range[1]))
        box = _crop_for_ratio(height, width, ratio, min_area, max_area, rng)
        if box is not None:  # The area bounds imply min_object_covered = area_range[0].
            return box
    return 0, 0, height, width


def _crop_for_ratio(height: int, width: int, ratio: float, min_area: float, max_area: float,
                    rng: np.random.Generator) -> Box | None:
    min_h = int(_round(math.sqrt(min_area / ratio)))
    max_h = int(_round(math.sqrt(max_area / ratio)))
    if _round(max_h * ratio) > width:
        max_h = int((width + 0.5 - 1e-7) / ratio)
        if _round(max_h * ratio) > width:
            max_h -= 1
    max_h = min(max_h, height)
    min_h = min(min_h, max_h)
    h = min_h + int(rng.integers(max_h - min_h + 1)) if max_h > min_h else min_h
    w = int(_round(h * ratio))
    if w * h < min_area:
        h += 1
        w = int(_round(h * ratio))
    if w * h > max_area:
        h -= 1
        w = int(_round(h * ratio))
    if w * h < min_area or w * h > max_area or w > width or h > height or w <= 0 or h <= 0:
        return None
    top = int(rng.integers(height - h)) if h < height else 0
    left = int(rng.integers(width - w)) if w < width else 0
    return top, left, h, w


def _round(value: float) -> float:
    """C's ``lrintf``: round half to even."""
    return float(round(value))


def center_crop_box(height: int, width: int, fraction: float) -> Box:
    """Model Garden's ``center_crop_image``: a square of ``fraction`` of the shorter side."""
    size = fraction * min(height, width)
    top, left = int((height - size) / 2.0), int((width - size) / 2.0)
    return top, left, int(size), int(size)


class ClassificationParser:
    """Encoded image + label -> ``(float [3, H, W] tensor, label)`` as Model Garden parses.

    Args:
        output_size: ``(height, width)`` of the output.
        is_training: Random crop and flip (training) or center crop (evaluation).
        aug_crop: Random crops when training (Model Garden's ``aug_crop``).
        crop_area_range: Area fractions of the random crop.
        center_crop_fraction: Side of the center crop as a fraction of the shorter side.
        aug_rand_hflip: Random left-right flips when training.
        num_classes: For multi-hot labels (``is_multilabel``).
        is_multilabel: Labels are lists of class ids, returned multi-hot.
        draft_decode: Let JPEGs decode at a reduced scale where the crop allows.
        resize_method: ``bilinear`` or ``nearest`` (half-pixel centers, as TF2).
    """

    def __init__(self, output_size: Sequence[int], *, is_training: bool, aug_crop: bool = True,
                 crop_area_range: Sequence[float] = (0.08, 1.0),
                 center_crop_fraction: float = 0.875, aug_rand_hflip: bool = True,
                 num_classes: int = 0, is_multilabel: bool = False,
                 draft_decode: bool = True, resize_method: str = "bilinear") -> None:
        self.output_size = (int(output_size[0]), int(output_size[1]))
        self.is_training = is_training
        self.aug_crop = aug_crop
        self.crop_area_range = tuple(crop_area_range)
        self.center_crop_fraction = center_crop_fraction
        self.aug_rand_hflip = aug_rand_hflip
        self.num_classes = num_classes
        self.is_multilabel = is_multilabel
        self.draft_decode = draft_decode
        self.resize_mode = "nearest-exact" if resize_method == "nearest" else "bilinear"
        self.pre_resize: list[Hook] = []
        self.post_resize: list[Hook] = []
        self.post_normalize: list[Hook] = []

    def crop_box(self, height: int, width: int, rng: np.random.Generator) -> Box:
        """The crop of an image of this size (random when training with ``aug_crop``)."""
        if self.is_training and self.aug_crop:
            box = sample_distorted_box(height, width, rng, area_range=self.crop_area_range)
            if box != (0, 0, height, width):
                return box
        elif self.is_training:
            return 0, 0, height, width
        return center_crop_box(height, width, self.center_crop_fraction)

    def decode_crop(self, encoded: bytes, rng: np.random.Generator) -> torch.Tensor:
        """The crop of the encoded image as a uint8 ``[3, h, w]`` tensor (a view of the
        decoded channels-last pixels)."""
        import simplejpeg

        if not simplejpeg.is_jpeg(encoded):
            pixels = decode_image(encoded)
            top, left, h, w = self.crop_box(*pixels.shape[:2], rng)
            return torch.from_numpy(pixels[top:top + h, left:left + w]).permute(2, 0, 1)
        height, width = simplejpeg.decode_jpeg_header(encoded)[:2]
        top, left, h, w = self.crop_box(height, width, rng)
        wanted = (0, 0)  # In full, unless the crop allows half the size or less.
        if self.draft_decode:
            out_h, out_w = self.output_size
            wanted = (math.ceil(height * out_h / h), math.ceil(width * out_w / w))
            if 2 * wanted[0] > height or 2 * wanted[1] > width:
                wanted = (0, 0)
        pixels = decode_image(encoded, wanted)
        scale = pixels.shape[1] / width
        y0, x0 = int(top * scale), int(left * scale)
        y1 = max(y0 + 1, round((top + h) * scale))
        x1 = max(x0 + 1, round((left + w) * scale))
        return torch.from_numpy(pixels[y0:y1, x0:x1]).permute(2, 0, 1)

    def image(self, encoded: bytes, rng: np.random.Generator) -> torch.Tensor:
        """The parsed, normalized float ``[3, H, W]`` image."""
        pixels = self.decode_crop(encoded, rng).permute(1, 2, 0).numpy()  # [h, w, 3]
        flip = self.is_training and self.aug_rand_hflip and rng.random() < 0.5
        image = pixels.astype(np.float32)
        if self.pre_resize:
            crop = torch.from_numpy(image).permute(2, 0, 1)
            crop = crop.flip(-1) if flip else crop
            for hook in self.pre_resize:
                crop = hook(crop, rng)
            image, flip = crop.permute(1, 2, 0).contiguous().numpy(), False
        resized = _resize(image, self.output_size, self.resize_mode)
        if flip:  # Resizing is mirror-symmetric: flip after it (fewer pixels).
            resized = _cv2().flip(resized, 1)
        image = torch.from_numpy(resized).permute(2, 0, 1)  # channels-last [3, H, W]
        for hook in self.post_resize:
            image = hook(image, rng)
        normalized = torch.empty(image.shape)  # contiguous
        torch.sub(image, _MEAN, out=normalized)
        image = normalized.div_(_STD)
        for hook in self.post_normalize:
            image = hook(image, rng)
        return image

    def label(self, label: Any) -> Any:
        """An int class id, or a multi-hot float vector (``is_multilabel``)."""
        if not self.is_multilabel:
            return int(label)
        hot = torch.zeros(self.num_classes)
        hot[torch.as_tensor(label, dtype=torch.long)] = 1.0
        return hot

    def __call__(self, decoded: dict[str, Any], seed: int) -> tuple[torch.Tensor, Any]:
        rng = np.random.default_rng(seed)
        return self.image(decoded["image"], rng), self.label(decoded["label"])


class ClassificationRecord:
    """A ``tf.train.Example`` record -> ``(image, label)``: Model Garden's classification
    decoder, then `ClassificationParser` (picklable: runs in loader workers).

    Args:
        parser: The parser.
        image_key: Feature of the encoded image (``image_field_key``).
        label_key: Feature of the label (``label_field_key``).
        num_classes: Labels must be in ``[0, num_classes)``.
    """

    def __init__(self, parser: ClassificationParser, *, image_key: str = "image/encoded",
                 label_key: str = "image/class/label", num_classes: int = 0) -> None:
        self.parser, self.image_key, self.label_key = parser, image_key, label_key
        self.num_classes = num_classes

    @classmethod
    def from_config(cls, params: Any, model_config: Any) -> ClassificationRecord:
        """The record parser of an ``ImageClassificationDataConfig`` for ``task.model``."""
        height, width, _ = image_shape(model_config)
        parser = ClassificationParser(
            (height, width), is_training=bool(params.is_training), aug_crop=params.aug_crop,
            crop_area_range=params.crop_area_range,
            center_crop_fraction=params.center_crop_fraction,
            aug_rand_hflip=params.aug_rand_hflip, num_classes=model_config.num_classes,
            is_multilabel=params.is_multilabel, resize_method=params.tf_resize_method)
        _attach_augmenter(parser, params)
        return cls(parser, image_key=params.image_field_key, label_key=params.label_field_key,
                   num_classes=model_config.num_classes)

    def __call__(self, data: bytes, seed: int) -> tuple[torch.Tensor, Any]:
        from torchgarden.data.tf_example import decode_classification

        decoded = decode_classification(data, image_key=self.image_key,
                                        label_key=self.label_key,
                                        is_multilabel=self.parser.is_multilabel)
        labels = np.atleast_1d(decoded["label"])
        if self.num_classes and len(labels) and (labels.min() < 0
                                                 or labels.max() >= self.num_classes):
            raise ValueError(f"label {labels.tolist()} is outside [0, {self.num_classes}) "
                             "(task.model.num_classes)")
        return self.parser(decoded, seed)


def _cv2() -> Any:
    """OpenCV, run sequentially: one image is too small to split, and the loader workers
    are the parallelism (nor does a thread pool survive the fork that starts them)."""
    import cv2

    if cv2.getNumThreads() != 0:
        cv2.setNumThreads(0)
    return cv2


def decode_image(encoded: bytes, min_size: tuple[int, int] = (0, 0)) -> np.ndarray:
    """RGB uint8 ``[h, w, 3]`` pixels of an encoded image as ``tf.io.decode_image``
    decodes it (see the module docstring); a JPEG at the smallest DCT scale of 1/2 or less
    that keeps ``min_size`` (``(0, 0)``, or none: in full).

    Raises:
        ValueError: The bytes are no image either decoder reads.
    """
    import simplejpeg

    if simplejpeg.is_jpeg(encoded):
        try:
            return simplejpeg.decode_jpeg(encoded, "RGB", fastdct=True, fastupsample=False,
                                          min_height=min_size[0], min_width=min_size[1],
                                          min_factor=2 if min_size[0] else 1)
        except ValueError as error:  # CMYK JPEGs, which TurboJPEG does not turn into RGB
            if "CMYK" not in str(error):
                raise
    cv2 = _cv2()
    flags = cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION
    pixels = cv2.imdecode(np.frombuffer(encoded, np.uint8), flags)
    if pixels is None:
        raise ValueError(f"image of {len(encoded)} bytes could not be decoded")
    return pixels


def _resize(image: np.ndarray, size: tuple[int, int], mode: str) -> np.ndarray:
    """``tf.image.resize`` of a float ``[h, w, 3]`` image (half-pixel centers, no
    antialiasing): OpenCV's ``INTER_LINEAR`` / ``INTER_NEAREST_EXACT``."""
    cv2 = _cv2()
    method = cv2.INTER_LINEAR if mode == "bilinear" else cv2.INTER_NEAREST_EXACT
    if image.shape[:2] == size:
        return image
    return cv2.resize(image, (size[1], size[0]), interpolation=method)


def _attach_augmenter(parser: ClassificationParser, params: Any) -> None:
    """The split's ``color_jitter``, ``aug_type``, ``random_erasing`` and ``dtype`` as the
    parser's hooks, where Model Garden's parser applies them: jitter on the crop, the
    policy on the resized image cast to uint8 (as its ``distort`` casts), erasing on the
    normalized image, the cast last."""
    from torchgarden.vision.classification_augment import build_augmenter

    augmenter = build_augmenter(params)
    if augmenter is None:
        return

    def generator(rng: np.random.Generator) -> torch.Generator:
        return torch.Generator().manual_seed(int(rng.integers(2**62)))

    if augmenter.color_jitter:
        parser.pre_resize.append(
            lambda image, rng: augmenter.jitter(image, generator(rng)).float())
    if augmenter.policy is not None:
        parser.post_resize.append(lambda image, rng: augmenter.distort(
            image.clamp(0, 255).to(torch.uint8), generator(rng)).float())
    if augmenter.random_erasing is not None:
        parser.post_normalize.append(
            lambda image, rng: augmenter.erase(image, generator(rng)))
    if augmenter.dtype != torch.float32:
        parser.post_normalize.append(lambda image, rng: augmenter.cast(image))
