"""RetinaNet and segmentation on a by-name library backbone (tiny transformers ResNet)."""

from __future__ import annotations

import pytest
import torch

import torchgarden as tg
from torchgarden.models import build_backbone
from torchgarden.vision import BackboneSegmentationModel, RetinaNet

pytest.importorskip("transformers")

_TINY = {"layer_type": "basic", "embedding_size": 8, "hidden_sizes": [8, 16, 24, 32],
         "depths": [1, 1, 1, 1]}


def test_retinanet_task_builds_a_transformers_backbone_on_levels_2_to_4():
    params = tg.get_experiment("retinanet_resnet18")
    params.override({"task": {"model": {"backbone": {"library_config": _TINY}}}})
    model = tg.get_task(params.task).build_model().eval()
    assert type(model.backbone.model).__name__ == "ResNetBackbone"
    assert model.fpn.levels == ["2", "3", "4"]
    outputs = model(torch.zeros(2, 3, 64, 64))
    assert {k: tuple(v.shape[-2:]) for k, v in outputs["cls_outputs"].items()} == {
        "2": (16, 16), "3": (8, 8), "4": (4, 4)}
    assert outputs["detection_boxes"].shape == (2, 100, 4)


def test_retinanet_rejects_levels_below_the_backbone_and_adds_coarser_ones():
    backbone = build_backbone("transformers/resnet", settings=_TINY)
    with pytest.raises(ValueError, match=r"has levels \['2', '3', '4', '5'\] but"):
        RetinaNet(num_classes=3, backbone=backbone, min_level=1, max_level=4)
    # Levels above the backbone's coarsest are Model Garden's P6/P7: stride-2 convs.
    model = RetinaNet(num_classes=3, backbone=backbone, min_level=3, max_level=7).train()
    outputs = model(torch.zeros(2, 3, 128, 128))
    assert {k: tuple(v.shape[-2:]) for k, v in outputs["cls_outputs"].items()} == {
        "3": (16, 16), "4": (8, 8), "5": (4, 4), "6": (2, 2), "7": (1, 1)}
    assert sorted(model.fpn.coarser) == ["6", "7"]


def test_segmentation_on_a_library_backbone_returns_full_resolution_logits():
    params = tg.get_experiment("semantic_segmentation")
    params.override({"task": {"model": {"backbone": {"name": "transformers/resnet",
                                                     "library_config": _TINY}}}})
    model = tg.get_task(params.task).build_model()
    assert isinstance(model, BackboneSegmentationModel)
    assert model(torch.rand(2, 3, 64, 64)).shape == (2, params.task.model.num_classes, 64, 64)
