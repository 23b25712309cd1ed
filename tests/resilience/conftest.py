"""Shared fixtures of the resilience tests: uninterrupted reference runs, trained once."""

from __future__ import annotations

import pytest
from resilience_tools import CASES, cli_args, run_in_process


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """``reference(case)``: the model_dir of an uninterrupted in-process run of ``CASES[case]``."""
    done: dict[str, str] = {}

    def get(case: str) -> str:
        if case not in done:
            experiment, override, mode = CASES[case]
            model_dir = str(tmp_path_factory.mktemp(f"reference_{case}") / "run")
            assert run_in_process(cli_args(experiment, model_dir, override, mode)) == 0
            done[case] = model_dir
        return done[case]

    return get
