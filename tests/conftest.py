"""Test hygiene: one torch thread, environment restored, process groups torn down."""

from __future__ import annotations

import logging
import os

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _hygiene():
    environ = dict(os.environ)
    rng = torch.get_rng_state()
    yield
    os.environ.clear()
    os.environ.update(environ)
    torch.set_rng_state(rng)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    logging.getLogger("torchgarden").setLevel(logging.NOTSET)
