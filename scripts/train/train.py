#!/usr/bin/env python3
"""Train (or continue training) the embedded Qwen3-architecture model on one GPU.

One run fits in a time budget (default 9 minutes of optimisation) and ends by exporting bf16 weights in
the Hugging Face layout (config.json, tokenizer.json, model-0000N-of-0000M.safetensors shards of at most
16 MB). A later run may resume from those weights (--init); the optimizer starts fresh each run.

  python3 scripts/train/train.py --data data --tokenizer models/NAME/tokenizer.json --out OUTDIR \
      [--init models/NAME] [--minutes 9] [--seed 1]

Data: prose from data/corpus/train.txt (language modelling, low weight) and synthetic long-context tasks
(niah_data.py) whose answer tokens carry most of the loss: retrieval in RULER's template and in phrasings
composed from the train side of the phrasing parts, passkeys, and RULER's vt, cwe and fwe. Sequences come
in length buckets from 1K to 16K tokens, each bucket holding the same number of tokens per step. The quick
checks score RULER's NIAH tasks, the same shapes phrased from the held-out parts, and vt, cwe and fwe, all
on the held-out essay and key words.
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import niah_data  # noqa: E402

BUCKETS = [1024, 2048, 4096, 8192, 16384]
BUCKET_P = [0.15, 0.25, 0.3, 0.2, 0.1]
# Training tasks and their weights; the last two (distractor-needle shapes) get --hard-boost more draws.
TASKS = list(niah_data.RULER_TASKS) + ["mixed", "passkey", "vt", "cwe", "fwe"]
TASK_W = [1.0] * len(niah_data.RULER_TASKS) + [2.0, 0.5, 1.5, 1.5, 1.5]
TASKS += ["niah_multikey_2", "niah_multikey_3"]  # drawn --hard-boost more times


def build_config(vocab, args):
    from transformers import Qwen3Config
    return Qwen3Config(
        vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.ffn, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, head_dim=128,
        max_position_embeddings=32768, rope_theta=args.rope_theta, rms_norm_eps=1e-6, tie_word_embeddings=True,
        attention_bias=False, bos_token_id=0, eos_token_id=0, pad_token_id=1, sliding_window=None,
        use_sliding_window=False, max_window_layers=args.layers)


# ---------------------------------------------------------------- data workers
def worker(rank, args, queue, tokens_per_step):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args.tokenizer)
    rng = random.Random(args.seed * 1000 + rank)
    words = niah_data.load_words(args.data, "train")
    phrasings = niah_data.load_phrasings(args.data, "train")
    sents = niah_data.load_sentences(os.path.join(args.data, "corpus", "train.txt"))
    with open(os.path.join(args.data, "corpus", "train.txt"), encoding="utf-8") as f:
        docs = [d.strip() for d in f.read().split("\f") if d.strip()]
    gen = niah_data.Generator(words, sents, rng, phrasings, random_noun_frac=args.random_noun_frac,
                              heldout_words=niah_data.phrasing_words(args.data, "eval"), vary_frac=args.vary_frac,
                              cwe_first_order=args.cwe_order == "first", synth_frac=args.synth_frac,
                              synth_needle_frac=args.synth_needle_frac)
    eos, pad = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|pad|>")
    cpt = {}  # running chars per token per task family
    weights = [w * (args.agg_weight if t in niah_data.AGGREGATION_TASKS else 1.0) for t, w in zip(TASKS, TASK_W)]
    weights += [args.hard_boost] * 2
    while True:
        T = rng.choices(BUCKETS, args.bucket_p)[0]
        B = max(1, tokens_per_step // T)
        ids = np.full((B, T + 1), pad, dtype=np.int32)
        w = np.zeros((B, T + 1), dtype=np.float32)
        for b in range(B):
            if rng.random() < args.lm_frac:  # plain language modelling on prose
                row = []
                while len(row) < T + 1:
                    row += tok.encode(docs[rng.randrange(len(docs))]).ids + [eos]
                ids[b] = row[: T + 1]
                w[b, 1:] = args.lm_weight
                continue
            task = rng.choices(TASKS, weights)[0]
            form = "composed" if rng.random() < args.composed_frac else "ruler"
            key = (task, form)
            ratio = cpt.get(key, 3.0)
            target = int(rng.uniform(0.5, 0.97) * T * ratio) if rng.random() < 0.3 else int(0.95 * T * ratio)
            while True:
                prompt, answer, _ = gen.example(target, task, form)
                p = tok.encode(prompt).ids
                a = tok.encode(answer).ids + [eos]
                cpt[key] = ratio = 0.8 * ratio + 0.2 * (len(prompt) / max(1, len(p)))
                if len(p) + len(a) <= T + 1:
                    break
                target = int(target * 0.97 * (T + 1) / (len(p) + len(a)))  # never cut a task's context
            row = p + a
            ids[b, : len(row)] = row
            w[b, 1 : len(p)] = args.ctx_weight
            w[b, len(p) : len(row)] = 1.0
        queue.put((ids, w))


# ---------------------------------------------------------------- quick checks
EVAL_GROUPS = {"ruler": list(niah_data.RULER_TASKS), "heldout": list(niah_data.RULER_TASKS),
               "aggregation": list(niah_data.AGGREGATION_TASKS)}


@torch.no_grad()
def quick_eval(model, tok, args, length, n_per_task, seed):
    """Greedy answers on held-out essay, key words and (group "heldout") phrasing parts; per-task scores
    (RULER's string_match_all, in %) and one macro per group."""
    words = niah_data.load_words(args.data, "eval")
    sents = niah_data.load_sentences(os.path.join(args.data, "corpus", "essay.txt"))
    gen = niah_data.Generator(words, sents, random.Random(seed), niah_data.load_phrasings(args.data, "eval"),
                              ruler_defaults=True)
    eos = tok.token_to_id("<|endoftext|>")
    model.eval()
    res = {}
    for group, tasks in EVAL_GROUPS.items():
        form = "composed" if group == "heldout" else "ruler"
        scores_g = []
        for task in tasks:
            scores, chars = [], length * 3.0
            for _ in range(n_per_task):
                while True:
                    prompt, _, expected = gen.example(int(chars), task, form)
                    ids = tok.encode(prompt).ids
                    if len(ids) <= length - 64:
                        break
                    chars *= 0.97 * (length - 64) / len(ids)
                x = torch.tensor([ids], device=args.device)
                out = model.generate(x, max_new_tokens=64, do_sample=False, eos_token_id=eos, pad_token_id=eos)
                text = tok.decode(out[0, len(ids):].tolist()).lower()
                scores.append(sum(e.lower() in text for e in expected) / len(expected))
            name = ("heldout_" + task.removeprefix("niah_")) if group == "heldout" else task
            res[name] = round(100.0 * sum(scores) / len(scores), 1)
            scores_g.append(res[name])
        res["macro_" + group] = round(sum(scores_g) / len(scores_g), 1)
    model.train()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--init", default=None, help="resume from exported weights (fresh optimizer)")
    ap.add_argument("--minutes", type=float, default=9.0, help="optimisation time budget")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (overrides --minutes)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--tokens-per-step", type=int, default=131072)
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--ffn", type=int, default=640)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--rope-theta", type=float, default=1e6)
    ap.add_argument("--lm-frac", type=float, default=0.15)
    ap.add_argument("--lm-weight", type=float, default=0.3)
    ap.add_argument("--ctx-weight", type=float, default=0.03)
    ap.add_argument("--composed-frac", type=float, default=0.6,
                    help="share of retrieval examples phrased from the train phrasing parts (the rest: RULER's)")
    ap.add_argument("--random-noun-frac", type=float, default=0.5,
                    help="share of composed examples whose hidden thing is a random noun of the train words")
    ap.add_argument("--vary-frac", type=float, default=0.5,
                    help="share of composed examples with perturbed parts (words swapped, inserted, dropped)")
    ap.add_argument("--synth-frac", type=float, default=0.0,
                    help="share of composed examples whose question and answer start come from niah_data's "
                         "question grammar (SYNTH_*) instead of the train phrasing parts")
    ap.add_argument("--synth-needle-frac", type=float, default=0.0,
                    help="share of composed examples whose needle statements come from niah_data's needle "
                         "grammar (SYNTH_NEEDLE_*) instead of the train needle frames")
    ap.add_argument("--eval-every", type=float, default=3.0, help="minutes between quick evals")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--bucket-p", type=float, nargs=len(BUCKETS), default=BUCKET_P,
                    help="probability of each length bucket " + str(BUCKETS))
    ap.add_argument("--agg-weight", type=float, default=1.0, help="scales the draws of vt, cwe and fwe")
    ap.add_argument("--cwe-order", choices=["random", "first"], default="random",
                    help="order of the common words in cwe answers: random, or as they first appear in the list")
    ap.add_argument("--hard-boost", type=int, default=1, help="extra draws of the distractor-needle tasks")
    ap.add_argument("--final-eval-lengths", type=int, nargs="*", default=[4096, 16384])
    ap.add_argument("--final-eval-n", type=int, default=4)
    args = ap.parse_args()

    from tokenizers import Tokenizer
    from transformers import Qwen3ForCausalLM
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    tok = Tokenizer.from_file(args.tokenizer)
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "train_log.jsonl"), "a")

    def emit(rec):
        rec["t"] = round(time.time() - t0, 1)
        print(json.dumps(rec), flush=True)
        log.write(json.dumps(rec) + "\n")
        log.flush()

    t0 = time.time()
    if args.init:
        model = Qwen3ForCausalLM.from_pretrained(args.init, dtype=torch.float32, attn_implementation="sdpa")
    else:
        cfg = build_config(tok.get_vocab_size(), args)
        cfg._attn_implementation = "sdpa"
        model = Qwen3ForCausalLM(cfg)
    model.to(args.device)
    n_params = sum(p.numel() for p in model.parameters())
    emit({"event": "start", "params": n_params, "init": args.init, "args": vars(args)})

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=args.device == "cuda")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue(maxsize=64)
    procs = [ctx.Process(target=worker, args=(r, args, queue, args.tokens_per_step), daemon=True)
             for r in range(args.workers)]
    for p in procs:
        p.start()

    budget = args.minutes * 60.0
    t_train = time.time()
    step, seen, last_eval = 0, 0, time.time()
    ema = None
    while True:
        elapsed = time.time() - t_train
        frac = step / args.steps if args.steps else elapsed / budget
        if frac >= 1.0:
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup)
        lr *= args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, w = queue.get()
        ids = torch.from_numpy(ids).to(args.device, non_blocking=True).long()
        w = torch.from_numpy(w).to(args.device, non_blocking=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=args.device == "cuda"):
            hidden = model.model(input_ids=ids[:, :-1]).last_hidden_state
            logits = model.lm_head(hidden)
        loss_tok = F.cross_entropy(logits.float().view(-1, logits.size(-1)), ids[:, 1:].reshape(-1),
                                   reduction="none")
        wt = w[:, 1:].reshape(-1)
        loss = (loss_tok * wt).sum() / wt.sum().clamp_min(1.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += ids.numel()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 50 == 0:
            ans = (w[:, 1:] == 1.0).reshape(-1)
            ans_loss = loss_tok[ans].mean().item() if ans.any() else float("nan")
            emit({"step": step, "loss": round(ema, 4), "answer_loss": round(ans_loss, 4), "lr": lr,
                  "tokens": seen, "tok_per_s": round(seen / (time.time() - t_train))})
        if time.time() - last_eval > args.eval_every * 60:
            try:
                emit({"step": step, "quick_eval_4k": quick_eval(model, tok, args, 4096, 2, 7)})
            except Exception as e:  # a check must not end a run
                emit({"step": step, "quick_eval_error": repr(e)})
            last_eval = time.time()

    for p in procs:
        p.terminate()
    final = {"step": step, "tokens": seen, "train_seconds": round(time.time() - t_train, 1)}
    # Export first: the checks below only read the model.
    model.to(torch.bfloat16).save_pretrained(args.out, max_shard_size="16MB", safe_serialization=True)
    with open(args.tokenizer, "rb") as src, open(os.path.join(args.out, "tokenizer.json"), "wb") as dst:
        dst.write(src.read())
    model.float()
    for length in args.final_eval_lengths:
        try:
            final[f"quick_eval_{length // 1024}k"] = quick_eval(model, tok, args, length, args.final_eval_n, 11)
        except Exception as e:
            final[f"quick_eval_{length // 1024}k_error"] = repr(e)
    emit({"event": "done", **final})


if __name__ == "__main__":
    main()
