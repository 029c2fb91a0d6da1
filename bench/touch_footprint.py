#!/usr/bin/env python3
"""The memory a server touches per request, from a valgrind lackey trace.

Reads, on stdin, the log of `valgrind --tool=lackey --trace-mem=yes --trace-sched=yes` (one
line per instruction and per data access, and the scheduler's "acquired lock" lines that say
which thread runs). The trace is split into wake-ups at each entry of the address of the
process's epoll_wait: at a low request rate every wake-up starts on cold caches, so the distinct
64-byte lines a wake-up touches are what it fetches from memory. bench/touch_footprint.sh runs it.

Counting starts at the first wake-up after the file GO exists and ends at the first after STOP
exists; the addresses come from the file ADDRS, read once it exists (the epoll_wait entry, and
the server's own text range, [lo, hi), by which data lines are attributed: a line touched in
a library is counted to the server's function that ran last on that thread).

  touch_footprint.py ADDRS GO STOP MAPS REQUESTS [TOP]
(MAPS: a copy of /proc/PID/maps; REQUESTS: a file that holds the requests counted, read
once the trace ends; ADDRS.binary: the server binary's path)
Prints, per request: the code and data lines and 4 KiB pages (summed over wake-ups), the data
lines by thread,
and the TOP (thread, function) pairs by data lines first touched in a wake-up, then by code
lines (a function's own, or the library code it called).
"""
import bisect
import collections
import os
import re
import subprocess
import sys


def wait_for_addresses(stream, path):
    """Skips the trace until `path` exists (checked every 1M lines): startup is not counted."""
    n = 0
    for _ in stream:
        n += 1
        if n % 1000000 == 0 and os.path.exists(path):
            return [int(x, 16) for x in open(path).read().split()]
    return None


def count(stream, wake, lo, hi, go, stop):
    counting = False
    wakeups = code_sum = data_sum = code_pages_sum = data_pages_sum = 0
    code, data = set(), set()
    code_pages, data_pages = set(), set()  # 4 KiB pages: what the TLB has to map
    by_thread = collections.Counter()
    by_caller = collections.Counter()  # (thread, server address) -> data lines
    code_at = collections.Counter()  # (thread, server address, in the server) -> code lines
    thread, last = 1, {}  # the running thread; each thread's last address in the server's text
    for line in stream:
        kind = line[0:1]
        if kind == b'I':
            addr = int(line[3:line.index(b',')], 16)
            if addr == wake:
                if counting:
                    wakeups += 1
                    code_sum += len(code)
                    data_sum += len(data)
                    code_pages_sum += len(code_pages)
                    data_pages_sum += len(data_pages)
                    if os.path.exists(stop):
                        break
                elif os.path.exists(go):
                    counting = True
                code, data = set(), set()
                code_pages, data_pages = set(), set()
            if counting:
                inside = lo <= addr < hi
                if inside:
                    last[thread] = addr
                if addr >> 6 not in code:
                    code.add(addr >> 6)
                    code_pages.add(addr >> 12)
                    code_at[(thread, addr if inside else last.get(thread, 0), inside)] += 1
        elif kind == b' ':
            if counting:
                line_no = int(line[3:line.index(b',')], 16) >> 6
                if line_no not in data:
                    data.add(line_no)
                    data_pages.add(line_no >> 6)
                    by_thread[thread] += 1
                    by_caller[(thread, last.get(thread, 0))] += 1
        elif kind == b'-' and b'acquired lock' in line:
            at = line.index(b'SCHED[') + 6
            thread = int(line[at:line.index(b']', at)])
    pages = (code_pages_sum, data_pages_sum)
    return wakeups, code_sum, data_sum, pages, by_thread, by_caller, code_at


def symbolizer(maps_path, binary_path):
    """Address -> the server's function (nm -C of its binary, at its load base)."""
    base = None
    for line in open(maps_path):
        fields = line.split()
        if len(fields) >= 6 and fields[5] == binary_path and int(fields[2], 16) == 0:
            base = int(fields[0].split('-')[0], 16)
            break
    out = subprocess.run(['nm', '-C', '--defined-only', binary_path], capture_output=True,
                         text=True).stdout
    table = []
    for entry in out.splitlines():
        m = re.match(r'([0-9a-f]+) [tTwW] (.*)', entry)
        if m:
            table.append((int(m.group(1), 16), m.group(2)))
    table.sort()

    def name(addr):
        if addr == 0 or base is None:
            return '(no server code yet on this thread)'
        i = bisect.bisect_right(table, (addr - base, '\uffff')) - 1
        return table[i][1] if i >= 0 else '?'
    return name


def main():
    addrs_path, go, stop, maps_path, requests_path = sys.argv[1:6]
    top = int(sys.argv[6]) if len(sys.argv) > 6 else 40
    stream = sys.stdin.buffer
    addrs = wait_for_addresses(stream, addrs_path)
    if addrs is None:
        sys.exit('touch_footprint: the trace ended before the addresses were given')
    wake, lo, hi = addrs[:3]
    binary = open(addrs_path + '.binary').read().strip()
    wakeups, code_sum, data_sum, pages, by_thread, by_caller, code_at = count(
        stream, wake, lo, hi, go, stop)
    for _ in stream:  # the rest of the trace, so that the traced process is not blocked
        pass
    requests = max(1, int(open(requests_path).read()))
    name = symbolizer(maps_path, binary)
    print(f'{requests} requests, {wakeups} wake-ups ({wakeups / requests:.2f} a request)')
    print(f'per request: {code_sum / requests:.0f} code lines, {data_sum / requests:.0f} data '
          f'lines (64 bytes; distinct in each wake-up, summed)')
    print(f'per request: {pages[0] / requests:.0f} code pages, {pages[1] / requests:.0f} data '
          f'pages (4 KiB; distinct in each wake-up, summed)')
    for thread, lines in by_thread.most_common():
        print(f'  thread {thread}: {lines / requests:.1f} data lines a request')
    merged = collections.Counter()
    for (thread, addr), lines in by_caller.items():
        merged[(thread, name(addr))] += lines
    print(f'data lines a request by thread and by the server function that ran last there '
          f'(top {top}):')
    for (thread, fn), lines in merged.most_common(top):
        print(f'{lines / requests:8.1f}  T{thread} {fn[:150]}')
    code_fn = collections.Counter()
    for (thread, addr, inside), lines in code_at.items():
        code_fn[(thread, name(addr) if inside else '(library) via ' + name(addr))] += lines
    print(f'code lines a request by thread and by the server function they are in (or that '
          f'called the library they are in) (top {top}):')
    for (thread, fn), lines in code_fn.most_common(top):
        print(f'{lines / requests:8.1f}  T{thread} {fn[:150]}')


if __name__ == '__main__':
    main()
