"""Building blocks for models: Keras-style auxiliary losses and one-line layers."""

from torchgarden.layers.layer import Lambda, Layer, model_losses

__all__ = ["Layer", "Lambda", "model_losses"]
