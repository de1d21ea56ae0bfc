"""`kilnd --help` lists every flag kilnd defines (absl's default --help matched none: it looks for
flags in a file named after the binary). The flag names are read from server/main's sources, so
a flag added there is checked without touching this test."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

MAIN = Path(__file__).resolve().parents[2] / "server" / "main"


def defined_flags() -> list[str]:
    names = []
    for source in sorted(MAIN.glob("*.cc")):
        names += re.findall(r"ABSL_FLAG\(\s*[^,]+?,\s*(\w+)\s*,", source.read_text())
    assert len(names) >= 20, names  # the regex still reads server/main
    return names


def test_kilnd_help_lists_every_flag():
    out = subprocess.run([os.environ["KILND"], "--help"], capture_output=True, text=True,
                         timeout=30)
    text = out.stdout + out.stderr
    assert "No flags matched" not in text, text
    assert text.startswith("kilnd: kilnd --model-repository DIR"), text[:200]
    missing = [f for f in defined_flags() if f"--{f} (" not in text]
    assert not missing, f"kilnd --help does not list {missing}:\n{text}"
