#!/usr/bin/env python3
"""Check a shipped model directory: sizes within budget, transformers loads it, greedy retrieval works.

  python3 scripts/train/check_model.py models/minima-qwen3-23m [--data data] [--length 2048] [--n 4]
Needs torch, transformers and tokenizers (the project venv or the GPU machine).
"""
import argparse
import glob
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import niah_data  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--data", default="data")
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()

    shards = sorted(glob.glob(os.path.join(args.model, "*.safetensors")))
    sizes = [os.path.getsize(s) for s in shards]
    print(f"shards: {len(shards)}, largest {max(sizes) / 2**20:.2f} MiB, total {sum(sizes) / 2**20:.2f} MiB")
    assert max(sizes) <= 16 * 2**20 and sum(sizes) <= 48 * 2**20, "size budget exceeded"

    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.eval()
    print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
    words = niah_data.load_words(args.data, "eval")
    sents = niah_data.load_sentences(os.path.join(args.data, "corpus", "essay.txt"))
    gen = niah_data.Generator(words, sents, random.Random(args.seed))
    eos = tok.token_to_id("<|endoftext|>")
    ok = 0
    total = 0
    for task in niah_data.RULER_TASKS:
        for _ in range(args.n):
            prompt, _, expected = gen.example(int(args.length * 3.2), task, ruler_form=True)
            ids = tok.encode(prompt).ids[-(args.length - 64):]
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), max_new_tokens=48, do_sample=False, eos_token_id=eos,
                                     pad_token_id=eos)
            text = tok.decode(out[0, len(ids):].tolist())
            score = sum(e.lower() in text.lower() for e in expected) / len(expected)
            ok += score
            total += 1
            print(f"{task:16s} {score:.2f}  {text.strip()[:90]!r}")
    print(f"mean string_match_all at {args.length} tokens: {100 * ok / total:.1f}")


if __name__ == "__main__":
    main()
