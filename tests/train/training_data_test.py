#!/usr/bin/env python3
"""The embedded model's training data (scripts/train/niah_data.py) against what it promises.

- The phrasing parts on disk are phrasing_parts.py's split, recomputed here from the hash, and the sides
  are disjoint.
- Training examples never use a held-out part: no held-out needle frame, question, prefix or intro (each
  turned into a pattern here) and no held-out noun appears in any of a few hundred composed examples.
- Every answer is recomputed from the prompt's text: the needles carry the expected values; vt's chain is
  followed from the queried value; cwe's and fwe's word counts give the expected words, with a strict gap.
Run: python3 tests/train/training_data_test.py --data data   (data from scripts/data/extract_corpus.py)
"""
import argparse
import hashlib
import os
import random
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts", "train"))
sys.path.insert(0, os.path.join(ROOT, "scripts", "data"))
import niah_data  # noqa: E402
import phrasing_parts  # noqa: E402

CATEGORIES = ("nouns", "verbs", "needles", "questions", "prefixes", "intros")


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def split_on_disk_is_the_hash_split(data):
    for cat in CATEGORIES:
        sides = {}
        for side in ("train", "eval"):
            with open(os.path.join(data, "phrasings", f"{side}_{cat}.txt")) as f:
                sides[side] = [line.rstrip("\n") for line in f if line.strip()]
        check(not set(sides["train"]) & set(sides["eval"]), f"{cat}: a part on both sides")
        check(set(sides["train"]) | set(sides["eval"]) == set(phrasing_parts.PARTS[cat]), f"{cat}: parts lost")
        for part in phrasing_parts.PARTS[cat]:
            h = int.from_bytes(hashlib.blake2b(f"phrase:{cat}:{part}".encode(), digest_size=8).digest(), "little")
            want = "eval" if h % phrasing_parts.HELDOUT_MOD == 0 else "train"
            check(part in sides[want], f"{cat}: '{part}' is not on its hash's side ({want})")


# What a placeholder of a training example can be filled with: keys and values are adjective-noun words,
# 7-digit numbers, UUIDs or letter-digit codes; nouns one or two words; verbs up to four words.
ATOM = r"(?:[a-z]+-[a-z]+|\d{7}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[A-Z0-9]{4}-[A-Z0-9]{3,5})"
FILL = {"key": ATOM, "value": ATOM, "query": r"[^\n?]{1,400}?", "noun": r"[A-Za-z]+(?: [a-z]+)?",
        "nq": r"[A-Za-z]+(?: [a-z]+)?", "verb": r"[a-z]+(?: [a-z]+){0,3}", "be": r"(?:is|are)"}


def frame_pattern(frame):
    """A regex matching any filling of `frame` with what training examples fill placeholders with."""
    out = ""
    for piece in re.split(r"(\{[a-z]+\})", frame):
        m = re.fullmatch(r"\{([a-z]+)\}", piece)
        out += FILL[m.group(1)] if m else re.escape(piece)
    return re.compile(out, re.IGNORECASE)  # training lower-cases some parts


def training_never_uses_held_out_parts(data, rng):
    held = niah_data.load_phrasings(data, "eval")
    gen = niah_data.Generator(niah_data.load_words(data, "train"),
                              niah_data.load_sentences(os.path.join(data, "corpus", "train.txt"), 2_000_000), rng,
                              niah_data.load_phrasings(data, "train"), random_noun_frac=0.5,
                              heldout_words=niah_data.phrasing_words(data, "eval"), vary_frac=0.5, synth_frac=0.5,
                              synth_needle_frac=0.5)
    # Needle frames are matched in the context, questions and prefixes in the last line, intros in the first.
    needle_pats = [frame_pattern(f) for f in held["needles"]]
    tail_pats = [frame_pattern(f) for f in held["questions"] + held["prefixes"]]
    held_nouns = {w for n in held["nouns"] for w in n.split("|")}
    tasks = list(niah_data.RULER_TASKS) + ["mixed"]
    for i in range(240):
        prompt, answer, expected = gen.example(rng.randint(600, 2500), tasks[i % len(tasks)], "composed")
        head, tail = prompt.split("\n", 1)[0], prompt.rsplit("\n", 1)[1]
        check(head not in held["intros"], f"held-out intro in training: {head}")
        for p in tail_pats:
            check(not p.search(tail), f"held-out question or prefix in training: {tail}")
        for p in needle_pats:
            m = p.search(prompt)
            check(not m, f"held-out needle frame in training: {m.group(0) if m else ''}")
        # The question's words, keys (hyphenated words, UUIDs, codes) left out: keys come from the word lists.
        plain = " ".join(w.strip(".,:?") for w in tail.split() if "-" not in w)
        for n in held_nouns:
            check(not re.search(rf"\b{re.escape(n)}\b", plain), f"held-out noun '{n}' in a training question: {tail}")
        for v in expected:
            check(v in prompt and v in answer, f"value {v} missing")


def synthesized_questions_are_many_and_never_held_out(data, rng):
    """The question grammar: thousands of distinct shapes, every one a well-formed template (only the
    {nq}, {be} and {query} slots left), none matching a held-out question or answer start or naming a
    held-out noun, and an answer start left out in some of them."""
    held = niah_data.load_phrasings(data, "eval")
    tail_pats = [frame_pattern(f) for f in held["questions"] + held["prefixes"]]
    held_nouns = {w for n in held["nouns"] for w in n.split("|")}
    gen = niah_data.Generator(niah_data.load_words(data, "train"), ["A sentence of prose here."] * 50, rng,
                              niah_data.load_phrasings(data, "train"), synth_frac=1.0)
    seen, empty = set(), 0
    for _ in range(4000):
        q, p = gen.synth_question()
        seen.add((q, p))
        empty += p == ""
        for t in (q, p):
            check(set(re.findall(r"\{([a-z_]+)\}", t)) <= {"nq", "be", "query"}, f"an unfilled slot in '{t}'")
        check("{query}" in q and "{nq}" in q, f"the question names neither key nor noun: {q}")
        tail = q.format(be="is", nq="locker key", query="calm-owl") + " " + p.format(be="is", nq="locker key",
                                                                                      query="calm-owl")
        for pat in tail_pats:
            check(not pat.search(tail), f"held-out question or answer start synthesized: {tail}")
        for n in held_nouns:
            check(not re.search(rf"\b{re.escape(n)}\b", tail.replace("calm-owl", "")), f"held-out noun '{n}': {tail}")
    check(len(seen) > 2500, f"only {len(seen)} distinct question shapes in 4000 draws")
    check(200 < empty < 1200, f"{empty} of 4000 without an answer start")
    # Composed examples with no answer start end with the question: the answer follows it directly.
    gen.vary_frac = 0.0
    for _ in range(200):
        prompt, answer, expected = gen.example(rng.randint(600, 1500), "niah_single_2", "composed")
        check(not prompt.endswith(" ") and answer.startswith(" ") and not answer.startswith("  "),
              f"spacing at the answer: {prompt[-60:]!r} + {answer!r}")


def synthesized_needles_are_many_and_never_held_out(data, rng):
    """The needle grammar: thousands of distinct statements, each a frame with exactly the {noun}, {key},
    {value} (and maybe {verb}) slots, none matching a held-out needle frame or naming a held-out noun; in
    composed examples the needles carry every asked value and the answer is unchanged."""
    held = niah_data.load_phrasings(data, "eval")
    needle_pats = [frame_pattern(f) for f in held["needles"]]
    held_nouns = {w for n in held["nouns"] for w in n.split("|")}
    gen = niah_data.Generator(niah_data.load_words(data, "train"), ["A sentence of prose here."] * 50, rng,
                              niah_data.load_phrasings(data, "train"), synth_needle_frac=1.0)
    seen = set()
    for _ in range(4000):
        frame = gen.synth_needle()
        seen.add(frame)
        slots = set(re.findall(r"\{([a-z_]+)\}", frame))
        check({"noun", "key", "value"} <= slots <= {"noun", "key", "value", "verb"}, f"slots of '{frame}'")
        check(frame.endswith(".") and "  " not in frame, f"malformed statement: {frame!r}")
        for verb in ("is", "has been recorded as"):
            text = frame.format(noun="locker key", key="calm-owl", value="1234567", verb=verb)
            for pat in needle_pats:
                check(not pat.search(text), f"held-out needle frame synthesized: {text}")
            for n in held_nouns:
                check(not re.search(rf"\b{re.escape(n)}\b", text.replace("calm-owl", "")), f"held-out noun '{n}': {text}")
    check(len(seen) > 2000, f"only {len(seen)} distinct needle statements in 4000 draws")
    gen.vary_frac = 0.0
    for task in ("niah_single_2", "niah_multikey_1", "niah_multivalue", "niah_multiquery"):
        for _ in range(20):
            prompt, answer, expected = gen.example(rng.randint(800, 2000), task, "composed")
            for v in expected:
                check(v in prompt and v in answer, f"value {v} missing from a synthesized-needle example")
            check(answer == " " + niah_data.join_keys(expected) + ".", f"answer text: {answer!r}")


def variable_tracking_answers_follow_the_chain(gen, rng):
    for _ in range(40):
        prompt, answer, expected = gen.variable_tracking(rng.randint(800, 6000))
        value = re.search(r"assigned the value (\d+) in the text above", prompt).group(1)
        assign = dict(re.findall(r"^VAR ([A-Z]{5}) = (\d+|VAR [A-Z]{5})\.$", prompt, re.M))
        holding, grew = set(), True
        while grew:  # every variable whose assignment leads to the value
            grew = False
            for var, rhs in assign.items():
                if var not in holding and (rhs == value or (rhs.startswith("VAR ") and rhs[4:] in holding)):
                    holding.add(var)
                    grew = True
        check(holding == set(expected), f"vt: chain {sorted(holding)} != expected {expected}")
        order = [m for m in re.findall(r"^VAR ([A-Z]{5}) =", prompt, re.M) if m in holding]
        check(order == expected, "vt: the answer lists the chain in its order")
        check(answer == " " + ", ".join(expected) + ".", "vt: answer text")
        check(f"{len(expected)} variables" in prompt, "vt: the prefix names the chain's length")


def common_words_are_the_most_common(gen, rng):
    for _ in range(30):
        prompt, answer, expected = gen.common_words(rng.randint(3000, 30000))
        n = int(re.search(r"What are the (\d+) most common words", prompt).group(1))
        entries = re.findall(r"^(\d+)\. ([a-z]+)$", prompt, re.M)
        check([int(i) for i, _ in entries] == list(range(1, len(entries) + 1)), "cwe: numbering")
        counts = {}
        for _, w in entries:
            counts[w] = counts.get(w, 0) + 1
        ranked = sorted(counts.values(), reverse=True)
        check(len(expected) == n and set(expected) == {w for w, c in counts.items() if c >= ranked[n - 1]},
              "cwe: expected are the top words")
        check(len(ranked) > n and ranked[n - 1] > ranked[n], "cwe: a strict gap after the common words")
        check(answer == " " + ", ".join(expected) + ".", "cwe: answer text")
        if gen.cwe_first_order:
            first = [w for i, (_, w) in enumerate(entries) if w in expected and w not in (e for _, e in entries[:i])]
            check(expected == first, "cwe: the answer lists the common words as they first appear")


def frequent_words_are_the_most_frequent(gen, rng):
    for _ in range(30):
        prompt, answer, expected = gen.frequent_words(rng.randint(2000, 30000))
        body = prompt.split("\n", 1)[1].rsplit("\nQuestion:", 1)[0]
        counts = {}
        for w in body.split():
            counts[w] = counts.get(w, 0) + 1
        top = sorted(counts.items(), key=lambda x: -x[1])
        check([c for _, c in top[:3]] == sorted((counts[w] for w in expected), reverse=True), "fwe: top counts")
        check([counts[w] for w in expected] == sorted((counts[w] for w in expected), reverse=True), "fwe: order")
        check(top[2][1] > top[3][1], "fwe: a strict gap after the third word")


def ruler_defaults_are_rulers(data, rng):
    gen = niah_data.Generator(niah_data.load_words(data, "eval"), ["A sentence of prose here."] * 50, rng,
                              niah_data.load_phrasings(data, "eval"), ruler_defaults=True)
    for _ in range(5):
        check(len(gen.variable_tracking(4000)[2]) == 5, "vt: one chain of four hops")
        check(len(gen.common_words(12000)[2]) == 10, "cwe: ten common words")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "data"))
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    args = ap.parse_args()
    print(f"seed {args.seed}")
    rng = random.Random(args.seed)
    words = niah_data.load_words(args.data, "train")
    gen = niah_data.Generator(words, ["A sentence of prose here."] * 50, rng, niah_data.load_phrasings(args.data, "train"))
    for test in (lambda: split_on_disk_is_the_hash_split(args.data),
                 lambda: training_never_uses_held_out_parts(args.data, rng),
                 lambda: synthesized_questions_are_many_and_never_held_out(args.data, rng),
                 lambda: synthesized_needles_are_many_and_never_held_out(args.data, rng),
                 lambda: variable_tracking_answers_follow_the_chain(gen, rng),
                 lambda: common_words_are_the_most_common(gen, rng),
                 lambda: common_words_are_the_most_common(
                     niah_data.Generator(words, ["A sentence."] * 50, rng, niah_data.load_phrasings(args.data, "train"),
                                         cwe_first_order=True), rng),
                 lambda: frequent_words_are_the_most_frequent(gen, rng),
                 lambda: ruler_defaults_are_rulers(args.data, rng)):
        test()
    print("training data: all checks passed")


if __name__ == "__main__":
    main()
