from __future__ import annotations

import pytest

from torchgarden.data import InputContext


def test_per_replica_batch_size_divides_global_batch():
    assert InputContext(num_replicas=4, replica_id=3).get_per_replica_batch_size(64) == 16
    assert InputContext().get_per_replica_batch_size(7) == 7


def test_indivisible_global_batch_names_argument_and_nearest_multiple():
    with pytest.raises(ValueError, match=r"global_batch_size \(10\).*replicas \(4\).*set it to 12"):
        InputContext(num_replicas=4).get_per_replica_batch_size(10)
    with pytest.raises(ValueError, match="set it to 3"):
        InputContext(num_replicas=3).get_per_replica_batch_size(2)


def test_invalid_replica_id_is_rejected():
    with pytest.raises(ValueError, match=r"replica_id must be in \[0, 2\), got 2"):
        InputContext(num_replicas=2, replica_id=2)


def test_from_environment_without_process_group_is_single_replica():
    assert InputContext.from_environment() == InputContext(1, 0)
