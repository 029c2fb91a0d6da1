#!/usr/bin/python3
"""Trains ferry's demo model: a few-million-parameter llama-architecture GGUF on the King James
Bible (public domain; Debian packages bible-kjv and bible-kjv-text), with a byte-level BPE
vocabulary trained on the same text and a ChatML chat template.

Everything is numpy with hand-written backprop and AdamW; `--check` runs a finite-difference
gradient check on a tiny configuration first. Training checkpoints to WORK/ckpt.npz every
--ckpt-every steps and resumes from it. Progress goes to stderr: a percentage with an ETA on a
terminal, plain lines every 30 s otherwise.

  /usr/bin/python3 tools/train_demo/train_demo.py --work var/train_demo --out models/X.gguf

Needs: python3-numpy, bible-kjv (apt). See tools/train_demo/README.md.
"""

import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the machine is shared: one core's worth
import numpy as np  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}")
# GPT-2's split pattern (tokenizer.ggml.pre = "gpt2"), with \p{L} and \p{N} narrowed to ASCII:
# the corpus is pure ASCII (checked when it is read), so the split is the same as ferry's.
GPT2_SPLIT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------- corpus

def read_kjv():
    """One string per verse, in canonical order (31,102 verses), from the bible-kjv package."""
    try:
        out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], check=True, capture_output=True,
                             cwd="/tmp").stdout.decode("ascii")
    except FileNotFoundError:
        sys.exit("train_demo: the 'bible' program is missing: apt-get install bible-kjv")
    verses = []
    for line in out.splitlines():
        m = re.match(r"^\S+\d+:\d+ (.*)$", line)
        if m:
            verses.append(m.group(1).strip())
    if len(verses) != 31102:
        sys.exit("train_demo: expected 31102 verses from 'bible', got %d" % len(verses))
    return verses


def split_corpus(verses):
    """Every 50th verse block of 10 is held out (for the perplexity figure and the test)."""
    train, held = [], []
    for i in range(0, len(verses), 10):
        (held if (i // 10) % 50 == 49 else train).append(verses[i:i + 10])
    return train, held


def documents(blocks, rng):
    """The training text: for each block of consecutive verses, either a ChatML exchange (the
    user says one verse, the assistant answers with the next one or two) or plain text."""
    docs = []
    for block in blocks:
        i = 0
        while i < len(block):
            if rng.random() < 0.5 and i + 1 < len(block):
                n = 1 + int(rng.random() < 0.5)
                answer = " ".join(block[i + 1:i + 1 + n])
                docs.append("<|im_start|>user\n" + block[i] + "<|im_end|>\n<|im_start|>assistant\n" +
                            answer + "<|im_end|>\n")
                i += 1 + n
            else:
                n = 2 + int(rng.integers(0, 4))
                docs.append(" ".join(block[i:i + n]) + "<|endoftext|>")
                i += n
    return docs


# ---------------------------------------------------------------------------------- tokenizer

def bytes_to_unicode():
    """GPT-2's byte <-> printable code point table (how byte-level BPE stores token text)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class Bpe:
    def __init__(self, tokens, merges):
        self.tokens = tokens  # byte-level text, specials last
        self.merges = merges  # list of (a, b)
        self.rank = {m: i for i, m in enumerate(merges)}
        self.id = {t: i for i, t in enumerate(tokens)}
        self.b2u = bytes_to_unicode()
        self.cache = {}

    @staticmethod
    def train(text_pieces, n_vocab):
        b2u = bytes_to_unicode()
        counts = {}
        for piece in text_pieces:
            for w in GPT2_SPLIT.findall(piece):
                counts[w] = counts.get(w, 0) + 1
        words = [[b2u[b] for b in w.encode()] for w in counts]
        freq = list(counts.values())
        pairs, where = {}, {}
        for wi, w in enumerate(words):
            for p in zip(w, w[1:]):
                pairs[p] = pairs.get(p, 0) + freq[wi]
                where.setdefault(p, set()).add(wi)
        tokens = [b2u[b] for b in range(256)]
        merges = []
        n_merges = n_vocab - 256 - len(SPECIALS)
        while len(merges) < n_merges and pairs:
            best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
            if pairs[best] < 2:
                break
            merges.append(best)
            merged = best[0] + best[1]
            tokens.append(merged)
            for wi in list(where.get(best, ())):
                w, f = words[wi], freq[wi]
                for p in zip(w, w[1:]):
                    pairs[p] -= f
                    if pairs[p] == 0:
                        del pairs[p]
                    where[p].discard(wi)
                out, i = [], 0
                while i < len(w):
                    if i + 1 < len(w) and w[i] == best[0] and w[i + 1] == best[1]:
                        out.append(merged)
                        i += 2
                    else:
                        out.append(w[i])
                        i += 1
                words[wi] = out
                for p in zip(out, out[1:]):
                    pairs[p] = pairs.get(p, 0) + f
                    where.setdefault(p, set()).add(wi)
        return Bpe(tokens + SPECIALS, merges)

    def encode_word(self, w):
        got = self.cache.get(w)
        if got is not None:
            return got
        parts = [self.b2u[b] for b in w.encode()]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = self.rank.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        ids = [self.id[p] for p in parts]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        """Text with the special tokens matched first, as ferry does for a rendered template."""
        ids = []
        for seg in SPECIAL_SPLIT.split(text):
            if seg in SPECIALS:
                ids.append(self.id[seg])
            elif seg:
                for w in GPT2_SPLIT.findall(seg):
                    ids.extend(self.encode_word(w))
        return ids


# -------------------------------------------------------------------------------------- model

class Config:
    def __init__(self, n_vocab, dim=128, n_layer=4, n_head=4, n_kv_head=2, ff=384, ctx=256,
                 theta=10000.0, eps=1e-5):
        self.n_vocab, self.dim, self.n_layer, self.n_head = n_vocab, dim, n_layer, n_head
        self.n_kv_head, self.ff, self.ctx, self.theta, self.eps = n_kv_head, ff, ctx, theta, eps
        self.hd = dim // n_head

    def to_dict(self):
        return dict(self.__dict__)


def init_params(c, rng, dtype=np.float32):
    def w(rows, cols, scale=1.0):
        return (rng.standard_normal((rows, cols)) * scale / math.sqrt(cols)).astype(dtype)
    p = {"tok": (rng.standard_normal((c.n_vocab, c.dim)) * 0.05).astype(dtype),
         "norm_f": np.ones(c.dim, dtype)}
    out_scale = 1.0 / math.sqrt(2 * c.n_layer)
    for l in range(c.n_layer):
        p["%d.an" % l] = np.ones(c.dim, dtype)
        p["%d.q" % l] = w(c.n_head * c.hd, c.dim)
        p["%d.k" % l] = w(c.n_kv_head * c.hd, c.dim)
        p["%d.v" % l] = w(c.n_kv_head * c.hd, c.dim)
        p["%d.o" % l] = w(c.dim, c.n_head * c.hd, out_scale)
        p["%d.fn" % l] = np.ones(c.dim, dtype)
        p["%d.g" % l] = w(c.ff, c.dim)
        p["%d.u" % l] = w(c.ff, c.dim)
        p["%d.d" % l] = w(c.dim, c.ff, out_scale)
    return p


def rope_tables(c, T, dtype):
    """cos and sin (T, hd/2) of ggml's normal (llama) layout: pairs of adjacent elements."""
    inv = c.theta ** (-np.arange(0, c.hd, 2, dtype=np.float64) / c.hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


def rope(x, cos, sin):  # x (B, h, T, hd)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def rope_back(g, cos, sin):
    g0, g1 = g[..., 0::2], g[..., 1::2]
    out = np.empty_like(g)
    out[..., 0::2] = g0 * cos + g1 * sin
    out[..., 1::2] = -g0 * sin + g1 * cos
    return out


def rmsnorm(x, w, eps):
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * r * w, r


def rmsnorm_back(g, x, w, r):
    xn = x * r
    dw = np.sum(g * xn, axis=tuple(range(g.ndim - 1)))
    gx = g * w
    dx = r * (gx - xn * np.mean(gx * xn, axis=-1, keepdims=True))
    return dx, dw


def forward(p, c, ids, targets=None):
    """Logits (B, T, V); with targets also the mean cross-entropy and the gradients."""
    B, T = ids.shape
    dt = p["tok"].dtype
    cos, sin = rope_tables(c, T, dt)
    mask = np.triu(np.full((T, T), -1e9, dt), 1)
    grp = c.n_head // c.n_kv_head
    x = p["tok"][ids]
    caches = []
    for l in range(c.n_layer):
        L = "%d." % l
        h, r1 = rmsnorm(x, p[L + "an"], c.eps)
        q = (h @ p[L + "q"].T).reshape(B, T, c.n_head, c.hd).transpose(0, 2, 1, 3)
        k = (h @ p[L + "k"].T).reshape(B, T, c.n_kv_head, c.hd).transpose(0, 2, 1, 3)
        v = (h @ p[L + "v"].T).reshape(B, T, c.n_kv_head, c.hd).transpose(0, 2, 1, 3)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        kr, vr = np.repeat(k, grp, axis=1), np.repeat(v, grp, axis=1)
        s = q @ kr.transpose(0, 1, 3, 2) / np.asarray(math.sqrt(c.hd), dt) + mask
        s -= s.max(-1, keepdims=True)
        a = np.exp(s)
        a /= a.sum(-1, keepdims=True)
        o = (a @ vr).transpose(0, 2, 1, 3).reshape(B, T, c.n_head * c.hd)
        x2 = x + o @ p[L + "o"].T
        h2, r2 = rmsnorm(x2, p[L + "fn"], c.eps)
        gt = h2 @ p[L + "g"].T
        up = h2 @ p[L + "u"].T
        sg = 1.0 / (1.0 + np.exp(-gt))
        act = gt * sg * up
        x3 = x2 + act @ p[L + "d"].T
        caches.append((x, h, r1, q, kr, vr, a, o, x2, h2, r2, gt, up, sg, act))
        x = x3
    hf, rf = rmsnorm(x, p["norm_f"], c.eps)
    logits = hf @ p["tok"].T
    if targets is None:
        return logits
    z = logits - logits.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1, keepdims=True))
    logp = z - lse
    n = B * T
    loss = -np.take_along_axis(logp, targets[..., None], -1).mean()
    g = {}
    dlog = np.exp(logp)
    np.put_along_axis(dlog, targets[..., None], np.take_along_axis(dlog, targets[..., None], -1) - 1, -1)
    dlog /= n
    g["tok"] = dlog.reshape(n, -1).T @ hf.reshape(n, -1)
    dhf = dlog @ p["tok"]
    dx, g["norm_f"] = rmsnorm_back(dhf, x, p["norm_f"], rf)
    for l in reversed(range(c.n_layer)):
        L = "%d." % l
        (x0, h, r1, q, kr, vr, a, o, x2, h2, r2, gt, up, sg, act) = caches[l]
        # ffn
        g[L + "d"] = dx.reshape(n, -1).T @ act.reshape(n, -1)
        dact = dx @ p[L + "d"]
        dup = dact * gt * sg
        dgt = dact * up * (sg * (1 + gt * (1 - sg)))
        g[L + "u"] = dup.reshape(n, -1).T @ h2.reshape(n, -1)
        g[L + "g"] = dgt.reshape(n, -1).T @ h2.reshape(n, -1)
        dh2 = dup @ p[L + "u"] + dgt @ p[L + "g"]
        dx2n, g[L + "fn"] = rmsnorm_back(dh2, x2, p[L + "fn"], r2)
        dx2 = dx + dx2n
        # attention
        g[L + "o"] = dx2.reshape(n, -1).T @ o.reshape(n, -1)
        do = (dx2 @ p[L + "o"]).reshape(B, T, c.n_head, c.hd).transpose(0, 2, 1, 3)
        da = do @ vr.transpose(0, 1, 3, 2)
        dvr = a.transpose(0, 1, 3, 2) @ do
        ds = a * (da - np.sum(da * a, -1, keepdims=True)) / np.asarray(math.sqrt(c.hd), dt)
        dq = ds @ kr
        dkr = ds.transpose(0, 1, 3, 2) @ q
        dk = dkr.reshape(B, c.n_kv_head, grp, T, c.hd).sum(2)
        dv = dvr.reshape(B, c.n_kv_head, grp, T, c.hd).sum(2)
        dq, dk = rope_back(dq, cos, sin), rope_back(dk, cos, sin)
        dq = dq.transpose(0, 2, 1, 3).reshape(n, -1)
        dk = dk.transpose(0, 2, 1, 3).reshape(n, -1)
        dv = dv.transpose(0, 2, 1, 3).reshape(n, -1)
        hn = h.reshape(n, -1)
        g[L + "q"], g[L + "k"], g[L + "v"] = dq.T @ hn, dk.T @ hn, dv.T @ hn
        dh = (dq @ p[L + "q"] + dk @ p[L + "k"] + dv @ p[L + "v"]).reshape(B, T, -1)
        dxn, g[L + "an"] = rmsnorm_back(dh, x0, p[L + "an"], r1)
        dx = dx2 + dxn
    np.add.at(g["tok"], ids.reshape(-1), dx.reshape(n, -1))
    return logits, loss, g


def grad_check():
    """Finite differences against the backward pass on a tiny float64 model."""
    rng = np.random.default_rng(0)
    c = Config(n_vocab=37, dim=16, n_layer=2, n_head=4, n_kv_head=2, ff=24, ctx=8)
    p = init_params(c, rng, np.float64)
    for k in p:  # move norms off 1 so their gradients are exercised in general position
        if p[k].ndim == 1:
            p[k] = p[k] + rng.standard_normal(p[k].shape) * 0.1
    ids = rng.integers(0, c.n_vocab, (2, 7))
    tg = rng.integers(0, c.n_vocab, (2, 7))
    _, _, g = forward(p, c, ids, tg)
    worst = 0.0
    for k in p:
        flat = p[k].reshape(-1)
        for j in rng.choice(flat.size, min(6, flat.size), replace=False):
            old = flat[j]
            flat[j] = old + 1e-5
            lp = forward(p, c, ids, tg)[1]
            flat[j] = old - 1e-5
            lm = forward(p, c, ids, tg)[1]
            flat[j] = old
            num = (lp - lm) / 2e-5
            ana = g[k].reshape(-1)[j]
            rel = abs(num - ana) / max(1e-8, abs(num) + abs(ana))
            worst = max(worst, rel)
            if rel > 1e-4:
                sys.exit("train_demo: gradient check failed for %s[%d]: numeric %.8g, backprop %.8g"
                         % (k, j, num, ana))
    log("train_demo: gradient check passed (worst relative error %.2e)" % worst)


# --------------------------------------------------------------------------------------- GGUF

# Per-layer parameter names here -> GGUF tensor names (blk.N.<name>.weight).
TENSOR_NAMES = {"an": "attn_norm", "q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output",
                "fn": "ffn_norm", "g": "ffn_gate", "u": "ffn_up", "d": "ffn_down"}


def write_gguf(path, c, p, bpe, meta):
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    kv = []

    def add(key, typ, payload):
        kv.append(s(key) + struct.pack("<I", typ) + payload)

    u32 = lambda k, v: add(k, 4, struct.pack("<I", v))
    f32 = lambda k, v: add(k, 6, struct.pack("<f", v))
    st = lambda k, v: add(k, 8, s(v))
    bl = lambda k, v: add(k, 7, struct.pack("<B", 1 if v else 0))

    def arr_str(k, vals):
        add(k, 9, struct.pack("<IQ", 8, len(vals)) + b"".join(s(v) for v in vals))

    def arr_i32(k, vals):
        add(k, 9, struct.pack("<IQ", 5, len(vals)) + struct.pack("<%di" % len(vals), *vals))

    st("general.architecture", "llama")
    st("general.name", meta["name"])
    st("general.description", meta["description"])
    st("general.license", "public-domain (weights trained on the King James Version of the Bible)")
    u32("general.alignment", 32)
    u32("llama.context_length", c.ctx)
    u32("llama.embedding_length", c.dim)
    u32("llama.block_count", c.n_layer)
    u32("llama.feed_forward_length", c.ff)
    u32("llama.attention.head_count", c.n_head)
    u32("llama.attention.head_count_kv", c.n_kv_head)
    u32("llama.rope.dimension_count", c.hd)
    f32("llama.rope.freq_base", c.theta)
    f32("llama.attention.layer_norm_rms_epsilon", c.eps)
    u32("llama.vocab_size", c.n_vocab)
    st("tokenizer.ggml.model", "gpt2")
    st("tokenizer.ggml.pre", "gpt2")
    arr_str("tokenizer.ggml.tokens", bpe.tokens)
    arr_i32("tokenizer.ggml.token_type", [3 if t in SPECIALS else 1 for t in bpe.tokens])
    arr_str("tokenizer.ggml.merges", [a + " " + b for a, b in bpe.merges])
    u32("tokenizer.ggml.bos_token_id", bpe.id["<|endoftext|>"])
    u32("tokenizer.ggml.eos_token_id", bpe.id["<|im_end|>"])
    u32("tokenizer.ggml.padding_token_id", bpe.id["<|endoftext|>"])
    bl("tokenizer.ggml.add_bos_token", False)
    st("tokenizer.chat_template", CHAT_TEMPLATE)

    tensors = [("token_embd.weight", p["tok"], 1), ("output_norm.weight", p["norm_f"], 0)]
    for l in range(c.n_layer):
        for short, long in TENSOR_NAMES.items():
            a = p["%d.%s" % (l, short)]
            tensors.append(("blk.%d.%s.weight" % (l, long), a, 0 if a.ndim == 1 else 1))
    infos, blobs, off = [], [], 0
    for name, a, typ in tensors:
        data = (a.astype(np.float16) if typ == 1 else a.astype(np.float32)).tobytes()
        dims = list(reversed(a.shape))  # ggml: ne0 is the row length
        infos.append(s(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims) +
                     struct.pack("<IQ", typ, off))
        pad = (-len(data)) % 32
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv) + b"".join(infos)
    head += b"\0" * ((-len(head)) % 32)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def f16_params(p):
    """The weights as ferry runs them: matrices rounded to F16."""
    return {k: (v.astype(np.float16).astype(np.float32) if v.ndim == 2 else v) for k, v in p.items()}


# ------------------------------------------------------------------------------------ training

class Progress:
    def __init__(self, total, done):
        self.total, self.start_done, self.t0 = total, done, time.time()
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def update(self, step, loss):
        now = time.time()
        rate = (step - self.start_done) / max(1e-9, now - self.t0)
        eta = (self.total - step) / rate if rate > 0 else 0
        msg = "%5.1f%%  step %d/%d  loss %.3f  %.2f s/step  ETA %dm%02ds" % (
            100.0 * step / self.total, step, self.total, loss, 1 / rate if rate else 0,
            eta // 60, eta % 60)
        if self.tty:
            sys.stderr.write("\r" + msg + "   ")
            sys.stderr.flush()
        elif now - self.last >= 30 or step == self.total:
            self.last = now
            log("train_demo: " + msg)

    def finish(self):
        if self.tty:
            sys.stderr.write("\n")


def batches(tokens, rng, B, T):
    starts = rng.integers(0, len(tokens) - T - 1, B)
    x = np.stack([tokens[s:s + T] for s in starts])
    y = np.stack([tokens[s + 1:s + T + 1] for s in starts])
    return x, y


def evaluate(p, c, tokens, T):
    """Mean cross-entropy (nats/token) over consecutive windows of the held-out tokens."""
    n = (len(tokens) - 1) // T
    tot = 0.0
    for i in range(0, n, 8):
        k = min(8, n - i)
        x = np.stack([tokens[(i + j) * T:(i + j + 1) * T] for j in range(k)])
        y = np.stack([tokens[(i + j) * T + 1:(i + j + 1) * T + 1] for j in range(k)])
        tot += forward(p, c, x, y)[1] * k
    return tot / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="var/train_demo", help="checkpoints and the tokenized corpus")
    ap.add_argument("--out", default="models/ferry-demo-1m.gguf")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=6)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--check", action="store_true", help="only run the gradient check")
    ap.add_argument("--bench", type=int, default=0, help="time N steps and stop")
    a = ap.parse_args()
    grad_check()
    if a.check:
        return
    os.makedirs(a.work, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    verses = read_kjv()
    train_blocks, held_blocks = split_corpus(verses)
    t0 = time.time()
    vocab_path = os.path.join(a.work, "bpe-%d.json" % a.vocab)
    if os.path.exists(vocab_path):  # a resumed run keeps the vocabulary it started with
        with open(vocab_path) as f:
            v = json.load(f)
        bpe = Bpe(v["tokens"], [tuple(m) for m in v["merges"]])
    else:
        bpe = Bpe.train([" ".join(b) for b in train_blocks], a.vocab)
        with open(vocab_path, "w") as f:
            json.dump({"tokens": bpe.tokens, "merges": bpe.merges}, f)
    log("train_demo: BPE vocabulary of %d tokens (%d merges) in %.0f s" %
        (len(bpe.tokens), len(bpe.merges), time.time() - t0))
    docs = documents(train_blocks, rng)
    tokens = np.array([t for d in docs for t in bpe.encode(d)], dtype=np.int32)
    held_text = "\n".join(" ".join(b) for b in held_blocks)
    held = np.array(bpe.encode(held_text), dtype=np.int32)
    with open(os.path.join(a.work, "heldout.txt"), "w") as f:
        f.write(held_text + "\n")
    log("train_demo: %d training tokens (%d documents), %d held-out tokens" %
        (len(tokens), len(docs), len(held)))

    c = Config(n_vocab=len(bpe.tokens), ctx=a.seq)
    p = init_params(c, rng)
    n_params = sum(v.size for v in p.values())
    log("train_demo: %d parameters (%s)" % (n_params, json.dumps(c.to_dict())))
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    step, elapsed = 0, 0.0
    ckpt = os.path.join(a.work, "ckpt.npz")
    if os.path.exists(ckpt) and not a.bench:
        z = np.load(ckpt, allow_pickle=False)
        if int(z["n_vocab"]) == c.n_vocab and int(z["steps"]) == a.steps:
            step, elapsed = int(z["step"]), float(z["elapsed"])
            for k in p:
                p[k], m[k], v2[k] = z["p/" + k], z["m/" + k], z["v/" + k]
            rng = np.random.default_rng([a.seed, step])
            log("train_demo: resumed from %s at step %d" % (ckpt, step))
    total = a.bench or a.steps
    warm = max(1, total // 20)
    b1, b2, wd = 0.9, 0.98, 0.05
    prog = Progress(total, step)
    t_start = time.time() - elapsed
    loss_ema = None
    while step < total:
        x, y = batches(tokens, rng, a.batch, a.seq)
        _, loss, g = forward(p, c, x, y)
        loss_ema = loss if loss_ema is None else 0.95 * loss_ema + 0.05 * loss
        step += 1
        lr = a.lr * min(1.0, step / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / total)))
        gn = math.sqrt(sum(float(np.sum(gv * gv)) for gv in g.values()))
        clip = min(1.0, 1.0 / max(gn, 1e-9))
        for k in p:
            gk = g[k] * clip
            m[k] = b1 * m[k] + (1 - b1) * gk
            v2[k] = b2 * v2[k] + (1 - b2) * gk * gk
            mh = m[k] / (1 - b1 ** step)
            vh = v2[k] / (1 - b2 ** step)
            decay = wd * lr * p[k] if p[k].ndim == 2 else 0
            p[k] = (p[k] - lr * mh / (np.sqrt(vh) + 1e-8) - decay).astype(np.float32)
        prog.update(step, loss_ema)
        if not a.bench and (step % a.ckpt_every == 0 or step == total):
            arrays = {"p/" + k: p[k] for k in p}
            arrays.update({"m/" + k: m[k] for k in p})
            arrays.update({"v/" + k: v2[k] for k in p})
            np.savez(ckpt + ".part.npz", step=step, steps=a.steps, n_vocab=c.n_vocab,
                     elapsed=time.time() - t_start, **arrays)
            os.replace(ckpt + ".part.npz", ckpt)
            rng = np.random.default_rng([a.seed, step])
    prog.finish()
    train_s = time.time() - t_start
    if a.bench:
        log("train_demo: %d steps in %.1f s" % (total, train_s))
        return
    pf = f16_params(p)
    held_loss = evaluate(pf, c, held, a.seq)
    log("train_demo: held-out loss %.3f nats/token (perplexity %.1f) with F16 weights" %
        (held_loss, math.exp(held_loss)))
    meta = {
        "name": "ferry-demo",
        "description": "ferry's demo model: %d parameters trained by tools/train_demo on the KJV "
                       "Bible, %d steps of %dx%d tokens, held-out loss %.3f nats/token" %
                       (n_params, a.steps, a.batch, a.seq, held_loss),
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    write_gguf(a.out, c, p, bpe, meta)
    np.savez(os.path.join(a.work, "final_f16.npz"), **{k: v for k, v in pf.items()})
    with open(os.path.join(a.work, "summary.json"), "w") as f:
        json.dump({"params": int(n_params), "config": c.to_dict(), "steps": a.steps,
                   "batch": a.batch, "seq": a.seq, "train_tokens": int(len(tokens)),
                   "heldout_tokens": int(len(held)), "final_train_loss_ema": float(loss_ema),
                   "heldout_loss": float(held_loss), "train_seconds": round(train_s)}, f, indent=1)
    log("train_demo: wrote %s (%d bytes); training took %.0f s" %
        (a.out, os.path.getsize(a.out), train_s))


if __name__ == "__main__":
    main()
