"""`Config`: the typed, lockable, YAML round-tripping base of every config."""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from torchgarden.config import _classes
from torchgarden.config._classes import TYPE_KEY, check_class_name, key_of, show
from torchgarden.config._types import coerce, export, field_types
from torchgarden.config.errors import ConfigError, ConfigKeyError, ConfigTypeError
from torchgarden.config.notices import ModelGardenKey
from torchgarden.config.overrides import dump_yaml, load_yaml_file, parse_override
from torchgarden.config.restrictions import check_restriction
from torchgarden.utils.files import atomic_write_text
from torchgarden.utils.suggest import did_you_mean

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Config"]


_ABSENT = object()


@dataclasses.dataclass
class Config:
    """Base class of all configs: typed fields, strict overrides, lock, YAML round trip.

    Every subclass must be a `@dataclasses.dataclass` whose fields all have defaults
    (and a docstring under each). Assigning a value checks it against the field's
    annotation; assigning a name that is not a field is an error at any time.

    Class attributes:
        RESTRICTIONS: Relations such as `'trainer.train_steps > 0'` checked by
            `validate()`, with keys relative to this config. Defaults to [].
        MODEL_GARDEN_KEYS: Model Garden keys this config maps to its own fields or
            ignores, each leaving a notice (`torchgarden.config.notices`). Defaults to {}.

    Example:
        >>> @dataclasses.dataclass
        ... class Opt(Config):
        ...     lr: float = 0.1
        ...     \"\"\"Learning rate.\"\"\"
        >>> Opt().override("lr=1").lr
        1.0
    """

    RESTRICTIONS: ClassVar[list[str]] = []
    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {}
    _path_prefix: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _classes.register(cls)

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        field_types(cls)  # cached; reports a subclass that forgot @dataclass
        return super().__new__(cls)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):  # private state, not part of the config
            object.__setattr__(self, name, value)
            return
        if name not in field_types(type(self)):
            raise ConfigKeyError(self._no_field(name), key=name)
        self._refuse_if_locked(f"cannot set {name!r}")
        path = f"{type(self).__name__}.{name}"
        object.__setattr__(self, name, self._convert(name, value, path=path, current=None))

    def __delattr__(self, name: str) -> None:
        if name.startswith("_"):
            return object.__delattr__(self, name)
        self._refuse_if_locked(f"cannot delete {name!r}")
        if name not in field_types(type(self)):
            raise ConfigKeyError(self._no_field(name), key=name)
        # Model Garden's ParamsDict deletes the key; a typed config keeps every field.
        raise ConfigKeyError(f"cannot delete {type(self).__name__}.{name}: a config's fields are "
                             f"fixed by its class; assign a value instead (cfg.{name} = ...)",
                             key=name)

    def __getattr__(self, name: str) -> Any:  # only reached when normal lookup fails
        raise AttributeError(name if name.startswith("_") else self._no_field(name))

    def _no_field(self, name: str) -> str:
        names = field_types(type(self))
        hint = did_you_mean(name, names, style="clause") or "; fields: " + ", ".join(names)
        return f"{type(self).__name__} has no field {name!r}{hint}"

    def _refuse_if_locked(self, action: str, key: str = "") -> None:
        if self.locked:
            raise ConfigError(f"{key or type(self).__name__} is locked; {action}. "
                              "Use .replace(...) to get an unlocked modified copy")

    def _convert(self, name: str, value: Any, *, path: str, current: Any,
                 strict: bool = True) -> Any:
        """Checks and converts a value for field ``name`` (a subclass may check more)."""
        return coerce(value, field_types(type(self))[name], path=path, current=current,
                      strict=strict)

    @property
    def locked(self) -> bool:
        """Whether `lock()` was called on this config."""
        return self.__dict__.get("_locked", False)

    def override(self, overrides: Mapping[str, Any] | str | Config, *, strict: bool = True) -> Self:
        """Merges `overrides` into this config in place and returns it.

        A mapping value for a sub-config field merges into it; `_type` in such a
        mapping switches the field to that (imported) subclass. Dotted keys
        (`{"trainer.train_steps": 5}`) nest. If any key or value is wrong nothing
        is changed.

        Args:
            overrides: A mapping, a `Config`, or a string parsed by `parse_override`
                (`'a.b=1,c=[1,2]'`, YAML/JSON text, or a YAML file path).
            strict: Whether an unknown key is an error. With False, unknown keys
                are skipped. Defaults to True.

        Raises:
            ConfigError: On an unknown key (naming the dotted key and the closest
                valid one), a wrong type, or a locked config.
        """
        if isinstance(overrides, str):
            data: Any = parse_override(overrides)
        elif isinstance(overrides, Config):
            data = overrides.as_dict()
        elif isinstance(overrides, Mapping):
            data = overrides
        else:
            raise ConfigTypeError("override expects a mapping, a string or a Config, "
                                  f"received {show(overrides)}")
        trial = copy.deepcopy(self)  # dry run first so a bad override changes nothing
        trial._apply(data, strict=strict, prefix="")
        self._apply(data, strict=strict, prefix="")
        return self

    def _apply(self, data: Mapping[str, Any], *, strict: bool, prefix: str) -> None:
        """Merges a mapping into this config (no dry run); `prefix` is this config's key."""
        self._refuse_if_locked("no change is allowed", prefix)
        names = field_types(type(self))
        data = _nest_dotted(data, prefix)
        type_name = data.pop(TYPE_KEY, None)
        type_key = _join(prefix, TYPE_KEY)
        if type_name is not None:
            check_class_name(type_name, type_key)
        data = self._read_model_garden_keys(data, prefix)
        if type_name is not None and type_name != key_of(type(self)):
            raise ConfigError(
                f"{type_key}: cannot turn a {type(self).__name__} into {type_name!r} in place; "
                f"build it with {type_name.rpartition('.')[2]}.from_dict", key=type_key)
        for key, value in data.items():
            if key in names:
                new = self._convert(key, value, path=_join(prefix, key),
                                    current=getattr(self, key), strict=strict)
                object.__setattr__(self, key, new)
            elif strict:
                valid = f"; valid keys of {prefix or type(self).__name__}: {', '.join(names)}"
                raise _unknown_key(key, names, prefix, valid, config=self)

    def screen(self, data: Mapping[str, Any], prefix: str = "") -> None:
        """Refuses what makes the rest of an override ``data`` moot (a model family no library
        builds) before it is applied, so a file's first refusal is that; changes nothing."""
        for key, value in _nest_dotted(data, prefix).items():
            child = getattr(self, key) if key in field_types(type(self)) else None
            if isinstance(child, Config) and isinstance(value, Mapping):
                child.screen(value, _join(prefix, key))

    def _read_model_garden_keys(self, data: dict[str, Any], prefix: str) -> dict[str, Any]:
        """`data` with this class' Model Garden keys mapped or dropped (each noticed)."""
        table = type(self).MODEL_GARDEN_KEYS
        if not any(key in table for key in data):
            return data
        rewritten: dict[str, Any] = {}
        for key, value in data.items():
            spec = table.get(key)
            pair = (key, value) if spec is None else spec.rewrite(key, value, path=_join(prefix, key))
            if pair is None:
                continue
            if pair[0] != key and (_sets(data, pair[0]) or _sets(rewritten, pair[0])):
                raise ConfigError(f"{_join(prefix, key)} and {_join(prefix, pair[0])} set the "
                                  "same field; keep one of them", key=_join(prefix, key))
            rewritten[pair[0]] = pair[1]
        return _nest_dotted(rewritten, prefix)

    def lock(self) -> Self:
        """Makes this config and every sub-config immutable; returns self."""
        self._set_locked(True)
        return self

    def copy(self) -> Self:
        """Returns an unlocked deep copy."""
        clone = copy.deepcopy(self)
        clone._set_locked(False)
        return clone

    def replace(self, **kwargs: Any) -> Self:
        """Returns an unlocked deep copy with `kwargs` applied as a strict override.

        Example:
            >>> short = cfg.replace(trainer={"train_steps": 10})  # doctest: +SKIP
        """
        clone = self.copy()
        clone.override(kwargs, strict=True)
        return clone

    def _set_locked(self, locked: bool) -> None:
        object.__setattr__(self, "_locked", locked)
        for name in field_types(type(self)):
            for _, child in _items(getattr(self, name), name):
                if isinstance(child, Config):
                    child._set_locked(locked)

    def validate(self) -> Self:
        """Checks `RESTRICTIONS` and each config's `check()`, recursively; returns self.

        Raises:
            ConfigError: On the first violated restriction or failed check.
        """
        self._validate(prefix="")
        return self

    def _validate(self, prefix: str) -> None:
        for text in type(self).RESTRICTIONS:
            check_restriction(self, text, prefix=prefix)
        object.__setattr__(self, "_path_prefix", prefix)
        self.check()
        for name in field_types(type(self)):
            for path, value in _items(getattr(self, name), _join(prefix, name)):
                if isinstance(value, float) and math.isnan(value):
                    # NaN compares false with everything, so a NaN bound or rate silently
                    # disables the check or poisons the run; no field means anything by it.
                    raise ConfigError(f"{path} is NaN; give a number", key=path)
                if isinstance(value, Config):
                    value._validate(path)

    def check(self) -> None:
        """Hook: raise `ConfigError` for invalid values, naming a field by
        `self.field_path(name)` (its full dotted key). The default accepts all."""

    def field_path(self, name: str) -> str:
        """Returns the dotted key of field `name` as seen from the config being validated."""
        return _join(self._path_prefix, name)

    def as_dict(self, *, include_type: bool = True) -> dict[str, Any]:
        """Returns a deep, plain-`dict` copy in field order (lists stay lists, tuples tuples).

        Args:
            include_type: Whether to write `_type: module.Class` into the mapping
                of a field whose value is a strict subclass of its annotated
                class, so that `from_dict` rebuilds the same class. Defaults to True.
        """
        types = field_types(type(self))
        return {name: export(getattr(self, name), types[name], include_type)
                for name in self._export_names()}

    def _export_names(self) -> list[str]:
        return list(field_types(type(self)))

    def to_yaml(self, path: str | os.PathLike[str] | None = None) -> str:
        """Returns the config as YAML and writes it to `path` (atomically) if given.

        Args:
            path: File to write; parent directories are created. Defaults to None.
        """
        text = dump_yaml(self.as_dict())
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            atomic_write_text(path, text)
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Builds `cls()` from defaults, then applies `data` as a strict override.

        A top-level `_type` naming a subclass of `cls` builds that subclass.
        """
        if not isinstance(data, Mapping):
            raise ConfigTypeError(f"{cls.__name__}.from_dict expects a mapping, "
                                  f"received {show(data)}")
        return coerce(data, cls, path="")

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> Self:
        """Reads a YAML file written by `to_yaml` (or by hand) into a new config."""
        return cls.from_dict(load_yaml_file(path))

    def __getitem__(self, key: str) -> Any:
        """Returns the value at a dotted key such as `"trainer.train_steps"`."""
        node: Any = self
        walked = ""
        for part in key.split("."):
            if isinstance(node, Config) and part in field_types(type(node)):
                node = getattr(node, part)
            elif isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                names = field_types(type(node)) if isinstance(node, Config) else ()
                raise _unknown_key(part, names, walked,
                                   config=node if isinstance(node, Config) else None)
            walked = _join(walked, part)
        return node

    def get(self, key: str, default: Any = None) -> Any:
        """Returns the value at a dotted key, or `default` if there is none."""
        try:
            return self[key]
        except ConfigError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, _ABSENT) is not _ABSENT


_classes.ROOT = Config
_classes.register(Config)


def _join(prefix: str, key: object) -> str:
    """`prefix.key`, or `key` at the top level (empty `prefix`)."""
    return f"{prefix}.{key}" if prefix else str(key)


def _unknown_key(key: str, names: Iterable[str], prefix: str, fallback: str = "", *,
                 config: Config | None = None) -> ConfigKeyError:
    """The error for `key` under `prefix`: the field of that name deeper in `config`
    (`train_steps` at the top is `trainer.train_steps`), else the closest of `names`,
    else `fallback`."""
    deeper = nested_paths(config, key, prefix) if config is not None else []
    if deeper:
        more = f" (or {', '.join(map(repr, deeper[1:3]))})" if len(deeper) > 1 else ""
        hint = f"; did you mean {deeper[0]!r}{more}?"
    else:
        hint = did_you_mean(key, names, prefix=_join(prefix, ""), style="clause") or fallback
    return ConfigKeyError(f"unknown key {_join(prefix, key)!r}{hint}", key=_join(prefix, key))


def _sets(data: Mapping[str, Any], dotted: str) -> bool:
    """Whether `data` (nested or with dotted keys) gives a value for the key `dotted`."""
    if dotted in data:
        return True
    head, _, rest = dotted.partition(".")
    return bool(rest) and isinstance(data.get(head), Mapping) and _sets(data[head], rest)


def nested_paths(config: Config, name: str, prefix: str = "") -> list[str]:
    """The dotted keys of the fields named `name` below `config`'s own fields (in its
    sub-configs), shallowest first; `prefix` is `config`'s own key.

    Example:
        >>> nested_paths(ExperimentConfig(), "train_steps")  # doctest: +SKIP
        ['trainer.train_steps']
    """
    found, queue = [], [(config, prefix)]
    while queue:
        node, path = queue.pop(0)
        for field in field_types(type(node)):
            child = getattr(node, field, None)
            if field == name and node is not config:
                found.append(_join(path, field))
            if isinstance(child, Config):
                queue.append((child, _join(path, field)))
    return found


def _nest_dotted(data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Turns `{"a.b": 1}` into `{"a": {"b": 1}}` (one level; each sub-config nests its own)."""
    result: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigTypeError(f"keys must be strings, received {show(key)} under "
                                  f"{prefix or 'the top level'}")
        head, dot, rest = key.partition(".")
        if not dot:
            present = result.get(key)  # `a.b` seen first: merge, never drop it
            both = isinstance(present, Mapping) and isinstance(value, Mapping)
            result[key] = {**value, **present} if both else value
            continue
        present = result.get(head, {})
        if not isinstance(present, Mapping):
            raise ConfigError(f"key {_join(prefix, key)!r} conflicts with {_join(prefix, head)!r}")
        result[head] = {**present, rest: value}
    return result


def _items(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """`(dotted key, item)` for `value`, or for each item inside its lists, tuples and dicts."""
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _items(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _items(item, f"{path}.{key}")
    else:
        yield path, value
