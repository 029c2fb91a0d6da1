#!/usr/bin/python3
"""Writes the trained demo model at the size of a real one, with the same predictions.

The demo model (2 MB of F16 weights) sits in the CPU's caches, so its decode is bound by
arithmetic, not by memory, unlike every model people run; speculative decoding's gain depends on
that difference. This widens the feed-forward layers with units whose gate and up rows and down
columns are zero (silu(0) * 0 = 0, and a zero column adds +0 to every sum) and appends layers whose
attention output and down projections are zero (their other weights random, so they cost what
real layers cost): every added term is an exact +0, so ferry's logits on the padded file are the
demo model's bit for bit (checked by bench/speculative_bench.cpp's `identical` column and by
`ferry engine generate` on both files), while each token reads the whole padded file from memory.

    tools/train_demo/pad_demo.py models/ferry-demo-1m.gguf /tmp/demo-padded.gguf --ff 8192 --layers 32
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_demo as td  # noqa: E402
import verify  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--ff", type=int, default=8192, help="feed-forward width of every layer")
    ap.add_argument("--layers", type=int, default=32, help="layers in all")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    c, p, bpe = verify.load(a.src)
    if a.ff < c.ff or a.layers < c.n_layer:
        sys.exit("pad_demo: --ff and --layers must be at least the model's (%d, %d)" % (c.ff, c.n_layer))
    rng = np.random.default_rng(a.seed)
    extra = td.Config(n_vocab=c.n_vocab, dim=c.dim, n_layer=a.layers, n_head=c.n_head,
                      n_kv_head=c.n_kv_head, ff=a.ff, ctx=c.ctx, theta=c.theta, eps=c.eps)
    fresh = td.init_params(extra, rng)
    out = {"tok": p["tok"], "norm_f": p["norm_f"]}
    for l in range(a.layers):
        k = lambda short: "%d.%s" % (l, short)  # noqa: E731
        if l < c.n_layer:
            for short in ("an", "q", "k", "v", "o", "fn"):
                out[k(short)] = p[k(short)]
            out[k("g")] = np.zeros((a.ff, c.dim), np.float32)
            out[k("u")] = np.zeros((a.ff, c.dim), np.float32)
            out[k("d")] = np.zeros((c.dim, a.ff), np.float32)
            out[k("g")][:c.ff] = p[k("g")]
            out[k("u")][:c.ff] = p[k("u")]
            out[k("d")][:, :c.ff] = p[k("d")]
        else:
            for short in ("an", "q", "k", "v", "fn", "g", "u"):
                out[k(short)] = fresh[k(short)]
            out[k("o")] = np.zeros_like(fresh[k("o")])
            out[k("d")] = np.zeros_like(fresh[k("d")])
    meta = {"name": "ferry-demo-1m padded to %d layers x ff %d" % (a.layers, a.ff),
            "description": "the trained ferry demo model with zero-effect padding (pad_demo.py)"}
    td.write_gguf(a.dst, extra, out, bpe, meta)
    print("wrote %s (%.1f MB)" % (a.dst, os.path.getsize(a.dst) / 1e6))


if __name__ == "__main__":
    main()
