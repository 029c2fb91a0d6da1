#!/usr/bin/env python3
"""Lists the C++ functions longer than a limit (default 80 lines), longest first.

  scripts/long_functions.py [--max N] PATH...   (files or folders; .h and .cpp)

A function is a brace block opened at namespace or class level whose head has a parameter
list; its length is the lines from the head's first line to the closing brace. A reason for
a long function is written beside it in a comment; this script only counts. A heuristic over
text (comments and literals stripped), not a parser: good enough for ferry's formatted tree.
"""
import argparse
import pathlib
import re
import sys

CONTAINER = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|^\s*extern\s+\"C\"")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try)\b")


def strip(text):
    """Blanks comments, string and character literals (raw strings too), keeping newlines."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * max(0, j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    text = strip(path.read_text(errors="replace"))
    stack = []  # per open brace: "container", "function", "other"
    head_start = 0  # offset where the current statement began
    found = []
    for i, c in enumerate(text):
        if c == "{":
            head = text[head_start:i]
            in_function = any(k == "function" for k, _, _ in stack)
            kind = "other"
            if not in_function:
                h = head.strip()
                if CONTAINER.search(h):
                    kind = "container"
                elif "(" in h and not CONTROL.match(h) and not h.endswith("=") and "=" not in h.split("(")[0]:
                    kind = "function"
            start_line = text.count("\n", 0, head_start + len(head) - len(head.lstrip())) + 1
            stack.append((kind, start_line, h if kind == "function" else ""))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, start_line, h = stack.pop()
                if kind == "function":
                    end_line = text.count("\n", 0, i) + 1
                    name = re.findall(r"([~\w:<>]+)\s*\(", h)
                    found.append((end_line - start_line + 1, start_line, name[0] if name else h[:40]))
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return found


SKIP_DIRS = {"node_modules", "build", "build-fuzz"}  # not ferry's sources


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--max", type=int, default=80)
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    files = []
    for p in map(pathlib.Path, args.paths):
        if not p.is_dir():
            files.append(p)
            continue
        files += sorted(x for x in p.rglob("*")
                        if x.suffix in (".h", ".cpp") and not SKIP_DIRS.intersection(x.parts))
    rows = []
    for f in files:
        for lines, line, name in functions(f):
            if lines > args.max:
                rows.append((lines, f"{f}:{line}", name))
    for lines, where, name in sorted(rows, reverse=True):
        print(f"{lines:5d}  {where}  {name}")
    print(f"{len(rows)} functions over {args.max} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
