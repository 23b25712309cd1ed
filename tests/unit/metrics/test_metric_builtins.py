"""Built-in metrics against hand-computed values."""

import pytest
import torch

from torchgarden import metrics as M


def test_mean_with_and_without_sample_weight():
    m = M.Mean()
    assert m.result().item() == 0.0  # no NaN before any update
    m.update_state(torch.tensor([1.0, 3.0]))
    m.update_state(torch.tensor([[5.0], [7.0]]), sample_weight=torch.tensor([2.0, 0.0]))
    assert m.result().item() == pytest.approx((1 + 3 + 10) / 4)
    assert m.name == "mean"


def test_sum_and_weight_broadcast_over_elements():
    s = M.Sum()
    s.update_state(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), sample_weight=torch.tensor([1.0, 0.5]))
    assert s.result().item() == pytest.approx(3 + 3.5)
    with pytest.raises(ValueError, match="sample_weight of shape"):
        s.update_state(torch.ones(2, 2), sample_weight=torch.ones(3))


def test_accuracy_family():
    acc = M.Accuracy()
    acc.update_state(torch.tensor([1, 2, 3, 4]), torch.tensor([[1], [0], [3], [4]]))
    assert acc.result().item() == pytest.approx(0.75)

    sparse = M.SparseCategoricalAccuracy()
    logits = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]])
    sparse.update_state(torch.tensor([[1], [2], [2]]), logits, sample_weight=torch.tensor([1.0, 1.0, 2.0]))
    assert sparse.result().item() == pytest.approx(3 / 4)

    cat = M.CategoricalAccuracy()
    cat.update_state(torch.eye(3)[[1, 2, 2]], logits)
    assert cat.result().item() == pytest.approx(2 / 3)

    binary = M.BinaryAccuracy(threshold=0.6)
    binary.update_state(torch.tensor([1, 0, 1, 0]), torch.tensor([0.7, 0.65, 0.55, 0.1]))
    assert binary.result().item() == pytest.approx(0.5)


def test_top_k_accuracy_and_dense_sparse_accuracy():
    top2 = M.TopKAccuracy(k=2)
    assert top2.name == "top_2_accuracy" and M.TopKAccuracy().name == "top_5_accuracy"
    scores = torch.tensor([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2], [0.5, 0.3, 0.2]])
    top2.update_state(torch.tensor([0, 1, 2]), scores)
    assert top2.result().item() == pytest.approx(2 / 3)
    assert M.SparseTopKCategoricalAccuracy is M.TopKAccuracy

    dense = M.SparseCategoricalAccuracy()
    logits = torch.zeros(1, 2, 2, 2)
    logits[0, 1, 0, :] = 1.0  # top row predicts class 1, bottom row class 0
    dense.update_state(torch.tensor([[[1, 0], [0, 0]]]), logits)
    assert dense.result().item() == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match="y_true"):
        dense.update_state(torch.zeros(3, 4, 5), torch.zeros(3))


def test_precision_recall_thresholds_and_class_id():
    y_true = torch.tensor([1.0, 0.0, 1.0, 1.0])
    y_pred = torch.tensor([0.9, 0.7, 0.2, 0.6])
    p = M.Precision()
    r = M.Recall()
    p.update_state(y_true, y_pred)
    r.update_state(y_true, y_pred)
    assert p.result().item() == pytest.approx(2 / 3)  # tp=2 fp=1
    assert r.result().item() == pytest.approx(2 / 3)  # tp=2 fn=1
    multi = M.Precision(thresholds=[0.1, 0.8])
    multi.update_state(y_true, y_pred, sample_weight=torch.tensor([1.0, 2.0, 1.0, 1.0]))
    assert multi.result().tolist() == pytest.approx([3 / 5, 1.0])
    per_class = M.Recall(class_id=1)
    per_class.update_state(torch.tensor([[1, 1], [0, 1]]), torch.tensor([[0.9, 0.2], [0.1, 0.8]]))
    assert per_class.result().item() == pytest.approx(0.5)


def test_mean_iou_indices_logits_ignore_and_per_class():
    m = M.MeanIoU(num_classes=3, ignore_index=255)
    y_true = torch.tensor([[0, 0, 1, 1, 255]])
    m.update_state(y_true, torch.tensor([[0, 1, 1, 1, 2]]))
    # class 0: 1/2, class 1: 2/3, class 2 absent -> mean over 2 classes
    assert m.per_class_iou().tolist() == pytest.approx([0.5, 2 / 3, 0.0])
    assert m.result().item() == pytest.approx((0.5 + 2 / 3) / 2)
    logits = torch.nn.functional.one_hot(torch.tensor([[0, 1, 1, 1, 2]]), 3).permute(0, 2, 1).float()
    again = M.MeanIoU(num_classes=3, ignore_index=255)
    again.update_state(y_true, logits)
    assert torch.equal(again.total_cm, m.total_cm)
    weighted = M.MeanIoU(num_classes=2)
    weighted.update_state(torch.tensor([0, 1]), torch.tensor([1, 1]), sample_weight=torch.tensor([0.0, 1.0]))
    assert weighted.result().item() == pytest.approx(1.0)


def test_regression_metrics_weighted():
    mse = M.MeanSquaredError()
    mae = M.MeanAbsoluteError()
    y_true = torch.tensor([[0.0, 1.0], [2.0, 2.0]])
    y_pred = torch.tensor([[1.0, 1.0], [0.0, 2.0]])
    w = torch.tensor([1.0, 3.0])
    mse.update_state(y_true, y_pred, sample_weight=w)
    mae.update_state(y_true, y_pred, sample_weight=w)
    # per-example (Keras, last-axis mean): mse [0.5, 2.0], mae [0.5, 1.0]
    assert mse.result().item() == pytest.approx((0.5 + 3 * 2.0) / 4)
    assert mae.result().item() == pytest.approx((0.5 + 3 * 1.0) / 4)
    mse.reset_states()
    mse.update_state(torch.tensor([1.0, 2.0]), torch.tensor([[1.0], [4.0]]))  # [N] vs [N, 1]
    assert mse.result().item() == pytest.approx(2.0)


def test_metrics_checkpoint_round_trip():
    m = M.MeanIoU(num_classes=2)
    m.update_state(torch.tensor([0, 1, 1]), torch.tensor([0, 1, 0]))
    restored = M.MeanIoU(num_classes=2)
    restored.load_state_dict(m.state_dict())
    assert restored.result().item() == pytest.approx(m.result().item())
