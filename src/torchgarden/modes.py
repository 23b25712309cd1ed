"""The run modes of ``run_experiment`` and the ``torchgarden`` command (torch-free)."""

from __future__ import annotations

from torchgarden.utils.suggest import did_you_mean

__all__ = ["MODES", "check_mode"]

MODES = (
    "train",
    "eval",
    "train_and_eval",
    "continuous_eval",
    "train_and_post_eval",
    "continuous_train_and_eval",
)


def check_mode(mode: str, *, flag: str = "mode") -> str:
    """Returns ``mode`` if it is one of ``MODES``.

    Args:
        mode: The requested mode.
        flag: How the caller names the setting in the message (``"--mode"`` on the
            command line). Defaults to ``"mode"``.

    Raises:
        ValueError: Naming the valid modes and the closest one.
    """
    if mode in MODES:
        return mode
    hint = did_you_mean(mode, MODES, cutoff=0.6)
    raise ValueError(f"{flag} '{mode}' is not one of {', '.join(MODES)}.{hint}")
