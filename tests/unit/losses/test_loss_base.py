"""Loss base class: reductions, sample-weight broadcasting, float32, get()."""

import pytest
import torch

from torchgarden import losses as L


class Identity(L.Loss):
    def call(self, y_true, y_pred):
        return y_pred


PER_EXAMPLE = torch.tensor([[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize(("reduction", "expected"), [
    ("none", [[1.0, 2.0], [3.0, 4.0]]),
    ("sum", 10.0),
    ("sum_over_batch_size", 2.5),
    ("auto", 2.5),
    ("mean", 2.5),
    (None, [[1.0, 2.0], [3.0, 4.0]]),
])
def test_reductions_without_weights(reduction, expected):
    out = Identity(reduction=reduction)(torch.zeros(2, 2), PER_EXAMPLE)
    torch.testing.assert_close(out, torch.tensor(expected))


@pytest.mark.parametrize(("reduction", "expected"), [
    (L.Reduction.NONE, [[0.0, 0.0], [6.0, 8.0]]),
    (L.Reduction.SUM, 14.0),
    (L.Reduction.SUM_OVER_BATCH_SIZE, 14.0 / 4),
    (L.Reduction.MEAN, 14.0 / 4),  # weights broadcast to [[0, 0], [2, 2]] -> sum 4
])
def test_sample_weight_broadcasts_per_example(reduction, expected):
    loss = Identity(reduction=reduction)
    for weight in (torch.tensor([0.0, 2.0]), torch.tensor([[0.0], [2.0]])):
        out = loss(torch.zeros(2, 2), PER_EXAMPLE, weight)
        torch.testing.assert_close(out, torch.tensor(expected))


def test_mean_with_scalar_and_zero_weights():
    assert Identity(reduction="mean")(torch.zeros(2), torch.tensor([1.0, 3.0]), 0.5).item() == 2.0
    assert Identity(reduction="mean")(torch.zeros(2), torch.tensor([1.0, 3.0]),
                                      torch.zeros(2)).item() == 0.0
    with pytest.raises(ValueError, match="sample_weight of shape"):
        Identity()(torch.zeros(2, 2), PER_EXAMPLE, torch.ones(3))


def test_bad_reduction_names_choices_and_closest():
    with pytest.raises(ValueError, match=r"did you mean 'sum_over_batch_size'"):
        L.Loss(reduction="sum_over_batch")
    assert L.Reduction.validate("SUM") is L.Reduction.SUM


def test_half_inputs_are_computed_in_float32():
    out = L.MeanSquaredError()(torch.zeros(2, dtype=torch.bfloat16),
                               torch.tensor([1.0, 3.0], dtype=torch.bfloat16))
    assert out.dtype == torch.float32 and out.item() == 5.0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = Identity()(torch.zeros(1), torch.tensor([1.0]) @ torch.ones(1, 1))
    assert out.dtype == torch.float32


def test_default_names():
    assert Identity().name == "identity"
    assert L.Huber().name == "huber_loss"
    assert L.FocalLoss(name="cls").name == "cls"


def my_huber_loss(threshold):
    def my_huber_loss(y_true, y_pred):
        error = y_true - y_pred
        is_small_error = torch.abs(error) <= threshold
        small_error_loss = torch.square(error) / 2
        big_error_loss = threshold * (torch.abs(error) - (0.5 * threshold))
        return torch.where(is_small_error, small_error_loss, big_error_loss)
    return my_huber_loss


def test_get_wraps_closure_from_course_notes():
    loss = L.get(my_huber_loss(threshold=1.2))
    assert isinstance(loss, L.LossFunctionWrapper) and loss.name == "my_huber_loss"
    y_true = torch.tensor([0.0, 0.0, 0.0])
    y_pred = torch.tensor([[0.5], [1.0], [3.0]])  # [N, 1] against [N]: ranks matched
    expected = (0.125 + 0.5 + 1.2 * (3.0 - 0.6)) / 3
    assert loss(y_true, y_pred).item() == pytest.approx(expected)
    assert loss(y_true, y_pred).item() == pytest.approx(L.Huber(1.2)(y_true, y_pred).item())


def test_get_names_classes_instances_and_errors():
    assert isinstance(L.get("mse"), L.MeanSquaredError)
    assert isinstance(L.get("Huber"), L.Huber)
    assert isinstance(L.get("sparse_categorical_crossentropy"), L.SparseCategoricalCrossentropy)
    assert isinstance(L.get(L.FocalLoss), L.FocalLoss)
    focal = L.FocalLoss()
    assert L.get(focal) is focal
    with pytest.raises(ValueError, match="did you mean 'huber'"):
        L.get("hubr")
    with pytest.raises(TypeError, match="loss name"):
        L.get(3)


def test_guide_custom_loss_subclass():
    class CustomLoss(L.Loss):
        def __init__(self, alpha=0.25, reduction=L.Reduction.NONE, name=None):
            super().__init__(reduction=reduction, name=name)
            self._alpha = alpha

        def call(self, labels, predictions):
            positive = labels == 1.0
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                predictions, labels, reduction="none")
            return torch.where(positive, self._alpha * loss, (1 - self._alpha) * loss)

    out = CustomLoss()(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]))
    assert out.tolist() == pytest.approx([0.25 * 0.693147, 0.75 * 0.693147], rel=1e-5)
