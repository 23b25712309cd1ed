"""The outer loop: ``Controller`` (Orbit) and its helpers."""

from torchgarden.loop.controller import Action, Controller
from torchgarden.loop.logs import flatten_logs, to_host

__all__ = ["Controller", "Action", "to_host", "flatten_logs"]
