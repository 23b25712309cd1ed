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
