#!/usr/bin/python3
"""Instructions per iteration of one Google Benchmark function, from a callgrind output file.

The cost of the benchmark function (its own and its callees') divided by how many times a
function that runs once per iteration was called (callgrind counts calls exactly), so the
warm-up and calibration runs drop out of the figure. Load-independent, unlike the CPU time.

  valgrind --tool=callgrind --callgrind-out-file=cg.out build/bench/ferry_frontend_bench \\
      --benchmark_filter='^BM_RequestChat$' --benchmark_min_time=1
  bench/callgrind_per_iteration.py cg.out BM_RequestChat 'gateway::parse_request('

Standard library only.
"""

import re
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, bench, once = sys.argv[1:]
    names = {}

    def name_of(token):
        m = re.match(r"\((\d+)\)(?: (.*))?", token)
        if not m:
            return token
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), token)

    cost = 0  # of the benchmark function: its own lines and its calls
    calls = 0  # of the once-per-iteration function, from anywhere
    fn = cfn = ""
    pending = None  # the count of a `calls=` line, whose cost line follows
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("fn="):
                fn = name_of(line[3:])
            elif line.startswith("cfn="):
                cfn = name_of(line[4:])
            elif line.startswith("calls="):
                pending = int(line[6:].split()[0])
            elif line and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                ir = int(parts[1]) if len(parts) > 1 else 0
                if pending is not None:
                    if once in cfn:
                        calls += pending
                    pending = None
                if bench in fn:
                    cost += ir
    if calls == 0:
        sys.exit(f"no call of a function named like {once!r}")
    print(f"{bench}: {cost / calls:,.0f} instructions per iteration ({calls} iterations)")


if __name__ == "__main__":
    main()
