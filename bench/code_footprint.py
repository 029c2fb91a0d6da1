#!/usr/bin/python3
"""The code a profiled window executed: distinct 64-byte instruction lines, per object file.

Reads a callgrind output file written with `--dump-instr=yes --dump-line=no` (so that each
cost line starts with an instruction address) and counts the cache lines of code that ran at
least one instruction in the profile's window, per object (the executable, libc, SQLite...).
When every request of the window is alike, this is about the code one request runs: which
parts of the program a request goes through, and how much code (bench/README.md, issue 17
session 29: at 200 req/s the user time followed the instruction count, not this figure).

  bench/code_footprint.py cg.out [TOP]

TOP (default 0): also list the TOP functions with the most lines.
full_callgrind.sh and nginx_callgrind.sh run it with CALLGRIND_FOOTPRINT=1. Standard library only.
"""

import collections
import re
import sys

LINE = 64
NAME_LINE = re.compile(r"(c?)(ob|fn)=(.*)")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) == 3 else 0
    tables = collections.defaultdict(dict)  # compressed names, by kind (ob, fn)

    def name_of(kind, token):
        m = re.match(r"\((\d+)\)(?: (.*))?", token.strip())
        if not m:
            return token.strip()
        if m.group(2) is not None:
            tables[kind][m.group(1)] = m.group(2)
        return tables[kind].get(m.group(1), token.strip())

    lines = collections.defaultdict(set)  # object -> line numbers
    by_function = collections.Counter()  # function -> lines first seen in it
    seen = set()
    obj = fn = None
    address = 0
    call_site = False  # the line after calls= holds a call's inclusive cost, not its own
    saw_addresses = False
    cost_field = 1  # after the positions (the address, and the line when dumped)
    with open(sys.argv[1], errors="replace") as f:
        for raw in f:
            if raw.startswith("positions:"):
                positions = raw.split()[1:]
                saw_addresses = positions[:1] == ["instr"]
                cost_field = len(positions)
                continue
            named = NAME_LINE.match(raw)
            if named:  # ob=, fn= set the current object or function; cob=, cfn= only name one
                callee, kind, token = named.groups()
                value = name_of(kind, token)
                if not callee:
                    obj, fn = (value, fn) if kind == "ob" else (obj, value)
                continue
            if raw.startswith("calls="):
                call_site = True
                continue
            first = raw[:1]
            if not (first.isdigit() or first in "+-*"):
                continue
            fields = raw.split()
            token = fields[0]
            if token == "*":
                pass
            elif token[0] == "+":
                address += int(token[1:], 0)
            elif token[0] == "-":
                address -= int(token[1:], 0)
            else:
                address = int(token, 0)
            if not call_site and len(fields) > cost_field and int(fields[cost_field]) > 0:
                line = address // LINE
                lines[obj].add(line)
                if (obj, line) not in seen:
                    seen.add((obj, line))
                    by_function[(obj, fn)] += 1
            call_site = False
    if not saw_addresses:
        sys.exit("code_footprint: the profile has no instruction addresses "
                 "(callgrind --dump-instr=yes)")
    total = 0
    for obj, s in sorted(lines.items(), key=lambda item: -len(item[1])):
        total += len(s)
        print(f"{len(s):7d} lines {len(s) * LINE / 1024:8.1f} KiB  {obj}")
    print(f"{total:7d} lines {total * LINE / 1024:8.1f} KiB  in all")
    if top:
        print(f"functions with the most lines (top {top}):")
        for (obj, fn), n in by_function.most_common(top):
            print(f"{n:7d} lines  {fn[:140]}")


if __name__ == "__main__":
    main()
