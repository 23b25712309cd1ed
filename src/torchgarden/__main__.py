"""``python -m torchgarden``."""

import sys

from torchgarden.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
