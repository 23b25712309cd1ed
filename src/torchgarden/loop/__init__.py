"""The outer loop: ``Controller`` (Orbit) and its helpers."""

from torchgarden.loop.controller import Action, Controller
from torchgarden.loop.logs import flatten_logs, to_host
from torchgarden.loop.throughput import LoopMonitor, ProfilerWindow, ThroughputMeter

__all__ = [
    "Action", "Controller", "LoopMonitor", "ProfilerWindow", "ThroughputMeter", "flatten_logs",
    "to_host",
]
