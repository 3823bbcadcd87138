"""Command line: ``sglang-eagle3-capture``."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sglang-eagle3-capture")
    parser.parse_args(argv)
    return 0
