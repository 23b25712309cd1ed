"""Models from the field's model libraries, by name: ``transformers``, ``torchvision``, ``timm``.

``transformers/<model_type>`` builds a Hugging Face model class from its config (pure
PyTorch, random weights or a local ``pretrained_path``); ``torchvision/<builder>`` and
``timm/<model>`` build those libraries' models where torchvision imports; LoRA adapters
come from PEFT (:mod:`torchgarden.models.lora`). Every library
is an optional extra, imported on first use; names load lazily, so importing this package
costs nothing.

Example:
    >>> from torchgarden.models import build_image_classifier
    >>> model = build_image_classifier("transformers/vit", num_classes=10, input_size=(1, 8, 8),
    ...     settings={"patch_size": 2, "hidden_size": 32, "num_hidden_layers": 1,
    ...               "num_attention_heads": 2, "intermediate_size": 64})
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchgarden.utils.lazy import lazy_names

if TYPE_CHECKING:
    from torchgarden.models.adapters import CausalLM, FeatureLevels, Logits
    from torchgarden.models.library import build_backbone, build_causal_lm, build_image_classifier
    from torchgarden.models.lora import TrainedState, adapt_model, merge_adapters
    from torchgarden.models.names import ModelName, parse_model_name
    from torchgarden.models.weights import hf_model_config, load_pretrained, read_state_dict

__getattr__, __all__ = lazy_names(__name__, __file__)
