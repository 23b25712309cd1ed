"""torchvision and timm models by name, on a GPU machine (where torchvision's CUDA wheels
load beside a CUDA torch; on the CPU machines they fail with ``operator torchvision::nms
does not exist``). Skipped without CUDA or without importable torchvision/timm.
"""

from __future__ import annotations

import importlib
import json

import pytest
import torch

from torchgarden.cli.main import main
from torchgarden.models import build_backbone, build_image_classifier


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except (ImportError, RuntimeError):
        return False
    return True


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.skipif(not _importable("torchvision"), reason="torchvision does not import")
def test_torchvision_resnet18_classifies_grayscale_and_gives_backbone_levels():
    model = build_image_classifier("torchvision/resnet18", num_classes=10,
                                   input_size=(1, 32, 32)).cuda()
    assert model(torch.zeros(2, 1, 32, 32, device="cuda")).shape == (2, 10)
    backbone = build_backbone("torchvision/resnet18")
    assert backbone.channels == {"2": 64, "3": 128, "4": 256, "5": 512}


@pytest.mark.skipif(not _importable("timm"), reason="timm does not import")
def test_timm_resnet18_classifier_and_backbone():
    model = build_image_classifier("timm/resnet18", num_classes=10, input_size=(1, 32, 32))
    assert model.cuda()(torch.zeros(2, 1, 32, 32, device="cuda")).shape == (2, 10)
    backbone = build_backbone("timm/resnet18")
    assert backbone.channels == {"1": 64, "2": 64, "3": 128, "4": 256, "5": 512}


@pytest.mark.skipif(not _importable("torchvision"), reason="torchvision does not import")
def test_torchvision_resnet18_trains_on_digits_through_the_cli(tmp_path, capsys):
    model_dir = tmp_path / "run"
    code = main(["train", "--experiment", "image_classification", "--model_dir", str(model_dir),
                 "--params_override", "task.model.name=torchvision/resnet18,"
                 "trainer.train_steps=300,trainer.validation_interval=300,"
                 "trainer.checkpoint_interval=300,runtime.device=cuda"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((model_dir / "best_ckpt" / "info.json").read_text())["accuracy"] > 0.8
