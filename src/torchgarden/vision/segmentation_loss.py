"""Model Garden's semantic-segmentation loss: per-pixel softmax cross-entropy with label
smoothing, class weights, an ignored label and hard-pixel mining (``top_k_percent_pixels``).

Example:
    >>> logits = torch.zeros(1, 2, 1, 2)
    >>> segmentation_loss(logits, torch.tensor([[[0, 255]]]), ignore_label=255)
    tensor(0.6931)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

__all__ = ["segmentation_loss"]

_EPSILON = 1e-5  # Model Garden's, added to the normaliser


def segmentation_loss(logits: torch.Tensor, labels: torch.Tensor, *, ignore_label: int,
                      label_smoothing: float = 0.0, class_weights: Sequence[float] = (),
                      top_k_percent_pixels: float = 1.0,
                      use_groundtruth_dimension: bool = True) -> torch.Tensor:
    """The mean loss over valid pixels, or over the hardest ones.

    Args:
        logits: ``[B, C, h, w]``.
        labels: ``[B, H, W]`` class ids; ``ignore_label`` pixels count nowhere.
        ignore_label: The ignored mask value.
        label_smoothing: Targets ``onehot * (1 - s) + s / C``. Defaults to 0.
        class_weights: ``C`` weights multiplying each pixel's loss by its class' (the
            normaliser stays the valid-pixel count). Defaults to () (all 1).
        top_k_percent_pixels: With ``p < 1`` only the ``int(p * B * h * w)`` largest pixel
            losses (ignored pixels count as 0) are summed, divided by that count or by the
            number of valid pixels if smaller. Defaults to 1.0 (all valid pixels).
        use_groundtruth_dimension: True: logits are resized (bilinear) to ``[H, W]``;
            False: labels are resized (nearest) to ``[h, w]``. Defaults to True.

    Returns:
        A scalar ``sum(loss) / (normaliser + 1e-5)``.
    """
    logits = logits.float()
    if logits.shape[-2:] != labels.shape[-2:]:
        if use_groundtruth_dimension:
            logits = F.interpolate(logits, size=labels.shape[-2:], mode="bilinear",
                                   align_corners=False)
        else:
            labels = F.interpolate(labels[:, None].float(), size=logits.shape[-2:],
                                   mode="nearest-exact")[:, 0].long()
    valid = labels != ignore_label
    # Per pixel, no [B, C, H, W] one-hot: ignored pixels come out 0.
    loss = F.cross_entropy(logits, labels.long(), ignore_index=ignore_label,
                           label_smoothing=label_smoothing, reduction="none")
    if class_weights:  # The pixel's whole loss times its class' weight, as Model Garden.
        classes = torch.where(valid, labels, torch.zeros_like(labels)).long()
        loss = loss * torch.as_tensor(class_weights, dtype=loss.dtype, device=loss.device)[classes]
    num_valid = valid.sum().to(loss.dtype)
    if top_k_percent_pixels >= 1.0:
        return loss.sum() / (num_valid + _EPSILON)
    k = int(top_k_percent_pixels * loss.numel())
    top = loss.flatten().topk(k).values
    return top.sum() / (torch.clamp(num_valid, max=k) + _EPSILON)
