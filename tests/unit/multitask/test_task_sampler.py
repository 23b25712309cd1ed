"""Task samplers: frequencies over 10k seeded draws, annealing, resumable state."""

from __future__ import annotations

import collections

import pytest

from torchgarden.multitask import (
    AnnealingTaskSampler,
    ProportionalTaskSampler,
    UniformTaskSampler,
)

WEIGHTS = {"a": 1.0, "b": 2.0, "c": 5.0}
DRAWS = 10_000
#: Three binomial standard deviations of a frequency near 0.5 over 10k draws, rounded up.
TOLERANCE = 0.016


def frequencies(sampler, steps) -> dict[str, float]:
    counts = collections.Counter(sampler.sample(step) for step in steps)
    return {name: counts[name] / len(steps) for name in sampler.task_names}


@pytest.mark.parametrize(("sampler", "expected"), [
    (UniformTaskSampler(WEIGHTS, seed=1), {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}),
    (ProportionalTaskSampler(WEIGHTS, seed=2), {"a": 1 / 8, "b": 2 / 8, "c": 5 / 8}),
    (ProportionalTaskSampler(WEIGHTS, alpha=0.5, seed=3),
     {n: w**0.5 / (1 + 2**0.5 + 5**0.5) for n, w in WEIGHTS.items()}),
    (ProportionalTaskSampler(WEIGHTS, alpha=0.0, seed=4), {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}),
], ids=["uniform", "proportional", "alpha_0.5", "alpha_0"])
def test_frequencies_over_10k_draws_are_within_tolerance_of_the_targets(sampler, expected):
    assert sampler.task_distribution(0) == pytest.approx(list(expected.values()))
    found = frequencies(sampler, range(DRAWS))
    for name, target in expected.items():
        assert found[name] == pytest.approx(target, abs=TOLERANCE), (name, found)


def test_annealing_goes_from_proportional_to_uniform_epoch_by_epoch():
    sampler = AnnealingTaskSampler(WEIGHTS, steps_per_epoch=2_000, total_steps=10_000, seed=5)
    assert [sampler.alpha(epoch * 2_000) for epoch in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0,
                                                                      0.0]
    for epoch in range(5):
        steps = range(epoch * 2_000, (epoch + 1) * 2_000)
        alpha = 1.0 - epoch / 4
        sizes = {n: w**alpha for n, w in WEIGHTS.items()}
        found = frequencies(sampler, steps)
        for name, size in sizes.items():  # 2k draws each: three std devs are ~0.033.
            assert found[name] == pytest.approx(size / sum(sizes.values()), abs=0.034), epoch


def test_a_restored_sampler_draws_what_an_uninterrupted_one_draws():
    uninterrupted = ProportionalTaskSampler(WEIGHTS, seed=7)
    expected = [uninterrupted.sample(step) for step in range(200)]
    first = ProportionalTaskSampler(WEIGHTS, seed=7)
    drawn = [first.sample(step) for step in range(120)]
    resumed = ProportionalTaskSampler(WEIGHTS, seed=123)  # Its own seed is overwritten.
    resumed.load_state_dict(first.state_dict())
    drawn += [resumed.sample(step) for step in range(120, 200)]
    assert drawn == expected


def test_the_same_seed_draws_the_same_tasks_and_another_seed_others():
    one, same, other = (ProportionalTaskSampler(WEIGHTS, seed=s) for s in (11, 11, 12))
    draws = [[s.sample(step) for step in range(300)] for s in (one, same, other)]
    assert draws[0] == draws[1] != draws[2]


@pytest.mark.parametrize("weights", [{"a": 0.0}, {"a": -1.0}, {"a": float("nan")}, {}])
def test_weights_must_be_positive(weights):
    with pytest.raises(ValueError, match="weight"):
        UniformTaskSampler(weights)
