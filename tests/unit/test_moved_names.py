"""Public names that moved raise with their new home, by attribute and by import."""

from __future__ import annotations

import importlib

import pytest

from torchgarden.utils.moved import MOVED


@pytest.mark.parametrize("module,name", [(m, n) for m, names in MOVED.items() for n in names])
def test_a_moved_name_says_where_it_went(module, name):
    imported = importlib.import_module(module)
    where = MOVED[module][name]
    with pytest.raises(AttributeError, match=f"{module}.{name} was {where.split(' (')[0]}"):
        getattr(imported, name)
    assert not hasattr(imported, name)
    with pytest.raises(ImportError, match=f"{module}.{name} was moved to"):
        exec(f"from {module} import {name}", {})


def test_the_new_home_of_serialize_config_works(tmp_path):
    import torchgarden as tg
    from torchgarden.train_lib import serialize_config

    path = serialize_config(tg.get_experiment("toy_regression"), tmp_path)
    assert tg.ExperimentConfig.from_yaml(path) == tg.get_experiment("toy_regression")


def test_an_unknown_name_is_a_plain_attribute_error():
    import torchgarden

    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        torchgarden.no_such_name  # noqa: B018
