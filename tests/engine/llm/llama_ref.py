"""Reference logits for llama_test: the Llama architecture written out in NumPy (float64 arithmetic) on the weights
of a GGUF file as llama.cpp's own `gguf` package dequantizes them; nothing here comes from kiln.

  llama_ref.py GGUF OUT IDS [IDS ...]    IDS: comma-separated token ids of one sequence. For sequence n writes
                                         OUT/logits_<n>.f32, the float32 logits [T, vocab] of every position, and
                                         prints "logits <n> <T> <vocab>"; then "done".
  llama_ref.py --greedy N STOP GGUF IDS [IDS ...]
                                         greedy decoding: for each prompt prints "greedy <n> <ids>", the N tokens
                                         that follow (argmax each time; ending early at STOP), then "done". Token by
                                         token with a key/value cache, in float32 (speed).

The architecture (llama.cpp's llm_build_llama for these files): x = token_embd[ids]; per block,
x += Wo(attn(rope(Wq h), rope(Wk h), Wv h)) with h = rmsnorm(x) * attn_norm, causal softmax attention with
n_head / n_head_kv query heads per key/value head, RoPE on adjacent pairs (the converter permuted Wq/Wk for it)
with theta^(-2i/d); x += Wdown(silu(Wgate g) * Wup g) with g = rmsnorm(x) * ffn_norm; logits =
rmsnorm(x) * output_norm times output.weight, or token_embd when the file has no output.weight.
"""
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main() -> None:
    greedy = None
    if sys.argv[1] == "--greedy":
        greedy = (int(sys.argv[2]), int(sys.argv[3]))
        del sys.argv[1:4]
        sys.argv.insert(2, "")
    path, out = sys.argv[1], sys.argv[2]
    r = GGUFReader(path)
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
    w = {}
    for t in r.tensors:
        shape = [int(d) for d in reversed(t.shape)]
        w[t.name] = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(shape)
    n_layer = meta["llama.block_count"]
    n_head = meta["llama.attention.head_count"]
    n_kv = meta.get("llama.attention.head_count_kv", n_head)
    n_embd = meta["llama.embedding_length"]
    d = n_embd // n_head
    theta = float(meta.get("llama.rope.freq_base", 10000.0))
    eps = float(meta["llama.attention.layer_norm_rms_epsilon"])
    emb = w["token_embd.weight"]
    out_w = w.get("output.weight", emb)

    def rmsnorm(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    def rope(v, pos):  # v [T, H, d]
        inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = pos[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = v[..., 0::2], v[..., 1::2]
        o = np.empty_like(v)
        o[..., 0::2] = a * c - b * s
        o[..., 1::2] = a * s + b * c
        return o

    if greedy is not None:
        n_new, stop = greedy
        layers = [{k: w[f"blk.{i}.{k}.weight"] for k in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                          "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")}
                  for i in range(n_layer)]
        for n, arg in enumerate(sys.argv[3:]):
            ids = [int(t) for t in arg.split(",")]
            ks = [[] for _ in range(n_layer)]
            vs = [[] for _ in range(n_layer)]

            def step(tok, p):
                x = emb[tok][None, :]
                for i, L in enumerate(layers):
                    h = rmsnorm(x, L["attn_norm"]).astype(np.float32)
                    pos = np.array([float(p)])
                    q = rope((h @ L["attn_q"].T).reshape(1, n_head, d), pos)[0]
                    ks[i].append(rope((h @ L["attn_k"].T).reshape(1, n_kv, d), pos)[0])
                    vs[i].append((h @ L["attn_v"].T).reshape(n_kv, d))
                    K, V = np.stack(ks[i], 1), np.stack(vs[i], 1)  # [n_kv, t, d]
                    o = np.empty((n_head, d), np.float32)
                    for hd in range(n_head):
                        kv = hd // (n_head // n_kv)
                        sc = K[kv] @ q[hd] / np.sqrt(d)
                        sc = np.exp(sc - sc.max())
                        o[hd] = (sc / sc.sum()) @ V[kv]
                    x = x + o.reshape(1, n_embd) @ L["attn_output"].T
                    g = rmsnorm(x, L["ffn_norm"]).astype(np.float32)
                    a = g @ L["ffn_gate"].T
                    x = x + ((a / (1 + np.exp(-a))) * (g @ L["ffn_up"].T)) @ L["ffn_down"].T
                return (rmsnorm(x, w["output_norm.weight"]) @ out_w.T)[0]
            for p, tok in enumerate(ids):
                logits = step(tok, p)
            new = []
            while len(new) < n_new:
                new.append(int(np.argmax(logits)))
                if new[-1] == stop or len(new) == n_new:
                    break
                logits = step(new[-1], len(ids) + len(new) - 1)
            print(f"greedy {n} {','.join(map(str, new))}")
        print("done")
        return

    for n, arg in enumerate(sys.argv[3:]):
        ids = [int(t) for t in arg.split(",")]
        T = len(ids)
        pos = np.arange(T, dtype=np.float64)
        x = emb[ids].astype(np.float64)
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for layer in range(n_layer):
            p = f"blk.{layer}."
            h = rmsnorm(x, w[p + "attn_norm.weight"])
            q = rope((h @ w[p + "attn_q.weight"].T).reshape(T, n_head, d), pos)
            k = rope((h @ w[p + "attn_k.weight"].T).reshape(T, n_kv, d), pos)
            v = (h @ w[p + "attn_v.weight"].T).reshape(T, n_kv, d)
            o = np.empty((T, n_head, d))
            for hd in range(n_head):
                kv = hd // (n_head // n_kv)
                s = q[:, hd, :] @ k[:, kv, :].T / np.sqrt(d) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                s /= s.sum(-1, keepdims=True)
                o[:, hd, :] = s @ v[:, kv, :]
            x = x + o.reshape(T, n_embd) @ w[p + "attn_output.weight"].T
            g = rmsnorm(x, w[p + "ffn_norm.weight"])
            a = g @ w[p + "ffn_gate.weight"].T
            ff = (a / (1 + np.exp(-a))) * (g @ w[p + "ffn_up.weight"].T)
            x = x + ff @ w[p + "ffn_down.weight"].T
        logits = rmsnorm(x, w["output_norm.weight"]) @ out_w.T
        logits.astype(np.float32).tofile(os.path.join(out, f"logits_{n}.f32"))
        print(f"logits {n} {T} {logits.shape[1]}")
    print("done")


if __name__ == "__main__":
    main()
