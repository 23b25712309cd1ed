"""A sharded, seeded sampler whose position can be saved and restored mid-epoch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler


class ResumableSampler(Sampler[int]):
    """Yields this rank's example indices for one epoch, resumable at any position.

    Each epoch's order is a pure function of `(seed, epoch)`: with `shuffle` it is
    `torch.randperm(num_examples)` drawn from a generator seeded with
    `seed + epoch`, else `0..num_examples-1`. The order is split across ranks
    like `torch.utils.data.DistributedSampler` (rank `r` takes positions
    `r, r + num_replicas, ...`), so ranks never overlap within an epoch. When
    `drop_last` is False the order is padded by wrapping around so every rank
    gets the same count (training needs it: every step is a collective), unless
    `pad` is False: then each example appears exactly once and the first
    `num_examples % num_replicas` ranks get one more (evaluation); when
    `drop_last` is True the tail that does not divide evenly is dropped.

    `set_start(index)` skips the first `index` samples of this rank's order for
    the next iteration only, which is how a run resumes mid-epoch without
    loading the batches it already consumed.

    Args:
        num_examples: Size of the dataset (>= 0).
        shuffle: Whether to permute the order each epoch.
        seed: Base seed; epoch `e` uses `seed + e`.
        num_replicas: Number of ranks sharing the dataset. Defaults to 1.
        rank: This rank, in `[0, num_replicas)`. Defaults to 0.
        drop_last: Drop the uneven tail instead of padding. Defaults to False.
        pad: Without `drop_last`, repeat examples so every rank gets as many; False
            gives ranks uneven shards with every example once. Defaults to True.

    Raises:
        ValueError: On a negative `num_examples`, `num_replicas` < 1 or a `rank`
            out of range.

    Example:
        >>> sampler = ResumableSampler(10, shuffle=True, seed=0)
        >>> sampler.set_epoch(3)
        >>> sampler.set_start(4)
        >>> len(list(sampler))
        6
    """

    def __init__(
        self,
        num_examples: int,
        *,
        shuffle: bool,
        seed: int,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = False,
        pad: bool = True,
    ) -> None:
        if num_examples < 0:
            raise ValueError(f"num_examples must be >= 0, got {num_examples}.")
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}.")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}.")
        self.num_examples = num_examples
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.pad = pad
        self.epoch = 0
        self._start = 0
        if drop_last:
            self._num_samples = num_examples // num_replicas
        elif pad:
            self._num_samples = -(-num_examples // num_replicas)
        else:  # Positions rank, rank + num_replicas, ... below num_examples.
            self._num_samples = len(range(rank, num_examples, num_replicas))

    @property
    def start(self) -> int:
        """Samples the next iteration skips (0 unless `set_start` was called)."""
        return self._start

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch whose order the next iteration yields."""
        self.epoch = epoch

    def set_start(self, index: int) -> None:
        """Skips the first `index` samples of this rank's order, for the next iteration only.

        Raises:
            ValueError: If `index` is negative or larger than `len(self)`.
        """
        if not 0 <= index <= self._num_samples:
            raise ValueError(
                f"set_start index must be in [0, {self._num_samples}] (samples per rank "
                f"per epoch), got {index}."
            )
        self._start = index

    def epoch_indices(self) -> torch.Tensor:
        """Returns this rank's full order for the current epoch as an int64 tensor.

        The result ignores `set_start`; it is the order an uninterrupted epoch
        yields.
        """
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.num_examples, generator=generator)
        else:
            order = torch.arange(self.num_examples)
        if not (self.pad or self.drop_last):
            return order[self.rank :: self.num_replicas]
        total = self._num_samples * self.num_replicas
        if total > self.num_examples and self.num_examples > 0:
            # Pad by wrapping (repeating the order as often as needed) so that
            # every rank gets the same number of samples.
            repeats = -(-total // self.num_examples)
            order = order.repeat(repeats)
        order = order[:total]
        return order[self.rank : total : self.num_replicas]

    def take_start(self) -> int:
        """Returns the pending start offset and clears it (used by batch samplers)."""
        start, self._start = self._start, 0
        return start

    def __iter__(self) -> Iterator[int]:
        start = self.take_start()
        # One conversion per epoch; yielding Python ints avoids per-sample tensors.
        return iter(self.epoch_indices()[start:].tolist())

    def __len__(self) -> int:
        return self._num_samples

    def state_dict(self) -> dict[str, Any]:
        """Returns `{"epoch", "start", "seed", "num_examples"}`."""
        return {
            "epoch": self.epoch,
            "start": self._start,
            "seed": self.seed,
            "num_examples": self.num_examples,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the epoch and pending start offset.

        Raises:
            ValueError: If the saved `seed` or `num_examples` differ from this
                sampler's (the restored order would not match the saved run).
        """
        for key in ("seed", "num_examples"):
            if key in state_dict and state_dict[key] != getattr(self, key):
                raise ValueError(
                    f"ResumableSampler state has {key}={state_dict[key]}, but this sampler "
                    f"has {key}={getattr(self, key)}; resume with the same data and seed."
                )
        self.epoch = int(state_dict["epoch"])
        self.set_start(int(state_dict.get("start", 0)))
