"""The batch iterator a trainer holds: repeats across epochs and resumes mid-epoch."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch.distributed as dist

from torchgarden.data.sampler import ResumableSampler
from torchgarden.data.streaming import is_stateful_loader

logger = logging.getLogger(__name__)


class DataIterator:
    """Iterates a loader by batches, tracking `(epoch, batches_in_epoch)` for checkpoints.

    With `repeat=True` (training) it never ends: when a pass is exhausted it
    moves to the next epoch, calls `sampler.set_epoch`, and starts a new pass,
    so training continues seamlessly across `Controller.train` calls. With
    `repeat=False` (evaluation) it raises `StopIteration` after one pass until
    `reset()` is called.

    `load_state_dict` makes the next batch the one an uninterrupted run would
    have produced. When the loader's `.sampler` is a `ResumableSampler` and the
    loader has an integer `.batch_size`, the consumed batches are skipped
    without loading them (`sampler.set_start`); the resumed sequence is then
    bit-identical, at any world size (positions count global batches). A loader with
    `state_dict()` / `load_state_dict()` (torchdata's `StatefulDataLoader`, the
    streaming protocol of `data.streaming`) has its own state stored too, one per rank
    (under `torchrun` the state dict gathers every rank's, so it is a collective), and
    handed back before the next pass. Any other iterable is re-iterated from the start
    of the epoch and the consumed batches are loaded and dropped (a warning says the
    resume is approximate: it is exact only if the iterable replays the same order).

    Args:
        loader: A loader from `build_dataloader`, a `DataLoader`, or any iterable.
        repeat: Start a new epoch when a pass ends (True) or stop (False).

    Example:
        >>> iterator = DataIterator(loader, repeat=True)
        >>> batch = next(iterator)
        >>> state = iterator.state_dict()   # {"epoch": 0, "batches_in_epoch": 1}
        >>> resumed = DataIterator(loader, repeat=True)
        >>> resumed.load_state_dict(state)  # next(resumed) is the 2nd batch
    """

    def __init__(self, loader: Iterable[Any], *, repeat: bool) -> None:
        self.loader = loader
        self.repeat = repeat
        sampler = getattr(loader, "sampler", None)
        batch_size = getattr(loader, "batch_size", None)
        self._sampler: ResumableSampler | None = None
        if isinstance(sampler, ResumableSampler) and isinstance(batch_size, int):
            self._sampler = sampler
            self._batch_size = batch_size
        self._stateful = self._sampler is None and is_stateful_loader(loader)
        self._loader_state: dict[str, Any] | None = None  # Handed over before the next pass.
        self._epoch = sampler.epoch if isinstance(sampler, ResumableSampler) else 0
        self._batches_in_epoch = 0
        self._iterator: Iterator[Any] | None = None
        self._exhausted = False
        self._skipped: set[tuple[int, int]] = set()
        self._wait_seconds = 0.0

    @property
    def wait_seconds(self) -> float:
        """Seconds spent waiting for the loader's batches so far (host clock): the input
        pipeline's share of a train loop (``throughput/data_wait_fraction``)."""
        return self._wait_seconds

    def counters(self) -> dict[str, float]:
        """Counts the loader's stream reports: ``data/skipped_records`` (bad records a
        TFRecord source with ``skip_bad_records`` skipped so far this epoch, all workers)."""
        if not getattr(getattr(self.loader, "dataset", None), "skip_bad", False):
            return {}
        return {"data/skipped_records": float(_sum_key(self.loader.state_dict(), "skipped"))}

    @property
    def epoch(self) -> int:
        """The epoch the next batch comes from (0-based)."""
        return self._epoch

    @property
    def batches_in_epoch(self) -> int:
        """Batches delivered so far in the current epoch."""
        return self._batches_in_epoch

    @property
    def resumes_exactly(self) -> bool:
        """True if `load_state_dict` skips batches through a `ResumableSampler` or the
        loader's own state."""
        return self._sampler is not None or self._stateful

    @property
    def collective_state_dict(self) -> bool:
        """True when `state_dict()` gathers every rank's loader state (a collective)."""
        return self._stateful and _world_size() > 1

    def __iter__(self) -> DataIterator:
        return self

    def __next__(self) -> Any:
        # One frame per batch on top of the loader's own: this runs every step.
        while True:
            start = time.perf_counter()
            try:
                iterator = self._iterator
                if iterator is None:
                    if self._exhausted:
                        raise StopIteration
                    iterator = self._iterator = self._begin_pass()
                try:
                    batch = next(iterator)
                except StopIteration:
                    batch = self._next_epoch_first_batch()
            finally:
                self._wait_seconds += time.perf_counter() - start
            index = self._batches_in_epoch
            self._batches_in_epoch = index + 1
            if not self._skipped or (self._epoch, index) not in self._skipped:
                return batch

    def skip(self, positions: Iterable[tuple[int, int]]) -> None:
        """Never delivers the batches at these ``(epoch, index in epoch)`` positions.

        Blow-up recovery uses it to step over a batch whose loss was NaN twice. The
        positions are part of :meth:`state_dict`, so a resumed run skips them too.
        """
        self._skipped.update((int(epoch), int(index)) for epoch, index in positions)

    @property
    def skipped(self) -> frozenset[tuple[int, int]]:
        """The ``(epoch, index)`` positions :meth:`skip` took out."""
        return frozenset(self._skipped)

    def last_positions(self, count: int) -> list[tuple[int, int]]:
        """The ``(epoch, index)`` positions of the last ``count`` batches read (delivered or
        skipped), most recent last; earlier epochs are reached through ``len(loader)``."""
        positions, epoch, index = [], self._epoch, self._batches_in_epoch
        while len(positions) < count:
            if index == 0:
                if epoch == 0 or not hasattr(self.loader, "__len__"):
                    break
                epoch, index = epoch - 1, len(self.loader)  # type: ignore[arg-type]
            index -= 1
            positions.append((epoch, index))
        return positions[::-1]

    def _next_epoch_first_batch(self) -> Any:
        self._iterator = None
        if not self.repeat:
            self._exhausted = True
            raise StopIteration
        empty_pass = self._batches_in_epoch == 0
        self._epoch += 1
        self._batches_in_epoch = 0
        self._iterator = self._begin_pass()
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = None
            what = "two consecutive passes" if empty_pass else "a whole new epoch"
            raise RuntimeError(
                f"DataIterator(repeat=True): the loader yielded no batch for {what}; "
                "check that the dataset is not empty and global_batch_size <= its size "
                "when drop_remainder=True."
            ) from None

    def _begin_pass(self) -> Iterator[Any]:
        skip = self._batches_in_epoch
        if self._sampler is not None:
            self._sampler.set_epoch(self._epoch)
            if skip:
                # Resume without loading: the sampler drops the consumed samples.
                self._sampler.set_start(min(skip * self._batch_size, len(self._sampler)))
            return iter(self.loader)
        self._set_epoch_if_possible()
        if self._stateful:
            if self._loader_state is not None:
                self.loader.load_state_dict(self._loader_state)  # type: ignore[attr-defined]
                self._loader_state = None
            return iter(self.loader)
        iterator = iter(self.loader)
        for _ in range(skip):
            try:
                next(iterator)
            except StopIteration:
                break
        return iterator

    def _set_epoch_if_possible(self) -> None:
        owners = (self.loader, getattr(self.loader, "sampler", None),
                  getattr(self.loader, "dataset", None))
        for owner in owners:
            set_epoch = getattr(owner, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(self._epoch)
                return

    def close(self) -> None:
        """Shuts the loader's current pass (and its worker processes) down now; the next
        batch resumes from the same position (as after :meth:`load_state_dict`).

        Dropping a pass to the garbage collector instead (a Trainer sits in reference
        cycles) makes torch wait 5 s per worker to shut it down.
        """
        if self._iterator is None:
            return
        if self._stateful and self._loader_state is None:
            self._loader_state = self.loader.state_dict()  # type: ignore[attr-defined]
        _shutdown_workers(self._iterator)
        self._iterator = None

    def reset(self) -> None:
        """Starts a fresh pass over the current epoch at its first batch."""
        self._iterator = None
        self._exhausted = False
        self._batches_in_epoch = 0

    def state_dict(self) -> dict[str, Any]:
        """Returns `{"epoch": e, "batches_in_epoch": k}` (and `"skipped"` positions, if any).

        A stateful loader adds `"loader"`: its `state_dict()`. Under `torchrun` that
        state differs per rank, so every rank's is gathered (a collective):
        `{"world_size": W, "ranks": [state of rank 0, ...]}`.
        """
        state: dict[str, Any] = {"epoch": self._epoch, "batches_in_epoch": self._batches_in_epoch}
        fingerprint = getattr(self.loader, "data_fingerprint", None)
        if fingerprint is not None:
            state["data_fingerprint"] = str(fingerprint)
        if self._skipped:
            state["skipped"] = [list(position) for position in sorted(self._skipped)]
        if not self._stateful:
            return state
        pending = self._loader_state  # Restored but not yet iterated: still the position.
        state["loader"] = pending if pending is not None else self.loader.state_dict()  # type: ignore[attr-defined]
        world_size = _world_size()
        if world_size == 1:
            return state
        ranks: list[Any] = [None] * world_size
        dist.all_gather_object(ranks, state)
        return {"world_size": world_size, "ranks": ranks}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Makes the next batch the `k+1`-th batch of epoch `e`.

        Args:
            state_dict: `{"epoch": e, "batches_in_epoch": k}` (and optionally
                `"skipped"`) from `state_dict()`.

        Raises:
            KeyError: If a key is missing.
            ValueError: If a value is negative, or the loader's ``data_fingerprint`` is
                not the one saved (the data changed: its position would mean other examples).
        """
        state_dict = self._own_state(state_dict)
        for key in ("epoch", "batches_in_epoch"):
            if key not in state_dict:
                raise KeyError(
                    f"DataIterator state is missing {key!r}; expected keys "
                    f"['batches_in_epoch', 'epoch'], got {sorted(state_dict)}."
                )
            if int(state_dict[key]) < 0:
                raise ValueError(f"DataIterator state {key} must be >= 0, got {state_dict[key]}.")
        _check_same_data(state_dict.get("data_fingerprint"),
                         getattr(self.loader, "data_fingerprint", None))
        self._epoch = int(state_dict["epoch"])
        self._batches_in_epoch = int(state_dict["batches_in_epoch"])
        self._skipped = {(int(e), int(i)) for e, i in state_dict.get("skipped", ())}
        self._iterator = None
        self._exhausted = False
        self._loader_state = state_dict.get("loader") if self._stateful else None
        if self._loader_state is not None:
            return
        if self._sampler is None and self._batches_in_epoch:
            logger.warning(
                "DataIterator: %s has no ResumableSampler with an integer batch_size; resuming "
                "by replaying %d batches of epoch %d, which is exact only if it repeats the "
                "same order.",
                type(self.loader).__name__,
                self._batches_in_epoch,
                self._epoch,
            )


    def _own_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """This rank's entry of a per-rank state; the start of the epoch when the world
        size changed (a stream's position cannot be re-split across another number of ranks)."""
        if "ranks" not in state:
            saved_world_size, ranks = 1, [state]
        else:
            saved_world_size, ranks = int(state["world_size"]), list(state["ranks"])
        world_size, rank = _world_size(), dist.get_rank() if _world_size() > 1 else 0
        if "loader" not in ranks[0] or saved_world_size == world_size:
            return ranks[rank] if saved_world_size == world_size else ranks[0]
        epoch = min(int(r["epoch"]) for r in ranks)
        logger.warning(
            "DataIterator: the stream's position was saved by %d ranks and cannot be split "
            "across %d; every rank restarts epoch %d of its shard.", saved_world_size,
            world_size, epoch,
        )
        same_data = {k: ranks[0][k] for k in ("data_fingerprint",) if k in ranks[0]}
        return {"epoch": epoch, "batches_in_epoch": 0, **same_data}


def _sum_key(state: Any, key: str) -> int:
    """The sum of the int values under ``key`` anywhere in a nested state."""
    if isinstance(state, dict):
        own = state.get(key, 0) if isinstance(state.get(key, 0), int) else 0
        return own + sum(_sum_key(v, key) for k, v in state.items() if k != key)
    if isinstance(state, list | tuple):
        return sum(_sum_key(v, key) for v in state)
    return 0


def _world_size() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def _shutdown_workers(iterator: Iterator[Any]) -> None:
    """Ends a loader iterator's worker processes (torch's own shutdown), unless they persist.

    A ``StatefulDataLoader`` keeps its last iterator, so dropping ours is not enough.
    """
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown) and not getattr(iterator, "_persistent_workers", False):
        shutdown()


def _check_same_data(saved: str | None, current: Any) -> None:
    """A loader may carry ``data_fingerprint`` (a dataset's, e.g. Hugging Face's
    ``_fingerprint``); a position saved on other data is refused rather than resumed."""
    if saved is None or current is None or str(current) == saved:
        return
    raise ValueError(
        f"the training data changed since the checkpoint was written (it was {saved}, now "
        f"{current}), so its saved position would read other examples: restore the data it "
        "trained on.")
