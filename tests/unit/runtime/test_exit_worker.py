"""``distribute.exit_worker``: the status given, output flushed, no interpreter teardown."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import atexit, logging, sys
from torchgarden.distribute import exit_worker
atexit.register(lambda: print("interpreter exit ran"))
logging.basicConfig(stream=sys.stderr, format="%(message)s")
logging.getLogger("w").warning("logged")
print("unflushed stdout", end="")
sys.stderr.write("unflushed stderr")
exit_worker(7)
print("after exit_worker")
"""


def test_exit_worker_flushes_and_exits_without_the_interpreters_teardown():
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 7
    assert done.stdout == "unflushed stdout"  # Flushed; atexit and later code never ran.
    assert done.stderr == "logged\nunflushed stderr"
