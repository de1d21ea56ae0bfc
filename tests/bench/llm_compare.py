"""LLM decode speed, kiln vs llama.cpp, on the same GGUF file and thread count, in one run (issue #24's speed table).

  llm_compare.py [--gguf FILE] [--llm-perf build/release/tests/bench/llm_perf] [--llama-python PY] [--steps N]
                 [--check-greedy]

kiln: llm_perf (tests/bench/llm_perf.cc), once with float activations and once with --int8 (LlamaOptions::
int8_activations, llama.cpp's way), times replayed decode steps of LlamaModel with 1, 4 and 8 slots all
active (tokens/s = slots / step time), and Prefill of 128 prompt tokens. Batch-1 decode is the single-stream figure; the 8-slot aggregate against it
is continuous batching's gain.
llama.cpp: through llama-cpp-python, when PY (a Python with `llama_cpp` installed; pip builds llama.cpp from source,
so it is not part of make deps) is given: n_threads = the cores kiln uses, decode tokens/s by wall time over the
tokens generated after the first from a one-token prompt (up to 4 x --steps), and prefill tokens/s at 128 prompt
tokens (each in a process of its own).
Prints one JSON line per measurement and a table of ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

LLAMA_CPP_SCRIPT = r"""
import json, sys, time
from llama_cpp import Llama
path, threads, steps, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=512, verbose=False)
def run(prompt, n):
    llm.reset()
    t0 = time.perf_counter()
    out = llm.create_completion(prompt, max_tokens=n, temperature=0.0)
    return time.perf_counter() - t0, out["usage"]["completion_tokens"]
if mode == "decode":
    # A one-token prompt: the decode figure then needs no batched matmul (llama.cpp's AMX path crashed on every
    # multi-token batch in a KVM guest on Emerald Rapids, where its one-token steps ran).
    prompt = [llm.tokenize(b"Once", add_bos=False)[0]]
    run(prompt, 2)  # warm-up
    t1, n1 = run(prompt, 1)
    tn, nn = run(prompt, steps + 1)
    print(json.dumps({"decode_tokens_per_s": (nn - n1) / (tn - t1), "decode_tokens": nn - n1}))
else:
    long = " ".join(["word"] * 127)
    run(long, 1)  # warm-up
    tp, _ = run(long, 1)
    print(json.dumps({"prefill_tokens_per_s": len(llm.tokenize(long.encode(), add_bos=False)) / tp}))
"""

# Greedy token-for-token check (--check-greedy): llama.cpp tokenizes five fixed chat prompts and generates up to N
# tokens with temperature 0 (argmax, no penalties); kiln's LlamaModel::Greedy (llm_perf greedy N: prefill + decode)
# runs on the same prompt ids. Prints one JSON line per prompt and whether every one is equal.
LLAMA_CPP_GREEDY = r"""
import json, sys
from llama_cpp import Llama
path, n = sys.argv[1], int(sys.argv[2])
# One token per evaluation (n_batch = n_ubatch = 1): llama.cpp's AMX path crashed its process (exit -11) on every
# multi-token batch in a KVM guest on Emerald Rapids; token by token it runs there, and the prompt's logits are the
# same computation per token.
llm = Llama(model_path=path, n_threads=2, n_ctx=512, n_batch=1, n_ubatch=1, verbose=False)
eos = llm.token_eos()
for prompt in json.loads(sys.stdin.read()):
    ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    llm.reset()
    out = []
    for t in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(t)
        if t == eos or len(out) >= n:
            break
    print(json.dumps({"prompt_ids": ids, "greedy": out}))
"""
GREEDY_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a compiler does in two sentences.",
    "List three prime numbers.",
    "Tell me a short story about a robot who learns to paint.",
]


def check_greedy(args) -> bool:
    chat = [f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n" for p in GREEDY_PROMPTS]
    r = subprocess.run([args.llama_python, "-c", LLAMA_CPP_GREEDY, args.gguf, "64"], input=json.dumps(chat),
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"# llama.cpp greedy run failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
        return False
    ref = [json.loads(line) for line in r.stdout.splitlines()]
    lines = "\n".join(",".join(map(str, x["prompt_ids"])) for x in ref) + "\n"
    all_equal = True
    for mode, flags in (("float", []), ("int8", ["--int8"])):
        k = subprocess.run([args.llm_perf, *flags, args.gguf, "greedy", "64"], input=lines, capture_output=True,
                           text=True, check=True)
        got = [[int(t) for t in line.split(",") if t] for line in k.stdout.splitlines()]
        same = 0
        for prompt, x, g in zip(GREEDY_PROMPTS, ref, got):
            equal = g == x["greedy"]
            same += equal
            first = next((i for i, (a, b) in enumerate(zip(g, x["greedy"])) if a != b), None)
            print(json.dumps({"activations": mode, "prompt": prompt, "prompt_tokens": len(x["prompt_ids"]),
                              "tokens": len(g), "equal": equal, "first_difference": first}))
        print(f"greedy, kiln {mode} activations vs llama.cpp: {same}/{len(GREEDY_PROMPTS)} prompts equal token for "
              "token (up to 64 tokens)")
        all_equal &= same == len(GREEDY_PROMPTS)
    return all_equal


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=str(REPO / ".venv/share/kiln/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--llm-perf", default=str(REPO / "build/release/tests/bench/llm_perf"))
    ap.add_argument("--llama-python", default=os.environ.get("LLAMA_PYTHON", ""))
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--check-greedy", action="store_true",
                    help="also compare greedy output with llama.cpp token for token (needs --llama-python)")
    args = ap.parse_args()
    if args.check_greedy and args.llama_python:
        check_greedy(args)
    print(f"# CPU: {platform.processor() or platform.machine()}, {args.threads} threads, model {Path(args.gguf).name}")
    runs = {}  # mode -> (rows by slot count, prefill row)
    for mode, flags in (("float", []), ("int8", ["--int8"])):
        out = subprocess.run([args.llm_perf, *flags, args.gguf, str(args.steps), "1,4,8", "256"], capture_output=True,
                             text=True, check=True).stdout
        rows, prefill = {}, None
        for line in out.splitlines():
            row = json.loads(line)
            if "prefill_tokens" in row:
                prefill = row
            else:
                rows[row["slots"]] = row
            print(json.dumps({"engine": "kiln", "activations": mode, **row}))
        runs[mode] = (rows, prefill)
    ref = None
    if args.llama_python:
        ref = {}
        for mode in ("decode", "prefill"):  # one process each: a crash in one leaves the other's figure
            r = subprocess.run([args.llama_python, "-c", LLAMA_CPP_SCRIPT, args.gguf, str(args.threads),
                                str(args.steps * 4), mode], capture_output=True, text=True)
            if r.returncode == 0:
                row = json.loads(r.stdout.strip().splitlines()[-1])
                ref.update(row)
                print(json.dumps({"engine": "llama.cpp", **row}))
            else:
                print(f"# llama.cpp {mode} run failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
    for mode, (kiln, prefill) in runs.items():
        single = kiln[1]["tokens_per_s"]
        print(f"kiln {mode:5s} decode, 1 stream     {single:8.2f} tok/s   first step {kiln[1]['first_step_s']:.2f} s")
        for n in (4, 8):
            print(f"kiln {mode:5s} decode, {n} streams     {kiln[n]['tokens_per_s']:8.2f} tok/s   "
                  f"{kiln[n]['tokens_per_s'] / single:.2f}x its single stream (target >= 4x at 8)")
        print(f"kiln {mode:5s} prefill (128)        {prefill['tokens_per_s']:8.2f} tok/s   "
              f"first run {prefill['first_prefill_s']:.2f} s")
    if ref is not None:
        for mode, (kiln, prefill) in runs.items():
            if "decode_tokens_per_s" in ref:
                print(f"llama.cpp decode, 1 stream {ref['decode_tokens_per_s']:8.2f} tok/s   kiln {mode} / llama.cpp = "
                      f"{kiln[1]['tokens_per_s'] / ref['decode_tokens_per_s']:.3f}x (target >= 1.0x)")
            if "prefill_tokens_per_s" in ref:
                print(f"llama.cpp prefill (128)    {ref['prefill_tokens_per_s']:8.2f} tok/s   kiln {mode} / llama.cpp = "
                      f"{prefill['tokens_per_s'] / ref['prefill_tokens_per_s']:.3f}x")
    else:
        print("# llama.cpp: not measured (give --llama-python, a Python with llama-cpp-python installed)")


if __name__ == "__main__":
    sys.exit(main())
