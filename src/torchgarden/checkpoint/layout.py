"""The on-disk layout of a checkpoint, its manifest and its verification (stated only here).

```
<directory>/<name>-<N>/                       a checkpoint, numbered by its global step:
    state.pt                                  "single": one torch.save of the state (CPU)
    .metadata, __<rank>_<i>.distcp            "dcp": DCP's index and each rank's shards
    meta.json                                 the manifest, written last
<directory>/.<name>-<N>.tmp-<pid>-<hex>/      a save (or a delete) in flight
<directory>/.<name>-<N>.corrupt-<hex>         a bad entry set aside, kept for inspection
```

A checkpoint is assembled in its hidden temp directory, meta.json (format, step, size and
checksum of every file, config, version) is written and fsynced last, and the directory is
renamed into place: a directory ``<name>-<N>`` holding meta.json is complete. Checksums are
XXH3-128; checkpoints written before it record sha256, still verified.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import secrets
import shutil
import threading
from collections.abc import Mapping
from typing import Any

import xxhash

from torchgarden.checkpoint.errors import CheckpointFormatError, CorruptCheckpointError
from torchgarden.utils.files import fsync_dir, temp_path_for
from torchgarden.utils.processes import pid_alive

STATE_FILE = "state.pt"
META_FILE = "meta.json"
METADATA_FILE = ".metadata"  # DCP's index of a sharded checkpoint.
# meta.json's ``format`` (absent in single-file checkpoints) and the file each must list.
SINGLE, SHARDED = "single", "dcp"
_REQUIRED_FILE = {SINGLE: STATE_FILE, SHARDED: METADATA_FILE}
FORMAT_VERSION = 1  # meta.json's ``format_version``; a reader refuses a newer one.
_CHUNK = 16 << 20  # Read buffer: large sequential I/O.
_DIGESTS = {"xxh3_128": xxhash.xxh3_128, "sha256": hashlib.sha256}
_HEX = {"xxh3_128": re.compile(r"^[0-9a-f]{32}$"), "sha256": re.compile(r"^[0-9a-f]{64}$")}

# Temp directories of saves in flight in this process; never cleaned up by a peer save.
_LIVE_TEMP_DIRS: set[str] = set()
_LIVE_LOCK = threading.Lock()


def checkpoint_path(directory: str, name: str, number: int) -> str:
    return os.path.join(directory, f"{name}-{number}")


def checkpoint_number(path: str | os.PathLike[str]) -> int:
    """Returns the number ``N`` of a checkpoint path ending in ``-<N>`` (else ValueError)."""
    base = os.path.basename(os.path.normpath(os.fspath(path)))
    match = re.search(r"-(\d+)$", base)
    if match is None:
        raise ValueError(f"checkpoint path must end in '-<number>', got {os.fspath(path)!r}.")
    return int(match.group(1))


def _scan(directory: str, pattern: str) -> list[tuple[re.Match[str], os.DirEntry[str]]]:
    """The entries of ``directory`` (none if absent) whose whole name matches ``pattern``."""
    try:
        return [(match, entry) for entry in os.scandir(directory)
                if (match := re.fullmatch(pattern, entry.name))]
    except (FileNotFoundError, NotADirectoryError):
        return []


def entries(directory: str, name: str) -> list[tuple[int, str]]:
    """``(N, path)`` of every entry named ``<name>-<N>`` (complete or not), oldest first."""
    return sorted((int(match.group(1)), entry.path)
                  for match, entry in _scan(directory, rf"{re.escape(name)}-(\d+)"))


def list_checkpoints(directory: str, name: str) -> list[tuple[int, str]]:
    """The :func:`entries` that are complete (renamed directories holding meta.json)."""
    return [(n, p) for n, p in entries(directory, name)
            if os.path.isfile(os.path.join(p, META_FILE))]


def latest_checkpoint(
    directory: str | os.PathLike[str], checkpoint_name: str = "ckpt"
) -> str | None:
    """Returns the path of the highest-numbered complete ``<checkpoint_name>-<N>`` in
    ``directory``, or None."""
    found = list_checkpoints(os.fspath(directory), checkpoint_name)
    return found[-1][1] if found else None


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads and returns a checkpoint's ``meta.json``.

    Raises:
        CorruptCheckpointError: meta.json is missing or not valid JSON.
        CheckpointFormatError: The checkpoint was written in a newer format.
    """
    meta_path = os.path.join(os.fspath(path), META_FILE)
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise CorruptCheckpointError(
            f"checkpoint {os.fspath(path)!r} is incomplete: {META_FILE} is missing.") from None
    except (OSError, ValueError) as e:
        raise CorruptCheckpointError(f"{meta_path!r} is unreadable: {e}.") from e
    if not isinstance(meta, dict) or not isinstance(meta.get("format_version"), int):
        raise CorruptCheckpointError(f"{meta_path!r} has no integer 'format_version'.")
    if meta["format_version"] > FORMAT_VERSION:
        raise CheckpointFormatError(
            f"checkpoint {os.fspath(path)!r} was written by a newer torchgarden (format "
            f"{meta['format_version']} > {FORMAT_VERSION}); upgrade torchgarden.")
    return meta


def is_sharded(meta: Mapping[str, Any]) -> bool:
    return meta.get("format", SINGLE) == SHARDED


def read_manifest(path: str | os.PathLike[str], *, check_step: bool = True) -> dict[str, Any]:
    """:func:`read_meta`, then checks the manifest's structure and (with ``check_step``)
    that it records the step ``N`` of the name ``<name>-<N>``; raises as ``read_meta``
    does, or ``CorruptCheckpointError`` for a malformed manifest or another step."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise CorruptCheckpointError(f"{path!r} is not a checkpoint directory.")
    meta = read_meta(path)
    meta_path = os.path.join(path, META_FILE)
    kind = meta.get("format", SINGLE)
    if kind not in _REQUIRED_FILE:
        raise CheckpointFormatError(
            f"{meta_path!r} records format {kind!r}; this torchgarden reads "
            f"{' and '.join(map(repr, _REQUIRED_FILE))}: upgrade torchgarden.")
    files = meta.get("files")
    if not isinstance(files, dict) or _REQUIRED_FILE[kind] not in files:
        raise CorruptCheckpointError(
            f"{meta_path!r} does not list {_REQUIRED_FILE[kind]} under 'files'.")
    for file_name, info in files.items():
        if not isinstance(file_name, str) or os.path.basename(file_name) != file_name:
            raise CorruptCheckpointError(f"{meta_path!r} lists {file_name!r}, not a file name.")
        if not (isinstance(info, dict) and type(info.get("bytes")) is int and any(
                isinstance(info.get(a), str) and form.match(info[a]) for a, form in _HEX.items())):
            raise CorruptCheckpointError(
                f"{meta_path!r}: the entry of {file_name!r} needs an integer 'bytes' and a "
                f"hex checksum ('xxh3_128', or 'sha256' in older checkpoints).")
    step = meta.get("step")
    if check_step and (type(step) is not int or step != checkpoint_number(path)):
        raise CorruptCheckpointError(
            f"{meta_path!r} records step {step!r} but the directory is named for step "
            f"{checkpoint_number(path)} (renamed or copied?); rename it to match its step to "
            f"use it.")
    return meta


def file_entry(checksum: str, size: int) -> dict[str, Any]:
    """The manifest's entry of a file with this XXH3-128 ``checksum`` and size in bytes."""
    return {"xxh3_128": checksum, "bytes": size}


def file_digest(path: str, algorithm: str = "xxh3_128") -> str:
    """The file's hex digest, read in 16 MiB blocks into one buffer (``readinto`` waits
    without the GIL, so a ``torch.load`` of the file on another thread reads alongside)."""
    digest = _DIGESTS[algorithm]()
    view = memoryview(bytearray(_CHUNK))
    with open(path, "rb", buffering=0) as f:
        while count := f.readinto(view):
            digest.update(view[:count])
    return digest.hexdigest()


def file_problem(
    path: str, meta: Mapping[str, Any], *, hashes: bool = True, share: tuple[int, int] = (0, 1)
) -> str | None:
    """What is wrong with the first bad file of a read manifest (checksums too with
    ``hashes``), or None; ``share=(rank, world_size)`` checks every ``world_size``-th
    file from ``rank`` on, as ranks verify a sharded checkpoint together."""
    rank, world_size = share
    for name in sorted(meta["files"])[rank::world_size]:
        info, file_path = meta["files"][name], os.path.join(path, name)
        if os.path.islink(file_path):  # torchgarden writes none; it may point anywhere.
            return (f"{file_path!r} is a symbolic link (to {os.readlink(file_path)!r}); a "
                    f"checkpoint holds only its own files.")
        if not os.path.isfile(file_path):
            return f"{file_path!r} is missing."
        size = os.path.getsize(file_path)
        if size != info["bytes"]:
            return (f"{file_path!r} has {size} bytes but {META_FILE} records {info['bytes']} "
                    f"(truncated or altered).")
        algorithm = next(a for a in _DIGESTS if a in info)
        if hashes and (digest := file_digest(file_path, algorithm)) != info[algorithm]:
            return (f"{file_path!r} {algorithm} checksum {digest[:12]}... does not match "
                    f"{META_FILE} {str(info[algorithm])[:12]}... (altered on disk).")
    return None


def verify(path: str | os.PathLike[str], *, check_step: bool = True) -> dict[str, Any]:
    """:func:`read_manifest`, then every file's size and checksum; returns the manifest."""
    meta = read_manifest(path, check_step=check_step)
    problem = file_problem(os.fspath(path), meta)
    if problem is not None:
        raise CorruptCheckpointError(problem)
    return meta


def link_problem(path: str) -> str | None:
    """Why an entry found in a directory is not read as a checkpoint there: it is a
    symbolic link (torchgarden writes none, and a run reads only its own); else None."""
    if os.path.islink(path):
        return (f"it is a symbolic link (to {os.readlink(path)!r}); a run resumes only from "
                f"checkpoints written in its directory (load another one by path: "
                f"task.init_checkpoint, or CheckpointManager.restore(path)).")
    return None


def problem(path: str) -> str | None:
    """Why an existing entry is no complete checkpoint (a link, its manifest or sizes),
    or None."""
    if (link := link_problem(path)) is not None:
        return link
    try:
        meta = read_manifest(path)
    except CorruptCheckpointError as e:
        return str(e)
    return file_problem(path, meta, hashes=False)


@functools.lru_cache(maxsize=1)
def package_version() -> str:
    try:
        return importlib.metadata.version("torchgarden")
    except Exception:
        return "unknown"


def new_temp_dir(final: str) -> str:
    """Creates the hidden temp directory where ``final`` is assembled, left alone by
    :func:`clean_stale_temp_dirs` until :func:`release_temp_dir`."""
    os.makedirs(os.path.dirname(final), exist_ok=True)
    temp = temp_path_for(final)  # Absolute, as clean_stale_temp_dirs compares it.
    with _LIVE_LOCK:
        _LIVE_TEMP_DIRS.add(temp)
    os.makedirs(temp)
    return temp


def release_temp_dir(temp: str, *, remove: bool) -> None:
    with _LIVE_LOCK:
        _LIVE_TEMP_DIRS.discard(temp)
    if remove:
        shutil.rmtree(temp, ignore_errors=True)


def publish(temp: str, final: str, files: dict[str, Any], *, config: Any, extra: Any,
            version: str, **fields: Any) -> None:
    """Writes meta.json last into the complete ``temp`` (``fields``: a sharded checkpoint's
    ``format`` and ``world_size``) and renames it to ``final``."""
    meta = {
        "format_version": FORMAT_VERSION,
        **fields,
        "step": checkpoint_number(final),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "files": files,
        "config": config,
        "torchgarden": version,
        "extra": extra,
    }
    with open(os.path.join(temp, META_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(temp)
    if os.path.exists(final):
        raise FileExistsError(f"checkpoint {final!r} was written by someone else meanwhile.")
    os.rename(temp, final)
    fsync_dir(os.path.dirname(final))


def set_aside(path: str) -> str:
    """Renames a bad entry to a hidden ``.<name>-<N>.corrupt-<hex>``; returns that path."""
    aside = os.path.join(os.path.dirname(path),
                         f".{os.path.basename(path)}.corrupt-{secrets.token_hex(4)}")
    os.rename(path, aside)
    return aside


def remove_checkpoint(path: str) -> None:
    """Renames a checkpoint to a hidden temp name, then deletes it: a reader (an
    evaluator following the directory) finds all of it or none of it."""
    hidden = temp_path_for(path)
    try:
        os.rename(path, hidden)
    except FileNotFoundError:
        return
    if os.path.islink(hidden):
        os.unlink(hidden)  # The link only: never what it points at.
    else:
        shutil.rmtree(hidden, ignore_errors=True)


def clean_stale_temp_dirs(directory: str, name: str) -> None:
    """Removes the temp directories of saves and deletes whose process died."""
    for match, entry in _scan(directory, rf"\.{re.escape(name)}-\d+\.tmp-(\d+)-[0-9a-f]+"):
        pid = int(match.group(1))
        with _LIVE_LOCK:
            live = os.path.abspath(entry.path) in _LIVE_TEMP_DIRS
        if entry.is_dir() and not live and (pid == os.getpid() or not pid_alive(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)
