"""Text that ships with every Python: the standard library's source files, split by file.

The files are found under the running interpreter's ``stdlib`` directory (``sysconfig``),
without ``site-packages`` and test directories; each file goes to validation when the
CRC-32 of its relative path falls below ``validation_percent`` out of 100, so the split
is the same on every machine and run, and no file is in both splits.

Example:
    >>> corpus = read_corpus(python_stdlib_root(), split="validation")
    >>> corpus.num_files > 10 and corpus.data.dtype.name == "uint8"
    True
"""

from __future__ import annotations

import dataclasses
import pathlib
import sysconfig
import zlib
from collections.abc import Sequence

import numpy as np

__all__ = ["Corpus", "list_files", "python_stdlib_root", "read_corpus", "split_of"]

#: Directories left out of the corpus (installed packages, tests, caches).
EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__", "test", "tests",
                           "idle_test"})
_SPLITS = ("train", "validation")


@dataclasses.dataclass(frozen=True)
class Corpus:
    """The bytes of one split.

    Attributes:
        data: Every file's bytes, concatenated in path order (``uint8``).
        num_files: How many files ``data`` holds.
        root: The directory the files were read from.
    """

    data: np.ndarray
    num_files: int
    root: str


def python_stdlib_root() -> str:
    """The running interpreter's standard-library directory."""
    return sysconfig.get_paths()["stdlib"]


def list_files(root: str | pathlib.Path, pattern: str = "*.py") -> list[pathlib.Path]:
    """Files under ``root`` matching ``pattern``, outside `EXCLUDED_DIRS`, sorted.

    Raises:
        FileNotFoundError: ``root`` is not a directory, or no file matches.
    """
    base = pathlib.Path(root)
    if not base.is_dir():
        raise FileNotFoundError(f"text corpus directory {str(base)!r} does not exist.")
    files = sorted(p for p in base.rglob(pattern)
                   if p.is_file() and not EXCLUDED_DIRS & set(p.relative_to(base).parts[:-1]))
    if not files:
        raise FileNotFoundError(f"no {pattern!r} files under {str(base)!r}.")
    return files


def split_of(relative_path: str, validation_percent: float) -> str:
    """``"validation"`` or ``"train"`` for a file, from the CRC-32 of its relative path."""
    bucket = zlib.crc32(relative_path.replace("\\", "/").encode("utf-8")) % 10_000
    return "validation" if bucket < validation_percent * 100 else "train"


def read_corpus(root: str, *, split: str, pattern: str = "*.py",
                validation_percent: float = 5.0, max_bytes: int = 0) -> Corpus:
    """Reads the bytes of ``split`` (``train`` or ``validation``) of the files under ``root``.

    Args:
        root: The directory (`python_stdlib_root` for the standard library).
        split: ``train`` or ``validation``.
        pattern: File-name pattern. Defaults to ``*.py``.
        validation_percent: Share of files in validation, in percent. Defaults to 5.0.
        max_bytes: Keep only the first this many bytes; 0 keeps all. Defaults to 0.

    Raises:
        ValueError: ``split`` is unknown or it holds no file.
        FileNotFoundError: See `list_files`.
    """
    if split not in _SPLITS:
        raise ValueError(f"text corpus split must be one of {_SPLITS}, got {split!r}.")
    base = pathlib.Path(root)
    chosen: Sequence[pathlib.Path] = [
        p for p in list_files(base, pattern)
        if split_of(p.relative_to(base).as_posix(), validation_percent) == split]
    if not chosen:
        raise ValueError(f"the {split} split of {str(base)!r} holds no file; change "
                         f"validation_percent ({validation_percent}).")
    data = np.frombuffer(b"".join(p.read_bytes() for p in chosen), dtype=np.uint8)
    if max_bytes:
        data = data[:max_bytes]
    return Corpus(data=data, num_files=len(chosen), root=str(base))
