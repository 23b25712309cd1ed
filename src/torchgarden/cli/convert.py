"""``torchgarden convert CHECKPOINT --output DIR``: a sharded (DCP) checkpoint as one file.

Writes ``DIR/<name>-<N>/`` (``state.pt`` + ``meta.json``): what one process would have
saved at that step, for ``torch.load``, inspection or training on without DCP. Runs in
one process and needs memory for the whole state.
"""

from __future__ import annotations

import argparse
import os

__all__ = ["COMMANDS", "add_parser", "command_convert"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds the ``convert`` subcommand to ``sub``."""
    convert = sub.add_parser(
        "convert", help="write a sharded (DCP) checkpoint as a single state.pt checkpoint.")
    convert.add_argument("checkpoint", metavar="CHECKPOINT",
                         help="a checkpoint directory written with "
                              "trainer.checkpoint_format=dcp, e.g. runs/x/ckpt-1000.")
    convert.add_argument("--output", required=True, metavar="DIR",
                         help="where to write <name>-<N>/ (created if missing).")


def command_convert(args: argparse.Namespace) -> int:
    """Converts (after verifying the source); prints the new checkpoint's path."""
    from torchgarden.checkpoint import convert_to_single

    if not os.path.isdir(args.checkpoint):
        raise FileNotFoundError(f"CHECKPOINT {args.checkpoint} is not a directory; pass a "
                                "ckpt-<N> directory of a run.")
    path = convert_to_single(args.checkpoint, args.output)
    print(f"torchgarden: wrote {path}", flush=True)
    return 0


COMMANDS = {"convert": command_convert}
