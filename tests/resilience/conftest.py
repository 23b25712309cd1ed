"""Shared fixtures of the resilience tests: uninterrupted reference runs, trained once."""

from __future__ import annotations

import pytest
from resilience_tools import CASES, cli_args, run_in_process
from table import DIGITS, EVERY_5, SHORT, TOY, run_quietly


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


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> dict[str, str]:
    """Short runs (checkpoints at steps 5 and 10) copied into the table rows that resume."""
    runs = {}
    for kind, command, extra in (("trained", TOY, ""),
                                 ("trained_digits", DIGITS, ",task.model.hidden_sizes=[8]")):
        model_dir = str(tmp_path_factory.mktemp(kind) / "run")
        code = run_quietly([*command, "--model_dir", model_dir, "--params_override",
                            f"{SHORT}{EVERY_5}{extra}"])
        assert code == 0
        runs[kind] = model_dir
    return runs
