#!/usr/bin/env python3
"""Extract the training/evaluation text corpus and key word lists from Debian packages.

Sources (installed by scripts/bootstrap.sh): python3.11-doc (reStructuredText sources of the Python
documentation, PSF licence), linux-doc-6.1 (kernel Documentation/*.rst, GPL-2.0) and wordnet-base
(WordNet 3.0 index files, WordNet licence).

Outputs (under --out, default data/):
  corpus/train.txt        training prose, one document per block, documents separated by "\\n\\f\\n"
  corpus/essay.txt        held-out prose (the "essay" haystack of the evaluation), never trained on
  words/train_adjectives.txt, words/train_nouns.txt   key vocabulary for training
  words/eval_adjectives.txt,  words/eval_nouns.txt    disjoint key vocabulary reserved for evaluation
  phrasings/{train,eval}_{nouns,verbs,needles,questions,prefixes,intros}.txt
                          the retrieval prompts' parts (phrasing_parts.py), split by hash: training
                          composes examples from train_*, the held-out-phrasing evaluation from eval_*

The split is a pure function of each file's path (blake2b), so it is identical on every machine with the
same package versions. Only the standard library is used.
"""
import argparse
import gzip
import hashlib
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import phrasing_parts  # noqa: E402

PY_DOC = "/usr/share/doc/python3.11/html/_sources"
LINUX_DOC = "/usr/share/doc/linux-doc-6.1/Documentation"
WORDNET = "/usr/share/wordnet"
DICT_WORDS = "/usr/share/dict/words"

HELDOUT_MOD = 10  # one file in ten (by path hash) is held out as the essay haystack


def path_bucket(path: str, mod: int) -> int:
    h = hashlib.blake2b(path.encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") % mod


ROLE = re.compile(r":[a-zA-Z:+-]+:`([^`<]*?)(?:\s*<[^>]*>)?`")
LINK = re.compile(r"`([^`<]+?)(?:\s*<[^>]*>)?`_{1,2}")
LITERAL = re.compile(r"``([^`]+)``")
EMPH = re.compile(r"(\*\*|\*)([^*\n]+)\1")
SUBST = re.compile(r"\|[a-zA-Z0-9_-]+\|")
UNDERLINE = re.compile(r"^\s*([=\-~^\"'`#*+.:_])\1{2,}\s*$")


def clean_rst(text: str) -> list[str]:
    """Return prose paragraphs: directives, code blocks, tables and headings removed."""
    lines = text.replace("\r", "").split("\n")
    out_pars, cur = [], []
    skip_indent = None  # skip an indented block (directive body / literal block)
    prev_ends_literal = False
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if skip_indent is not None:
            if stripped == "" or indent > skip_indent:
                continue
            skip_indent = None
        if stripped.startswith(".. ") or stripped == "..":
            skip_indent = indent
            if cur:
                out_pars.append(" ".join(cur))
                cur = []
            continue
        if UNDERLINE.match(line) or stripped.startswith("+-") or stripped.startswith("|"):
            if cur:
                cur.pop() if UNDERLINE.match(line) and len(cur) == 1 else None
            if cur:
                out_pars.append(" ".join(cur))
            cur = []
            continue
        if stripped == "":
            if cur:
                out_pars.append(" ".join(cur))
                cur = []
            if prev_ends_literal:
                skip_indent = 0
                prev_ends_literal = False
            continue
        if indent >= 4 and not cur:
            continue  # code or quoted block
        if stripped.startswith(">>>") or stripped.startswith("$ ") or stripped.startswith("#"):
            continue
        cur.append(stripped)
        prev_ends_literal = stripped.endswith("::")
    if cur:
        out_pars.append(" ".join(cur))
    pars = []
    for p in out_pars:
        p = p.replace("::", ":")
        p = ROLE.sub(r"\1", p)
        p = LINK.sub(r"\1", p)
        p = LITERAL.sub(r"\1", p)
        p = EMPH.sub(r"\2", p)
        p = SUBST.sub("", p)
        p = re.sub(r"\s+", " ", p).strip()
        letters = sum(c.isalpha() for c in p)
        if len(p) < 80 or letters < 0.6 * len(p):
            continue
        if p.startswith(("- ", "* ", ":", "=")):
            continue
        if not p.endswith((".", "?", "!", ":", ")")):
            continue
        pars.append(p)
    return pars


def read_text(path: str) -> str:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def collect_files():
    files = []
    for root, _, names in os.walk(PY_DOC):
        for n in names:
            if n.endswith(".rst.txt") or n.endswith(".txt"):
                files.append(os.path.join(root, n))
    for root, _, names in os.walk(LINUX_DOC):
        for n in names:
            if n.endswith(".rst.gz") or n.endswith(".rst"):
                files.append(os.path.join(root, n))
    files.sort()
    if not files:
        sys.exit("extract_corpus: no documentation found; run scripts/bootstrap.sh (python3.11-doc, linux-doc-6.1)")
    return files


def wordnet_lemmas(pos: str) -> list[str]:
    path = os.path.join(WORDNET, f"index.{pos}")
    words = []
    with open(path, encoding="latin-1") as f:
        for line in f:
            if line.startswith(" "):
                continue
            lemma = line.split(" ", 1)[0]
            # sense count: frequent words have many senses; keep common, simple lemmas only
            fields = line.split()
            if len(fields) < 3 or not lemma.isalpha() or not lemma.islower():
                continue
            if not 3 <= len(lemma) <= 10:
                continue
            if int(fields[2]) < 2:  # synset count >= 2 keeps everyday words
                continue
            words.append(lemma)
    return words


def word_lists():
    common = set()
    if os.path.exists(DICT_WORDS):
        with open(DICT_WORDS, encoding="utf-8", errors="replace") as f:
            common = {w.strip() for w in f if w.strip().isalpha() and w.strip().islower()}
    adjs = sorted(set(w for w in wordnet_lemmas("adj") if not common or w in common))
    nouns = sorted(set(w for w in wordnet_lemmas("noun") if not common or w in common))
    # A word may be both; keep it on one side only so an adjective-noun pair never reads twice.
    nouns = [w for w in nouns if w not in set(adjs)]
    split = {}
    for kind, ws in (("adjectives", adjs), ("nouns", nouns)):
        train = [w for w in ws if path_bucket("word:" + w, 2) == 0]
        evalw = [w for w in ws if path_bucket("word:" + w, 2) == 1]
        split[kind] = (train, evalw)
    return split


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="data")
    args = ap.parse_args()
    os.makedirs(os.path.join(args.out, "corpus"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "words"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "phrasings"), exist_ok=True)

    files = collect_files()
    n_train = n_held = 0
    b_train = b_held = 0
    with open(os.path.join(args.out, "corpus", "train.txt"), "w", encoding="utf-8") as ftr, \
         open(os.path.join(args.out, "corpus", "essay.txt"), "w", encoding="utf-8") as fes:
        for path in files:
            rel = os.path.relpath(path, "/usr/share/doc")
            pars = clean_rst(read_text(path))
            if not pars:
                continue
            doc = "\n".join(pars)
            if path_bucket(rel, HELDOUT_MOD) == 0:
                fes.write(doc + "\n")
                n_held += 1
                b_held += len(doc)
            else:
                ftr.write(doc + "\n\f\n")
                n_train += 1
                b_train += len(doc)
    split = word_lists()
    for kind, (train, evalw) in split.items():
        for name, ws in (("train", train), ("eval", evalw)):
            with open(os.path.join(args.out, "words", f"{name}_{kind}.txt"), "w") as f:
                f.write("\n".join(ws) + "\n")
    phrasings = phrasing_parts.split_parts()
    for cat, (train, held) in phrasings.items():
        for name, parts in (("train", train), ("eval", held)):
            with open(os.path.join(args.out, "phrasings", f"{name}_{cat}.txt"), "w") as f:
                f.write("\n".join(parts) + "\n")
    print(f"train: {n_train} documents, {b_train/1e6:.1f} MB; essay (held out): {n_held} documents, "
          f"{b_held/1e6:.1f} MB")
    for kind, (train, evalw) in split.items():
        print(f"{kind}: {len(train)} train, {len(evalw)} eval")
    print("phrasing parts (train/held out): " + ", ".join(f"{c} {len(t)}/{len(h)}" for c, (t, h) in phrasings.items()))


if __name__ == "__main__":
    main()
