"""Example tests: ``examples/`` on ``sys.path`` and readers of TensorBoard event files.

Each example is imported once per test process (``import custom_steps``), exactly as a
user's script would import it, and its ``main(model_dir)`` is run under ``tmp_path``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES_DIR) not in sys.path:
    sys.path.insert(0, str(EXAMPLES_DIR))


def _accumulator(directory: str | Path) -> EventAccumulator:
    accumulator = EventAccumulator(
        str(directory), size_guidance={"scalars": 0, "images": 0, "histograms": 0}
    )
    accumulator.Reload()
    return accumulator


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    """The repository's ``examples/`` directory."""
    return EXAMPLES_DIR


@pytest.fixture
def read_scalars() -> Callable[[str | Path], dict[str, list[tuple[int, float]]]]:
    """``read_scalars(directory) -> {tag: [(step, value), ...]}`` from real event files."""

    def read(directory: str | Path) -> dict[str, list[tuple[int, float]]]:
        accumulator = _accumulator(directory)
        return {
            tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]
        }

    return read


@pytest.fixture
def read_events() -> Callable[[str | Path], EventAccumulator]:
    """``read_events(directory)``: a loaded ``EventAccumulator`` (images, histograms...)."""
    return _accumulator
