"""Model Garden's RandAugment/AutoAugment ops: values computed by hand at given levels."""

from __future__ import annotations

import pytest
import torch

from torchgarden.vision.autoaugment import (
    POLICIES,
    RANDAUG_OPS,
    AutoAugment,
    RandAugment,
    apply_op,
    autocontrast,
    blend,
    contrast,
    equalize,
    grayscale,
    level_to_args,
    posterize,
    rotate,
    sharpness,
    solarize,
    solarize_add,
    transform,
)


def _image(seed: int = 0, shape: tuple[int, ...] = (3, 6, 7)) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _args(name: str, level: float, **consts: float) -> tuple[float, ...]:
    consts = {"cutout_const": 40.0, "translate_const": 10.0, **consts}
    return level_to_args(name, level, generator=torch.Generator().manual_seed(0), **consts)


def test_level_args_follow_model_gardens_0_to_10_scale():
    assert _args("Posterize", 10) == (4,) and _args("Posterize", 7) == (2,)  # int(0.7 * 4)
    assert _args("Solarize", 5) == (128,) and _args("Solarize", 10) == (256,)
    assert _args("SolarizeAdd", 10) == (110,)
    assert _args("Cutout", 5, cutout_const=40) == (20,)
    assert _args("Color", 10) == pytest.approx((1.9,)) and _args("Sharpness", 0) == (0.1,)
    assert abs(_args("Rotate", 10)[0]) == pytest.approx(30.0)
    assert abs(_args("ShearX", 5)[0]) == pytest.approx(0.15)
    assert abs(_args("TranslateY", 10, translate_const=250)[0]) == pytest.approx(250.0)
    assert _args("Equalize", 9) == ()


def test_signed_levels_are_negated_half_the_time():
    gen = torch.Generator().manual_seed(1)
    signs = {level_to_args("Rotate", 10, cutout_const=0, translate_const=0, generator=gen)[0] > 0
             for _ in range(50)}
    assert signs == {True, False}


def test_posterize_solarize_invert_values():
    image = torch.tensor([[[0, 15, 16, 127, 128, 200, 255]]], dtype=torch.uint8)
    assert posterize(image, 4).tolist() == [[[0, 0, 16, 112, 128, 192, 240]]]
    # bits 0 shifts by 8, which TF clamps to 7: only the top bit survives.
    assert posterize(image, 0).tolist() == [[[0, 0, 0, 0, 128, 128, 128]]]
    assert solarize(image, 128).tolist() == [[[0, 15, 16, 127, 127, 55, 0]]]
    # Level 10 gives threshold 256, which TF's uint8 conversion wraps to 0: all inverted.
    assert solarize(image, 256).equal(255 - image)
    assert solarize_add(image, 110).tolist() == [[[110, 125, 126, 237, 128, 200, 255]]]
    assert apply_op(image, "Invert", ()).tolist() == [[[255, 240, 239, 128, 127, 55, 0]]]


def test_blend_truncates_inside_and_clips_outside():
    a = torch.tensor([[[10, 100]]], dtype=torch.uint8)
    b = torch.tensor([[[20, 201]]], dtype=torch.uint8)
    assert blend(a, b, 0.55).tolist() == [[[15, 155]]]  # 15.5 and 155.55 truncated
    assert blend(a, b, 1.9).tolist() == [[[29, 255]]]  # 29.0, 291.9 clipped
    assert blend(a, b, 0.0) is a and blend(a, b, 1.0) is b


def test_brightness_and_contrast_degenerates():
    image = torch.full((3, 16, 16), 200, dtype=torch.uint8)
    assert apply_op(image, "Brightness", (0.5,)).unique().tolist() == [100]
    # Model Garden's contrast degenerate is the pixel count / 256 (here 256 / 256 = 1).
    assert contrast(image, 0.5).unique().tolist() == [100]  # 1 + 0.5 * 199 = 100.5


def test_grayscale_and_color_match_tf_rgb_to_grayscale():
    image = torch.tensor([[[255]], [[0]], [[0]]], dtype=torch.uint8)
    assert grayscale(image).item() == int(0.2989 * 255.5)  # 76
    assert apply_op(image, "Color", (0.0,)).flatten().tolist() == [76, 76, 76]


def test_autocontrast_and_equalize_per_channel():
    image = torch.tensor([[[50, 100], [150, 150]]], dtype=torch.uint8)
    assert autocontrast(image).tolist() == [[[0, 127], [255, 255]]]
    flat = torch.full((1, 2, 2), 7, dtype=torch.uint8)
    assert autocontrast(flat).equal(flat) and equalize(flat).equal(flat)
    # histogram {0: 2, 1: 2, 2: 2, 3: 2}: step = (8 - 2) // 255 = 0, so unchanged
    ramp = torch.tensor([[[0, 1, 2, 3], [0, 1, 2, 3]]], dtype=torch.uint8)
    assert equalize(ramp).equal(ramp)
    big = torch.arange(256, dtype=torch.uint8).repeat(4).view(1, 32, 32) // 2
    lut_image = equalize(big)  # 128 values x 8: step = 1016 // 255 = 3, lut = (cum + 1) // 3
    assert lut_image[0, 0, :3].tolist() == [0, 0, 3]


def test_sharpness_keeps_the_border_and_smooths_the_inside():
    image = torch.zeros(1, 3, 3, dtype=torch.uint8)
    image[0, 1, 1] = 130
    out = sharpness(image, 0.0)  # the degenerate: (5 * 130) / 13 = 50 inside
    assert out[0, 1, 1].item() == 50 and out[0, 0].tolist() == [0, 0, 0]


def test_rotate_by_zero_and_by_90_and_translate():
    image = _image()
    assert rotate(image, 0.0).equal(image)
    square = _image(shape=(3, 5, 5))
    # Positive degrees in Model Garden's transform turn content counter-clockwise.
    assert rotate(square, 90.0).equal(torch.rot90(square, 1, dims=(1, 2)))
    shifted = apply_op(image, "TranslateX", (2.0,))
    assert shifted[:, :, :5].equal(image[:, :, 2:])
    # Keras' default reflect fill: column 5 reads x=7 -> 6, column 6 reads x=8 -> 5.
    assert shifted[:, :, 5].equal(image[:, :, 6]) and shifted[:, :, 6].equal(image[:, :, 5])


def test_shear_and_cutout():
    image = _image()
    assert transform(image, [1, 0, 0, 0, 1, 0]).equal(image)
    sheared = apply_op(image, "ShearX", (1.0,))  # row y reads x + y
    assert sheared[:, 1, :6].equal(image[:, 1, 1:])
    gen = torch.Generator().manual_seed(3)
    out = apply_op(torch.zeros(3, 20, 20, dtype=torch.uint8), "Cutout", (2,), gen)
    assert set(out.unique().tolist()) == {0, 128} and int((out[0] == 128).sum()) <= 16


@pytest.mark.parametrize("op", RANDAUG_OPS)
def test_every_op_keeps_shape_and_dtype(op):
    image = _image()
    out = apply_op(image, op, _args(op, 7), torch.Generator().manual_seed(0))
    assert out.shape == image.shape and out.dtype == torch.uint8


def test_randaugment_layers_draw_from_the_generator():
    image = _image(shape=(3, 16, 16))
    aug = RandAugment(num_layers=2, magnitude=9)
    first = aug(image, torch.Generator().manual_seed(5))
    assert aug(image, torch.Generator().manual_seed(5)).equal(first)
    outs = {tuple(aug(image, torch.Generator().manual_seed(s)).flatten()[:40].tolist())
            for s in range(8)}
    assert len(outs) > 1
    only_invert = RandAugment(num_layers=1, exclude_ops=[o for o in RANDAUG_OPS if o != "Invert"])
    # Two branches: Invert or identity.
    results = {only_invert(image, torch.Generator().manual_seed(s)).equal(255 - image)
               for s in range(20)}
    assert results == {True, False}
    never = RandAugment(num_layers=3, prob_to_apply=0.0)
    assert never(image, torch.Generator().manual_seed(0)).equal(image)


def test_float_images_are_clipped_truncated_and_returned_as_float():
    aug = RandAugment(num_layers=1, exclude_ops=[o for o in RANDAUG_OPS if o != "Invert"])
    image = torch.tensor([[[-3.0, 10.7, 300.0]]])
    outs = {tuple(aug(image, torch.Generator().manual_seed(s)).flatten().tolist())
            for s in range(20)}
    assert outs == {(0.0, 10.0, 255.0), (255.0, 245.0, 0.0)}


def test_autoaugment_policies_and_unknown_names():
    assert len(POLICIES["v0"]) == 25 and POLICIES["v0"][0] == (("Equalize", 0.8, 1.0),
                                                               ("ShearY", 0.8, 4.0))
    assert all(sub[-1] == ("Cutout", 0.8, 8.0) for sub in POLICIES["vit"])
    aug = AutoAugment(augmentation_name="test", translate_const=250)
    image = _image(shape=(3, 8, 8))
    out = aug(image, torch.Generator().manual_seed(0))  # TranslateX 100 px, then Equalize
    assert out.shape == image.shape
    with pytest.raises(ValueError, match="detection_v0"):
        AutoAugment(augmentation_name="detection_v0")
    with pytest.raises(ValueError, match="exclude_ops"):
        RandAugment(exclude_ops=["Blur"])
