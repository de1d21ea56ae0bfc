"""Reference tokenizations for tokenizer_test: Hugging Face's `tokenizers` (the Rust library SmolLM2's own
tokenizer.json is made for) built from a GGUF file's vocabulary and merges, read by llama.cpp's `gguf` package;
nothing here comes from kiln.

  tokenizer_ref.py GGUF    prints one JSON object per line: {"text": ..., "ids": [...], "decoded": ...} for a
                           corpus of 1,000 lines (600 lines of Python's standard library sources, 400 built from
                           fragments that stress the pre-tokenizer: contractions, digit runs, Unicode letters and
                           numbers of many scripts, odd whitespace, emoji, special tokens), then "done".

The tokenizer is SmolLM2's: a byte-level BPE model (no unknown token, no byte fallback), the pre-tokenizer
Sequence[Digits(individual_digits), ByteLevel(add_prefix_space=False)] (llama.cpp's "smollm"), the ByteLevel
decoder, and the control tokens (token_type 3) as special tokens. Run with the project venv.
"""
import json
import os
import random
import sys

from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers


def field(r, key):
    return r.fields[key].contents()


def build(path: str) -> Tokenizer:
    r = GGUFReader(path)
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    assert field(r, "tokenizer.ggml.model") == "gpt2" and field(r, "tokenizer.ggml.pre") == "smollm"
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


FRAGMENTS = [
    "I'm", "you're", "they'll", "we've", "she'd", "it's", "don't", "'S", "O'Neil", "rock'n'roll", "''", "'",
    "12345", "3.14159", "a1b22c333", "1,000,000", "2026-12-03", "0x7fff", "1e-5",
    "²", "½", "٣٤٥", "Ⅻ", "①②", "१२३",
    "café", "naïve", "Straße", "Ωμέγα", "Привет мир", "漢字かなカナ", "한국어", "مرحبا", "हिन्दी", "ไทย", "עברית",
    "e\u0301", "Z\u0351\u0352", "ﬁ",
    "😀", "👩\u200d💻", "🇫🇷", "✓", "→", "€", "©",
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028", "\u200b", "\u2009", "\x0b",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_st", "<|im_end", "<repo_name>", "<>",
    "!!!", "...", "?!", "--", "==>", "#include <vector>", "def f(x):", "return x**2", "  # comment", "{\"a\": [1, 2]}",
    "https://example.com/a?b=c&d=e", "user@example.org", "C++", "__init__", "snake_case", "CamelCase", "ALLCAPS",
    "Hello", "world", "the", "quick", "brown", "fox",
]
SEPARATORS = ["", " ", " ", " ", "  ", "\n", "\t", "", ", "]


def corpus() -> list[str]:
    lines: list[str] = []
    lib = os.path.dirname(os.__file__)
    for name in sorted(os.listdir(lib)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(lib, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.strip():
                    lines.append(line)
                if len(lines) >= 600:
                    break
        if len(lines) >= 600:
            break
    rng = random.Random(24)
    while len(lines) < 1000:
        parts = [rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 6))]
        lines.append("".join(p + rng.choice(SEPARATORS) for p in parts))
    return lines


def main() -> None:
    tok = build(sys.argv[1])
    out = []
    for text in corpus():
        ids = tok.encode(text).ids
        out.append(json.dumps({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)}))
    sys.stdout.write("\n".join(out) + "\ndone\n")


if __name__ == "__main__":
    main()
