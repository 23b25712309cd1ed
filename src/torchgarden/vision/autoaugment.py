"""Model Garden's RandAugment and AutoAugment on uint8 ``[C, H, W]`` tensors, in torch.

Each op gives the values Model Garden's ``official/vision/ops/augment.py`` gives for the
same image and the same random draws: uint8 arithmetic with its truncating casts
(``blend``), PIL-style ``Equalize``/``AutoContrast``/``Sharpness``, its ``Contrast``
degenerate (the pixel count / 256, as Model Garden computes it), geometric ops with
nearest sampling and Keras' ``reflect`` fill (what its ``transform`` does by default),
and the 0-10 level scale (``level_to_args``). No library gives these values: kornia's
and torchvision's RandAugment use other op lists, magnitude ranges and float arithmetic
(docs/porting_from_model_garden.md, "Deliberate differences").

Random numbers come from ``generator`` (None: torch's global RNG, which
`torchgarden.data` seeds per batch in loader workers), so a run is a function of its seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

__all__ = ["POLICIES", "RANDAUG_OPS", "AutoAugment", "RandAugment", "apply_op", "level_to_args"]

MAX_LEVEL = 10.0
_REPLACE = 128  # Model Garden's fill value for Cutout
RANDAUG_OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color",
    "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY",
    "Cutout", "SolarizeAdd",
)
"""RandAugment's ops in Model Garden's order (``exclude_ops`` removes some)."""

# AutoAugment policies (the AutoAugment paper's sub-policies as Model Garden names them):
# each sub-policy is ((op, probability, level), ...).
_V0 = (
    "Equalize .8 1 ShearY .8 4|Color .4 9 Equalize .6 3|Color .4 1 Rotate .6 8|"
    "Solarize .8 3 Equalize .4 7|Solarize .4 2 Solarize .6 2|Color .2 0 Equalize .8 8|"
    "Equalize .4 8 SolarizeAdd .8 3|ShearX .2 9 Rotate .6 8|Color .6 1 Equalize 1 2|"
    "Invert .4 9 Rotate .6 0|Equalize 1 9 ShearY .6 3|Color .4 7 Equalize .6 0|"
    "Posterize .4 6 AutoContrast .4 7|Solarize .6 8 Color .6 9|Solarize .2 4 Rotate .8 9|"
    "Rotate 1 7 TranslateY .8 9|ShearX 0 0 Solarize .8 4|ShearY .8 0 Color .6 4|"
    "Color 1 0 Rotate .6 2|Equalize .8 4 Equalize 0 8|Equalize 1 4 AutoContrast .6 2|"
    "ShearY .4 7 SolarizeAdd .6 7|Posterize .8 2 Solarize .6 10|Solarize .6 8 Equalize .6 1|"
    "Color .8 6 Rotate .4 5"
)
_SIMPLE = (
    "Color .4 9 Equalize .6 3|Solarize .8 3 Equalize .4 7|Solarize .4 2 Solarize .6 2|"
    "Color .2 0 Equalize .8 8|Equalize .4 8 SolarizeAdd .8 3|Color .6 1 Equalize 1 2|"
    "Color .4 7 Equalize .6 0|Posterize .4 6 AutoContrast .4 7|Solarize .6 8 Color .6 9|"
    "Equalize .8 4 Equalize 0 8|Equalize 1 4 AutoContrast .6 2|Posterize .8 2 Solarize .6 10|"
    "Solarize .6 8 Equalize .6 1"
)
_REDUCED_IMAGENET = (
    "Posterize .4 8 Rotate .6 9|Solarize .6 5 AutoContrast .6 5|Equalize .8 8 Equalize .6 3|"
    "Posterize .6 7 Posterize .6 6|Equalize .4 7 Solarize .2 4|Equalize .4 4 Rotate .8 8|"
    "Solarize .6 3 Equalize .6 7|Posterize .8 5 Equalize 1 2|Rotate .2 3 Solarize .6 8|"
    "Equalize .6 8 Posterize .4 6|Rotate .8 8 Color .4 0|Rotate .4 9 Equalize .6 2|"
    "Equalize 0 7 Equalize .8 8|Invert .6 4 Equalize 1 8|Color .6 4 Contrast 1 8|"
    "Rotate .8 8 Color 1 2|Color .8 8 Solarize .8 7|Sharpness .4 7 Invert .6 8|"
    "ShearX .6 5 Equalize 1 9|Color .4 0 Equalize .6 3|Equalize .4 7 Solarize .2 4|"
    "Solarize .6 5 AutoContrast .6 5|Invert .6 4 Equalize 1 8|Color .6 4 Contrast 1 8|"
    "Equalize .8 8 Equalize .6 3"
)
_REDUCED_CIFAR10 = (
    "Invert .1 7 Contrast .2 6|Rotate .7 2 TranslateX .3 9|Sharpness .8 1 Sharpness .9 3|"
    "ShearY .5 8 TranslateY .7 9|AutoContrast .5 8 Equalize .9 2|ShearY .2 7 Posterize .3 7|"
    "Color .4 3 Brightness .6 7|Sharpness .3 9 Brightness .7 9|Equalize .6 5 Equalize .5 1|"
    "Contrast .6 7 Sharpness .6 5|Color .7 7 TranslateX .5 8|Equalize .3 7 AutoContrast .4 8|"
    "TranslateY .4 3 Sharpness .2 6|Brightness .9 6 Color .2 8|Solarize .5 2 Invert 0 3|"
    "Equalize .2 0 AutoContrast .6 0|Equalize .2 8 Equalize .6 4|Color .9 9 Equalize .6 6|"
    "AutoContrast .8 4 Solarize .2 8|Brightness .1 3 Color .7 0|Solarize .4 5 AutoContrast .9 3|"
    "TranslateY .9 9 TranslateY .7 9|AutoContrast .9 2 Solarize .8 3|Equalize .8 8 Invert .1 3|"
    "TranslateY .7 9 AutoContrast .9 1"
)
_SVHN = (
    "ShearX .9 4 Invert .2 3|ShearY .9 8 Invert .7 5|Equalize .6 5 Solarize .6 6|"
    "Invert .9 3 Equalize .6 3|Equalize .6 1 Rotate .9 3|ShearX .9 4 AutoContrast .8 3|"
    "ShearY .9 8 Invert .4 5|ShearY .9 5 Solarize .2 6|Invert .9 6 AutoContrast .8 1|"
    "Equalize .6 3 Rotate .9 3|ShearX .9 4 Solarize .3 3|ShearY .8 8 Invert .7 4|"
    "Equalize .9 5 TranslateY .6 6|Invert .9 4 Equalize .6 7|Contrast .3 3 Rotate .8 4|"
    "Invert .8 5 TranslateY 0 2|ShearY .7 6 Solarize .4 8|Invert .6 4 Rotate .8 4|"
    "ShearY .3 7 TranslateX .9 3|ShearX .1 6 Invert .6 5|Solarize .7 2 TranslateY .6 7|"
    "ShearY .8 4 Invert .8 8|ShearX .7 9 TranslateY .8 3|ShearY .8 5 AutoContrast .7 3|"
    "ShearX .7 2 Invert .1 5"
)
_PANOPTIC = (
    "Sharpness .4 1.4 Brightness .2 2|Equalize 0 1.8 Contrast .2 2|"
    "Sharpness .2 1.8 Color .2 1.8|Solarize .2 1.4 Equalize .6 1.8|"
    "Sharpness .2 .2 Equalize .2 1.4"
)


def _parse(text: str) -> tuple[tuple[tuple[str, float, float], ...], ...]:
    subs = [sub.split() for sub in text.split("|")]
    return tuple(tuple((w[i], float(w[i + 1]), float(w[i + 2])) for i in range(0, len(w), 3))
                 for w in subs)


_VIT = _PANOPTIC + "|Sharpness .4 7 Invert .6 8|Invert .6 4 Equalize 1 8|" \
    "Posterize .6 7 Posterize .6 6|Solarize .6 5 AutoContrast .6 5"
POLICIES = {
    "v0": _parse(_V0), "test": _parse("TranslateX 1 4 Equalize 1 10"),
    "simple": _parse(_SIMPLE), "reduced_cifar10": _parse(_REDUCED_CIFAR10),
    "svhn": _parse(_SVHN), "reduced_imagenet": _parse(_REDUCED_IMAGENET),
    "panoptic_deeplab_policy": _parse(_PANOPTIC),
    "vit": tuple(sub + (("Cutout", 0.8, 8.0),) for sub in _parse(_VIT)),
}
"""AutoAugment's ``augmentation_name`` choices (Model Garden's ``detection_v0`` needs
box-aware ops and ``deit3_three_augment`` a Gaussian blur: not provided)."""


# ------------------------------------------------------------------------ pixel ops
def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    """tf.cast(float -> uint8) of values in [0, 255]: truncation."""
    return x.to(torch.uint8)


def blend(image1: torch.Tensor, image2: torch.Tensor, factor: float) -> torch.Tensor:
    """``image1 + factor * (image2 - image1)`` in float32, truncated (clipped if extrapolating)."""
    if factor == 0.0:
        return image1
    if factor == 1.0:
        return image2
    a = image1.float()
    temp = a + factor * (image2.float() - a)
    return _to_uint8(temp if 0.0 < factor < 1.0 else temp.clamp(0.0, 255.0))


def grayscale(image: torch.Tensor) -> torch.Tensor:
    """``tf.image.rgb_to_grayscale`` on uint8 (a ``[1, H, W]`` image is its own gray)."""
    if image.shape[0] != 3:
        return image[:1]
    weights = torch.tensor([0.2989, 0.5870, 0.1140]).view(3, 1, 1)
    gray = (image.float() * (1.0 / 255.0) * weights).sum(0, keepdim=True)
    return _to_uint8((gray * 255.5).clamp(0.0, 255.0))


def autocontrast(image: torch.Tensor) -> torch.Tensor:
    """Per channel: stretch [min, max] to [0, 255] (a flat channel is kept)."""
    out = []
    for channel in image:
        lo, hi = channel.min().float(), channel.max().float()
        if hi > lo:
            scale = 255.0 / (hi - lo)
            channel = _to_uint8((channel.float() * scale - lo * scale).clamp(0.0, 255.0))
        out.append(channel)
    return torch.stack(out)


def equalize(image: torch.Tensor) -> torch.Tensor:
    """PIL's histogram equalization per channel."""
    out = []
    for channel in image:
        histo = torch.bincount(channel.flatten().long(), minlength=256)
        nonzero = histo[histo != 0]
        step = int((nonzero.sum() - nonzero[-1]) // 255)
        if step:
            lut = (torch.cumsum(histo, 0) + step // 2) // step
            lut = torch.cat([lut.new_zeros(1), lut[:-1]]).clamp(0, 255)
            channel = lut[channel.long()].to(torch.uint8)
        out.append(channel)
    return torch.stack(out)


def posterize(image: torch.Tensor, bits: int) -> torch.Tensor:
    """Keeps the top ``bits`` bits; a shift of 8 acts as 7, as TF's clamped shifts do."""
    shift = min(8 - int(bits), 7)
    return (image >> shift) << shift


def solarize(image: torch.Tensor, threshold: int = 128) -> torch.Tensor:
    """Inverts the pixels at or above ``threshold``, taken as a uint8 as TF converts it: the
    256 of level 10 wraps to 0, so every pixel is inverted (google-research/big_vision#110)."""
    return torch.where(image < int(threshold) % 256, image, 255 - image)


def solarize_add(image: torch.Tensor, addition: int = 0, threshold: int = 128) -> torch.Tensor:
    """Adds ``addition`` (clipped) to the pixels below ``threshold``."""
    added = (image.long() + int(addition)).clamp(0, 255).to(torch.uint8)
    return torch.where(image < threshold, added, image)


def contrast(image: torch.Tensor, factor: float) -> torch.Tensor:
    """Blend with a flat image of Model Garden's degenerate value (pixel count / 256)."""
    height, width = image.shape[-2:]
    mean = min(max(height * width / 256.0, 0.0), 255.0)
    return blend(torch.full_like(image, int(mean)), image, factor)


def sharpness(image: torch.Tensor, factor: float) -> torch.Tensor:
    """Blend with PIL's SMOOTH filter of the image (border pixels kept)."""
    kernel = torch.tensor([[1.0, 1, 1], [1, 5, 1], [1, 1, 1]]) / 13.0
    channels = image.shape[0]
    smooth = F.conv2d(image.float()[None], kernel.expand(channels, 1, 3, 3), groups=channels)[0]
    result = image.clone()
    result[:, 1:-1, 1:-1] = _to_uint8(smooth.clamp(0.0, 255.0))
    return blend(result, image, factor)


def fill_rectangle(image: torch.Tensor, center: tuple[int, int], half: tuple[int, int],
                   fill: torch.Tensor | float) -> torch.Tensor:
    """``image`` with rows ``[cy - hy, cy + hy)`` and columns ``[cx - hx, cx + hx)`` (clipped)
    taken from ``fill`` (a tensor like ``image`` or a value); ``center``/``half`` are (y, x)."""
    (cy, cx), (hy, hx) = center, half
    height, width = image.shape[-2:]
    top, bottom = max(0, cy - hy), min(height, cy + hy)
    left, right = max(0, cx - hx), min(width, cx + hx)
    out = image.clone()
    if bottom > top and right > left:
        patch = fill[..., top:bottom, left:right] if isinstance(fill, torch.Tensor) else fill
        out[..., top:bottom, left:right] = patch
    return out


def cutout(image: torch.Tensor, pad_size: int, generator: torch.Generator | None) -> torch.Tensor:
    """Fills a ``2 * pad_size`` square at a uniform random centre with gray (128)."""
    height, width = image.shape[-2:]
    cy = int(torch.randint(0, height, (), generator=generator))
    cx = int(torch.randint(0, width, (), generator=generator))
    return fill_rectangle(image, (cy, cx), (int(pad_size), int(pad_size)), _REPLACE)


def _reflect(coord: torch.Tensor, length: int) -> torch.Tensor:
    """TF's ``FILL_REFLECT`` coordinate mapping (``d c b a | a b c d | d c b a``)."""
    if length <= 1:
        return torch.zeros_like(coord)
    size2 = 2.0 * length
    neg = size2 * torch.trunc(-coord / size2) + coord
    neg = torch.where(neg < -length, neg + size2, -neg - 1)
    pos = coord - size2 * torch.trunc(coord / size2)
    pos = torch.where(pos >= length, size2 - pos - 1, pos)
    mapped = torch.where(coord < 0, neg, torch.where(coord > length - 1, pos, coord))
    return mapped.clamp(0, length - 1)


def transform(image: torch.Tensor, matrix: Sequence[float]) -> torch.Tensor:
    """Keras' ``transform(..., interpolation='nearest')``: output pixel (x, y) reads input
    ``(a0 x + a1 y + a2, b0 x + b1 y + b2)``, reflected at the borders, rounded half away
    from zero."""
    a0, a1, a2, b0, b1, b2 = (float(v) for v in matrix[:6])
    height, width = image.shape[-2:]
    ys, xs = torch.meshgrid(torch.arange(height, dtype=torch.float32),
                            torch.arange(width, dtype=torch.float32), indexing="ij")
    src_x = _reflect(a0 * xs + a1 * ys + a2, width)
    src_y = _reflect(b0 * xs + b1 * ys + b2, height)
    ix = (torch.sign(src_x) * torch.floor(src_x.abs() + 0.5)).long()
    iy = (torch.sign(src_y) * torch.floor(src_y.abs() + 0.5)).long()
    return image[:, iy, ix]


def rotate(image: torch.Tensor, degrees: float) -> torch.Tensor:
    """Rotation about the centre by ``degrees`` (Model Garden's angle-to-transform)."""
    radians = degrees * math.pi / 180.0
    height, width = image.shape[-2:]
    cos, sin = math.cos(radians), math.sin(radians)
    x_off = ((width - 1) - (cos * (width - 1) - sin * (height - 1))) / 2.0
    y_off = ((height - 1) - (sin * (width - 1) + cos * (height - 1))) / 2.0
    return transform(image, [cos, -sin, x_off, sin, cos, y_off])


_GEOMETRIC: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "Rotate": rotate,
    "ShearX": lambda im, level: transform(im, [1.0, level, 0.0, 0.0, 1.0, 0.0]),
    "ShearY": lambda im, level: transform(im, [1.0, 0.0, 0.0, level, 1.0, 0.0]),
    "TranslateX": lambda im, pixels: transform(im, [1.0, 0.0, pixels, 0.0, 1.0, 0.0]),
    "TranslateY": lambda im, pixels: transform(im, [1.0, 0.0, 0.0, 0.0, 1.0, pixels]),
}


# ------------------------------------------------------------------ levels and ops
def level_to_args(name: str, level: float, *, cutout_const: float, translate_const: float,
                  generator: torch.Generator | None = None) -> tuple[float, ...]:
    """The op's argument at ``level`` (0-10), as Model Garden's ``level_to_arg``; signed
    args (rotate, shear, translate) are negated with probability 1/2 (one draw)."""
    scaled = level / MAX_LEVEL
    if name in ("AutoContrast", "Equalize", "Invert"):
        return ()
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        return (scaled * 1.8 + 0.1,)
    multipliers = {"Posterize": 4, "Solarize": 256, "SolarizeAdd": 110, "Cutout": cutout_const}
    if name in multipliers:
        return (int(scaled * multipliers[name]),)
    bounds = {"Rotate": 30.0, "ShearX": 0.3, "ShearY": 0.3, "TranslateX": translate_const,
              "TranslateY": translate_const}
    if name not in bounds:
        raise ValueError(f"unknown augmentation op {name!r}; expected one of {RANDAUG_OPS}")
    value = scaled * float(bounds[name])
    keep_sign = float(torch.rand((), generator=generator)) + 0.5 >= 1.0
    return (value if keep_sign else -value,)


def apply_op(image: torch.Tensor, name: str, args: tuple[float, ...],
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Applies Model Garden's op ``name`` with its (already levelled) ``args``."""
    if name in _GEOMETRIC:
        return _GEOMETRIC[name](image, *args)
    simple: dict[str, Callable[..., torch.Tensor]] = {
        "AutoContrast": autocontrast, "Equalize": equalize, "Invert": lambda im: 255 - im,
        "Posterize": posterize, "Solarize": solarize, "SolarizeAdd": solarize_add,
        "Color": lambda im, f: blend(grayscale(im).expand_as(im), im, f),
        "Contrast": contrast, "Brightness": lambda im, f: blend(torch.zeros_like(im), im, f),
        "Sharpness": sharpness,
    }
    if name == "Cutout":
        return cutout(image, int(args[0]), generator)
    return simple[name](image, *args)


def _as_uint8(image: torch.Tensor) -> torch.Tensor:
    """Model Garden's entry cast: float images clipped to [0, 255], truncated."""
    return image if image.dtype == torch.uint8 else _to_uint8(image.clamp(0.0, 255.0))


class RandAugment:
    """Model Garden's RandAugment: ``num_layers`` times, one of ``len(ops) + 1`` branches
    (the last keeps the image) drawn uniformly, at level ``magnitude`` (0-10).

    Args:
        num_layers: Ops applied in sequence. Defaults to 2.
        magnitude: Shared level on Model Garden's 0-10 scale. Defaults to 10.
        cutout_const: Cutout half size at level 10. Defaults to 40.
        translate_const: Translation in pixels at level 10. Defaults to 100.
        magnitude_std: When > 0, each op's level gets a standard-normal draw added and is
            clipped to [0, 10] (Model Garden adds N(0, 1) whatever the value). Defaults to 0.
        prob_to_apply: Each layer's result is kept with this probability (None: always).
        exclude_ops: Op names left out of ``RANDAUG_OPS``. Defaults to none.

    Example:
        >>> out = RandAugment(num_layers=2, magnitude=9)(torch.zeros(3, 8, 8, dtype=torch.uint8))
        >>> out.dtype, tuple(out.shape)
        (torch.uint8, (3, 8, 8))
    """

    def __init__(self, *, num_layers: int = 2, magnitude: float = 10.0,
                 cutout_const: float = 40.0, translate_const: float = 100.0,
                 magnitude_std: float = 0.0, prob_to_apply: float | None = None,
                 exclude_ops: Sequence[str] = ()) -> None:
        unknown = sorted(set(exclude_ops) - set(RANDAUG_OPS))
        if unknown:
            raise ValueError(f"exclude_ops: unknown op(s) {unknown}; ops are {list(RANDAUG_OPS)}")
        self.num_layers, self.magnitude = int(num_layers), float(magnitude)
        self.cutout_const, self.translate_const = float(cutout_const), float(translate_const)
        self.magnitude_std, self.prob_to_apply = float(magnitude_std), prob_to_apply
        self.ops = tuple(op for op in RANDAUG_OPS if op not in set(exclude_ops))

    def __call__(self, image: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Augments one ``[C, H, W]`` image; returns it in its input dtype."""
        dtype, image = image.dtype, _as_uint8(image)
        for _ in range(self.num_layers):
            index = int(torch.randint(0, len(self.ops) + 1, (), generator=generator))
            augmented = image
            if index < len(self.ops):
                name, level = self.ops[index], self.magnitude
                if self.magnitude_std > 0:
                    level = level + float(torch.randn((), generator=generator))
                    level = min(max(level, 0.0), MAX_LEVEL)
                args = level_to_args(name, level, cutout_const=self.cutout_const,
                                     translate_const=self.translate_const, generator=generator)
                augmented = apply_op(image, name, args, generator)
            if self.prob_to_apply is None or float(
                    torch.rand((), generator=generator)) < self.prob_to_apply:
                image = augmented
        return image.to(dtype)


class AutoAugment:
    """Model Garden's AutoAugment: one sub-policy drawn uniformly, each of its
    ``(op, probability, level)`` applied with its probability.

    Args:
        augmentation_name: A key of `POLICIES`. Defaults to ``v0``.
        cutout_const: Cutout half size at level 10. Defaults to 100.
        translate_const: Translation in pixels at level 10. Defaults to 250.
    """

    def __init__(self, *, augmentation_name: str = "v0", cutout_const: float = 100.0,
                 translate_const: float = 250.0) -> None:
        if augmentation_name not in POLICIES:
            raise ValueError(f"augmentation_name {augmentation_name!r} is not one of "
                             f"{', '.join(POLICIES)}")
        self.policy = POLICIES[augmentation_name]
        self.cutout_const, self.translate_const = float(cutout_const), float(translate_const)

    def __call__(self, image: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Augments one ``[C, H, W]`` image; returns it in its input dtype."""
        dtype, image = image.dtype, _as_uint8(image)
        sub_policy = self.policy[int(torch.randint(0, len(self.policy), (), generator=generator))]
        for name, prob, level in sub_policy:
            # Model Garden applies the op when floor(u + prob) is 1.
            if float(torch.rand((), generator=generator)) + prob >= 1.0:
                args = level_to_args(name, level, cutout_const=self.cutout_const,
                                     translate_const=self.translate_const, generator=generator)
                image = apply_op(image, name, args, generator)
        return image.to(dtype)
