"""``SearchSpace``: a YAML file of config keys and the distributions to draw them from.

```yaml
trainer.optimizer_config.learning_rate.type: {categorical: [constant, cosine]}
trainer.optimizer_config.learning_rate.constant.learning_rate:
  log_uniform: [1.0e-4, 1.0e-1]
  when: {trainer.optimizer_config.learning_rate.type: constant}
trainer.optimizer_config.optimizer.sgd.momentum: {uniform: [0.0, 0.95]}
task.hidden_size: {int: [0, 64], step: 16}
```

Each key is a dotted config key; each value names one distribution (``log_uniform``,
``uniform`` with an optional ``step``; ``int`` with an optional ``step`` or ``log: true``;
``categorical``) and optionally ``when``, a condition on another key (a categorical drawn
earlier in the file, or a fixed value of the config). The whole space is checked against
the experiment's config before any trial: the key exists (else the closest one is named),
the distribution fits the field's type, the range is not empty, and both ends of each
range give a config that validates. Nothing here imports Optuna or torch.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

from torchgarden.config import Config, ConfigError, ExperimentConfig, load_yaml_file
from torchgarden.utils.suggest import did_you_mean

__all__ = ["DISTRIBUTIONS", "Parameter", "SearchSpace", "load_search_space"]

#: The distribution names a space file may use.
DISTRIBUTIONS = ("log_uniform", "uniform", "int", "categorical")
_OPTIONS = {"log_uniform": (), "uniform": ("step",), "int": ("step", "log"),
            "categorical": ()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Parameter:
    """One searched config key.

    Attributes:
        key: The dotted config key (also the Optuna parameter's name).
        kind: One of ``DISTRIBUTIONS``.
        low, high: The range (``log_uniform``, ``uniform``, ``int``), both ends included.
        step: The grid step of ``uniform`` / ``int``; None for a continuous range.
        log: Whether ``int`` draws on a log scale.
        choices: The values of ``categorical``.
        when: ``(key, value)``: drawn only in trials where ``key`` has ``value``.
    """

    key: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    step: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    when: tuple[str, Any] | None = None

    def suggest(self, trial: Any) -> Any:
        """Draws this parameter's value in an Optuna ``trial``."""
        if self.kind == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high),
                                     step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, step=self.step,
                                   log=self.kind == "log_uniform")

    def as_dict(self) -> dict[str, Any]:
        """The entry as a space file writes it (recorded with the study)."""
        entry: dict[str, Any] = {
            self.kind: list(self.choices) if self.kind == "categorical" else [self.low, self.high]}
        if self.step is not None:
            entry["step"] = self.step
        if self.log and self.kind == "int":
            entry["log"] = True
        if self.when is not None:
            entry["when"] = {self.when[0]: self.when[1]}
        return entry


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """The searched parameters, in file order (a condition's key comes first)."""

    parameters: tuple[Parameter, ...]

    def suggest(self, trial: Any, base: ExperimentConfig) -> dict[str, Any]:
        """Draws the trial's overrides: ``{key: value}`` for each parameter whose
        condition holds (on a value drawn earlier in this trial, else on ``base``)."""
        drawn: dict[str, Any] = {}
        for parameter in self.parameters:
            if parameter.when is not None:
                key, value = parameter.when
                if drawn.get(key, base.get(key)) != value:
                    continue
            drawn[parameter.key] = parameter.suggest(trial)
        return drawn

    def as_dict(self) -> dict[str, Any]:
        """The space as plain data (compared when a study is reopened)."""
        return {p.key: p.as_dict() for p in self.parameters}


def load_search_space(path: str | os.PathLike[str], base: ExperimentConfig) -> SearchSpace:
    """Reads and checks a space file against ``base`` (the experiment's config).

    Raises:
        ConfigError: One line naming the file, the key and what is wrong: an unknown key
            (with the closest one), an unknown distribution, an empty or non-positive log
            range, a distribution the field's type cannot hold, a condition that can never
            hold, or a range end the config rejects.
    """
    where = os.fspath(path)
    data = load_yaml_file(path)
    if not data:
        raise ConfigError(f"search space {where} is empty; give at least one config key, "
                          "e.g. trainer.optimizer_config.learning_rate.constant.learning_rate: "
                          "{log_uniform: [1.0e-4, 1.0e-1]}")
    parameters: list[Parameter] = []
    for key, entry in data.items():
        try:
            parameter = _parameter(str(key), entry, base, parameters)
            _check_fits(parameter, base)
        except ConfigError as error:
            raise ConfigError(f"search space {where}: {error}", key=str(key)) from None
        parameters.append(parameter)
    return SearchSpace(tuple(parameters))


def _parameter(key: str, entry: Any, base: ExperimentConfig,
               earlier: list[Parameter]) -> Parameter:
    _field_of(base, key)
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{key}: expected a mapping such as {{uniform: [0.0, 1.0]}}, "
                          f"received {entry!r}")
    kinds = [name for name in entry if name in DISTRIBUTIONS]
    if len(kinds) != 1:
        unknown = [str(n) for n in entry if n not in (*DISTRIBUTIONS, "step", "log", "when")]
        hint = did_you_mean(unknown[0], DISTRIBUTIONS, style="clause") if unknown else ""
        raise ConfigError(f"{key}: name exactly one distribution of {', '.join(DISTRIBUTIONS)}"
                          f", found {', '.join(map(str, entry)) or 'none'}{hint}")
    kind = kinds[0]
    for option in entry:
        if option not in (kind, "when", *_OPTIONS[kind]):
            raise ConfigError(f"{key}: {kind} takes no {option!r} (options: "
                              f"{', '.join((*_OPTIONS[kind], 'when'))})")
    when = _condition(key, entry.get("when"), base, earlier)
    if kind == "categorical":
        choices = entry[kind]
        if not isinstance(choices, list) or not choices or any(
                isinstance(c, list | dict) for c in choices):
            raise ConfigError(f"{key}: categorical expects a non-empty list of scalars, "
                              f"received {choices!r}")
        return Parameter(key=key, kind=kind, choices=tuple(choices), when=when)
    low, high = _range(key, kind, entry[kind])
    step = entry.get("step")
    if step is not None and (not isinstance(step, int | float) or step <= 0
                             or (kind == "int" and not isinstance(step, int))):
        raise ConfigError(f"{key}: step must be a positive {'integer' if kind == 'int' else 'number'}"
                          f", received {step!r}")
    log = entry.get("log", False)
    if not isinstance(log, bool) or (log and (step not in (None, 1) or low <= 0)):
        raise ConfigError(f"{key}: log: true needs low > 0 and no step, received "
                          f"low={low}, step={step}")
    return Parameter(key=key, kind=kind, low=low, high=high, step=step, log=log, when=when)


def _range(key: str, kind: str, value: Any) -> tuple[float, float]:
    number = int if kind == "int" else int | float
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, number) and not isinstance(v, bool) for v in value)):
        what = "two integers" if kind == "int" else "two numbers"
        raise ConfigError(f"{key}: {kind} expects [low, high], {what}, received {value!r}")
    low, high = value
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise ConfigError(f"{key}: {kind} range [{low}, {high}] is empty; low must be below "
                          "high (fix a key at one value with --params_override instead)")
    if kind == "log_uniform" and low <= 0:
        raise ConfigError(f"{key}: log_uniform needs low > 0, received [{low}, {high}]; use "
                          "uniform for a range that includes 0")
    return low, high


def _condition(key: str, when: Any, base: ExperimentConfig,
               earlier: list[Parameter]) -> tuple[str, Any] | None:
    if when is None:
        return None
    if not isinstance(when, Mapping) or len(when) != 1:
        raise ConfigError(f"{key}: when expects one 'key: value', received {when!r}")
    (other, value), = when.items()
    other = str(other)
    _field_of(base, other)
    drawn = next((p for p in earlier if p.key == other), None)
    if drawn is not None:
        if drawn.kind != "categorical" or value not in drawn.choices:
            raise ConfigError(f"{key}: when {other}: {value!r} never holds: {other} is drawn "
                              f"from {drawn.as_dict()}")
    elif base.get(other) != value:
        raise ConfigError(f"{key}: when {other}: {value!r} never holds: the config has "
                          f"{base.get(other)!r} and the space does not draw {other} before "
                          "this key")
    return other, value


def _field_of(base: ExperimentConfig, key: str) -> None:
    """Checks that ``key`` names a field holding a value (not a section)."""
    value = base[key]  # ConfigKeyError naming the closest key.
    if isinstance(value, Config):
        raise ConfigError(f"{key} is a section, not a value; name one of its fields: "
                          f"{', '.join(value.as_dict())}")


def _check_fits(parameter: Parameter, base: ExperimentConfig) -> None:
    """Both range ends (each choice) fit the field's type and give a valid config."""
    key = parameter.key
    if parameter.kind == "categorical":
        values = list(parameter.choices)
    elif parameter.kind == "int":
        values = [int(parameter.low), int(parameter.high)]
    else:
        values = [float(parameter.low), float(parameter.high)]
    for value in values:
        config = base.copy()
        if parameter.when is not None:
            config.override({parameter.when[0]: parameter.when[1]})
        try:
            config.override({key: value})
        except ConfigError as error:
            if parameter.kind in ("uniform", "log_uniform") and _holds_int(base, key):
                log = ", log: true" if parameter.kind == "log_uniform" else ""
                raise ConfigError(f"{key} is an integer; {parameter.kind} draws floats: use "
                                  f"{{int: [low, high]{log}}} with integer ends") from None
            raise ConfigError(f"{parameter.kind} does not fit {key}: {error}") from None
        try:
            config.validate()
        except ConfigError as error:
            raise ConfigError(f"{key}={value!r} (an end of its {parameter.kind}) gives an "
                              f"invalid config: {error}") from None


def _holds_int(base: ExperimentConfig, key: str) -> bool:
    """Whether the field takes 1 but not 0.5."""
    def takes(value: Any) -> bool:
        try:
            base.copy().override({key: value})
        except ConfigError:
            return False
        return True

    return takes(1) and not takes(0.5)
