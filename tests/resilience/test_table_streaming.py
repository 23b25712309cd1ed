"""Adversarial table, streaming data group: shards that go bad, data that changes.

64 digits as 4 WebDataset tar shards (16 examples each) and as a Hugging Face
``save_to_disk`` directory of 4 Arrow files; batches of 8, so shard 2 is reached at the
5th batch, after the checkpoints at steps 2 and 4. A shard that is missing, truncated or
corrupt when it is reached stops the run with one line naming it (exit 2; the run is
resumable from its checkpoints), or with ``skip_bad_records=true`` is skipped with one
warning; Arrow files are checked when loaded; a resume on data whose fingerprint changed
is refused with the model_dir untouched, and on the same data resumes exactly.
"""

from __future__ import annotations

import os
import shutil
import tarfile

import pytest
from resilience_tools import differences, final_state
from table import DIGITS, Case, run_case, run_quietly, tree

from digits_streams import write_digits_streams

pytest.importorskip("datasets")
pytest.importorskip("torchdata")

SHARDS, PER_SHARD = 4, 16
STEPS = "trainer.steps_per_loop=2,trainer.summary_interval=2,trainer.checkpoint_interval=2"


@pytest.fixture(scope="session")
def stream_data(tmp_path_factory) -> str:
    """``<root>/shard-<i>.tar`` and ``<root>/arrow`` (the same 64 digits)."""
    root = tmp_path_factory.mktemp("stream_data")
    return str(write_digits_streams(root, shards=SHARDS, per_shard=PER_SHARD))


def _data(tmp: str) -> str:
    return os.path.join(tmp, "data")


def wds(model_dir: str, tmp: str, extra: str = "", steps: int = 8) -> list[str]:
    return [*DIGITS, "--model_dir", model_dir, "--params_override",
            f"task.train_data.source=webdataset,task.train_data.input_path={_data(tmp)}/"
            "shard-*.tar,task.train_data.x_key=npy,task.train_data.y_key=cls,"
            f"task.train_data.global_batch_size=8,trainer.train_steps={steps},{STEPS}{extra}"]


def arrow(model_dir: str, tmp: str, extra: str = "", steps: int = 8) -> list[str]:
    return [*DIGITS, "--model_dir", model_dir, "--params_override",
            f"task.train_data.source=datasets,task.train_data.input_path={_data(tmp)}/arrow,"
            "task.train_data.x_key=image,task.train_data.y_key=label,"
            f"task.train_data.global_batch_size=8,trainer.train_steps={steps},{STEPS}{extra}"]


def damaged(how):
    """Setup: a fresh copy of the data, then ``how(data dir)``."""
    def setup(_model_dir: str, tmp: str) -> None:
        shutil.copytree(os.environ["TG_STREAM_DATA"], _data(tmp))
        how(_data(tmp))
    return setup


def shard(data: str, i: int = 2) -> str:
    return os.path.join(data, f"shard-{i}.tar")


def cut(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def halve(path: str) -> None:
    cut(path, os.path.getsize(path) // 2)


def scribble(path: str, offset: int, count: int = 3000) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\x13" * count)


def member_boundary(path: str) -> int:
    """The byte offset of the 12th example's header (a cut there leaves whole members)."""
    with tarfile.open(path) as tar:
        return tar.getmembers()[22].offset


def deleted_once_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shard 2 disappears after the run checked its files, before it is reached."""
    from torchgarden.data import hf

    real = hf.stream_webdataset

    def stream_then_delete(paths, **kwargs):
        stream = real(paths, **kwargs)
        os.remove(next(p for p in paths if p.endswith("shard-2.tar")))
        return stream

    monkeypatch.setattr(hf, "stream_webdataset", stream_then_delete)


def resumable(model_dir: str, _tmp: str) -> None:
    assert {"ckpt-2", "ckpt-4"} <= set(os.listdir(model_dir))


def trained_then_changed(streaming: bool):
    """Setup: 4 steps on the Arrow data, then the data saved again with other labels."""
    def setup(model_dir: str, tmp: str) -> None:
        import datasets

        shutil.copytree(os.environ["TG_STREAM_DATA"], _data(tmp))
        assert run_quietly(arrow(model_dir, tmp, f",task.train_data.streaming={streaming}",
                                 steps=4)) == 0
        path = os.path.join(_data(tmp), "arrow")
        changed = datasets.load_from_disk(path).map(lambda r: {"label": (r["label"] + 1) % 10})
        changed.save_to_disk(path + ".new", num_shards=SHARDS)
        shutil.rmtree(path)
        os.rename(path + ".new", path)
    return setup


SHARD_2 = "shard-2.tar' is unreadable after"
CASES = [
    Case("wds_shard_truncated_mid_member", lambda d, t: wds(d, t),
         (SHARD_2, "unexpected end of data", "skip_bad_records=true"), "trains",
         setup=damaged(lambda data: cut(shard(data), 20000)), check=resumable),
    Case("wds_shard_cut_at_a_member_boundary", lambda d, t: wds(d, t),
         (SHARD_2, "10 examples", "cut short"), "trains",
         setup=damaged(lambda data: cut(shard(data), member_boundary(shard(data)))),
         check=resumable),
    Case("wds_shard_with_a_corrupt_header", lambda d, t: wds(d, t),
         (SHARD_2, "no valid tar header"), "trains",
         setup=damaged(lambda data: scribble(shard(data), 9000)), check=resumable),
    Case("wds_shard_deleted_mid_epoch", lambda d, t: wds(d, t),
         (SHARD_2, "0 examples", "No such file"), "trains", setup=damaged(lambda data: None),
         patch=deleted_once_built, check=resumable),
    Case("wds_corrupt_shard_in_a_worker", lambda d, t: wds(d, t, ",task.train_data.num_workers=2"),
         ("shard-2.tar' is unreadable", "no valid tar header", "(in DataLoader worker 0)"),
         "trains", setup=damaged(lambda data: scribble(shard(data), 9000)), check=resumable),
    Case("wds_corrupt_shard_skipped_when_asked",
         lambda d, t: wds(d, t, ",task.train_data.skip_bad_records=true"),
         ("skipping the rest of WebDataset shard", "shard-2.tar", "no valid tar header"),
         "existing", code=0, setup=damaged(lambda data: scribble(shard(data), 9000))),
    Case("arrow_file_truncated", lambda d, t: arrow(d, t),
         ("arrow", "data-00002-of-00004.arrow is unreadable", "save_to_disk"),
         setup=damaged(lambda data: halve(os.path.join(data, "arrow",
                                                       "data-00002-of-00004.arrow")))),
    Case("arrow_file_missing", lambda d, t: arrow(d, t, ",task.train_data.streaming=true"),
         ("data-00001-of-00004.arrow", "No such file"),
         setup=damaged(lambda data: os.remove(os.path.join(data, "arrow",
                                                           "data-00001-of-00004.arrow")))),
    Case("arrow_changed_between_runs", lambda d, t: arrow(d, t),
         ("ckpt-4", "training data changed since the checkpoint", "/arrow@"), "existing",
         setup=trained_then_changed(False)),
    Case("arrow_stream_changed_between_runs",
         lambda d, t: arrow(d, t, ",task.train_data.streaming=true"),
         ("ckpt-4", "training data changed since the checkpoint"), "existing",
         setup=trained_then_changed(True)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_streaming_row(case, tmp_path, trained, stream_data, capsys, caplog, monkeypatch):
    monkeypatch.setenv("TG_STREAM_DATA", stream_data)
    print(run_case(case, str(tmp_path), trained, capsys, caplog, monkeypatch))


@pytest.mark.parametrize("source", ["webdataset", "arrow_stream"])
def test_a_stream_on_the_same_data_resumes_exactly(source, tmp_path, stream_data):
    """Stopped at step 4 (mid-epoch, inside shard 1) and resumed to 12 (into the second
    epoch): the same weights, optimizer state and data position as a run never stopped."""
    shutil.copytree(stream_data, _data(str(tmp_path)))
    command = wds if source == "webdataset" else (
        lambda d, t, steps: arrow(d, t, ",task.train_data.streaming=true", steps=steps))
    full, resumed = str(tmp_path / "full"), str(tmp_path / "resumed")
    assert run_quietly(command(full, str(tmp_path), steps=12)) == 0
    assert run_quietly(command(resumed, str(tmp_path), steps=4)) == 0
    assert run_quietly(command(resumed, str(tmp_path), steps=12)) == 0
    assert differences(final_state(full), final_state(resumed)) == []
    assert tree(os.path.join(full, "ckpt-12")).keys() == tree(
        os.path.join(resumed, "ckpt-12")).keys()
