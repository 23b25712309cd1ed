"""torchmetrics adapter, as_metric and metric_results."""

import pytest
import torch
import torchmetrics

from torchgarden.metrics import Mean, Metric, TorchMetricsAdapter, as_metric, metric_results


def test_adapter_swaps_argument_order_and_resets():
    adapter = as_metric(torchmetrics.MeanSquaredError())
    assert isinstance(adapter, TorchMetricsAdapter) and isinstance(adapter, Metric)
    assert adapter.name == "mean_squared_error"
    adapter.update_state(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 3.0]))
    assert adapter.result().item() == pytest.approx(5.0)
    adapter.reset_state()
    adapter.update_state(torch.tensor([1.0]), torch.tensor([3.0]))
    assert adapter.result().item() == pytest.approx(4.0)
    with pytest.raises(ValueError, match="sample_weight"):
        adapter.update_state(torch.ones(1), torch.ones(1), sample_weight=torch.ones(1))


def test_adapter_order_matters_for_asymmetric_metric():
    # Precision(preds, target): preds [1, 1, 0], target [1, 0, 0] -> 1/2.
    adapter = TorchMetricsAdapter(torchmetrics.Precision(task="binary"), name="prec")
    value = adapter(torch.tensor([1, 0, 0]), torch.tensor([1, 1, 0]))
    assert adapter.name == "prec" and value.item() == pytest.approx(0.5)


def test_as_metric_passes_through_and_rejects():
    mean = Mean()
    assert as_metric(mean) is mean
    with pytest.raises(TypeError, match="torchmetrics.Metric"):
        as_metric(42)


def test_metric_results_merges_dicts_and_rejects_duplicates():
    mean = Mean(name="loss")
    mean.update_state(torch.tensor(2.0))
    collection = TorchMetricsAdapter(torchmetrics.MetricCollection(
        {"mae": torchmetrics.MeanAbsoluteError()}))
    collection.update_state(torch.tensor([0.0]), torch.tensor([3.0]))
    results = metric_results([mean, collection])
    assert set(results) == {"loss", "mae"}
    assert results["loss"].item() == 2.0 and results["mae"].item() == 3.0
    with pytest.raises(ValueError, match="'loss'"):
        metric_results([mean, Mean(name="loss")])
