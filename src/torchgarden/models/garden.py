"""Model Garden backbones (`torchgarden.models.backbones`) built by transformers.

`library_settings` turns a ``task.model.backbone`` one-of and its ``norm_activation``
into a transformers model type and config with Model Garden's depth and width (a
ResNet's blocks and widths from ``model_id``, a ViT's sizes from ``model_name``, ...);
`build_garden_backbone` builds that model with random weights and gives its batch norm
layers Model Garden's momentum and epsilon; `GardenClassifier` puts Model Garden's
classification head on it (optional batch norm, global average pooling, dropout, a
dense layer with ``kernel_initializer``).

Example:
    >>> from torchgarden.models.backbones import Backbone, NormActivation
    >>> backbone = Backbone(type="resnet")
    >>> backbone.resnet.model_id = 18
    >>> model = GardenClassifier(build_garden_backbone(backbone, NormActivation(),
    ...     input_size=(32, 32, 3)), num_classes=10)
    >>> model(torch.zeros(2, 3, 32, 32)).shape
    torch.Size([2, 10])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import nn

from torchgarden.models.activations import check_activation, follow_activation
from torchgarden.models.backbones import (
    EFFICIENTNET_SPECS,
    RESNET_SPECS,
    Backbone,
    NormActivation,
)
from torchgarden.models.dilated_resnet import apply_resnet_options, dilated_resnet_settings
from torchgarden.models.names import require_library
from torchgarden.models.transformers_models import transformers_config

__all__ = ["GardenBackbone", "GardenClassifier", "build_garden_backbone", "build_pyramid_backbone",
           "library_settings", "with_norm"]

#: Backbone type (MobileNet: model_id) -> transformers model type and base model class.
_MODELS: dict[str, tuple[str, str]] = {
    "resnet": ("resnet", "ResNetModel"),
    "dilated_resnet": ("resnet", "ResNetModel"),
    "vit": ("vit", "ViTModel"),
    "MobileNetV1": ("mobilenet_v1", "MobileNetV1Model"),
    "MobileNetV2": ("mobilenet_v2", "MobileNetV2Model"),
    "efficientnet": ("efficientnet", "EfficientNetModel"),
}


def library_settings(backbone: Backbone, norm_activation: NormActivation, *,
                     input_size: Sequence[int]) -> tuple[str, dict[str, Any]]:
    """``(transformers model type, config keywords)`` of a Model Garden backbone.

    Args:
        backbone: The one-of, already checked (`Backbone.check` refuses what cannot be built).
        norm_activation: Activation of ResNet and EfficientNet (MobileNet keeps relu6 and
            ViT GELU, as in Model Garden).
        input_size: ``[height, width, channels]`` (Model Garden's order).
    """
    height, width, channels = (int(v) for v in input_size)
    block = backbone.get()
    activation = check_activation(backbone.type, norm_activation.activation)
    if backbone.type == "resnet":
        kind, depths = RESNET_SPECS[block.model_id]
        widths = [int(w * block.depth_multiplier) for w in (64, 128, 256, 512)]
        return "resnet", {
            "layer_type": kind, "depths": list(depths), "hidden_act": activation,
            "hidden_sizes": [w * 4 for w in widths] if kind == "bottleneck" else widths,
            "embedding_size": int(64 * (block.depth_multiplier if block.scale_stem else 1.0)),
            "num_channels": channels}
    if backbone.type == "dilated_resnet":
        return "resnet", dilated_resnet_settings(block, activation, channels=channels)
    if backbone.type == "vit":
        hidden, patch, mlp_dim, heads, layers = block.sizes()
        return "vit", {
            "hidden_size": hidden, "patch_size": patch, "intermediate_size": mlp_dim,
            "num_attention_heads": heads, "num_hidden_layers": layers,
            "hidden_dropout_prob": block.transformer.dropout_rate,
            "attention_probs_dropout_prob": block.transformer.attention_dropout_rate,
            "layer_norm_eps": 1e-6, "image_size": [height, width], "num_channels": channels,
            "pooler_output_size": block.representation_size or None, "pooler_act": "tanh"}
    if backbone.type == "mobilenet":
        settings: dict[str, Any] = {"depth_multiplier": block.filter_size_scale,
                                    "num_channels": channels, "image_size": height}
        if block.model_id == "MobileNetV2":
            settings["output_stride"] = block.output_stride or 32
        return _MODELS[block.model_id][0], settings
    width_coefficient, depth_coefficient, resolution = EFFICIENTNET_SPECS[block.model_id]
    return "efficientnet", {
        "width_coefficient": width_coefficient, "depth_coefficient": depth_coefficient,
        "image_size": resolution, "hidden_dim": _round_filters(1280, width_coefficient),
        "drop_connect_rate": block.stochastic_depth_drop_rate, "hidden_act": activation,
        "num_channels": channels}


def _round_filters(filters: int, width_coefficient: float, divisor: int = 8) -> int:
    """EfficientNet's channel rounding (the top convolution's width)."""
    scaled = filters * width_coefficient
    rounded = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
    return int(rounded + divisor if rounded < 0.9 * scaled else rounded)


class GardenBackbone(nn.Module):
    """A transformers base model as ``images [B, C, H, W] -> features [B, D, h, w]``.

    The convolutional families return their last feature map; a ViT returns its pooled
    class token (through the ``representation_size`` dense + tanh layer when set) as a
    ``[B, D, 1, 1]`` map, Model Garden's ``pre_logits`` endpoint.

    Attributes:
        model: The transformers model (state-dict keys are the library's).
        num_features: ``D``.
    """

    def __init__(self, model: nn.Module, *, kind: str, num_features: int) -> None:
        super().__init__()
        self.model = model
        self.kind = kind
        self.num_features = num_features

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Returns the backbone's last features as a map."""
        output = self.model(images)
        if self.kind != "vit":
            return output.last_hidden_state
        pooled = output.pooler_output
        pooled = output.last_hidden_state[:, 0] if pooled is None else pooled
        return pooled[:, :, None, None]


def build_garden_backbone(backbone: Backbone, norm_activation: NormActivation, *,
                          input_size: Sequence[int], key: str = "task.model.backbone"
                          ) -> GardenBackbone:
    """Builds a Model Garden backbone with transformers (random weights).

    Args:
        backbone: The checked one-of (``type`` resnet, dilated_resnet, vit, mobilenet or
            efficientnet).
        norm_activation: Activation, batch norm momentum/epsilon, sync batch norm.
        input_size: ``[height, width, channels]``.
        key: The config key named in errors.
    """
    model_type, settings = library_settings(backbone, norm_activation, input_size=input_size)
    config = transformers_config(model_type, settings, key=key)
    name = backbone.mobilenet.model_id if backbone.type == "mobilenet" else backbone.type
    cls = getattr(require_library("transformers"), _MODELS[name][1])
    if backbone.type == "vit":
        model = cls(config, add_pooling_layer=bool(backbone.vit.representation_size))
        _init_vit(model, original=backbone.vit.original_init)
        _add_stochastic_depth(model, backbone.vit.init_stochastic_depth_rate, key=key)
        features = backbone.vit.representation_size or config.hidden_size
    else:
        model = cls(config)
        resnet = backbone.type in ("resnet", "dilated_resnet")
        if resnet:
            apply_resnet_options(model, backbone.get(), activation=config.hidden_act)
        model = with_norm(model, norm_activation)
        features = _last_width(model)
        if resnet:
            follow_activation(model, config.hidden_act)
            _add_resnet_stochastic_depth(model, backbone.get().stochastic_depth_drop_rate)
    return GardenBackbone(model, kind=backbone.type or "", num_features=features)


def _last_width(model: nn.Module) -> int:
    """Channels of the last convolution (the features a convolutional backbone returns)."""
    return [m for m in model.modules() if isinstance(m, nn.Conv2d)][-1].out_channels


def build_pyramid_backbone(backbone: Any, norm_activation: NormActivation, *,
                           in_channels: int = 3, key: str = "task.model.backbone"
                           ) -> nn.Module | None:
    """The multi-level backbone of RetinaNet or segmentation (``{str(level): map}``).

    Args:
        backbone: A checked ``LibraryBackbone``: ``type: resnet`` builds Model Garden's
            ResNet (transformers ``ResNetBackbone``, levels 2..5), ``dilated_resnet`` its
            DeepLab ResNet, ``mobilenet`` a transformers MobileNet (every block's output);
            unset ``type`` with a ``name`` builds that library model; neither gives None
            (the task's built-in).
        norm_activation: Activation and batch norm of Model Garden's backbones.
        in_channels: Input channels. Defaults to 3.
        key: The config key named in errors.
    """
    from torchgarden.models.library import build_backbone

    kind, block = backbone.type, backbone.get() if backbone.type else None
    if kind == "mobilenet":
        return _mobilenet_levels(backbone, norm_activation, in_channels=in_channels, key=key)
    if kind in ("resnet", "dilated_resnet"):
        activation = check_activation(kind, norm_activation.activation)
        _, settings = library_settings(backbone, norm_activation,
                                       input_size=(64, 64, in_channels))
        built = build_backbone("transformers/resnet", in_channels=in_channels,
                               settings=settings, pretrained_path=backbone.pretrained_path,
                               ignore_mismatched_sizes=backbone.ignore_mismatched_sizes, key=key,
                               prepare=partial(apply_resnet_options, block=block,
                                               activation=activation))
        follow_activation(built.model, activation)
        _add_resnet_stochastic_depth(built.model, block.stochastic_depth_drop_rate)
        return built
    if backbone.name:
        return build_backbone(backbone.name, in_channels=in_channels,
                              settings=backbone.library_config,
                              pretrained_path=backbone.pretrained_path,
                              ignore_mismatched_sizes=backbone.ignore_mismatched_sizes, key=key)
    return None


def _mobilenet_levels(backbone: Backbone, norm_activation: NormActivation, *,
                      in_channels: int, key: str) -> nn.Module:
    """A transformers MobileNet as ``{str(level): map}``: each stride's last block output,
    Model Garden's endpoints (its final 1x1 conv runs but is no endpoint, `output_specs`)."""
    from torchgarden.models.adapters import FeatureLevels
    from torchgarden.models.weights import load_pretrained

    model_type, settings = library_settings(backbone, norm_activation,
                                            input_size=(64, 64, in_channels))
    config = transformers_config(model_type, {**settings, "output_hidden_states": True},
                                 key=key)
    cls = getattr(require_library("transformers"), _MODELS[backbone.mobilenet.model_id][1])
    model = cls(config, add_pooling_layer=False)
    if backbone.pretrained_path:
        load_pretrained(model, backbone.pretrained_path, key=f"{key}.pretrained_path",
                        ignore_mismatched_sizes=backbone.ignore_mismatched_sizes)
    return FeatureLevels(model, lambda out: out.hidden_states, in_channels=in_channels)


def with_norm(model: nn.Module, norm: NormActivation) -> nn.Module:
    """Model Garden's batch norm settings on every batch norm layer of ``model``:
    ``norm_momentum`` (Keras' meaning), ``norm_epsilon``, and ``use_sync_bn`` (synchronised
    batch norm when the run has more than one process; the converted model is returned)."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.momentum = 1.0 - norm.norm_momentum  # Keras keeps, torch replaces
            module.eps = norm.norm_epsilon
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if norm.use_sync_bn and distributed and torch.distributed.get_world_size() > 1:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model


def variance_scaling_(tensor: torch.Tensor, *, scale: float, mode: str,
                      distribution: str) -> torch.Tensor:
    """Keras' ``VarianceScaling`` initializer (``fan_in``/``fan_avg``; ``truncated_normal``
    draws within two standard deviations, rescaled as Keras does, or ``uniform``)."""
    fan_in, fan_out = nn.init._calculate_fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else (fan_in + fan_out) / 2
    variance = scale / max(1.0, fan)
    with torch.no_grad():
        if distribution == "uniform":
            limit = math.sqrt(3.0 * variance)
            return tensor.uniform_(-limit, limit)
        std = math.sqrt(variance) / 0.87962566103423978
        return nn.init.trunc_normal_(tensor, std=std, a=-2 * std, b=2 * std)


#: Keras initializer names -> torch initialisation of a kernel (biases start at zero).
KERNEL_INITIALIZERS: dict[str, Any] = {
    "zeros": nn.init.zeros_,
    "ones": nn.init.ones_,
    "random_uniform": lambda t: nn.init.uniform_(t, -0.05, 0.05),
    "random_normal": lambda t: nn.init.normal_(t, 0.0, 0.05),
    "truncated_normal": lambda t: nn.init.trunc_normal_(t, 0.0, 0.05, -0.1, 0.1),
    "glorot_uniform": lambda t: variance_scaling_(t, scale=1.0, mode="fan_avg",
                                                  distribution="uniform"),
    "glorot_normal": lambda t: variance_scaling_(t, scale=1.0, mode="fan_avg",
                                                 distribution="truncated_normal"),
    "he_uniform": lambda t: variance_scaling_(t, scale=2.0, mode="fan_in",
                                              distribution="uniform"),
    "he_normal": lambda t: variance_scaling_(t, scale=2.0, mode="fan_in",
                                             distribution="truncated_normal"),
    "lecun_uniform": lambda t: variance_scaling_(t, scale=1.0, mode="fan_in",
                                                 distribution="uniform"),
    "lecun_normal": lambda t: variance_scaling_(t, scale=1.0, mode="fan_in",
                                                distribution="truncated_normal"),
    "VarianceScaling": lambda t: variance_scaling_(t, scale=1.0, mode="fan_in",
                                                   distribution="truncated_normal"),
}


class DropoutDropPath(nn.Module):
    """Dropout, then stochastic depth: in training each example's branch is dropped with
    probability ``rate`` and the kept ones scaled by ``1 / (1 - rate)`` (Model Garden's
    ``StochasticDepth``, applied where its encoder block applies it: after the output
    dropout, before the residual sum).

    Args:
        dropout: The layer's own dropout (kept, so state dicts do not change).
        rate: Drop probability.
    """

    def __init__(self, dropout: nn.Module, rate: float) -> None:
        super().__init__()
        self.dropout = dropout
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns ``x`` with dropout and, in training, per-example stochastic depth."""
        x = self.dropout(x)
        if not self.training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


def _add_stochastic_depth(model: nn.Module, rate: float, *, key: str) -> None:
    """Stochastic depth ``rate * (i + 1) / num_layers`` in encoder block ``i`` (Model
    Garden's ``init_stochastic_depth_rate`` schedule), on both residual branches."""
    if not rate:
        return
    blocks = list(getattr(model, "layers", None) or model.encoder.layer)
    if not all(isinstance(getattr(b, "dropout", None), nn.Dropout) for b in blocks):
        raise ValueError(f"{key}.vit.init_stochastic_depth_rate: this transformers version's "
                         "ViT blocks have no residual dropout to add stochastic depth to; "
                         "set it to 0")
    for i, block in enumerate(blocks):
        block.dropout = DropoutDropPath(block.dropout, rate * (i + 1) / len(blocks))


def _add_resnet_stochastic_depth(model: nn.Module, rate: float) -> None:
    """Stochastic depth ``rate * (i + 2) / (stages + 1)`` in stage ``i`` (Model Garden's
    ResNet and dilated ResNet), on each block's residual branch after its last batch norm
    (and squeeze-and-excitation), before the shortcut is added; appended to the block's
    ``nn.Sequential``, so state-dict keys do not change."""
    if not rate:
        return
    stages = len(model.encoder.stages)
    for i, stage in enumerate(model.encoder.stages):
        for block in stage.layers:
            block.layer.append(DropoutDropPath(nn.Identity(), rate * (i + 2) / (stages + 1)))


def _init_vit(model: nn.Module, *, original: bool) -> None:
    """Model Garden's ViT initialisation (``original_init``); biases zero, class token zero,
    position embeddings normal(0.02)."""
    patch = KERNEL_INITIALIZERS["lecun_normal" if original else "he_uniform"]
    kernel = KERNEL_INITIALIZERS["glorot_uniform"] if original else (
        lambda t: nn.init.trunc_normal_(t, 0.0, 0.02, -0.04, 0.04))
    with torch.no_grad():
        embeddings = model.embeddings
        patch(embeddings.patch_embeddings.projection.weight)
        embeddings.patch_embeddings.projection.bias.zero_()
        embeddings.cls_token.zero_()
        embeddings.position_embeddings.normal_(0.0, 0.02)
        blocks = getattr(model, "encoder", None) or model.layers  # transformers 4 / 5
        for module in blocks.modules():
            if isinstance(module, nn.Linear):
                kernel(module.weight)
                module.bias.zero_()
        pooler = getattr(model, "pooler", None)
        if pooler is not None:
            patch(pooler.dense.weight)
            pooler.dense.bias.zero_()


class GardenClassifier(nn.Module):
    """Model Garden's classification model: backbone features, optional batch norm,
    global average pooling, dropout, and a dense layer of ``num_classes`` logits.

    Args:
        backbone: Features ``[B, D, h, w]``.
        num_classes: Logits per image.
        dropout_rate: Dropout before the dense layer. Defaults to 0.0.
        kernel_initializer: A `KERNEL_INITIALIZERS` name for the dense kernel.
            Defaults to random_uniform (Model Garden's default).
        add_head_batch_norm: Batch norm on the features before pooling. Defaults to False.
        norm_activation: Momentum and epsilon of that batch norm. Defaults to
            Model Garden's (0.99, 0.001).
    """

    def __init__(self, backbone: GardenBackbone, *, num_classes: int, dropout_rate: float = 0.0,
                 kernel_initializer: str = "random_uniform", add_head_batch_norm: bool = False,
                 norm_activation: NormActivation | None = None) -> None:
        super().__init__()
        norm = norm_activation or NormActivation()
        self.backbone = backbone
        width = backbone.num_features
        self.head_norm = with_norm(nn.BatchNorm2d(width), norm) if add_head_batch_norm \
            else nn.Identity()
        self.dropout = nn.Dropout(dropout_rate)
        self.classifier = nn.Linear(width, num_classes)
        KERNEL_INITIALIZERS[kernel_initializer](self.classifier.weight)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Returns ``[B, num_classes]`` logits."""
        features = self.head_norm(self.backbone(images))
        return self.classifier(self.dropout(features.mean(dim=(2, 3))))
