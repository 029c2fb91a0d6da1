#!/usr/bin/env python3
"""Replays prompt-lookup drafting policies over recorded runs, without a model.

The runs come from `ferry_speculative_bench --dump FILE` (one line a run: the workload, its
prompt and what decoding without drafts gave). Greedy outputs do not depend on drafting, so
which drafts would be kept is known exactly; a step's time is taken from a verify-cost table
(the bench's "verify cost" lines: one forward of the next token plus k drafted, as a ratio to
k = 0). What it prints per policy and workload is the predicted speed-up over decoding without
drafts, the tokens drafted and kept. It shows how a policy's decisions depend on the measured
cost of a drafted position (--slopes), which is what a noisy host moves.

    bench/speculative_sim.py RUNS [--cost 0:1,1:1.01,2:1.18,4:1.47,8:2.48] [--slopes 0.1,0.2,0.3]

The policies mirror local_engine/speculative.{h,cpp} and the scheduler's choose_draft:
  classes  (since session 20) DraftOdds: acceptance counted over all sequences by the draft's
           class (suffix length 1, 2, 3, 4, 5-7, 8; greedy or sampled), DraftCost's best length,
           one token now and then for a declined class.
  sequence (before) each sequence's own acceptance (decayed, 0.5 at first), its draft length
           halved after a miss and doubled after a full take, and a back-off of 1-16 steps after
           misses unless the cost fit said drafts are nearly free (`--nearly-free 0|1`).
"""
import argparse
import collections

MAX_MATCH = 8
MIN_GAIN = 0.10


def load(path):
    runs = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            p, o = parts.index("P"), parts.index("O")
            runs.append((parts[0], [int(t) for t in parts[p + 1:o]], [int(t) for t in parts[o + 1:]]))
    return runs


def lookup(tokens, min_match, limit):
    """The longest recent suffix seen earlier and what followed it (lookup_draft)."""
    n = len(tokens)
    if limit <= 0 or n < 2:
        return 0, []
    best, end = 0, -1
    for j in range(n - 2, -1, -1):
        if tokens[j] != tokens[-1]:
            continue
        m = 1
        while m < MAX_MATCH and j - m >= 0 and tokens[j - m] == tokens[n - 1 - m]:
            m += 1
        if m > best:
            best, end = m, j
            if m == MAX_MATCH:
                break
    if best < min_match:
        return 0, []
    out = []
    for i in range(limit):
        src = end + 1 + i
        out.append(tokens[src] if src < n else out[src - n])
    return best, out


class Cost:
    def __init__(self, table, slope=None):
        self.table = dict(sorted(table.items()))
        ks = list(self.table)
        fitted = (self.table[ks[-1]] - self.table[ks[0]]) / (ks[-1] - ks[0])
        self.b = fitted if slope is None else slope  # a drafted position, in one-token steps
        self.a = 1.0 - self.b

    def step(self, k):
        ks = list(self.table)
        for lo, hi in zip(ks, ks[1:]):
            if lo <= k <= hi:
                return self.table[lo] + (self.table[hi] - self.table[lo]) * (k - lo) / (hi - lo)
        return self.table[ks[-1]]

    def best(self, limit, alpha):
        best, best_rate, expected, term = 0, (1 + MIN_GAIN) / (self.a + self.b), 0.0, 1.0
        for k in range(1, limit + 1):
            term *= alpha
            expected += term
            rate = (1 + expected) / (self.a + self.b * (1 + k))
            if rate > best_rate:
                best_rate, best = rate, k
        return best

    def explore_every(self):
        return max(16, -(-self.b // 0.01 if self.b > 0 else 16))


class Classes:
    def __init__(self, cost):
        self.cost = cost
        self.cells = collections.defaultdict(lambda: [0.0, 0.0, 0])

    @staticmethod
    def key(m, sampled):
        return (m if m <= 4 else (5 if m < MAX_MATCH else 8), sampled)

    def new_sequence(self):
        return None

    def choose(self, seq, m, draft, sampled):
        if not draft:
            return 0
        kept, drafted, _ = self.cells[self.key(m, sampled)]
        k = self.cost.best(len(draft), (kept + 1) / (drafted + 2))
        if k == 0:
            cell = self.cells[self.key(m, sampled)]
            cell[2] += 1
            if cell[2] % int(self.cost.explore_every()) == 0:
                k = 1
        return k

    def feedback(self, seq, m, sampled, drafted, accepted):
        cell = self.cells[self.key(m, sampled)]
        cell[0] = 0.95 * cell[0] + accepted
        cell[1] = 0.95 * cell[1] + min(drafted, accepted + 1)


class Sequence:
    def __init__(self, cost, nearly_free):
        self.cost, self.nearly_free = cost, nearly_free

    def new_sequence(self):
        return {"kept": 0.0, "drafted": 0.0, "cap": 8, "misses": 0, "skip": 0}

    def choose(self, s, m, draft, sampled):
        if not self.nearly_free and s["skip"] > 0:
            s["skip"] -= 1
            return 0
        s["skip"] = 0 if self.nearly_free else s["skip"]
        if not draft:
            return 0
        k = min(len(draft), s["cap"])
        return min(k, self.cost.best(k, (s["kept"] + 1) / (s["drafted"] + 2)))

    def feedback(self, s, m, sampled, drafted, accepted):
        s["drafted"] = 0.8 * s["drafted"] + min(drafted, accepted + 1)
        s["kept"] = 0.8 * s["kept"] + accepted
        if accepted == 0:
            s["misses"] += 1
            s["skip"] = min(16, 1 << min(s["misses"] - 1, 4))
            s["cap"] = max(1, s["cap"] // 2)
            return
        s["misses"] = 0
        s["cap"] = min(8, 2 * s["cap"]) if accepted >= drafted else max(1, min(accepted + 1, 8))


def simulate(runs, policy, cost, max_draft=8, min_match=2, gen=96):
    out = collections.OrderedDict()
    for workload, prompt, output in runs:
        sampled = "sampled" in workload
        r = out.setdefault(workload, [0, 0.0, 0, 0])  # tokens, steps' time, drafted, kept
        seq = policy.new_sequence()
        tokens, j = prompt + output[:1], 0
        while j + 1 < len(output):
            limit = min(max_draft, gen - (j + 1) - 1)
            m, draft = lookup(tokens, min_match, limit)
            k = policy.choose(seq, m, draft, sampled)  # every step: back-off counts steps
            draft = draft[:k]
            kept = 0
            while kept < len(draft) and j + 1 + kept < len(output) and draft[kept] == output[j + 1 + kept]:
                kept += 1
            if draft:
                policy.feedback(seq, m, sampled, len(draft), kept)
            emitted = min(kept + 1, len(output) - (j + 1))
            tokens += output[j + 1:j + 1 + emitted]
            j += emitted
            r[0] += emitted
            r[1] += cost.step(len(draft))
            r[2] += len(draft)
            r[3] += kept
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("--cost", default="0:1,1:1.01,2:1.18,4:1.47,8:2.48")
    ap.add_argument("--slopes", default="")
    ap.add_argument("--nearly-free", type=int, default=-1, help="sequence policy: 0, 1, or both")
    a = ap.parse_args()
    runs = load(a.runs)
    table = {int(k): float(v) for k, v in (kv.split(":") for kv in a.cost.split(","))}
    slopes = [None] + [float(s) for s in a.slopes.split(",") if s]
    for slope in slopes:
        cost = Cost(table, slope)
        policies = [("classes", Classes(cost))]
        for nf in ([0, 1] if a.nearly_free < 0 else [a.nearly_free]):
            policies.append((f"sequence nearly-free={nf}", Sequence(cost, bool(nf))))
        for name, policy in policies:
            res = simulate(runs, policy, cost)
            cells = "  ".join(f"{w} {t / s:.2f}x ({d}, {k})" for w, (t, s, d, k) in res.items())
            print(f"b={cost.b:.3f} {name:26s} {cells}")


if __name__ == "__main__":
    main()
