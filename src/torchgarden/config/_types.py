"""Field annotations of config classes: resolving, printing and checking values.

`coerce(value, annotation)` is the single place where a value given to a config
(by an override, a YAML file or an attribute assignment) is checked against the
field's annotation and converted: int -> float, a numeric string -> float,
tuple -> list, a mapping -> a sub-config. Everything else that does not fit is a
`ConfigError` naming the dotted key, the annotation and the received value.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import numbers
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, get_args, get_origin

from torchgarden.config import _classes
from torchgarden.config._classes import _UNIONS, TYPE_KEY, NoneType, format_type, key_of, show
from torchgarden.config.errors import ConfigError, ConfigTypeError
from torchgarden.utils.suggest import did_you_mean

__all__ = ["coerce", "export", "field_types"]

_SCALARS = (bool, int, float, str)


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Returns the fields of a config class in definition order with resolved annotations.

    Raises:
        ConfigError: If a class in the hierarchy declares fields without being a
            dataclass, or an annotation names a class that cannot be found.
    """
    for klass in cls.__mro__:
        if not _classes.is_config_class(klass) or "__dataclass_fields__" in klass.__dict__:
            continue
        own = klass.__dict__.get("__annotations__", {})
        if any(not _is_classvar(annotation) for annotation in own.values()):
            raise ConfigError(
                f"{klass.__qualname__} declares fields but is not a dataclass; "
                "decorate it with @dataclasses.dataclass"
            )
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a config class defined in a function: find it by name
        namespace = {**_classes.simple_names(), **vars(typing)}
        try:
            hints = typing.get_type_hints(cls, localns=namespace)
        except Exception as error:  # noqa: BLE001 - reported as a ConfigError
            raise ConfigError(f"cannot resolve the annotations of {cls.__qualname__} ({error}); "
                              "define the classes they name at module level") from None
    return {field.name: hints[field.name] for field in dataclasses.fields(cls)}


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is ClassVar or get_origin(annotation) is ClassVar


def _mismatch(value: Any, tp: Any, path: str, hint: str = "") -> ConfigError:
    if not hint and isinstance(value, str) and re.fullmatch(r"[-+.\d]+(\s+[-+.\d]+)+", value):
        # `[320 320, 3]` in a YAML file: one string where the comma is missing.
        hint = f"; YAML reads it as one string: is a comma missing ({', '.join(value.split())})?"
    return ConfigTypeError(
        f"{path} expects {format_type(tp)}, received {show(value)}{hint}", key=path
    )


def export(value: Any, tp: Any, include_type: bool) -> Any:
    """``value`` as plain data for `as_dict`; ``tp`` is its field's annotation.

    A config whose class is not one the annotation names directly (`X`, `X | None`) gets
    its class under `_type` when ``include_type`` is set.
    """
    if _classes.is_config_class(type(value)):
        data = value.as_dict(include_type=include_type)
        named = get_args(tp) if get_origin(tp) in _UNIONS else (tp,)
        if include_type and type(value) not in named:
            data = {TYPE_KEY: key_of(type(value)), **data}
        return data
    if isinstance(value, list | tuple):  # A tuple stays a tuple (YAML writes both as lists).
        return type(value)(
            export(item, _element_type(tp, i), include_type) for i, item in enumerate(value)
        )
    if isinstance(value, dict):
        return {
            key: export(item, _element_type(tp, key), include_type) for key, item in value.items()
        }
    return value


def _element_type(tp: Any, index: int | str | None = None) -> Any:
    """Returns the annotation of one item of a list, tuple or dict annotation (else Any)."""
    members = (
        [arg for arg in get_args(tp) if arg is not NoneType] if get_origin(tp) in _UNIONS else [tp]
    )
    for member in members:
        origin = get_origin(member)
        args = get_args(member)
        if origin is list and args:
            return args[0]
        if origin is tuple and args:
            if _is_variadic_tuple(args):
                return args[0]
            return args[index] if isinstance(index, int) and index < len(args) else Any
        if origin is dict and len(args) == 2:
            return args[1]
    return Any


def coerce(value: Any, tp: Any, *, path: str, current: Any = None, strict: bool = True) -> Any:
    """Checks `value` against the resolved annotation `tp` and returns the value to store.

    Args:
        path: Dotted key of the field, for error messages.
        current: The field's present value: a mapping merges into a present sub-config
            or dict (which is returned); None builds a new one from defaults.
        strict: Whether unknown keys inside sub-configs are errors.

    Raises:
        ConfigError: If the value does not fit the annotation.
    """
    if tp is Any or tp is object:
        return _coerce_any(value, path, current, strict)
    origin = get_origin(tp)
    if origin in _UNIONS:
        return _coerce_union(value, tp, path, current, strict)
    if tp is NoneType or tp is None:
        if value is None:
            return None
        raise _mismatch(value, tp, path)
    if _classes.is_config_class(tp):
        return _coerce_config(value, tp, path, current, strict)
    if origin is Literal:
        choices = get_args(tp)
        if any(type(value) is type(choice) and value == choice for choice in choices):
            return value
        names = [c for c in choices if isinstance(c, str)]
        hint = did_you_mean(value, names, style="clause") if isinstance(value, str) else ""
        raise _mismatch(value, tp, path, hint)
    if tp in (list, tuple) or origin in (list, tuple, Sequence):
        return _coerce_sequence(value, tp, path, current, strict)
    if tp is dict or origin in (dict, Mapping):
        return _coerce_mapping(value, tp, path, current, strict)
    return _coerce_scalar(value, tp, path)


def _coerce_scalar(value: Any, tp: Any, path: str) -> Any:
    """A value of class ``tp`` as it is; a float field also takes ints and numeric strings."""
    if tp is float and isinstance(value, numbers.Real | str) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            return float(value.strip() if isinstance(value, str) else value)
    elif not isinstance(tp, type) or _fits(value, tp):  # a TypeVar (say) is not checked
        return int(value) if tp is int else value
    hint = {bool: "; write true or false", str: "; quote it to pass a string"}.get(tp, "")
    raise _mismatch(value, tp, path, hint)


def _fits(value: Any, tp: Any) -> bool:
    """Whether `value` matches `tp` without any conversion (first pass over a union)."""
    if tp is Any or tp is object:
        return True
    if _classes.is_config_class(tp):
        return isinstance(value, tp | Mapping)
    origin = get_origin(tp) or tp
    if tp is bool:
        return type(value) is bool
    if tp is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if origin is Literal:
        return value in get_args(tp)
    if origin in (list, tuple, Sequence):
        return isinstance(value, list | tuple)
    if origin in (dict, Mapping):
        return isinstance(value, Mapping)
    return isinstance(origin, type) and isinstance(value, origin)


def _coerce_union(value: Any, tp: Any, path: str, current: Any, strict: bool) -> Any:
    args = get_args(tp)
    if value is None:
        if NoneType in args:
            return None
        raise _mismatch(value, tp, path)
    members = [arg for arg in args if arg is not NoneType]
    if isinstance(value, Mapping):
        members, value = named_configs_first(value, members)
        if get_origin(members[0]) in (dict, Mapping) and _classes.is_config_class(type(current)):
            # Named sets replacing one config each start from a copy of it.
            current = {key: copy.deepcopy(current) for key in value}
    for member in [member for member in members if _fits(value, member)]:
        try:
            return coerce(value, member, path=path, current=current, strict=strict)
        except ConfigError as error:
            mismatch = error.key == path and "expects" in str(error)
            if mismatch and not _classes.is_config_class(member):
                raise _mismatch(value, tp, path) from None  # names the whole union
            raise
    for member in members:
        try:
            return coerce(value, member, path=path, current=current, strict=strict)
        except ConfigError as error:
            if error.key != path:
                raise
    raise _mismatch(value, tp, path)


def named_configs_first(value: Mapping[Any, Any], members: list[Any]) -> tuple[list[Any], Any]:
    """Orders the members of ``C | dict[str, C]`` (named sets) for a mapping.

    One of C's fields (or ``_type``) makes the mapping a C; otherwise, when every value is
    a mapping (or a dotted key names one), it is a dict of C by name (``{clean: {...},
    noisy: {...}}``): the dict members go first and the value is returned with its dotted
    keys nested.
    """
    named = [m for m in members if get_origin(m) in (dict, Mapping) and len(get_args(m)) == 2
             and _classes.is_config_class(get_args(m)[1])]
    if not named or not value or TYPE_KEY in value:
        return members, value
    fields = {name for m in members if _classes.is_config_class(m) for name in field_types(m)}
    if any(str(key).partition(".")[0] in fields for key in value):
        return members, value
    if not all("." in str(key) or isinstance(item, Mapping) or _classes.is_config_class(type(item))
               for key, item in value.items()):
        return members, value
    nested: dict[str, Any] = {}
    for key, item in value.items():
        head, dot, rest = str(key).partition(".")
        nested[head] = {**nested.get(head, {}), rest: item} if dot else item
    return named + [m for m in members if m not in named], nested


def _coerce_config(value: Any, tp: type, path: str, current: Any, strict: bool) -> Any:
    if isinstance(value, _classes.ROOT):
        if isinstance(value, tp):
            return value
        raise _mismatch(value, tp, path)
    if not isinstance(value, Mapping):
        raise _mismatch(value, tp, path, f"; give a mapping of {tp.__name__} fields")
    data = dict(value)
    cls = tp
    if TYPE_KEY in data:
        type_path = f"{path}.{TYPE_KEY}" if path else TYPE_KEY
        cls = _classes.lookup(data.pop(TYPE_KEY), path=type_path)
        if not issubclass(cls, tp):
            raise ConfigError(
                f"{type_path}: {cls.__name__} is not a subclass of {tp.__name__}", key=type_path
            )
        if type(current) is not cls:
            current = None
    if current is None or not isinstance(current, cls):
        if cls is _classes.ROOT and data:
            raise ConfigError(
                f"{path or cls.__name__}: the field is annotated with the generic Config; annotate "
                f"it with a concrete Config subclass or add '{TYPE_KEY}: module.Class' to the "
                "mapping", key=path)
        try:
            current = cls()
        except TypeError as error:
            raise ConfigError(f"{path or cls.__name__}: cannot build {cls.__name__} from "
                              f"defaults ({error}); give every field a default") from None
    current._apply(data, strict=strict, prefix=path)
    return current


def _coerce_sequence(value: Any, tp: Any, path: str, current: Any, strict: bool) -> Any:
    if not isinstance(value, list | tuple):
        hint = "; wrap it in brackets: [...]" if isinstance(value, _SCALARS) else ""
        raise _mismatch(value, tp, path, hint)
    args = get_args(tp)
    container = tuple if tp is tuple or get_origin(tp) is tuple else list
    if container is tuple and args and not _is_variadic_tuple(args):
        if len(value) != len(args):
            raise _mismatch(value, tp, path, f"; expected {len(args)} items, got {len(value)}")
        return tuple(coerce(v, a, path=f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    item_type = args[0] if args else Any
    same_length = isinstance(current, list | tuple) and len(current) == len(value)
    return container(coerce(item, item_type, path=f"{path}[{i}]",
                            current=current[i] if same_length else None, strict=strict)
                     for i, item in enumerate(value))


def _is_variadic_tuple(args: tuple[Any, ...]) -> bool:
    """`tuple[X, ...]`, and `tuple[X]`, which Model Garden configs use for "a tuple of X"
    (`z: Tuple[str] = ('a',)` takes `['a', 'b', 'c']` there too)."""
    return len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis)


def _coerce_mapping(value: Any, tp: Any, path: str, current: Any, strict: bool) -> dict:
    if not isinstance(value, Mapping):
        raise _mismatch(value, tp, path)
    args = get_args(tp)
    key_type, item_type = args if len(args) == 2 else (Any, Any)
    result = dict(current) if isinstance(current, dict) else {}
    for key, item in value.items():
        if key_type is not Any:
            key = coerce(key, key_type, path=f"{path} key")
        result[key] = coerce(
            item, item_type, path=f"{path}.{key}", current=result.get(key), strict=strict
        )
    return result


def _coerce_any(value: Any, path: str, current: Any, strict: bool) -> Any:
    """Accepts anything YAML can hold (and configs); mappings merge into a present dict."""
    if value is None or type(value) in _SCALARS:
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, _classes.ROOT) or (isinstance(value, Mapping) and TYPE_KEY in value):
        present = current if _classes.is_config_class(type(current)) else None
        return _coerce_config(value, _classes.ROOT, path, present, strict)
    if isinstance(value, Mapping):
        return _coerce_mapping(value, dict, path, current, strict)
    if isinstance(value, list | tuple):
        # A tuple stays a tuple, as in Model Garden (YAML has no tuples: a file gives a list).
        return type(value)(
            _coerce_any(item, f"{path}[{i}]", None, strict) for i, item in enumerate(value)
        )
    raise ConfigTypeError(
        f"{path} expects a YAML value (None, bool, int, float, str, list or mapping), "
        f"received {show(value)}",
        key=path,
    )
