"""Which weights an export takes: EMA averages or raw, from latest or best checkpoints."""

from __future__ import annotations

import pytest
import torch

from torchgarden.export import ExportError, select_weights


def _state(swapped: bool | None) -> dict:
    state = {"model": {"w": torch.tensor([1.0]), "counter": torch.tensor(3)}}
    if swapped is not None:  # the shadow holds whatever the model does not
        state["ema"] = {"shadow": {"w": torch.tensor([2.0])}, "swapped": swapped}
    return state


def test_without_ema_the_model_weights_are_exported():
    weights, used = select_weights(_state(None), None)
    assert not used and weights["w"].item() == 1.0
    with pytest.raises(ExportError, match="holds no exponential moving average"):
        select_weights(_state(None), True)


@pytest.mark.parametrize(("swapped", "ema", "value", "used"), [
    (False, None, 2.0, True),   # latest ckpt: averages in the shadow, taken by default
    (False, False, 1.0, False),  # --no-ema: the raw model weights
    (True, None, 1.0, True),    # best ckpt (saved mid-eval): averages already in the model
    (True, False, 2.0, False),  # --no-ema on a best ckpt: the raw weights are in the shadow
    (True, True, 1.0, True),
])
def test_ema_selection_follows_the_swapped_flag(swapped, ema, value, used):
    weights, is_average = select_weights(_state(swapped), ema)
    assert weights["w"].item() == value and is_average == used
    assert weights["counter"].item() == 3  # untracked entries are the model's


def test_ema_weights_of_a_real_average_latest_and_best_arrangements():
    from torchgarden.optim.ema import ExponentialMovingAverage

    model = torch.nn.Linear(3, 2)
    ema = ExponentialMovingAverage(model, average_decay=0.5, dynamic_decay=False)
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update(step=1)  # averages: halfway between the initial and the moved weights
    raw = {k: v.clone() for k, v in model.state_dict().items()}
    averages = {k: v.clone() for k, v in ema.state_dict()["shadow"].items()}
    latest = {"model": model.state_dict(), "ema": ema.state_dict()}
    assert torch.equal(select_weights(latest, None)[0]["weight"], averages["weight"])
    with ema.average_weights():  # how a best checkpoint is saved: during evaluation
        best = {"model": {k: v.clone() for k, v in model.state_dict().items()},
                "ema": {"shadow": {k: v.clone() for k, v in ema.state_dict()["shadow"].items()},
                        "swapped": True}}
    assert torch.equal(select_weights(best, None)[0]["weight"], averages["weight"])
    assert torch.equal(select_weights(best, False)[0]["weight"], raw["weight"])
    assert not torch.equal(averages["weight"], raw["weight"])
