"""A user project laid out like Model Garden's starter example.

``config.py`` registers the experiment, ``task.py`` registers its task, ``trainer.py``
holds a custom Trainer, and ``registry_imports.py`` imports what registers, so a launcher
needs one import (``custom_launch_script.py``) or one flag
(``torchgarden train --import my_project.registry_imports``, run from ``examples/`` or
with ``examples/`` on ``PYTHONPATH``).
"""
