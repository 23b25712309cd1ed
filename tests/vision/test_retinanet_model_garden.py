"""RetinaNet in Model Garden's schema: anchor/decoder/head/detection_generator blocks, the
backbone one-of, old flat keys read with a notice, refusals, and retinanet_resnetfpn_coco
(ResNet-50 FPN at Model Garden's size) built and trained."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchgarden as tg
from torchgarden.config import ConfigError
from torchgarden.config.notices import collect_notices
from torchgarden.vision.retinanet_model import RetinaNet

pytest.importorskip("transformers")

# Model Garden's published size of RetinaNet R50-FPN (MODEL_GARDEN.md) is 34.0M.
RESNETFPN_PARAMETERS = 34_089_111


def _params(**model):
    params = tg.get_experiment("retinanet")
    params.override({"task": {"model": model}})
    return params.validate()


def test_old_flat_keys_are_read_as_model_gardens_blocks_with_a_notice():
    with collect_notices() as notes:
        params = _params(fpn_channels=32, head_channels=16, num_head_convs=3, anchor_size=3.0,
                         num_scales=2, score_threshold=0.1, max_num_detections=50)
    model = params.task.model
    assert model.decoder.fpn.num_filters == 32
    assert (model.head.num_filters, model.head.num_convs) == (16, 3)
    assert (model.anchor.anchor_size, model.anchor.num_scales) == (3.0, 2)
    assert model.detection_generator.pre_nms_score_threshold == 0.1
    assert model.detection_generator.max_num_detections == 50
    assert {n.key for n in notes} >= {"task.model.fpn_channels", "task.model.score_threshold"}


@pytest.mark.parametrize("model, key", [
    ({"decoder": {"type": "identity"}}, "task.model.decoder.type"),
    ({"decoder": {"fpn": {"fusion_type": "concat"}}}, "task.model.decoder.fpn.fusion_type"),
    ({"head": {"attribute_heads": [{"name": "depth"}]}}, "task.model.head.attribute_heads"),
    ({"detection_generator": {"nms_version": "tflite"}},
     "task.model.detection_generator.nms_version"),
    ({"detection_generator": {"apply_nms": False}}, "task.model.detection_generator.apply_nms"),
    ({"detection_generator": {"soft_nms_sigma": 0.5}},
     "task.model.detection_generator.soft_nms_sigma"),
    ({"backbone": {"type": "vit"}}, "task.model.backbone.type"),
    ({"backbone": {"type": "spinenet"}}, "task.model.backbone.type"),
    ({"backbone": {"type": "resnet", "resnet": {"bn_trainable": False}}},
     "task.model.backbone.resnet.bn_trainable"),
    ({"backbone": {"type": "resnet"}, "norm_activation": {"activation": "hard_swish"}},
     "task.model.norm_activation.activation"),
    ({"norm_activation": {"activation": "leaky_relu"}}, "task.model.norm_activation.activation"),
    ({"backbone": {"type": "mobilenet", "mobilenet": {"model_id": "MobileNetV3Large"}}},
     "task.model.backbone.mobilenet.model_id"),
])
def test_what_torchgardens_retinanet_does_not_build_is_refused(model, key):
    with pytest.raises(ConfigError) as info:
        _params(**model)
    assert str(info.value).startswith(key) and "\n" not in str(info.value)


def test_model_garden_spellings_of_nms_and_keras_options_are_accepted_with_a_notice():
    with collect_notices() as notes:
        params = _params(detection_generator={"nms_version": "batched", "use_cpu_nms": True},
                         decoder={"fpn": {"use_keras_layer": True}})
    assert params.task.model.detection_generator.nms_version == "v2"
    assert {n.action for n in notes} == {"mapped", "ignored"}


def test_retinanet_resnetfpn_coco_has_model_gardens_architecture_and_size():
    params = tg.get_experiment("retinanet_resnetfpn_coco").validate()
    model = tg.get_task(params.task).build_model()
    assert isinstance(model, RetinaNet)
    assert sum(p.numel() for p in model.parameters()) == RESNETFPN_PARAMETERS
    assert round(RESNETFPN_PARAMETERS / 1e6, 1) == 34.1  # Model Garden publishes 34.0
    assert sorted(model.fpn.norms, key=int) == ["3", "4", "5", "6", "7"]
    assert sorted(model.head.cls_norms, key=int) == ["3", "4", "5", "6", "7"]
    norm = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert norm.momentum == pytest.approx(0.01) and norm.eps == 1e-3  # Keras' 0.99 / 0.001
    model.train()
    outputs = model(torch.zeros(2, 3, 128, 128))
    assert {k: tuple(v.shape[-2:]) for k, v in outputs["cls_outputs"].items()} == {
        "3": (16, 16), "4": (8, 8), "5": (4, 4), "6": (2, 2), "7": (1, 1)}
    assert outputs["cls_outputs"]["3"].shape[1] == 9 * 91


def test_a_model_garden_resnet_backbone_trains_on_the_shapes(tmp_path):
    params = tg.get_experiment("retinanet")
    params.override({
        "task": {
            "model": {"input_size": [32, 32, 3], "min_level": 3, "max_level": 6,
                      "backbone": {"type": "resnet", "resnet": {
                          "model_id": 18, "depth_multiplier": 0.125}},
                      "decoder": {"fpn": {"num_filters": 8, "batch_norm": True}},
                      "head": {"num_filters": 8, "num_convs": 1, "norm_per_level": True}},
            "losses": {"l2_weight_decay": 1e-4},
            "generated_data": {"data_dir": str(tmp_path / "data"), "num_train": 8,
                               "num_validation": 4, "image_size": 32, "max_objects": 2},
            "train_data": {"global_batch_size": 4},
            "validation_data": {"global_batch_size": 4}},
        "trainer": {"train_steps": 2, "steps_per_loop": 1, "summary_interval": 1,
                    "checkpoint_interval": 2, "validation_interval": 2, "progress_bar": False,
                    "optimizer_config": {"learning_rate": {"cosine": {"decay_steps": 2}},
                                         "warmup": {"linear": {"warmup_steps": 1}}}}})
    params.validate()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, logs = tg.run_experiment(params=params, mode="train_and_eval",
                                    model_dir=str(tmp_path / "run"))
    assert logs and torch.isfinite(torch.tensor(float(logs["AP"])))


def test_segmentation_takes_model_gardens_resnet_backbone():
    params = tg.get_experiment("semantic_segmentation")
    params.override({"task": {"model": {
        "backbone": {"type": "resnet", "resnet": {"model_id": 18, "depth_multiplier": 0.125}},
        "norm_activation": {"norm_momentum": 0.99, "norm_epsilon": 1e-3}}}})
    task = tg.get_task(params.validate().task)
    model = task.build_model().eval()
    # Model Garden's default decoder (identity) and head (level 3): logits at stride 8,
    # resized to the images for inference.
    assert model(torch.zeros(2, 3, 64, 64)).shape == (2, 4, 8, 8)
    assert task.inference_step(torch.zeros(2, 3, 64, 64), model).shape == (2, 4, 64, 64)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and all(m.momentum == pytest.approx(0.01) and m.eps == 1e-3 for m in norms)
    with pytest.raises(ConfigError, match=r"^task.model.backbone.type: 'spinenet' needs"):
        params.override({"task": {"model": {"backbone": {"type": "spinenet"}}}})
        params.validate()
