"""TFRecord shards as a resumable stream, read as Model Garden's input reader reads them.

`TFRecordStream` is an ``IterableDataset``; every reading unit (one per loader worker of each
replica: ``units = replicas x workers``) reads its own part of each pass, as
``official/core/input_reader.py`` does per input pipeline:

* more than one file and at least one per unit: training shuffles the file list (seeded by
  ``(seed, epoch)``, the same on every unit), unit ``u`` takes files ``u, u + units, ...``
  and reads them interleaved as ``tf.data.Dataset.interleave`` (deterministic) does:
  ``cycle_length`` files open at once, ``block_length`` consecutive records from each;
* otherwise (one file, or fewer files than units) every unit reads all files in order and
  keeps every ``units``-th record;
* training then shuffles records through a ``shuffle_buffer_size`` buffer (tf.data's
  ``shuffle``: a uniformly drawn slot is emitted and refilled with the next record),
  seeded by ``(seed, epoch, unit)``.

The state (`state_dict`) is the reading position: per open file its index and the byte
offset of the next record, the positions of the records in the shuffle buffer and the
buffer's RNG state, so a resumed run reads exactly the records an uninterrupted one would
have (the buffer is refilled by re-reading those records by offset). Each record is
parsed with a seed drawn from ``(seed, epoch, file, offset)``, so random augmentation
resumes exactly too. torchdata's ``StatefulDataLoader`` saves one state per worker.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from torchgarden.data.seeding import mix_seed
from torchgarden.data.tfrecord import TFRecordError, read_record_at, read_records

__all__ = ["TFRecordStream", "default_cycle_length"]

_LOG = logging.getLogger(__name__)
Record = tuple[int, int, bytes]  # (file index, byte offset, data)


def default_cycle_length() -> int:
    """tf.data's ``cycle_length=None`` (AUTOTUNE): the number of CPU cores this process may
    run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


class TFRecordStream(IterableDataset):
    """TFRecord shards as a stream of parsed examples (see the module docstring).

    Args:
        files: The TFRecord files, in `expand_input_paths` order.
        parse: Turns ``(record bytes, seed)`` into one example; runs in the workers.
        is_training: Shuffle files and records (Model Garden's ``is_training``).
        seed: Seed of the shuffles and of the parse seeds.
        shuffle_buffer_size: Records in the shuffle buffer.
        cycle_length: Files interleaved at once; None: `default_cycle_length`.
        block_length: Consecutive records from each interleaved file.
        skip_bad: Skip and count bad records (and records ``parse`` rejects) instead of
            raising `TFRecordError`.
    """

    def __init__(self, files: Sequence[str], parse: Callable[[bytes, int], Any], *,
                 is_training: bool = False, seed: int = 0, shuffle_buffer_size: int = 100,
                 cycle_length: int | None = None, block_length: int = 1,
                 skip_bad: bool = False) -> None:
        self.files = list(files)
        self.parse = parse
        self.is_training = is_training
        self.seed = seed
        self.shuffle_buffer_size = shuffle_buffer_size
        self.cycle_length = cycle_length
        self.block_length = block_length
        self.skip_bad = skip_bad
        self.epoch = 0
        self._passes = 0  # Passes since set_epoch: persistent workers never see set_epoch.
        self.replica_id, self.num_replicas = 0, 1
        self._resume: dict[str, Any] | None = None
        self._live: _Pass | None = None

    def set_epoch(self, epoch: int) -> None:
        """The pass to read next: a new file order and new shuffles when training."""
        self.epoch = int(epoch)
        self._passes = 0

    def shard_for_replica(self, replica_id: int, num_replicas: int) -> TFRecordStream:
        """This stream as read by replica ``replica_id`` of ``num_replicas`` (in place)."""
        self.replica_id, self.num_replicas = replica_id, num_replicas
        return self

    def _unit(self) -> tuple[int, int]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return self.replica_id * workers + worker, self.num_replicas * workers

    def __iter__(self) -> Iterator[Any]:
        unit, units = self._unit()
        resume, self._resume = self._resume, None
        live = self._live = _Pass(self, self.epoch + self._passes, unit, units, resume)
        self._passes += 1
        for index, offset, data in live:
            path = self.files[index]
            try:
                example = self.parse(data, mix_seed(self.seed, live.epoch, index, offset))
            except Exception as error:  # A record that is no valid example of the schema.
                message = f"{path}: record at byte offset {offset}: {error}"
                if not self.skip_bad:
                    raise TFRecordError(message) from error
                _LOG.warning("skipping: %s", message)
                live.skipped += 1
                continue
            yield example

    def state_dict(self) -> dict[str, Any]:
        """The reading position of the pass under way (see the module docstring)."""
        if self._live is not None:
            return self._live.state()
        return dict(self._resume) if self._resume else {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from a `state_dict` at the next iteration."""
        if state.get("num_files", len(self.files)) != len(self.files):
            raise ValueError(
                f"the data position saved in the checkpoint is in {state['num_files']} "
                f"TFRecord files, but input_path now names {len(self.files)}; resume with "
                "the same files")
        self.epoch, self._passes = int(state.get("epoch", self.epoch)), 0
        self._resume = state if "mode" in state else None
        self._live = None


class _Pass:
    """One unit's reading of one pass, with its position."""

    def __init__(self, stream: TFRecordStream, epoch: int, unit: int, units: int,
                 resume: dict[str, Any] | None) -> None:
        self.stream, self.epoch, self.unit, self.units = stream, epoch, unit, units
        n, seed = len(stream.files), stream.seed
        order = list(range(n))
        self.interleaved = n > 1 and n >= units
        if self.interleaved and stream.is_training:
            np.random.default_rng(mix_seed(seed, epoch, n)).shuffle(order)
        self.mine = order[unit::units] if self.interleaved else order
        cycle = stream.cycle_length or default_cycle_length()
        # Interleave: per slot [file index, next offset] or None; the next file to open.
        self.slots: list[list[int] | None] = [None] * cycle
        self.next_input = self.cycle_index = self.block_index = 0
        # Sequential: position in `mine`, next offset, records read so far (all units').
        self.sequential = [0, 0, 0]
        self.readers: dict[int, Iterator[tuple[int, bytes]]] = {}
        self.skipped_offsets: list[int] = []
        self.skipped = 0
        self.buffer: list[Record] = []
        self.rng = np.random.default_rng(mix_seed(seed, epoch, unit, 1))
        if resume is not None:
            self._restore(resume)

    # ----------------------------------------------------------------- reading
    def _reader(self, key: int, index: int, offset: int) -> Iterator[tuple[int, bytes]]:
        reader = self.readers.get(key)
        if reader is None:
            path = self.stream.files[index]
            reader = self.readers[key] = read_records(
                path, offset, skip_bad=self.stream.skip_bad, skipped=self.skipped_offsets)
        return reader

    def _interleave(self) -> Iterator[Record]:
        slots, cycle = self.slots, len(self.slots)
        while True:
            slot = slots[self.cycle_index]
            if slot is not None:
                got = next(self._reader(self.cycle_index, slot[0], slot[1]), None)
                if got is not None:
                    slot[1] = got[0] + 16 + len(got[1])
                    self.block_index += 1
                    if self.block_index == self.stream.block_length:
                        self._advance(cycle)
                    yield slot[0], got[0], got[1]
                    continue
                slots[self.cycle_index] = None
                self.readers.pop(self.cycle_index, None)
                self._advance(cycle)
            elif self.next_input < len(self.mine):
                slots[self.cycle_index] = [self.mine[self.next_input], 0]
                self.next_input += 1
            elif any(s is not None for s in slots):
                self._advance(cycle)
            else:
                return

    def _advance(self, cycle: int) -> None:
        self.block_index = 0
        self.cycle_index = (self.cycle_index + 1) % cycle

    def _sequential(self) -> Iterator[Record]:
        position = self.sequential
        while position[0] < len(self.mine):
            index = self.mine[position[0]]
            for offset, data in self._reader(-1, index, position[1]):
                position[1] = offset + 16 + len(data)
                position[2] += 1
                if (position[2] - 1) % self.units == self.unit:
                    yield index, offset, data
            self.readers.pop(-1, None)
            position[0], position[1] = position[0] + 1, 0

    def __iter__(self) -> Iterator[Record]:
        records = self._interleave() if self.interleaved else self._sequential()
        if not self.stream.is_training:
            yield from records
            return
        buffer, size = self.buffer, self.stream.shuffle_buffer_size
        for record in records:  # tf.data's shuffle: fill, then emit a random slot, refill it.
            if len(buffer) < size:
                buffer.append(record)
                if len(buffer) < size:
                    continue
            slot = int(self.rng.integers(len(buffer)))
            out = buffer[slot]
            buffer[slot] = buffer[-1]
            buffer.pop()
            yield out
        while buffer:
            slot = int(self.rng.integers(len(buffer)))
            out = buffer[slot]
            buffer[slot] = buffer[-1]
            buffer.pop()
            yield out

    # ------------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch, "num_files": len(self.stream.files),
            "mode": "interleave" if self.interleaved else "sequential",
            "slots": [list(s) if s else None for s in self.slots],
            "next_input": self.next_input, "cycle_index": self.cycle_index,
            "block_index": self.block_index, "sequential": list(self.sequential),
            "buffer": [(index, offset) for index, offset, _ in self.buffer],
            "rng": self.rng.bit_generator.state,
            "skipped": self.skipped + len(self.skipped_offsets),
        }

    def _restore(self, state: dict[str, Any]) -> None:
        self.slots = [list(s) if s else None for s in state["slots"]]
        self.next_input = state["next_input"]
        self.cycle_index, self.block_index = state["cycle_index"], state["block_index"]
        self.sequential = list(state["sequential"])
        self.rng.bit_generator.state = state["rng"]
        self.skipped = state.get("skipped", 0)
        files = self.stream.files
        self.buffer = [(i, o, read_record_at(files[i], o)) for i, o in state["buffer"]]
