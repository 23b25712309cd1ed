"""Which data source a split reads, checked against the keys that name data.

A source that generates its data (``digits``, the generated ``shapes``) reads no file, so a set
``input_path`` or ``tfds_name`` would be accepted and never read: refused here, in one line
naming both keys and the source the path most likely is. This module is torch-free.
"""

from __future__ import annotations

from torchgarden.config import DataConfig
from torchgarden.config.errors import ConfigError, not_one_of

__all__ = ["auto_source", "check_source", "guess_source"]


def guess_source(path: str | list[str], sources: tuple[str, ...]) -> str:
    """The source among ``sources`` that files like ``path`` most likely are."""
    first = path[0] if isinstance(path, list) and path else path
    text = str(first).split(",")[0].strip().lower()
    guesses = (
        (text.endswith(".npz"), "npz"),
        (text.endswith(".json"), "coco"),
        (text.endswith(".tar") or "{" in text, "webdataset"),
        (text.endswith("/") and "*" not in text, "folder"),
    )
    for matches, source in guesses:
        if matches and source in sources:
            return source
    return "tfrecord" if "tfrecord" in sources else sources[0]


def check_source(
    params: DataConfig, source: str, sources: tuple[str, ...], *, generated: str
) -> None:
    """Refuses an unknown ``source`` and keys naming data that ``source`` would not read.

    Args:
        params: The split's data config.
        source: Its source (for an automatic one, the source it resolved to).
        sources: The valid sources.
        generated: The source that generates its data (reads no ``input_path``).
    """
    if source not in sources:
        raise not_one_of(params.field_path("source"), source, sources)
    key = params.field_path("source")
    if source == generated:
        for name in ("input_path", "tfds_name"):
            value = getattr(params, name)
            if value:
                closest = "tfrecord" if name == "tfds_name" else guess_source(value, sources)
                raise ConfigError(
                    f"{params.field_path(name)} ({value!r}) is never read: {key} is "
                    f"'{generated}' (generated data); set {key}={closest} to read it, or "
                    f"unset {name}", key=params.field_path(name))
        return
    if params.tfds_name and source != "tfrecord":
        raise ConfigError(
            f"{params.field_path('tfds_name')} is read by source 'tfrecord' only ({key} is "
            f"'{source}'); set {key}=tfrecord", key=params.field_path("tfds_name"))
    if not params.input_path and not (source == "tfrecord" and params.tfds_name):
        names = "input_path (or tfds_name)" if source == "tfrecord" else "input_path"
        raise ConfigError(
            f"{params.field_path('input_path')} is required when {key} is '{source}'; set "
            f"{names}, or {key}={generated} for the generated data",
            key=params.field_path("input_path"))


def auto_source(params: DataConfig, files: str, suffix: str) -> str:
    """The source an empty ``source`` means: ``shapes`` without data keys, else ``files``.

    Refuses (naming ``source``) an ``input_path`` that does not look like ``files``' input
    (``suffix``: the file ending it takes; empty: one folder) rather than misread it.
    """
    key = params.field_path("source")
    if params.tfds_name:
        raise ConfigError(f"{params.field_path('tfds_name')} needs {key}=tfrecord",
                          key=params.field_path("tfds_name"))
    path = params.input_path
    if not path:
        return "shapes"
    paths = [p.strip() for p in (path if isinstance(path, list) else path.split(",")) if p.strip()]
    looks = all(p.lower().endswith(suffix) for p in paths) if suffix else (
        len(paths) == 1 and not any(c in paths[0] for c in "*?[") and "tfrecord" not in paths[0])
    if looks:
        return files
    wanted = f"a {suffix} file" if suffix else "one folder"
    raise ConfigError(
        f"{params.field_path('input_path')} ({path!r}) is not {wanted} as source '{files}' "
        f"reads; set {key}=tfrecord for TFRecord shards, or {key}={files}", key=key)
