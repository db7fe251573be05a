"""Rewrite the help blocks in docs/commands.md from the installed CLI (run after changing help).

Each `## \\`nccl-launch CMD\\`` section's first ```text block is the output of
`nccl-launch CMD --help` at 80 columns; tests/test_cli.py fails when they differ.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REFERENCE = Path(__file__).with_name("commands.md")
SECTION = re.compile(r"(## `nccl-launch (\S+)`\n\n```text\n)(.*?)(```)", re.DOTALL)


def current_help(command: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "nccl_launch", command, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "80"},
    )
    return result.stdout


def main() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    text = SECTION.sub(lambda m: m.group(1) + current_help(m.group(2)) + m.group(4), text)
    REFERENCE.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
