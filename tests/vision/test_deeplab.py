"""Model Garden's segmentation model in torchgarden: the dilated ResNet's strides and
dilations, parameter counts, ASPP, the DeepLabV3+ head, the loss's hard-pixel mining and the
schema's refusals (`torchgarden.vision.deeplab`, `torchgarden.models.dilated_resnet`)."""

from __future__ import annotations

import math

import pytest
import torch

import torchgarden as tg
from torchgarden.config import ConfigError
from torchgarden.config.notices import collect_notices
from torchgarden.experiments.semantic_segmentation import SegmentationBackbone
from torchgarden.models.backbones import NormActivation
from torchgarden.models.garden import build_pyramid_backbone
from torchgarden.vision.deeplab import ASPP, SegmentationHead
from torchgarden.vision.segmentation_loss import segmentation_loss

pytest.importorskip("transformers")


def _pyramid(kind: str, **block):
    backbone = SegmentationBackbone.from_dict({"type": kind, kind: block})
    backbone.validate()
    return build_pyramid_backbone(backbone, NormActivation())


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("output_stride, sizes, rates", [
    (16, {"2": 16, "3": 8, "4": 4}, [[1] * 6, [2, 4, 8]]),
    (8, {"2": 16, "3": 8}, [[2] * 6, [4, 8, 16]]),
])
def test_dilated_resnet_keeps_the_resolution_past_output_stride(output_stride, sizes, rates):
    built = _pyramid("dilated_resnet", model_id=50, output_stride=output_stride,
                     multigrid=[1, 2, 4])
    features = built(torch.zeros(1, 3, 64, 64))
    assert {level: m.shape[-1] for level, m in features.items()} == sizes
    coarsest = str(int(math.log2(output_stride)))
    assert features[coarsest].shape[1] == 2048  # the last stage's output, at stride 16 / 8
    stages = built.model.encoder.stages
    assert [[layer.layer[1].convolution.dilation[0] for layer in stage.layers]
            for stage in stages[2:]] == rates
    assert all(layer.shortcut.convolution.stride == (1, 1) for layer in [
        stages[3].layers[0]])


def test_dilation_adds_no_parameters_to_resnet_50_and_101():
    for model_id in (50, 101):
        plain = _pyramid("resnet", model_id=model_id)
        dilated = _pyramid("dilated_resnet", model_id=model_id, output_stride=8,
                           multigrid=[1, 2, 4])
        assert _params(dilated) == _params(plain)
    assert _params(plain) == 42_500_160  # ResNet-101 without its classifier


def test_the_v1_stem_is_three_3x3_convolutions_into_128_channels():
    built = _pyramid("dilated_resnet", model_id=50, stem_type="v1")
    convs = [layer.convolution for layer in built.model.embedder.embedder]
    assert [(c.kernel_size, c.stride, c.out_channels) for c in convs] == [
        ((3, 3), (2, 2), 64), ((3, 3), (1, 1), 64), ((3, 3), (1, 1), 128)]
    assert built.model.encoder.stages[0].layers[0].shortcut.convolution.in_channels == 128
    assert built(torch.zeros(1, 3, 64, 64))["4"].shape[-1] == 4


@pytest.mark.parametrize("kind", ["resnet", "dilated_resnet"])
def test_se_ratio_adds_model_gardens_squeeze_excitation_to_every_block(kind):
    from torchgarden.models.dilated_resnet import SqueezeExcitation

    plain = _pyramid(kind, model_id=50)
    built = _pyramid(kind, model_id=50, se_ratio=0.25, stochastic_depth_drop_rate=0.2)
    blocks = [layer for stage in built.model.encoder.stages for layer in stage.layers]
    excites = [layer.layer[-2] for layer in blocks]  # then the stochastic depth's drop
    assert len(blocks) == 16 and all(isinstance(e, SqueezeExcitation) for e in excites)
    widths = [e.reduce.in_channels for e in excites]
    assert [e.reduce.out_channels for e in excites] == [w // 4 for w in widths]
    added = sum(2 * w * (w // 4) + w // 4 + w for w in widths)  # two 1x1 convs with biases
    assert _params(built) == _params(plain) + added
    excite = excites[0].eval()
    x = torch.randn(2, widths[0], 5, 5)
    gate = torch.sigmoid(excite.expand(torch.relu(excite.reduce(x.mean((2, 3), keepdim=True)))))
    torch.testing.assert_close(excite(x), x * gate)
    assert all(e.reduce.bias.abs().sum() == 0 for e in excites)  # biases start at zero
    assert built(torch.zeros(1, 3, 64, 64))["5" if kind == "resnet" else "4"].shape[1] == 2048


def test_aspp_has_a_branch_per_rate_and_pools_with_model_gardens_kernel():
    aspp = ASPP(8, level="4", dilation_rates=[6, 12], num_filters=4, activation="swish",
                pool_kernel_size=[32, 32])
    assert len(aspp.branches) == 3 and aspp.pool_kernel == [2, 2]  # 32 // 2**4
    assert [b[0].dilation[0] for b in aspp.branches[1:]] == [6, 12]
    out = aspp({"4": torch.randn(2, 8, 4, 4)})
    assert list(out) == ["4"] and out["4"].shape == (2, 4, 4, 4)


def test_deeplabv3plus_head_predicts_at_the_low_level_resolution():
    head = SegmentationHead(3, 4, level="4", num_convs=2, num_filters=8,
                            feature_fusion="deeplabv3plus", low_level="2",
                            low_level_channels=6, low_level_num_filters=5)
    assert head.convs[0][0].in_channels == 4 + 5
    logits = head({"2": torch.randn(1, 6, 16, 16)}, {"4": torch.randn(1, 4, 4, 4)})
    assert logits.shape == (1, 3, 16, 16)


# Pixel losses of logits [0, 0], [2, 0], [0, 2] (labels 0) and an ignored pixel:
# ln 2, ln(1 + e^-2), ln(1 + e^2), 0.
_LOSSES = (math.log(2), math.log1p(math.exp(-2)), math.log1p(math.exp(2)))


def _example():
    logits = torch.tensor([[0.0, 2.0, 0.0, 5.0], [0.0, 0.0, 2.0, 0.0]]).reshape(1, 2, 1, 4)
    return logits, torch.tensor([[[0, 0, 0, 255]]])


@pytest.mark.parametrize("top_k, expected", [
    (1.0, sum(_LOSSES) / 3),                     # every valid pixel
    (0.5, (_LOSSES[2] + _LOSSES[0]) / 2),        # k = int(0.5 * 4) = 2 hardest
    (0.25, _LOSSES[2]),                          # k = 1
    (0.75, sum(_LOSSES) / 3),                    # k = 3: the ignored pixel's 0 is not taken
])
def test_top_k_percent_pixels_averages_the_hardest_pixels(top_k, expected):
    logits, labels = _example()
    loss = segmentation_loss(logits, labels, ignore_label=255, top_k_percent_pixels=top_k)
    assert loss.item() == pytest.approx(expected, rel=1e-4)


def test_top_k_divides_by_the_valid_pixels_when_fewer_than_k():
    logits, _ = _example()
    labels = torch.tensor([[[255, 255, 0, 255]]])
    loss = segmentation_loss(logits, labels, ignore_label=255, top_k_percent_pixels=0.5)
    assert loss.item() == pytest.approx(_LOSSES[2], rel=1e-4)  # min(k=2, valid=1)


def test_label_smoothing_and_class_weights_have_model_gardens_meaning():
    logits, labels = _example()
    smoothed = segmentation_loss(logits[..., 1:2], labels[..., 1:2], ignore_label=255,
                                 label_smoothing=0.2)
    assert smoothed.item() == pytest.approx(0.9 * 0.126928 + 0.1 * 2.126928, rel=1e-4)
    labels = torch.tensor([[[1, 0, 0, 255]]])
    weighted = segmentation_loss(logits, labels, ignore_label=255, class_weights=[2.0, 0.5])
    # pixel 0 is class 1 (weight 0.5), the others class 0 (weight 2); still / 3 valid.
    expected = (0.5 * math.log(2) + 2 * _LOSSES[1] + 2 * _LOSSES[2]) / 3
    assert weighted.item() == pytest.approx(expected, rel=1e-4)


def test_without_groundtruth_dimension_the_masks_are_resized_to_the_logits():
    logits = torch.zeros(1, 2, 2, 2)
    logits[0, 1, 0, 0] = 4.0
    labels = torch.full((1, 4, 4), 255)
    labels[0, 1, 1] = 1  # the nearest (half-pixel) sample of logits pixel (0, 0)
    loss = segmentation_loss(logits, labels, ignore_label=255, use_groundtruth_dimension=False)
    assert loss.item() == pytest.approx(math.log1p(math.exp(-4)), rel=1e-4)


def test_model_gardens_cityscapes_experiments_build_at_output_stride_16():
    params = tg.get_experiment("mnv2_deeplabv3_cityscapes").validate()
    task = tg.get_task(params.task)
    model = task.build_model().eval()
    assert model(torch.zeros(1, 3, 64, 64)).shape == (1, 19, 4, 4)
    assert task.inference_step(torch.zeros(1, 3, 64, 64), model).shape == (1, 19, 64, 64)
    assert tg.get_experiment("seg_deeplabv3plus_cityscapes").validate().task.model.backbone \
        .dilated_resnet.model_id == 101


@pytest.mark.parametrize("name, key", [
    ("seg_deeplabv3_pascal", "task.validation_data.resize_eval_groundtruth"),
    ("seg_deeplabv3plus_pascal", "task.validation_data.resize_eval_groundtruth"),
    ("mnv2_deeplabv3_pascal", "task.validation_data.resize_eval_groundtruth"),
    ("seg_resnetfpn_pascal", "task.train_data.output_size"),  # unset there, scale-jittered
    ("mnv2_deeplabv3plus_cityscapes",
     "task.model.backbone.mobilenet.output_intermediate_endpoints"),
])
def test_experiments_needing_what_is_not_built_are_refused_naming_the_key(name, key):
    with pytest.raises(ConfigError) as info:
        tg.get_experiment(name).validate()
    assert str(info.value).startswith(key) and "\n" not in str(info.value)


@pytest.mark.parametrize("override, key", [
    ({"model": {"backbone": {"dilated_resnet": {"se_ratio": 1.5}}}},
     "task.model.backbone.dilated_resnet.se_ratio"),
    ({"model": {"backbone": {"dilated_resnet": {"multigrid": [1, 2]}}}},
     "task.model.backbone.dilated_resnet.multigrid"),
    ({"model": {"backbone": {"type": "vit"}}}, "task.model.backbone.type"),
    ({"model": {"mask_scoring_head": {"num_convs": 4}}}, "task.model.mask_scoring_head"),
    ({"model": {"decoder": {"type": "nasfpn"}}}, "task.model.decoder.type"),
    ({"model": {"decoder": {"aspp": {"spp_layer_version": "v2"}}}},
     "task.model.decoder.aspp.spp_layer_version"),
    ({"model": {"head": {"feature_fusion": "panoptic_fpn_fusion"}}},
     "task.model.head.feature_fusion"),
    ({"model": {"head": {"level": 3}}}, "task.model.head.level"),
    ({"model": {"head": {"low_level": "2/depthwise"}}}, "task.model.head.low_level"),
    ({"model": {"input_size": [512, 512, 4]}}, "task.model.input_size"),
    ({"losses": {"gt_is_matting_map": True}}, "task.losses.gt_is_matting_map"),
    ({"losses": {"use_binary_cross_entropy": True}}, "task.losses.use_binary_cross_entropy"),
    ({"losses": {"class_weights": [1.0, 2.0]}}, "task.losses.class_weights"),
    ({"losses": {"top_k_percent_pixels": 0.0}}, "task.losses.top_k_percent_pixels"),
])
def test_what_is_not_built_is_refused_in_one_line_naming_the_key(override, key):
    params = tg.get_experiment("seg_deeplabv3plus_cityscapes")
    with pytest.raises(ConfigError) as info:
        params.override({"task": override})
        params.validate()
    assert str(info.value).startswith(key) and "\n" not in str(info.value)


def test_decoder_and_head_need_a_model_garden_backbone():
    params = tg.get_experiment("semantic_segmentation")
    params.override({"task": {"model": {"decoder": {"type": "aspp"}}}})
    with pytest.raises(ConfigError, match=r"^task\.model\.decoder shapes the model of a Model "):
        params.validate()


def test_task_ignore_label_is_read_as_losses_ignore_label_with_a_notice():
    params = tg.get_experiment("semantic_segmentation")
    with collect_notices() as notes:
        params.override({"task": {"ignore_label": 200}})
    assert params.validate().task.losses.ignore_label == 200
    assert [(n.key, n.action) for n in notes] == [("task.ignore_label", "mapped")]


def test_model_gardens_evaluation_block_reports_train_iou_and_per_class_iou():
    params = tg.get_experiment("seg_deeplabv3plus_cityscapes").validate()
    assert params.task.evaluation.report_train_mean_iou  # Model Garden's default
    task = tg.get_task(params.task)
    [metric] = task.build_metrics(training=True)
    labels = torch.tensor([[[0, 0], [1, 1]]])
    logits = torch.zeros(1, 19, 1, 1)
    logits[0, 0] = 1.0  # every pixel predicted 0, resized to the 2x2 masks
    task.process_metrics([metric], labels, logits)
    result = metric.result()
    assert float(result["mean_iou"]) == pytest.approx(0.25)  # classes 0 (IoU 1/2) and 1 (0)
    assert result["iou"]["class_0"] == pytest.approx(0.5)
    params.task.evaluation.report_per_class_iou = False
    assert "iou" not in tg.get_task(params.task).build_metrics(training=False)[0].result()
    assert tg.get_task(tg.get_experiment("semantic_segmentation").task).build_metrics(
        training=True) == []


def test_an_fpn_decoder_with_pyramid_fusion_predicts_at_the_head_level():
    params = tg.get_experiment("semantic_segmentation")
    params.override({"task": {"model": {
        "num_classes": 3, "min_level": 3, "max_level": 6,
        "backbone": {"type": "resnet", "resnet": {"model_id": 18, "depth_multiplier": 0.25}},
        "decoder": {"type": "fpn", "fpn": {"num_filters": 8}},
        "head": {"level": 3, "num_convs": 1, "num_filters": 8,
                 "feature_fusion": "pyramid_fusion"}}}})
    model = tg.get_task(params.validate().task).build_model().eval()
    assert sorted(model.decoder.output_levels, key=int) == ["3", "4", "5", "6"]
    assert model(torch.zeros(1, 3, 64, 64)).shape == (1, 3, 8, 8)
    assert tg.get_experiment("seg_resnetfpn_pascal").task.model.decoder.fpn.num_filters == 256
