"""Exact resume of a fine-tune after SIGKILL: frozen layers, an unfreeze step mid-loop."""

from __future__ import annotations

import pytest
from resilience_tools import DIGITS, cli_args, run_differences, run_in_process, run_until_done

#: A CNN whose conv + BatchNorm are frozen until step 23 (mid-loop: loops are 5 steps).
FINE_TUNE = (DIGITS + ",task.model.architecture=cnn,task.model.hidden_sizes=[8],"
             "trainer.freeze=[^0,^1],trainer.unfreeze_at_step=23")


@pytest.mark.slow
def test_kill_before_and_after_an_unfreeze_step_resumes_bitwise(tmp_path):
    reference = str(tmp_path / "reference")
    assert run_in_process(cli_args("image_classification", reference, FINE_TUNE)) == 0
    model_dir = str(tmp_path / "run")
    outcome = run_until_done(cli_args("image_classification", model_dir, FINE_TUNE),
                             ["step:12", "save:25:state", "step:27"])
    assert outcome.kills == ["step:12", "save:25:state", "step:27"]
    assert run_differences(reference, model_dir) == []


@pytest.mark.slow
def test_kill_during_a_lora_fine_tune_resumes_bitwise(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("peft")
    import torch

    base = tmp_path / "base"
    torch.manual_seed(0)
    transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=8, patch_size=2, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_channels=1, num_labels=10)).save_pretrained(base)
    lora = (DIGITS + f",task.model.name=transformers/vit,task.model.pretrained_path={base},"
            "task.model.adapter.type=lora,task.model.adapter.r=4,task.model.adapter.dropout=0.1,"
            "task.model.adapter.target_modules=[q_proj,v_proj],"
            "task.model.adapter.modules_to_save=[classifier]")
    reference = str(tmp_path / "reference")
    assert run_in_process(cli_args("image_classification", reference, lora)) == 0
    model_dir = str(tmp_path / "run")
    outcome = run_until_done(cli_args("image_classification", model_dir, lora),
                             ["step:8", "save:15:meta", "step:33"])
    assert len(outcome.kills) == 3
    assert run_differences(reference, model_dir) == []
