#!/usr/bin/env python3
"""Train the byte-level BPE tokenizer of the embedded model with the `tokenizers` library.

Qwen-style pre-tokenizer split (digits are single tokens), GPT-2 byte-to-unicode mapping, special
tokens for document boundaries and padding. Deterministic for a given corpus.
Usage: train_tokenizer.py --data data --out models/NAME [--vocab 8192]
"""
import argparse
import os
import random
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(__file__))
import niah_data  # noqa: E402

# The split pattern of Qwen2/Qwen3 tokenizers: contractions, letter runs with one leading
# non-letter, single digits, punctuation runs, newlines, whitespace.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|pad|>"]


def synthetic_lines(words, n, seed):
    rng = random.Random(seed)
    gen = niah_data.Generator(words, [], rng)
    for _ in range(n):
        yield gen.needle_sentence()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=8192)
    args = ap.parse_args()

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    words = niah_data.load_words(args.data, "train")

    def corpus():
        with open(os.path.join(args.data, "corpus", "train.txt"), encoding="utf-8") as f:
            for line in f:
                yield line
        yield from synthetic_lines(words, 20000, 1)

    tok.train_from_iterator(corpus(), trainer=trainer)
    os.makedirs(args.out, exist_ok=True)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    print(f"tokenizer: {tok.get_vocab_size()} tokens -> {args.out}/tokenizer.json")


if __name__ == "__main__":
    main()
