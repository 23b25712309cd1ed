"""Which replica an input pipeline feeds, and its share of the global batch."""

from __future__ import annotations

import dataclasses

import torch.distributed as dist


@dataclasses.dataclass(frozen=True)
class InputContext:
    """Where one input pipeline sits among the data-parallel replicas.

    The PyTorch twin of `tf.distribute.InputContext`: a task's `build_inputs`
    receives it and builds a pipeline that yields only this replica's shard, in
    per-replica batches.

    Args:
        num_replicas: Number of data-parallel replicas (processes). Defaults to 1.
        replica_id: Index of this replica in `[0, num_replicas)`. Defaults to 0.

    Raises:
        ValueError: If `num_replicas` < 1 or `replica_id` is out of range.

    Example:
        >>> InputContext(num_replicas=4, replica_id=1).get_per_replica_batch_size(64)
        16
    """

    num_replicas: int = 1
    replica_id: int = 0

    def __post_init__(self) -> None:
        if self.num_replicas < 1:
            raise ValueError(f"InputContext.num_replicas must be >= 1, got {self.num_replicas}.")
        if not 0 <= self.replica_id < self.num_replicas:
            raise ValueError(
                f"InputContext.replica_id must be in [0, {self.num_replicas}), "
                f"got {self.replica_id}."
            )

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """Returns this replica's share of `global_batch_size`.

        Args:
            global_batch_size: Examples per step summed over all replicas.

        Returns:
            `global_batch_size // num_replicas`.

        Raises:
            ValueError: If `global_batch_size` is not a multiple of `num_replicas`.
        """
        if global_batch_size % self.num_replicas:
            lower = (global_batch_size // self.num_replicas) * self.num_replicas
            upper = lower + self.num_replicas
            nearest = upper if global_batch_size - lower >= upper - global_batch_size else lower
            nearest = nearest or upper
            raise ValueError(
                f"global_batch_size ({global_batch_size}) must be divisible by the number of "
                f"replicas ({self.num_replicas}); set it to {nearest}."
            )
        return global_batch_size // self.num_replicas

    @classmethod
    def from_environment(cls) -> InputContext:
        """Builds the context of this process from `torch.distributed`.

        Returns:
            `InputContext(world_size, rank)` when a default process group is
            initialized, else `InputContext(1, 0)`.
        """
        if dist.is_available() and dist.is_initialized():
            return cls(num_replicas=dist.get_world_size(), replica_id=dist.get_rank())
        return cls()
