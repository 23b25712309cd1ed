"""torch.optim without importing ``torch._dynamo`` in a process that compiles nothing.

``torch.optim`` imports ``torch._dynamo`` (about 0.6 s on this project's CPU machine, half
as long as ``import torch``) the first time an optimizer is built or stepped, although
nothing is compiled: ``Optimizer.add_param_group``, ``zero_grad``, ``state_dict`` and
``load_state_dict`` are wrapped in ``torch._disable_dynamo``, which imports Dynamo to build
the disabled function on its first call, and each class's ``step`` is wrapped in
``_use_grad_for_differentiable``, which imports it to place graph breaks. Without Dynamo
loaded nothing can be compiled, so both wrappers reduce to their eager meaning: the
function itself, and ``step`` under ``torch.set_grad_enabled(differentiable)``.

:func:`defer_dynamo_import` gives the wrappers that eager meaning until the first
``import torch._dynamo`` of the process (``torch.compile``, ``runtime.enable_xla``, a
user's import), which puts torch's own wrappers back before Dynamo loads: from then on
torch behaves as if this module had never run.
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.optim import optimizer as torch_optimizer

__all__ = ["defer_dynamo_import"]

_DYNAMO = "torch._dynamo"
# torch's wrappers, recognised by their code (torch 2.x keeps these two decorators).
_DISABLED_CODE = torch._disable_dynamo(lambda: None).__code__
_USE_GRAD_CODE = torch_optimizer._use_grad_for_differentiable(lambda self: None).__code__
# What defer_dynamo_import changed: (function given __dynamo_disable), (class, torch's step).
_disabled: list[Callable[..., Any]] = []
_steps: list[tuple[type, Callable[..., Any], Callable[..., Any]]] = []


def defer_dynamo_import() -> None:
    """Keeps ``torch.optim`` from importing ``torch._dynamo`` until something else does.

    Call it before building optimizers; it does nothing once Dynamo is loaded, and a class
    already stepped with torch's own wrapper keeps it (that process has loaded Dynamo).
    """
    if _DYNAMO in sys.modules or _disabled or _steps:
        return
    for wrapper in vars(torch_optimizer.Optimizer).values():
        function = getattr(wrapper, "__wrapped__", None)
        if (getattr(wrapper, "__code__", None) is _DISABLED_CODE and function is not None
                and getattr(function, "__dynamo_disable", None) is None):
            function.__dynamo_disable = function  # torch's wrapper calls it as is.
            _disabled.append(function)
    for cls in _optimizer_classes():
        step = vars(cls).get("step")
        if getattr(step, "__code__", None) is _USE_GRAD_CODE:
            eager = _eager_step(step)
            cls.step = eager
            _steps.append((cls, step, eager))
    sys.meta_path.insert(0, _RestoreBeforeDynamo())


def _optimizer_classes() -> list[type]:
    """``torch.optim.Optimizer``'s subclasses, subclasses of subclasses included."""
    found, pending = [], [torch_optimizer.Optimizer]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def _eager_step(torch_step: Callable[..., Any]) -> Callable[..., Any]:
    """``torch_step`` (``_use_grad_for_differentiable``'s wrapper) without its graph
    breaks, which import Dynamo; torch's own once Dynamo is loaded."""
    step = torch_step.__wrapped__

    @functools.wraps(step)
    def eager_step(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        if _DYNAMO in sys.modules:  # A reference kept from before the restore.
            return torch_step(self, *args, **kwargs)
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return step(self, *args, **kwargs)

    return eager_step


def _restore() -> None:
    """Puts torch's wrappers back, in classes already hooked for step hooks too."""
    for function in _disabled:
        if getattr(function, "__dynamo_disable", None) is function:
            del function.__dynamo_disable
    for torch_step, eager in ((s, e) for _, s, e in _steps):
        for cls in _optimizer_classes():
            step = vars(cls).get("step")
            if step is eager:
                cls.step = torch_step
            elif getattr(step, "__wrapped__", None) is eager:  # Wrapped by profile_hook_step.
                hooked = torch_optimizer.Optimizer.profile_hook_step(torch_step)
                hooked.hooked = True
                cls.step = hooked
    _disabled.clear()
    _steps.clear()


class _RestoreBeforeDynamo(importlib.abc.MetaPathFinder):
    """An import hook that restores torch's wrappers when ``torch._dynamo`` is imported
    (before it loads) and then removes itself; it finds no module itself."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == _DYNAMO:
            sys.meta_path.remove(self)
            _restore()
        return None
