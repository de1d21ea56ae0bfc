"""The README's repository map says only what is true: every folder (`name/`) and file
(`name.ext`) it names exists, relative to the top-level folder of its line; every top-level
folder git tracks is listed; and what it marks `(planned: ...)` does not exist yet (once it does,
the README must say so). Also: every command block of the README carries a marker saying whether
tests/docs/test_readme_commands.py runs it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()

# A folder ("name/", "a/b/"), a file with an extension the map uses, or a Dockerfile.
TOKEN = re.compile(r"(?<![\w./`-])([A-Za-z_][\w.-]*(?:/[\w.-]+)*/"
                   r"|[A-Za-z_][\w-]*\.(?:cc|md|sh|py|yaml)|Dockerfile(?:\.\w+)?)(?![\w`])")


def map_block() -> list[str]:
    section = README.split("## Repository map", 1)[1]
    body = section.split("```", 2)[1]
    return [line for line in body.splitlines()[1:] if line.strip()]


def entries() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """({top folder: named paths}, {top folder: planned paths}) from the map."""
    named: dict[str, list[str]] = {}
    planned: dict[str, list[str]] = {}
    top = None
    for line in map_block():
        if not line.startswith(" "):
            top, _, line = line.partition(" ")
            assert top.endswith("/"), f"a map line starts with its folder: {top!r}"
            named.setdefault(top, [])
        assert top is not None
        for part, target in ((p, planned) for p in re.findall(r"\(planned: ([^)]*)\)", line)):
            target.setdefault(top, []).extend(TOKEN.findall(part))
        line = re.sub(r"\(planned: [^)]*\)", "", line)
        line = re.sub(r"`[^`]*`", "", line)  # code spans name commands, not paths
        named[top].extend(TOKEN.findall(line))
    return named, planned


def test_every_named_path_exists():
    named, _ = entries()
    assert len(named) >= 10, named
    missing = []
    for top, paths in named.items():
        if not (REPO / top).is_dir():
            missing.append(top)
        for p in paths:
            if not (REPO / top / p).exists():
                missing.append(top + p)
    assert not missing, f"the README's repository map names what does not exist: {missing}"


def test_every_top_level_folder_is_listed():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    folders = {f.split("/", 1)[0] + "/" for f in tracked if "/" in f and not f.startswith(".")}
    named, _ = entries()
    assert folders <= set(named), f"not in the map: {sorted(folders - set(named))}"


def test_planned_entries_do_not_exist_yet():
    _, planned = entries()
    landed = [top + p for top, paths in planned.items() for p in paths if (REPO / top / p).exists()]
    assert not landed, (f"{landed} exist now: list them in the README's map without "
                        "'(planned: ...)'")


def test_every_command_block_is_marked():
    """A fenced sh/python block is preceded by <!-- runnable --> or <!-- not runnable: why -->."""
    lines = README.splitlines()
    unmarked = []
    for i, line in enumerate(lines):
        if re.fullmatch(r"```(sh|bash|python|console)", line.strip()):
            before = lines[i - 1].strip() if i else ""
            if not re.fullmatch(r"<!-- (runnable|not runnable: .+) -->", before):
                unmarked.append(f"README.md:{i + 1}: {line}")
    assert not unmarked, unmarked
    assert README.count("<!-- runnable -->") >= 5
