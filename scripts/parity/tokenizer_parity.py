#!/usr/bin/env python3
"""Tokenizer parity: our C++ tokenizer (`minimakv tokenize`) against the `tokenizers` library.

For the shipped tokenizer and for a GPT-2-style byte-level BPE trained here with `tokenizers`, encode a
few thousand varied strings (Unicode, emoji, whitespace runs, digits, code, special tokens) with both
(and long runs without a space, up to 20,000 characters) and require identical ids and exact decode
round trips. Exits non-zero on any difference.
  tokenizer_parity.py --bin build/release/apps/minimakv/minimakv [--cases 3000] [--seed 1]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PIECES = ["hello", "world", " the", "The", "über", "naïve", "日本語", "中文字符", "한국어", "Привет", "مرحبا", "😀", "👍🏽",
          "🇫🇷", "e\u0301", "\u00a0", "\t", "\n", "\r\n", "  ", "   ", "1234567", "3.14159", "0x1F", "-42", "1e-9",
          "def f(x):\n    return x**2", "{\"k\": [1, 2]}", "i += 1;", "<|endoftext|>", "<|pad|>", "<|endoftext", "'s",
          "'ll", "don't", "CAPS", "snake_case", "kebab-case", "a.b.c", "...", "!!!", "??", "$%^&*", "©®™", "\u2028", "\x00",
          "One of the special magic numbers for", "is:", "3f2a9c1e-1111-4abc-8def-0123456789ab"]


def cases(n, seed):
    rng = random.Random(seed)
    out = ["", " ", "a", "<|endoftext|>", "  leading and trailing  ", "\n\n\n"]
    while len(out) < n:
        k = rng.randint(1, 12)
        s = ""
        for _ in range(k):
            p = rng.choice(PIECES) if rng.random() < 0.8 else "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(1, 5)))
            s += p + (rng.choice(["", " ", "  ", "\n", "\t"]) if rng.random() < 0.5 else "")
        out.append(s)
    return out


def long_words(seed):
    """Runs without a space (one pre-tokenizer piece each), where the merge order over thousands of
    symbols is exercised: letters from small and full alphabets, digits, one CJK character, mixed
    scripts, up to 20,000 characters."""
    rng = random.Random(seed + 1)
    out = []
    for alphabet in ["a", "ab", "aeinrst", "abcdefghijklmnopqrstuvwxyz", "0123456789", "\u6587\u5b57",
                     "аеиостн", "e\u0301x", "😀a"]:
        for n in (rng.randint(500, 2000), rng.randint(5000, 20000)):
            out.append("".join(rng.choice(alphabet) for _ in range(n)))
    return out


def train_gpt2_style(texts, path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(path)


def check(binary, model_dir, texts, label, prefix_space=False):
    ref = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    res = subprocess.run([binary, "tokenize", "--model", model_dir], input=json.dumps(texts).encode(),
                         capture_output=True, check=True)
    ours = json.loads(res.stdout)
    bad = 0
    for i, t in enumerate(texts):
        want = ref.encode(t).ids
        if ours["ids"][i] != want:
            bad += 1
            if bad <= 5:
                print(f"[{label}] MISMATCH for {t!r}:\n  ours {ours['ids'][i]}\n  ref  {want}")
        # exact round trip (a prefix space added by the pre-tokenizer is part of the decoded text)
        if not ours["roundtrip"][i] and not prefix_space:
            bad += 1
            if bad <= 5:
                print(f"[{label}] decode(encode(x)) != x for {t!r}")
    print(f"[{label}] {len(texts)} strings, {len(texts) - bad} identical")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    texts = cases(args.cases, args.seed) + long_words(args.seed)
    bad = check(args.bin, os.path.join(ROOT, "models", "minima-qwen3-23m"), texts, "shipped Qwen-style")
    with tempfile.TemporaryDirectory() as d:
        train_gpt2_style(texts[: args.cases // 2], os.path.join(d, "tokenizer.json"))
        bad += check(args.bin, d, texts, "trained GPT-2-style", prefix_space=True)
    print("tokenizer parity:", "ok" if bad == 0 else f"{bad} differences")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
