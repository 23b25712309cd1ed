"""Named sets of a config class: a field typed ``C | dict[str, C]`` (named validation sets).

``TaskConfig.validation_data`` takes one data config or several by name; a subclass that
declares its own data class there takes named sets of that class too
(:func:`named_sets_annotation`). :func:`named_configs_first` tells the two forms of a
mapping apart when a value is assigned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, get_args, get_origin

from torchgarden.config import _classes
from torchgarden.config._classes import TYPE_KEY

__all__ = ["named_configs_first", "named_sets_annotation"]


def named_sets_annotation(annotation: Any) -> Any:
    """``C`` -> ``C | dict[str, C]`` (a string annotation stays a string); an annotation
    that already names a dict is returned as it is."""
    if isinstance(annotation, str):
        return annotation if "dict[" in annotation else f"{annotation} | dict[str, {annotation}]"
    if isinstance(annotation, type):
        return annotation | dict[str, annotation]  # type: ignore[valid-type]
    return annotation


def named_configs_first(
    value: Mapping[Any, Any], members: list[Any], fields_of: Callable[[type], Any]
) -> tuple[list[Any], Any]:
    """Orders the members of ``C | dict[str, C]`` for a mapping: one of C's fields (or
    ``_type``) makes it a C; otherwise, when every value is a mapping (or a dotted key
    names one), it is a dict of C by name (``{clean: {...}, noisy: {...}}``).

    Args:
        value: The assigned mapping.
        members: The union's members (None left out), in declared order.
        fields_of: ``cls -> FieldSpec`` (its ``names``) of a config class.

    Returns:
        The members to try in order, and the value (dotted keys nested for the dict).
    """
    named = [m for m in members if get_origin(m) in (dict, Mapping) and len(get_args(m)) == 2
             and _classes.is_config_class(get_args(m)[1])]
    if not named or not value or TYPE_KEY in value:
        return members, value
    fields = {name for m in members if _classes.is_config_class(m) for name in fields_of(m).names}
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
