"""The Metric base class: weights as buffers, in-place updates, aliases, reset, sync."""

import pytest
import torch

from torchgarden.metrics import Metric


class GuideMetric(Metric):
    """The custom metric of the 'Customize metrics' guide, almost verbatim."""

    def __init__(self, name="my_metric"):
        super().__init__(name)
        self.total = self.add_weight("total", initializer="zeros")
        self.count = self.add_weight("count", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total += torch.sum(y_true * y_pred)
        self.count += torch.sum(sample_weight)

    def result(self):
        return self.total / self.count

    def reset_states(self):
        self.total = torch.tensor(0.0)
        self.count = torch.tensor(0.0)


class AliasMetric(Metric):
    def __init__(self):
        super().__init__()
        self.tp = self.add_weight("true_positives", shape=(2,), reduction="max")

    def update_state(self, values):
        self.tp = self.tp + values

    def result(self):
        return self.tp.sum()


def test_guide_metric_accumulates_in_place_and_call_returns_result():
    m = GuideMetric()
    total = m.total
    out = m(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]), torch.tensor([1.0, 1.0]))
    assert out.item() == pytest.approx(5.5)
    m.update_state(torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([2.0]))
    assert m.result().item() == pytest.approx(12.0 / 4.0)
    assert m.total is total  # still the registered buffer
    assert m.state_dict()["total"].item() == 12.0
    assert m.state_dict()["count"].item() == 4.0


def test_reset_state_alias_follows_overridden_reset_states():
    m = GuideMetric()
    m.update_state(torch.ones(2), torch.ones(2), torch.ones(2))
    m.reset_state()
    assert m.total.item() == 0.0 and m.count.item() == 0.0
    assert "total" in dict(m.named_buffers())


def test_assigning_a_new_tensor_copies_into_the_buffer_and_checks_shape():
    m = GuideMetric()
    buffer = m.total
    m.total = torch.tensor(7.0)
    assert m.total is buffer and buffer.item() == 7.0
    with pytest.raises(ValueError, match="shape"):
        m.total = torch.zeros(3)


def test_update_does_not_record_autograd_graph():
    m = GuideMetric()
    x = torch.ones(3, requires_grad=True)
    m.update_state(x, x * 2, torch.ones(3))
    assert not m.total.requires_grad and m.total.grad_fn is None


def test_alias_attribute_follows_buffer_through_to_and_load_state_dict():
    m = AliasMetric()
    assert m.name == "alias_metric"
    m.update_state(torch.tensor([1.0, 2.0]))
    assert list(m.state_dict()) == ["true_positives"]
    m = m.to(torch.float64)
    assert m.tp.dtype == torch.float64
    assert m.tp is m.true_positives
    m.update_state(torch.tensor([1.0, 1.0], dtype=torch.float64))
    assert m.result().item() == 5.0
    fresh = AliasMetric()
    fresh.load_state_dict(m.state_dict())
    assert fresh.tp.tolist() == [2.0, 3.0]
    fresh.reset_states()
    assert fresh.tp.tolist() == [0.0, 0.0]


def test_add_weight_initializers_and_validation():
    class Init(Metric):
        def __init__(self):
            super().__init__(dtype=torch.float64)
            self.add_weight("a", shape=2, initializer="ones")
            self.add_weight("b", initializer=3.5)
            self.add_weight("c", shape=(2,), initializer=lambda s, d: torch.arange(2, dtype=d))
            self.add_weight("n", dtype=torch.int64)

        def update_state(self):
            self.a.mul_(5)
            self.b.add_(1)
            self.c.add_(1)
            self.n.add_(1)

        def result(self):
            return self.a

    m = Init()
    m.update_state()
    m.reset_states()
    assert m.a.tolist() == [1.0, 1.0] and m.b.item() == 3.5 and m.c.tolist() == [0.0, 1.0]
    assert m.n.item() == 0 and m.n.dtype == torch.int64 and m.a.dtype == torch.float64
    with pytest.raises(ValueError, match="reduction"):
        m.add_weight("x", reduction="mean")
    with pytest.raises(ValueError, match="initializer"):
        m.add_weight("y", initializer="glorot")
    with pytest.raises(ValueError, match="already used"):
        m.add_weight("a")


def test_sync_is_a_no_op_without_process_group():
    m = AliasMetric()
    m.update_state(torch.tensor([1.0, 2.0]))
    m.sync()
    assert m.tp.tolist() == [1.0, 2.0]


def test_subclass_overriding_only_reset_state_is_used_by_reset_states():
    class Keras3(AliasMetric):
        def reset_state(self):
            self.tp.fill_(-1.0)

    m = Keras3()
    m.reset_states()
    assert m.tp.tolist() == [-1.0, -1.0]
