"""Synthetic long-context retrieval data for training the embedded model.

RULER-style needle-in-a-haystack examples (the evaluation's templates are allowed in training) plus other
phrasings: passkeys, several keys with many near-identical distractor needles, several values per key,
several queries at once; keys and values as adjective-noun words, 7-digit numbers and version-4 UUIDs,
at depths spread through the context. Training draws keys only from the training half of the word lists;
the other half and the essay haystack are reserved for evaluation (see the model card).
"""
import os
import random
import re
import uuid

NOISE_LINE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
SINGULAR = {"numbers": "number", "words": "word", "uuids": "uuid"}


def load_words(data_dir, split):
    out = {}
    for kind in ("adjectives", "nouns"):
        with open(os.path.join(data_dir, "words", f"{split}_{kind}.txt")) as f:
            out[kind] = [w.strip() for w in f if w.strip()]
    return out


def load_sentences(path, limit_bytes=None):
    with open(path, encoding="utf-8") as f:
        text = f.read(limit_bytes) if limit_bytes else f.read()
    text = text.replace("\f", " ")
    sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) > 20]
    return sents


def join_keys(keys):
    if len(keys) == 1:
        return keys[0]
    return ", ".join(keys[:-1]) + ", and " + keys[-1]


# The eight RULER NIAH tasks: (haystack, key kind, value kind, keys, values per key, queries)
RULER_TASKS = {
    "niah_single_1": ("noise", "words", "numbers", 1, 1, 1),
    "niah_single_2": ("essay", "words", "numbers", 1, 1, 1),
    "niah_single_3": ("essay", "words", "uuids", 1, 1, 1),
    "niah_multikey_1": ("essay", "words", "numbers", 4, 1, 1),
    "niah_multikey_2": ("needle", "words", "numbers", 1, 1, 1),
    "niah_multikey_3": ("needle", "uuids", "uuids", 1, 1, 1),
    "niah_multivalue": ("essay", "words", "numbers", 1, 4, 1),
    "niah_multiquery": ("essay", "words", "numbers", 4, 1, 4),
}

# Other phrasings, so the model learns retrieval rather than one template.
ALT_NEEDLES = [
    "The {vs} assigned to {key} is {value}.",
    "Remember that {key} goes with the {vs} {value}.",
    "Note: the {vs} for {key} is {value}.",
]
ALT_QUESTIONS = [
    ("What {be} the {vx} assigned to {query}?", " The {vx} assigned to {query} {be}"),
    ("Which {vx} {be} stored for {query} in the text above?", " The {vx} stored for {query} {be}"),
]


class Generator:
    def __init__(self, words, sentences, rng):
        self.words = words
        self.sentences = sentences
        self.rng = rng

    # ---- atoms
    def key_word(self):
        return f"{self.rng.choice(self.words['adjectives'])}-{self.rng.choice(self.words['nouns'])}"

    def value(self, kind):
        if kind == "numbers":
            return str(self.rng.randint(1_000_000, 9_999_999))
        if kind == "words":
            return self.key_word()
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def atom(self, kind):
        return self.key_word() if kind == "words" else self.value(kind)

    def needle_sentence(self):
        v = self.rng.choice(list(SINGULAR))
        return f"One of the special magic {v} for {self.key_word()} is: {self.value(v)}."

    # ---- haystacks
    def _haystack_units(self, kind, n_chars, key_kind, val_kind, ruler_form, alt_form):
        units, total = [], 0
        if kind == "essay":
            i = self.rng.randrange(len(self.sentences))
            while total < n_chars:
                s = self.sentences[i % len(self.sentences)]
                units.append(s)
                total += len(s) + 1
                i += 1
        elif kind == "noise":
            while total < n_chars:
                units.append(NOISE_LINE)
                total += len(NOISE_LINE) + 1
        else:  # distractor needles in the same format as the real ones
            while total < n_chars:
                k, val = self.atom(key_kind), self.value(val_kind)
                s = self._needle(ruler_form, alt_form, k, val, val_kind)
                units.append(s)
                total += len(s) + 1
        return units

    def _needle(self, ruler_form, alt, key, value, val_kind):
        if ruler_form:
            return f"One of the special magic {val_kind} for {key} is: {value}."
        return alt.format(vs=SINGULAR[val_kind], key=key, value=value)

    def example(self, n_chars, task=None, ruler_form=None):
        """One retrieval example of about n_chars characters: (prompt, answer, values)."""
        rng = self.rng
        if task is None:
            task = rng.choice(list(RULER_TASKS) + ["niah_multikey_2", "niah_multikey_3", "passkey", "mixed"])
        if task == "passkey":
            return self.passkey(n_chars)
        if task == "mixed":
            hay = rng.choice(["noise", "essay", "needle"])
            key_kind = rng.choice(["words", "words", "uuids"])
            val_kind = rng.choice(["numbers", "words", "uuids"])
            spec = (hay, key_kind, val_kind, rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2, 4]), 1)
            spec = spec[:5] + (rng.randint(1, spec[3]),)
        else:
            spec = RULER_TASKS[task]
        hay, key_kind, val_kind, n_keys, n_vals, n_q = spec
        if ruler_form is None:
            ruler_form = rng.random() < 0.7
        alt = rng.choice(ALT_NEEDLES)
        keys = []
        while len(keys) < n_keys:
            k = self.atom(key_kind)
            if k not in keys:
                keys.append(k)
        values = {k: [self.value(val_kind) for _ in range(n_vals)] for k in keys}
        needles = [(k, v) for k in keys for v in values[k]]
        rng.shuffle(needles)
        needle_texts = [self._needle(ruler_form, alt, k, v, val_kind) for k, v in needles]
        units = self._haystack_units(hay, max(0, n_chars - sum(len(t) + 1 for t in needle_texts)),
                                     key_kind, val_kind, ruler_form, alt)
        # depths spread through the context: sorted uniform positions
        pos = sorted(rng.randint(0, len(units)) for _ in needle_texts)
        for off, (p, t) in enumerate(zip(pos, needle_texts)):
            units.insert(p + off, t)
        sep = " " if hay == "essay" else "\n"
        context = sep.join(units)
        queries = keys[:n_q]
        rng.shuffle(queries)
        expected = [v for q in queries for v in values[q]]
        query = join_keys(queries)
        singular = len(expected) == 1
        if ruler_form:
            v = SINGULAR[val_kind] if singular else val_kind
            head = (f"{'A' if singular else 'Some'} special magic {v} {'is' if singular else 'are'} hidden within the "
                    f"following text. Make sure to memorize it. I will quiz you about the {v} afterwards.\n")
            q = f"\nWhat {'is' if singular else 'are all'} the special magic {v} for {query} mentioned in the provided text?"
            prefix = f" The special magic {v} for {query} mentioned in the provided text {'is' if singular else 'are'}"
        else:
            vx = SINGULAR[val_kind] + ("" if singular else "s")
            be = "is" if singular else "are"
            qt, pt = rng.choice(ALT_QUESTIONS)
            head = "Read the following text carefully.\n"
            q = "\n" + qt.format(be=be, vx=vx, query=query)
            prefix = pt.format(vx=vx, query=query, be=be)
        answer = " " + join_keys(expected) + "." if len(expected) > 1 else " " + expected[0] + "."
        return head + context + q + prefix, answer, expected

    def passkey(self, n_chars):
        key = str(self.rng.randint(10_000, 9_999_999))
        needle = f"The pass key is {key}. Remember it. {key} is the pass key."
        units = self._haystack_units(self.rng.choice(["noise", "essay"]), n_chars, "words", "numbers", True, "")
        units.insert(self.rng.randint(0, len(units)), needle)
        prompt = ("There is important info hidden inside a lot of irrelevant text. Find it and memorize it.\n"
                  + " ".join(units) + "\nWhat is the pass key?" + " The pass key is")
        return prompt, " " + key + ".", [key]
