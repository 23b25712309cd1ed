"""Fixtures of the torchrun tests: the single-process reference runs."""

from __future__ import annotations

from typing import Any

import dist_scenarios as scenarios
import pytest


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Single-process runs with the same global batch as the 2-rank runs."""
    root = tmp_path_factory.mktemp("reference")
    results: dict[str, Any] = {"root": root}
    results["toy"] = scenarios.run(scenarios.toy_params(), root / "toy")
    results["evaluator"] = scenarios.run(
        scenarios.toy_params(), root / "toy", mode="eval",
        task=scenarios.GatheringToyTask(scenarios.toy_params().task),
    )["eval"]
    results["digits"] = scenarios.run(scenarios.digits_params(), root / "digits")
    accumulate = scenarios.toy_params(**{"trainer.gradient_accumulation_steps": 2})
    results["accumulation"] = scenarios.run(accumulate, root / "accum")
    ema = scenarios.toy_params(**{"trainer.optimizer_config.ema": {"average_decay": 0.9}})
    results["ema"] = scenarios.run(ema, root / "ema")
    results["batches"] = scenarios.rank_batches(scenarios.toy_params(), 16)
    return results
