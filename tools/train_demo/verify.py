#!/usr/bin/python3
"""Checks a GGUF written by train_demo.py against ferry: reads the file back (weights and
vocabulary) with a GGUF reader of its own, then
  1. tokenization: ferry's token ids for held-out text and a chat equal this tool's BPE's;
  2. logits: ferry's next-token log-probabilities after a few prompts equal a numpy forward
     pass on the same weights (top-1 identical, max abs difference printed and bounded);
  3. the numpy held-out loss on the read-back weights (a layout mistake would show here).

  /usr/bin/python3 tools/train_demo/verify.py --model models/ferry-demo-2m.gguf \
      --ferry build/gateway/ferry --heldout var/train_demo/heldout.txt
"""

import argparse
import math
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_demo as td  # noqa: E402
import numpy as np  # noqa: E402


def read_gguf(path):
    buf = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("Q")
        s = buf[pos:pos + n].decode()
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q",
              12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert buf[:4] == b"GGUF"
    pos = 4
    version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    assert version == 3
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("I")
        dims = [take("Q") for _ in range(nd)]
        infos.append((name, dims, take("I"), take("Q")))
    align = kv.get("general.alignment", 32)
    data = pos + (-pos) % align
    tensors = {}
    for name, dims, typ, off in infos:
        dt = {0: np.float32, 1: np.float16}[typ]
        n = int(np.prod(dims))
        a = np.frombuffer(buf, dt, n, data + off).reshape(list(reversed(dims)))
        tensors[name] = a.astype(np.float32)
    return kv, tensors


def load(path):
    kv, t = read_gguf(path)
    a = kv["general.architecture"]
    c = td.Config(n_vocab=len(kv["tokenizer.ggml.tokens"]), dim=kv[a + ".embedding_length"],
                  n_layer=kv[a + ".block_count"], n_head=kv[a + ".attention.head_count"],
                  n_kv_head=kv[a + ".attention.head_count_kv"], ff=kv[a + ".feed_forward_length"],
                  ctx=kv[a + ".context_length"], theta=kv[a + ".rope.freq_base"],
                  eps=kv[a + ".attention.layer_norm_rms_epsilon"])
    p = {"tok": t["token_embd.weight"], "norm_f": t["output_norm.weight"]}
    for l in range(c.n_layer):
        for short, long in td.TENSOR_NAMES.items():
            p["%d.%s" % (l, short)] = t["blk.%d.%s.weight" % (l, long)]
    merges = [tuple(m.split(" ", 1)) for m in kv["tokenizer.ggml.merges"]]
    return c, p, td.Bpe(kv["tokenizer.ggml.tokens"], merges)


def ferry_ids(ferry, model, text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        out = subprocess.run([ferry, "tokenize", "--tokenizer", model, "--ids", f.name],
                             check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    return [int(x) for x in out.replace(",", " ").split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ferry", default="build/gateway/ferry")
    ap.add_argument("--heldout", required=True, help="heldout.txt written by train_demo.py")
    a = ap.parse_args()
    c, p, bpe = load(a.model)
    held = open(a.heldout).read()
    ok = True

    sample = held[:20000]
    mine, theirs = bpe.encode(sample), ferry_ids(a.ferry, a.model, sample)
    same = mine == theirs
    ok &= same
    print("tokenization of %d held-out bytes: %d tokens, ferry %s" %
          (len(sample), len(mine), "identical" if same else "DIFFERENT (%d tokens)" % len(theirs)))

    ids = np.array(bpe.encode(held), dtype=np.int32)
    loss = td.evaluate(p, c, ids, c.ctx)
    print("numpy held-out loss on the file's weights: %.3f nats/token (perplexity %.1f, "
          "vocabulary %d)" % (loss, math.exp(loss), c.n_vocab))

    prompts = ["<|im_start|>user\nWho made the heaven and the earth?<|im_end|>\n<|im_start|>assistant\n",
               "And the LORD said unto Moses,", "In the beginning", held[5000:5600]]
    worst = 0.0
    for text in prompts:
        pids = bpe.encode(text)[-c.ctx:]
        logits = td.forward(p, c, np.array([pids]))[0, -1].astype(np.float64)
        lp = logits - logits.max()
        lp -= math.log(np.exp(lp).sum())
        out = subprocess.run([a.ferry, "engine", "generate", "--model", a.model, "--prompt-ids",
                              ",".join(map(str, pids)), "--logprobs", "10", "--threads", "1"],
                             check=True, capture_output=True, text=True).stdout.split()
        fids = [int(x) for x in out[0::2]]
        flps = [float(x) for x in out[1::2]]
        diff = max(abs(flps[i] - lp[fids[i]]) for i in range(len(fids)))
        top1 = int(np.argmax(lp)) == fids[0]
        worst = max(worst, diff)
        ok &= top1 and diff < 2e-2
        print("prompt of %3d tokens: top-1 %s (%r), max |logprob diff| over ferry's top 10 %.2e" %
              (len(pids), "identical" if top1 else "DIFFERENT", bpe.tokens[fids[0]], diff))
    print("verify: %s" % ("OK" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
