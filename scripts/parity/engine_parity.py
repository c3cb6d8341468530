#!/usr/bin/env python3
"""Engine parity: `minimakv generate` (--kv bf16, CPU or CUDA backend) against transformers on the same ids.

Builds small random-initialised Qwen3 and Llama models with transformers (GQA and not, tied and untied
heads, Llama-3 rope scaling), saves them with save_pretrained (safetensors) next to the shipped
tokenizer, and compares (1) the logits after the prompt: our relative L2 error against transformers'
fp32 run must stay within twice transformers' own bf16-vs-fp32 error (our KV cache is BF16 in this
mode); (2) greedy continuations, token for token (64 tokens on the shipped model); where they part,
the fp32 reference's logit margin between the two tokens there must be within transformers' own BF16
change of those logits (a near-tie, reported). Needs torch, transformers and tokenizers.
  engine_parity.py --bin build/release/apps/minimakv/minimakv [--device cpu|cuda] [--out results.json]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(ROOT, "models", "minima-qwen3-23m")
PROMPT = ("Some special magic numbers are hidden within the following text. Make sure to memorize it.\n"
          "One of the special magic numbers for quiet-harbor is: 4417302.\n" +
          "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n" * 12 +
          "What is the special magic number for quiet-harbor mentioned in the provided text? The special magic "
          "number for quiet-harbor mentioned in the provided text is")


def random_models(tmp):
    shapes = [
        ("qwen3-gqa-tied", Qwen3Config(vocab_size=8192, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                                       num_attention_heads=8, num_key_value_heads=2, head_dim=64, tie_word_embeddings=True,
                                       max_position_embeddings=4096, rope_theta=1e6)),
        ("qwen3-mha-untied", Qwen3Config(vocab_size=8192, hidden_size=256, intermediate_size=384, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, head_dim=128,
                                         tie_word_embeddings=False, max_position_embeddings=4096)),
        ("llama-gqa-rope3", LlamaConfig(vocab_size=8192, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=8192,
                                        rope_theta=500000.0, tie_word_embeddings=False,
                                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 1024})),
    ]
    out = []
    for name, cfg in shapes:
        torch.manual_seed(0)
        cls = AutoModelForCausalLM.from_config(cfg)
        d = os.path.join(tmp, name)
        cls.save_pretrained(d, safe_serialization=True)
        shutil.copy(os.path.join(SHIPPED, "tokenizer.json"), d)
        out.append((name, d))
    return out


def ours(binary, model_dir, tokens, device):
    res = subprocess.run([binary, "generate", "--device", device, "--model", model_dir, "--prompt", PROMPT,
                          "--kv", "bf16", "--json",
                          "--prompt-logits", "--max-tokens", str(tokens), "--page-size", "32",
                          "--prefill-chunk", "64"], capture_output=True, check=True)
    return json.loads(res.stdout)


def reference(model_dir, ids, tokens, dtype):
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    m.eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = m(x).logits[0, -1].float()
        gen = m.generate(x, max_new_tokens=tokens, do_sample=False, eos_token_id=0, pad_token_id=0)
    return logits, gen[0, len(ids):].tolist()


def near_tie(model_dir, ids, ours_gen, ref_gen):
    """At the first position where the greedy continuations part, the fp32 reference's logit margin
    between its token and ours, and transformers' own BF16 perturbation of the logits there (max |bf16 -
    fp32|). A margin within that perturbation is a near-tie: transformers' BF16 model could flip it too."""
    p = next(i for i in range(min(len(ours_gen), len(ref_gen))) if ours_gen[i] != ref_gen[i])
    x = torch.tensor([ids + ref_gen[:p]])
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        m.eval()
        with torch.no_grad():
            out[dtype] = m(x).logits[0, -1].float()
    l32, l16 = out[torch.float32], out[torch.bfloat16]
    margin = float(l32[ref_gen[p]] - l32[ours_gen[p]])
    perturbation = float((l16 - l32).abs().max())
    return {"position": p, "reference_token": ref_gen[p], "our_token": ours_gen[p], "fp32_logit_margin": margin,
            "transformers_bf16_max_logit_change": perturbation, "near_tie": margin <= perturbation}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args()
    ids = Tokenizer.from_file(os.path.join(SHIPPED, "tokenizer.json")).encode(PROMPT).ids
    results, bad = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, d in [("shipped minima-qwen3-23m", SHIPPED)] + random_models(tmp):
            tokens = 64
            o = ours(args.bin, d, tokens, args.device)
            ref32, gen32 = reference(d, ids, tokens, torch.float32)
            ref16, _ = reference(d, ids, tokens, torch.bfloat16)
            mine = torch.tensor(o["prompt_logits"])
            err = float((mine - ref32).norm() / ref32.norm())
            err16 = float((ref16 - ref32).norm() / ref32.norm())
            ours_gen = o["tokens"]
            gen32 = [t for t in gen32 if t != 0][: len(ours_gen)] if 0 in gen32 else gen32
            same = ours_gen == gen32[: len(ours_gen)] and len(ours_gen) >= min(len(gen32), tokens)
            tie = None
            if not same and any(a != b for a, b in zip(ours_gen, gen32)):
                tie = near_tie(d, ids, ours_gen, gen32)
            ok = err <= 2 * err16 and (same or (tie is not None and tie["near_tie"]))
            bad += 0 if ok else 1
            results.append({"model": name, "device": args.device, "prompt_tokens": len(ids), "logits_rel_err_vs_fp32": err,
                            "transformers_bf16_rel_err_vs_fp32": err16, "greedy_tokens_compared": len(ours_gen),
                            "greedy_identical": same, "divergence": tie, "ok": ok})
            how = "identical" if same else (
                f"part at token {tie['position']}: fp32 margin {tie['fp32_logit_margin']:.4f} vs transformers' bf16 "
                f"change {tie['transformers_bf16_max_logit_change']:.4f} ({'near-tie' if tie['near_tie'] else 'NOT a tie'})"
                if tie else "DIFFER")
            print(f"{name:26s} logits rel err {err:.2e} (transformers bf16: {err16:.2e})  greedy {len(ours_gen)} "
                  f"tokens {how}  {'ok' if ok else 'FAIL'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
