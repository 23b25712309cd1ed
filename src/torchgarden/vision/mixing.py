"""Model Garden's MixupAndCutmix (per batch) and RandomErasing (per image), in torch.

Both follow ``official/vision/ops/augment.py`` rule for rule, including what it does
differently from the papers (stated on each class), so a Model Garden config trains on the
same distribution of inputs. Random numbers come from ``generator`` (None: torch's global
RNG, seeded per batch by `torchgarden.data`).
"""

from __future__ import annotations

import math

import torch

from torchgarden.vision.autoaugment import fill_rectangle

__all__ = ["MixupAndCutmix", "RandomErasing", "smooth_labels"]


def smooth_labels(labels: torch.Tensor, num_classes: int, label_smoothing: float) -> torch.Tensor:
    """One-hot ``[B, num_classes]`` with ``1 - s + s/K`` on the class and ``s/K`` elsewhere."""
    off = label_smoothing / num_classes
    on = 1.0 - label_smoothing + off
    out = torch.full((labels.shape[0], num_classes), off, dtype=torch.float32)
    return out.scatter_(1, labels.long().view(-1, 1), on)


class MixupAndCutmix:
    """Mixes each image of a batch with the image at the mirrored batch position.

    With probability ``prob`` the batch is mixed, by CutMix with probability
    ``switch_prob`` and Mixup otherwise (one alpha of 0 turns its method off); labels
    become smoothed one-hots blended by each example's ``lam``. Unmixed batches still get
    smoothed one-hot labels. As in Model Garden:

    * ``lam`` is drawn per example as ``g1 / (g1 + g2)`` with ``g ~ Gamma(1, rate=alpha)``
      (Model Garden passes alpha as the rate), which is Uniform(0, 1) for every alpha;
    * the CutMix box is ``int(sqrt(1 - lam) * H)`` on both sides (the height sets the
      width too), centred uniformly, filled over ``2 * (side // 2)`` rows/columns and
      clipped at the border, while ``lam = 1 - side_h * side_w / (H * W)`` counts the
      unclipped box.

    Args:
        mixup_alpha: Mixup's alpha; 0 turns Mixup off. Defaults to 0.8.
        cutmix_alpha: CutMix's alpha; 0 turns CutMix off. Defaults to 1.0.
        prob: Probability that a batch is mixed. Defaults to 1.0.
        switch_prob: Probability of CutMix rather than Mixup. Defaults to 0.5.
        label_smoothing: Smoothing of the one-hot labels. Defaults to 0.1.
        num_classes: Label classes. Defaults to 1001.

    Example:
        >>> mix = MixupAndCutmix(num_classes=3, label_smoothing=0.0)
        >>> images, labels = mix(torch.rand(4, 3, 8, 8), torch.tensor([0, 1, 2, 0]))
        >>> tuple(labels.shape), bool(torch.allclose(labels.sum(1), torch.ones(4)))
        ((4, 3), True)
    """

    def __init__(self, *, mixup_alpha: float = 0.8, cutmix_alpha: float = 1.0,
                 prob: float = 1.0, switch_prob: float = 0.5, label_smoothing: float = 0.1,
                 num_classes: int = 1001) -> None:
        self.mixup_alpha, self.cutmix_alpha = float(mixup_alpha), float(cutmix_alpha)
        self.prob, self.label_smoothing = float(prob), float(label_smoothing)
        self.num_classes = int(num_classes)
        self.switch_prob = float(switch_prob)
        if self.mixup_alpha and not self.cutmix_alpha:
            self.switch_prob = -1.0
        elif not self.mixup_alpha and self.cutmix_alpha:
            self.switch_prob = 1.0

    def __call__(self, images: torch.Tensor, labels: torch.Tensor,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Mixes ``images [B, C, H, W]`` and turns ``labels [B]`` into ``[B, num_classes]``."""
        labels = labels.reshape(-1)
        if float(torch.rand((), generator=generator)) >= self.prob:
            return images, smooth_labels(labels, self.num_classes, self.label_smoothing)
        if float(torch.rand((), generator=generator)) < self.switch_prob:
            images, lam = self.cutmix(images, generator)
        else:
            images, lam = self.mixup(images, generator)
        soft = smooth_labels(labels, self.num_classes, self.label_smoothing)
        lam = lam.view(-1, 1)
        return images, lam * soft + (1.0 - lam) * soft.flip(0)

    @staticmethod
    def sample_lam(alpha: float, size: int, generator: torch.Generator | None) -> torch.Tensor:
        """``g1 / (g1 + g2)``, ``g ~ Gamma(1, rate=alpha)`` (Model Garden's draw), ``[size]``."""
        # Gamma(1, rate) is Exponential(rate): -log(U) / rate, drawn from `generator`.
        draws = -torch.log1p(-torch.rand(2, size, generator=generator)) / alpha
        return draws[0] / (draws[0] + draws[1])

    def mixup(self, images: torch.Tensor,
              generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``lam * x + (1 - lam) * x[::-1]`` per example; returns ``(images, lam [B])``."""
        lam = self.sample_lam(self.mixup_alpha, images.shape[0], generator)
        weight = lam.view(-1, *([1] * (images.dim() - 1))).to(images.dtype)
        return weight * images + (1.0 - weight) * images.flip(0), lam

    def cutmix(self, images: torch.Tensor,
               generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Pastes a box of the mirrored image into each image; returns ``(images, lam [B])``."""
        batch = images.shape[0]
        height, width = images.shape[-2:]
        lam = self.sample_lam(self.cutmix_alpha, batch, generator)
        side = (torch.sqrt(1.0 - lam) * float(height)).to(torch.int64)
        centers_y = torch.randint(0, height, (batch,), generator=generator)
        centers_x = torch.randint(0, width, (batch,), generator=generator)
        partner = images.flip(0)
        mixed = torch.stack([
            fill_rectangle(images[i], (int(centers_y[i]), int(centers_x[i])),
                           (int(side[i]) // 2, int(side[i]) // 2), partner[i])
            for i in range(batch)
        ])
        lam = 1.0 - (side * side).float() / float(height * width)
        return mixed, lam


class RandomErasing:
    """Model Garden's RandomErasing of one normalized ``[C, H, W]`` image.

    With probability ``probability``, ``count`` rectangles (``min_count`` when
    ``min_count == max_count``) are filled with standard-normal noise. Each takes up to
    ``trials`` draws of an area in ``[min_area, max_area]`` of the image and a log-uniform
    aspect in ``[min_aspect, max_aspect]`` (default ``1 / min_aspect``); half sides are
    ``round(sqrt(area * aspect) / 2)`` (height) and ``round(sqrt(area / aspect) / 2)``
    (width); a fitting one is centred at a uniform ``[0, H - 2 * half_h)`` by
    ``[0, W - 2 * half_w)`` position and clipped at the border, as in Model Garden.

    Args:
        probability: Chance of erasing at all. Defaults to 0.25.
        min_area, max_area: Rectangle area range, as fractions of the image.
        min_aspect, max_aspect: Aspect (height / width) range; None = ``1 / min_aspect``.
        min_count, max_count: Number of rectangles. Default 1 and 1.
        trials: Draws per rectangle before giving up. Defaults to 10.
    """

    def __init__(self, *, probability: float = 0.25, min_area: float = 0.02,
                 max_area: float = 1 / 3, min_aspect: float = 0.3,
                 max_aspect: float | None = None, min_count: int = 1, max_count: int = 1,
                 trials: int = 10) -> None:
        self.probability = float(probability)
        self.min_area, self.max_area = float(min_area), float(max_area)
        self.log_aspect = (math.log(min_aspect), math.log(max_aspect or 1 / min_aspect))
        self.min_count, self.max_count, self.trials = int(min_count), int(max_count), int(trials)

    def _count(self, generator: torch.Generator | None) -> int:
        if self.min_count == self.max_count:
            return self.min_count
        # Model Garden's bounds: [min_count, max_count - min_count + 1).
        high = max(self.max_count - self.min_count + 1, self.min_count + 1)
        return int(torch.randint(self.min_count, high, (), generator=generator))

    def __call__(self, image: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Erases rectangles of ``image`` (float ``[C, H, W]``); returns the result."""
        if float(torch.rand((), generator=generator)) >= self.probability:
            return image
        height, width = image.shape[-2:]
        area = float(height * width)
        for _ in range(self._count(generator)):
            for _ in range(self.trials):
                u = torch.rand(2, generator=generator).tolist()
                erase = area * (self.min_area + (self.max_area - self.min_area) * u[0])
                low, high = self.log_aspect
                aspect = math.exp(low + (high - low) * u[1])
                half_h = round(math.sqrt(erase * aspect) / 2)
                half_w = round(math.sqrt(erase / aspect) / 2)
                if 2 * half_h < height and 2 * half_w < width:
                    cy = int(torch.randint(0, height - 2 * half_h, (), generator=generator))
                    cx = int(torch.randint(0, width - 2 * half_w, (), generator=generator))
                    noise = torch.randn(image.shape, generator=generator).to(image.dtype)
                    image = fill_rectangle(image, (cy, cx), (half_h, half_w), noise)
                    break
        return image
