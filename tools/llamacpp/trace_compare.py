#!/usr/bin/env python3
"""Compares ferry's forward-pass tensors with llama.cpp's, op by op, bit for bit.

    trace_compare.py LLAMA_DUMP_DIR FERRY_TRACE_DIR [--steps N] [--all]

LLAMA_DUMP_DIR comes from tools/llamacpp/llama_dump (every tensor of every llama_decode call);
FERRY_TRACE_DIR from a ferry run with FERRY_TRACE_DIR set (local_engine/kernels/trace.h), on the
same model, prompt ids and greedy steps. For each forward step and each traced tensor it prints
how many elements differ and the largest absolute difference; by default only up to the first
tensor that differs in each step (later ones inherit the difference).
"""
import struct
import sys
from collections import defaultdict


def read_floats(path):
    with open(path, "rb") as f:
        data = f.read()
    return struct.unpack("<%df" % (len(data) // 4), data)


def load_llama(d):
    """step -> list of (ferry_name, layer, file) in graph order."""
    steps = defaultdict(list)
    fa_count = defaultdict(int)
    after_attn = False
    with open(d + "/index.txt") as f:
        for line in f:
            parts = line.split()
            step, fn, op = int(parts[0]), parts[-1], parts[-7]
            name = " ".join(parts[1:-7])
            base, _, layer = name.rpartition("-")
            if not layer.isdigit():
                base, layer = name, "-1"
            layer = int(layer)
            key = None
            if op == "FLASH_ATTN_EXT":
                key = ("attn", fa_count[step])
                fa_count[step] += 1
                after_attn = True
            elif op == "MUL_MAT" and after_attn:  # the output projection (unnamed in qwen graphs)
                key = ("attn_out", fa_count[step] - 1)
                after_attn = False
            elif base in ("Qcur_normed", "Kcur_normed") and op == "MUL":
                key = (base[:4], layer)
            elif op == "ROPE" and base in ("Qcur", "Kcur"):
                key = (base[0] + "rope", layer)
            elif base in ("Qcur", "Kcur", "Vcur") and op in ("MUL_MAT", "ADD", "MUL"):
                key = (base, layer)  # the last such op wins: after bias / head norm
            elif op == "GET_ROWS" and base == "embd":
                key = ("embd", -1)
            elif base in ("attn_norm", "attn_out", "ffn_inp", "ffn_norm", "ffn_gate", "ffn_up",
                          "ffn_swiglu", "ffn_out", "l_out") and op not in ("VIEW", "RESHAPE",
                                                                           "GET_ROWS"):
                key = (base, layer)
            elif name in ("result_norm", "result_output"):
                key = (name, -1)
            if key is None:
                continue
            steps[step] = [e for e in steps[step] if e[:2] != key] + [(key[0], key[1], d + "/" + fn)]
    return steps


def load_ferry(d):
    steps = defaultdict(dict)
    with open(d + "/index.txt") as f:
        for line in f:
            step, name, layer, rows, cols, fn = line.split()
            steps[int(step)][(name, int(layer))] = (int(rows), int(cols), d + "/" + fn)
    return steps


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_all = "--all" in sys.argv
    llama, ferry = load_llama(args[0]), load_ferry(args[1])
    identical_steps = 0
    for step in sorted(llama):
        lines, n_same, first_bad = [], 0, None
        for name, layer, lfile in llama[step]:
            fkey = (name, layer)
            if fkey not in ferry.get(step, {}):
                continue
            rows, cols, ffile = ferry[step][fkey]
            a = read_floats(lfile)
            b = read_floats(ffile)
            if len(a) != len(b):
                if len(a) % cols == 0 and len(a) < len(b):
                    b = b[len(b) - len(a):]  # llama.cpp keeps only the output rows here
                else:
                    lines.append("  %-12s %2d size %d vs %d" % (name, layer, len(a), len(b)))
                    continue
            bad = [i for i in range(len(a)) if struct.pack("<f", a[i]) != struct.pack("<f", b[i])]
            maxd = max((abs(a[i] - b[i]) for i in bad), default=0.0)
            scale = max((abs(x) for x in a), default=0.0)
            lines.append("  %-13s %2d  %6d/%-6d differ  max diff %.3g (max |x| %.3g)%s" % (
                name, layer, len(bad), len(a), maxd, scale,
                "  first at %d: %r vs %r" % (bad[0], a[bad[0]], b[bad[0]]) if bad else ""))
            if not bad:
                n_same += 1
            elif first_bad is None:
                first_bad = len(lines) - 1
        if first_bad is None:
            identical_steps += 1
            print("step %d: all %d tensors identical" % (step, n_same))
            if show_all:
                print("\n".join(lines))
        else:
            print("step %d: %d tensors identical, then:" % (step, first_bad))
            print("\n".join(lines if show_all else lines[first_bad:first_bad + 1]))
    print("%d/%d steps bit-identical" % (identical_steps, len(llama)))

if __name__ == "__main__":
    main()
