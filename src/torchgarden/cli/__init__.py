"""The ``torchgarden`` command line (``train``, ``eval``, ``list``, ``config``)."""

from torchgarden.cli.flags import define_flags, parse_configuration

__all__ = ["define_flags", "parse_configuration"]
