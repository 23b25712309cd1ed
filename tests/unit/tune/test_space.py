"""The search space file: checked against the experiment's config before any trial."""

from __future__ import annotations

import pytest

optuna = pytest.importorskip("optuna")

from torchgarden import get_experiment  # noqa: E402
from torchgarden.config import ConfigError  # noqa: E402
from torchgarden.tune import load_search_space  # noqa: E402

LR = "trainer.optimizer_config.learning_rate"


def _space(tmp_path, text):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return load_search_space(path, get_experiment("toy_regression"))


def test_a_space_reads_every_distribution_and_draws_a_conditional_key_only_when_it_holds(
        tmp_path):
    space = _space(tmp_path, f"""
{LR}.type: {{categorical: [constant, cosine]}}
{LR}.constant.learning_rate: {{log_uniform: [1.0e-4, 1.0e-1], when: {{{LR}.type: constant}}}}
{LR}.cosine.initial_learning_rate: {{log_uniform: [1.0e-3, 1.0], when: {{{LR}.type: cosine}}}}
trainer.optimizer_config.optimizer.sgd.momentum: {{uniform: [0.0, 0.9], step: 0.1}}
task.hidden_size: {{int: [0, 64], step: 16}}
""")
    assert [p.kind for p in space.parameters] == [
        "categorical", "log_uniform", "log_uniform", "uniform", "int"]
    base = get_experiment("toy_regression")
    drawn = space.suggest(optuna.trial.FixedTrial({
        f"{LR}.type": "cosine", f"{LR}.cosine.initial_learning_rate": 0.01,
        "trainer.optimizer_config.optimizer.sgd.momentum": 0.5, "task.hidden_size": 32}), base)
    assert drawn == {f"{LR}.type": "cosine", f"{LR}.cosine.initial_learning_rate": 0.01,
                     "trainer.optimizer_config.optimizer.sgd.momentum": 0.5,
                     "task.hidden_size": 32}


@pytest.mark.parametrize("text,expected", [
    (f"{LR}.constant.learnin_rate: {{log_uniform: [1.0e-4, 1.0]}}",
     f"did you mean '{LR}.constant.learning_rate'"),
    ("task.hidden_size: {log_uniform: [1.0e-4, 1.0]}", "task.hidden_size is an integer"),
    ("task.hidden_size: {int: [16, 16]}", "range [16, 16] is empty"),
    (f"{LR}.constant.learning_rate: {{log_uniform: [0.0, 1.0]}}", "log_uniform needs low > 0"),
    ("task.hidden_size: {unifrm: [0, 1]}", "did you mean 'uniform'"),
    (f"{LR}.cosine.initial_learning_rate: {{uniform: [0.1, 1.0], when: {{{LR}.type: cosine}}}}",
     "never holds"),
    ("task.noise: {uniform: [-1.0, 0.5]}", "task.noise must be >= 0"),
    ("trainer: {uniform: [0, 1]}", "is a section"),
    ("task.hidden_size: {categorical: [8, wide]}", "does not fit task.hidden_size"),
])
def test_a_bad_space_is_one_line_naming_the_file_and_key(tmp_path, text, expected):
    with pytest.raises(ConfigError) as error:
        _space(tmp_path, text)
    message = str(error.value)
    assert "\n" not in message and "space.yaml" in message
    assert expected in message
