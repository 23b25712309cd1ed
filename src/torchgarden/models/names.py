"""Model names: ``library/model`` spellings, their libraries, and run-time download guards.

A library model is named ``<library>/<model>``:

* ``transformers/<model_type>``: a Hugging Face ``transformers`` model class built from
  its config (``resnet``, ``vit``, ``convnext``, ``gpt2``, ``llama``, ``bert``, ...);
* ``torchvision/<builder>``: ``torchvision.models.get_model`` (``resnet18``, ...);
* ``timm/<model>``: ``timm.create_model`` (``resnet18``, ``vit_tiny_patch16_224``, ...).

Nothing is downloaded at run time: a name that points at a hub checkpoint
(``transformers/google/vit-base-patch16-224``) or a library setting that would fetch
weights (``weights``, ``pretrained``) is a one-line error that says to use
``pretrained_path`` with a local file instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

__all__ = ["LIBRARIES", "ModelName", "check_no_download", "parse_model_name", "quiet_transformers",
           "require_library"]

#: Library -> (import name, pip extra).
LIBRARIES: dict[str, tuple[str, str]] = {
    "transformers": ("transformers", "transformers"),
    "torchvision": ("torchvision", "torchvision"),
    "timm": ("timm", "timm"),
}

# Library settings that would fetch weights from a hub.
_DOWNLOADING_KEYS = ("weights", "pretrained", "pretrained_cfg", "pretrained_model_name_or_path",
                     "weights_backbone", "use_pretrained_backbone")


@dataclasses.dataclass(frozen=True)
class ModelName:
    """A parsed ``library/model`` name.

    Attributes:
        library: ``transformers``, ``torchvision`` or ``timm``.
        model: The library's name of the model.
    """

    library: str
    model: str

    def __str__(self) -> str:
        return f"{self.library}/{self.model}"


def parse_model_name(name: str, *, key: str = "task.model.name") -> ModelName:
    """Splits ``library/model`` and checks it names no hub checkpoint.

    Args:
        name: The configured name.
        key: The config key named in errors.

    Raises:
        ValueError: An unknown library, an empty model, or a hub checkpoint id.
    """
    library, _, model = name.partition("/")
    if library not in LIBRARIES or not model:
        raise ValueError(
            f"{key}={name!r}: expected '<library>/<model>' with library one of "
            f"{sorted(LIBRARIES)} (e.g. 'transformers/resnet', 'timm/resnet18').")
    if "/" in model or model.startswith(("http:", "https:", "hf:")):
        raise ValueError(
            f"{key}={name!r} names a hub checkpoint; torchgarden downloads nothing at run "
            f"time: name the architecture ('{library}/<model type>') and set "
            "task.model.pretrained_path to a local .safetensors or state-dict file.")
    return ModelName(library, model)


def check_no_download(settings: Mapping[str, Any], *, key: str) -> None:
    """Raises if ``settings`` (a library config) asks for downloaded weights."""
    for name in _DOWNLOADING_KEYS:
        value = settings.get(name)
        if value not in (None, False, "", "none", "None"):
            raise ValueError(
                f"{key}.{name}={value!r} would download weights; torchgarden downloads "
                "nothing at run time: remove it and set task.model.pretrained_path to a "
                "local .safetensors or state-dict file.")


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' loading progress bars and load report off (torchgarden prints its
    own one line a load; errors still raise)."""
    logging_utils = importlib.import_module("transformers.utils.logging")
    enabled, verbosity = logging_utils.is_progress_bar_enabled(), logging_utils.get_verbosity()
    logging_utils.disable_progress_bar()
    logging_utils.set_verbosity_error()
    try:
        yield
    finally:
        logging_utils.set_verbosity(verbosity)
        if enabled:
            logging_utils.enable_progress_bar()


def require_library(library: str) -> ModuleType:
    """Imports ``library`` (lazily: each is an optional extra).

    Raises:
        ImportError: Naming the extra that installs it.
    """
    module, extra = LIBRARIES[library]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{library} models need the '{module}' package ({e}); install it with "
            f"pip install 'torchgarden[{extra}]'.") from e
    except RuntimeError as e:  # torchvision's operators fail to load beside a CPU torch.
        raise ImportError(
            f"{module} is installed but fails to import beside the installed torch: {e}. "
            f"Install a {module} build made for this torch.") from e
