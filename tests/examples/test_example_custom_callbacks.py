"""examples/custom_callbacks.py: custom callbacks and EarlyStopping stop training."""

from __future__ import annotations

import os

import custom_callbacks as example
import pytest
import torch
import torch.nn.functional as F

from torchgarden import callbacks, data


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("callbacks")))


def validation_loss(model):
    x, y = data.make_toy_regression(num_examples=32, noise=1.0, seed=0)
    with torch.no_grad():
        return F.mse_loss(model(x[16:]), y[16:]).item()


def test_detect_overfitting_stops_at_the_first_ratio_above_threshold(result):
    run = result["overfitting"]
    history, detector = run["history"], run["callback"]
    train = dict(history.train)
    for (step, ratio), (eval_step, logs) in zip(detector.ratios, history.eval):
        assert step == eval_step
        assert ratio == pytest.approx(logs["validation_loss"] / train[step]["training_loss"])
    *before, (stop_step, last) = detector.ratios
    assert last > 3.0 and all(r <= 3.0 for _, r in before)
    assert history.finished_at == stop_step == history.train[-1][0] < 400
    assert history.checkpoints == [stop_step]  # the final save when training stops


def test_early_stopping_follows_min_delta_and_patience_and_restores_best(result):
    run = result["early_stopping"]
    history, stopper = run["history"], run["callback"]
    best, best_step, wait, expected_stop = None, None, 0, None
    for step, logs in history.eval:  # the Keras rule, re-derived from the recorded logs
        value = logs["validation_loss"]
        if best is None or value < best - 0.05:
            best, best_step, wait = value, step, 0
        else:
            wait += 1
            if wait >= 3:
                expected_stop = step
                break
    assert expected_stop is not None and expected_stop < 400
    assert (stopper.stopped_step, stopper.best_step) == (expected_stop, best_step)
    assert history.finished_at == expected_stop
    # restore_best_weights: the returned model is the one evaluated at best_step.
    assert validation_loss(run["model"]) == pytest.approx(best, rel=1e-5)
    assert validation_loss(run["model"]) < history.eval[-1][1]["validation_loss"]


def test_early_stopping_state_is_saved_in_the_checkpoint(result):
    run = result["early_stopping"]
    stopper = run["callback"]
    path = os.path.join(run["model_dir"], f"ckpt-{stopper.stopped_step}", "state.pt")
    state = torch.load(path, weights_only=True)
    saved = state["callback_1_EarlyStopping"]
    assert (saved["best_step"], saved["wait"]) == (stopper.best_step, 3)
    assert saved["best"] == pytest.approx(stopper.best)


def test_baseline_that_is_never_beaten_stops_after_patience_evaluations(tmp_path):
    run = example.train_with(example.build_early_stopping(baseline=0.8), str(tmp_path))
    assert [step for step, _ in run["history"].eval] == [20, 40, 60]
    assert run["callback"].stopped_step == 60
    assert run["callback"].best_step is None


def test_keras_spelling_model_stop_training_also_stops(tmp_path):
    class KerasStyle(example.DetectOverfittingCallback):
        def on_eval_end(self, step, logs):
            if logs["validation_loss"] / self.training_loss > self.threshold:
                self.model.stop_training = True

    run = example.train_with(KerasStyle(threshold=3.0), str(tmp_path))
    assert run["history"].finished_at == 40
    assert not hasattr(run["model"], "stop_training")


def test_keras_epoch_hooks_fail_at_definition_naming_the_replacement():
    with pytest.raises(TypeError, match=r"on_epoch_end .*on_eval_end\(self, step, logs\)"):
        class EpochCallback(callbacks.Callback):  # noqa: F841
            def on_epoch_end(self, epoch, logs=None):
                pass
