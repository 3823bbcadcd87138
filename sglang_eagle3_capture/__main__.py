"""``python -m sglang_eagle3_capture``: the same command line as ``sglang-eagle3-capture``."""
import sys

from .doctor.cli import main

if __name__ == "__main__":
    sys.exit(main())
