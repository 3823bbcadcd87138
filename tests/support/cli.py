"""Running the command line in-process, as the console script does, and capturing what it prints."""

from __future__ import annotations

from sglang_eagle3_capture.doctor import cli


def run(capsys, *argv) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of ``sglang-eagle3-capture ARGV...`` (arguments passed through ``str``)."""
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err
