#!/usr/bin/python3
"""Checks that ferry's modules depend on each other one way only.

The allowed edges are the module table of docs/ARCHITECTURE.md (the rows between the
`modules:begin` and `modules:end` markers): a folder, what it owns, and the folders it may
include. Every `#include "..."` line of every module folder, and every ferry_* library a module's
CMakeLists.txt links, must point at the module itself or at one it may include; each backward
edge is reported as file:line. Exit status 1 when there is one, 2 when the table is unreadable.
Standard library only (runs before anything is installed).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "ARCHITECTURE.md"
SOURCE_SUFFIXES = {".h", ".cpp", ".inc", ".in"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
LINK = re.compile(r"\b(ferry_[a-z_0-9]+)\b")
# Libraries every module may link: compile options, generated data targets.
NEUTRAL_LIBRARIES = {"ferry_options", "ferry_tokenizer_data"}


def read_table():
    """Returns {module folder: set of folders it may include}."""
    text = TABLE.read_text(encoding="utf-8")
    try:
        body = text.split("<!-- modules:begin -->", 1)[1].split("<!-- modules:end -->", 1)[0]
    except IndexError:
        sys.exit(f"{TABLE}: no <!-- modules:begin --> ... <!-- modules:end --> table")
    allowed = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`").rstrip("/")
        allowed[folder] = {d.rstrip("/") for d in re.findall(r"`([^`]+)`", cells[-1])}
    if not allowed:
        sys.exit(f"{TABLE}: the module table has no rows")
    for folder, deps in allowed.items():
        unknown = deps - set(allowed) - {"*"}
        if unknown:
            sys.exit(f"{TABLE}: {folder} may include unknown modules {sorted(unknown)}")
    return allowed


def module_of(path, modules):
    """The longest module folder that holds `path` (a path relative to the root), or None."""
    best = None
    for folder in modules:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def library_modules(modules):
    """{ferry_x library: module folder} from each module's add_library line."""
    owners = {}
    for folder in modules:
        cmake = ROOT / folder / "CMakeLists.txt"
        if cmake.exists():
            for name in re.findall(r"add_library\((ferry_[a-z_0-9]+)", cmake.read_text()):
                owners[name] = folder
    return owners


def allows(module, target, allowed):
    return target == module or target in allowed[module] or "*" in allowed[module]


def main():
    allowed = read_table()
    problems = []
    for folder in sorted(allowed):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(ROOT).as_posix()
            module = module_of(rel, allowed)
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            for number, line in enumerate(lines, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                included = match.group(1)
                if "/" not in included:  # beside the file: its own module
                    continue
                target = module_of(included, allowed)
                if target is None or allows(module, target, allowed):
                    continue
                problems.append(f"{rel}:{number}: {module} must not include {target} "
                                f"(\"{included}\"); allowed: {sorted(allowed[module]) or 'none'}")
    owners = library_modules(allowed)
    for folder in sorted(allowed):
        cmake = ROOT / folder / "CMakeLists.txt"
        if not cmake.exists():
            continue
        for number, line in enumerate(cmake.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            for name in LINK.findall(line):
                target = owners.get(name)
                if name in NEUTRAL_LIBRARIES or target is None or allows(folder, target, allowed):
                    continue
                problems.append(f"{cmake.relative_to(ROOT)}:{number}: {folder} must not link "
                                f"{name} ({target})")
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_includes: {len(problems)} backward edge(s); the allowed edges are the "
              f"module table of docs/ARCHITECTURE.md", file=sys.stderr)
        return 1
    print(f"check_includes: {len(allowed)} modules, every include and link points one way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
