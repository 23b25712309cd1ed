"""`OneOfConfig`: a config that selects one of several alternative sub-configs."""

from __future__ import annotations

import dataclasses
from typing import Any

from torchgarden.config._types import field_types
from torchgarden.config.base import Config
from torchgarden.config.errors import not_one_of

__all__ = ["OneOfConfig"]


@dataclasses.dataclass
class OneOfConfig(Config):
    """A choice between alternatives: `type` names the field that is in use.

    Every field other than `type` is one alternative. `as_dict()` exports only
    `type` and the chosen alternative, which `from_dict` reads back.

    Example:
        >>> @dataclasses.dataclass
        ... class Sgd(Config):
        ...     momentum: float = 0.0
        >>> @dataclasses.dataclass
        ... class Opt(OneOfConfig):
        ...     type: str | None = "sgd"
        ...     sgd: Sgd = dataclasses.field(default_factory=Sgd)
        >>> Opt().get().momentum
        0.0
    """

    type: str | None = None
    """Name of the chosen alternative field, or None for none."""

    @classmethod
    def alternatives(cls) -> tuple[str, ...]:
        """Returns the names of the alternative fields (every field but `type`)."""
        return tuple(name for name in field_types(cls) if name != "type")

    def get(self, key: str | None = None, default: Any = None) -> Any:
        """Returns the chosen alternative's config (None if `type` is None).

        Args:
            key: If given, behaves like `Config.get`: the value at this dotted key.
                Defaults to None.
            default: Returned for a missing `key`. Defaults to None.
        """
        if key is not None:
            return super().get(key, default)
        return getattr(self, self.type) if self.type is not None else None

    def _convert(self, name: str, value: Any, *, path: str, **kwargs: Any) -> Any:
        value = super()._convert(name, value, path=path, **kwargs)
        if name == "type" and value is not None and value not in self.alternatives():
            raise not_one_of(path, value, self.alternatives())
        return value

    def _export_names(self) -> list[str]:
        return ["type"] if self.type is None else ["type", self.type]
