"""Checkpoint files written with direct I/O: exact bytes, digest, and the buffered fallback."""

from __future__ import annotations

import errno
import os

import pytest
import torch
import xxhash

from torchgarden.checkpoint import _direct


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT on this OS")
@pytest.mark.parametrize("size", [5, _direct.BLOCK, _direct.BLOCK + 4099])
def test_direct_file_writes_exactly_the_bytes_and_their_digest(tmp_path, size):
    data = os.urandom(size)
    path = str(tmp_path / "f.bin")
    try:
        direct = _direct.DirectFile(path)
    except OSError as error:  # A file system without O_DIRECT: the fallback's test covers it.
        pytest.skip(f"O_DIRECT refused here: {error}")
    direct.write(data[:3])
    direct.write(memoryview(data)[3:])
    direct.close()
    with open(path, "rb") as f:
        assert f.read() == data
    assert direct.size == size and direct.hexdigest() == xxhash.xxh3_128(data).hexdigest()


def test_a_file_system_without_direct_io_gets_buffered_writes(tmp_path, monkeypatch):
    def refuse(path):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), path)

    monkeypatch.setattr(_direct, "DirectFile", refuse)
    state = {"w": torch.arange(10.0)}
    entry = _direct.save_hashed(state, str(tmp_path / "state.pt"))
    with open(tmp_path / "state.pt", "rb") as f:
        data = f.read()
    assert entry == {"xxh3_128": xxhash.xxh3_128(data).hexdigest(), "bytes": len(data)}
    assert torch.equal(torch.load(tmp_path / "state.pt", weights_only=True)["w"], state["w"])
