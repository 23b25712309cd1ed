"""LoRA through PEFT: PEFT's own trainable count, adapter-only checkpoints, bad targets."""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn

from torchgarden.experiments.library_model import AdapterConfig
from torchgarden.models import build_image_classifier
from torchgarden.models.lora import TrainedState, adapt_model, merge_adapters

pytest.importorskip("peft")
pytest.importorskip("transformers")

SETTINGS = {"patch_size": 2, "hidden_size": 16, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 32}


def task_config(pretrained_path: str = "", **adapter) -> types.SimpleNamespace:
    model = types.SimpleNamespace(adapter=AdapterConfig(type="lora", **adapter),
                                  pretrained_path=pretrained_path)
    return types.SimpleNamespace(model=model, init_checkpoint="")


def vit() -> nn.Module:
    torch.manual_seed(0)
    return build_image_classifier("transformers/vit", num_classes=3, input_size=(1, 8, 8),
                                  settings=SETTINGS)


def test_trainable_count_equals_peft_and_checkpoints_hold_only_what_trains(tmp_path, capsys):
    model = vit()
    model.model.save_pretrained(tmp_path / "base")
    adapted, item = adapt_model(model, task_config(str(tmp_path / "base"), r=4,
                                target_modules=["q_proj", "v_proj"],
                                modules_to_save=["classifier"]), report=True)
    assert adapted is model and type(model.model).__name__ == "PeftModel"
    trainable, total = model.model.get_nb_trainable_parameters()
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == trainable
    assert trainable == 2 * 2 * (4 * 16 + 16 * 4) + (16 * 3 + 3)  # 2 layers x q,v + the head
    assert isinstance(item, TrainedState)
    assert all("lora_" in k or "modules_to_save" in k for k in item.state_dict())
    assert sum(t.numel() for t in item.state_dict().values()) == trainable
    assert f"LoRA trains {trainable:,} of {total:,} parameters" in capsys.readouterr().out
    x = torch.randn(2, 1, 8, 8)
    model.eval()
    before = model(x)
    merged = merge_adapters(model)
    assert type(merged.model).__name__ == "ViTForImageClassification"
    assert torch.allclose(merged(x), before, atol=1e-6)


def test_a_built_in_model_is_wrapped_whole_and_kept_in_full_without_a_weights_file():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    adapted, item = adapt_model(model, task_config(r=2, target_modules=["1"],
                                                   modules_to_save=["3"]))
    assert type(adapted).__name__ == "PeftModel" and item is adapted
    assert adapted(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    trainable = adapted.get_nb_trainable_parameters()[0]
    assert trainable == 2 * (64 + 16) + 16 * 10 + 10


def test_target_modules_that_do_not_exist_name_the_closest():
    with pytest.raises(ValueError, match=r"target_modules=\['q_prj'\].*did you mean .q_proj."):
        adapt_model(vit(), task_config(target_modules=["q_prj"]))
