"""Keeps the ranks' evaluation loops in step when their validation shards differ."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torchgarden import distribute

__all__ = ["Lockstep"]


class Lockstep:
    """Keeps every rank's eval loop at the same number of steps when shards differ.

    A sized loader's longest shard is agreed on once (one all-reduce); for an unsized
    one (a stream) the ranks agree after each step whether any still has a batch.

    Args:
        iterator: This rank's batch iterator.
        loader: The eval loader (its ``len()``, when it has one, is this rank's steps).
    """

    _END = object()

    def __init__(self, iterator: Iterator[Any], loader: Any) -> None:
        self._source = iterator
        self._next: Any = None
        self._last: Any = self._END
        self._continues = True
        try:
            self._steps: int | None = distribute.max_over_ranks(len(loader))
        except TypeError:
            self._steps = None
        self.iterator = self  # eval_step reads batches through this object.

    def __iter__(self) -> Lockstep:
        return self

    def __next__(self) -> Any:
        if not self._fetch():
            raise StopIteration
        self._last, self._next = self._next, None
        return self._last

    def _fetch(self) -> bool:
        if self._next is None:
            self._next = next(self._source, self._END)
        return self._next is not self._END

    def has_batch(self, step: int) -> bool:
        """Whether this rank has a batch for ``step`` (and every rank runs that step)."""
        mine = self._fetch()
        if self._steps is None:
            # Every rank asks each step; the answer decides any_rank_continues as well.
            self._continues = bool(distribute.max_over_ranks(int(mine)))
            return mine and self._continues
        return mine and step < self._steps

    def any_rank_continues(self, step: int) -> bool:
        """Whether some rank still has a batch for ``step`` (this one has none)."""
        if self._steps is None:
            return self._continues
        return step < self._steps

    def last_batch(self) -> Any:
        """This rank's last batch, for a forward nobody counts.

        Raises:
            ValueError: This rank's shard was empty (fewer examples than ranks).
        """
        if self._last is self._END:
            raise ValueError(
                f"rank {distribute.get_rank()} has no validation example, but the other "
                "ranks' forward passes need it to run one too; use at least one validation "
                f"example per rank ({distribute.get_world_size()})."
            )
        return self._last
