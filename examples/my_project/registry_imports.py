"""Imports every module of the project that registers an experiment or a task."""

from my_project import config, task  # noqa: F401
