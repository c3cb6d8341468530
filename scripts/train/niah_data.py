"""Synthetic long-context data for training the embedded model (and for train.py's quick checks).

Retrieval (NIAH) examples come in two forms: RULER's own template (the evaluation's RULER tasks use it;
training on it is allowed) and composed phrasings, one part of each category of phrasing_parts.py (what
is hidden, how it is stated, asked and answered). Training composes from the train side of every
category only; the held-out side, like the essay haystack and the evaluation key words, is read only by
the evaluation. Besides the eight RULER NIAH shapes: passkeys, mixed shapes (1-8 keys, 1-4 values per
key, distractor needles), and RULER's variable tracking (vt), common words extraction (cwe) and frequent
words extraction (fwe) with the templates of the C++ evaluation (src/eval/ruler_synthetic.cpp). Keys and
values: adjective-noun words, 7-digit numbers, version-4 UUIDs and (training only) letter-digit codes.
"""
import bisect
import os
import random
import re
import uuid

NOISE_LINE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
SINGULAR = {"numbers": "number", "words": "word", "uuids": "uuid"}
PHRASING_CATEGORIES = ("nouns", "verbs", "needles", "questions", "prefixes", "intros")


def load_words(data_dir, split):
    out = {}
    for kind in ("adjectives", "nouns"):
        with open(os.path.join(data_dir, "words", f"{split}_{kind}.txt")) as f:
            out[kind] = [w.strip() for w in f if w.strip()]
    return out


def load_phrasings(data_dir, split):
    out = {}
    for cat in PHRASING_CATEGORIES:
        with open(os.path.join(data_dir, "phrasings", f"{split}_{cat}.txt")) as f:
            out[cat] = [line.rstrip("\n") for line in f if line.strip()]
    return out


def phrasing_words(data_dir, split):
    """Every lowercase word of a side's phrasing parts (to keep them out of training's random nouns)."""
    out = set()
    for parts in load_phrasings(data_dir, split).values():
        for part in parts:
            out.update(w.lower() for w in re.findall(r"[A-Za-z]+", re.sub(r"\{[a-z_]+\}", " ", part)))
    return out


def load_sentences(path, limit_bytes=None):
    with open(path, encoding="utf-8") as f:
        text = f.read(limit_bytes) if limit_bytes else f.read()
    text = text.replace("\f", " ")
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) > 20]


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
AGGREGATION_TASKS = ("vt", "cwe", "fwe")

# A grammar of questions and answer starts (training only, --synth-frac): a lead-in, a wh-question, an
# imperative or a polite request, a relation between the hidden thing and the key, a pointer back to the
# context, and an answer start (possibly none, so the answer follows the question directly). Tens of
# thousands of shapes instead of the parts lists' few dozen, none of them a held-out part (the training
# data test checks it). The slots use {nq}, {be} and {query} like the parts; {imp} and {rel} are filled here.
SYNTH_LEADS = ("", "", "", "", "Question:", "Q:", "Now,", "Quick check:", "One last thing:", "Final question:",
               "Based on the passage,", "Going over the passage again,", "Considering everything above,", "Okay.",
               "Task:", "Next:", "Memory test:")
SYNTH_REL = ("of", "for", "linked to", "belonging to", "attached to", "paired with", "that goes with", "tied to",
             "given for", "listed for", "assigned to", "connected to", "stored under", "kept for", "set for")
SYNTH_IMP = ("state", "report", "write down", "provide", "quote", "repeat", "recall", "identify", "find",
             "retrieve", "show", "output", "spell out", "copy out", "list", "return", "print", "fetch", "extract")
SYNTH_ASK = (("what {be} the {nq} {rel} {query}", "?"), ("which {nq} {be} {rel} {query}", "?"),
             ("what {nq} {be} {rel} {query}", "?"), ("{imp} the {nq} {rel} {query}", "."),
             ("please {imp} the {nq} {rel} {query}", "."), ("can you {imp} the {nq} {rel} {query}", "?"),
             ("could you {imp} the {nq} {rel} {query}", "?"), ("I need you to {imp} the {nq} {rel} {query}", "."),
             ("I would like the {nq} {rel} {query}", "."), ("do you remember the {nq} {rel} {query}", "?"),
             ("what was the {nq} {rel} {query}", "?"), ("{query}: {imp} its {nq}", "."))
SYNTH_REFS = ("", "", "", "in the passage", "from the passage", "in the context", "that appeared earlier",
              "mentioned earlier", "from earlier on", "in what you just read", "somewhere above", "in the material")
SYNTH_PREFIXES = ("", "", "Reply:", "Response:", "Output:", "A:", "Solution:", "Final:", "The {nq} {rel} {query} {be}",
                  "The {nq} {be}", "That would be", "It is", "Sure:", "Okay, the {nq} {be}", "Got it. The {nq} {be}",
                  "As stated, the {nq} {be}", "The passage gives", "{query}:")

# A grammar of needle statements (training only, --synth-needle-frac), as SYNTH_ASK is for questions: a
# lead-in, a statement shape that puts the key, the hidden thing and the value in many orders, a relation
# and a closing remark. Relations and lead-ins of the held-out needle frames ("associated with", "that
# belongs to", "Note:", "Record:", ...) are left out, and the training data test checks that no drawn
# statement matches a held-out frame. Slots: {noun}, {key}, {value}, {verb} as in the parts' frames.
SYNTH_NEEDLE_LEADS = ("", "", "", "", "Reminder:", "For the record,", "Heads up:", "FYI,", "As of today,",
                      "Just so you know,", "Officially,", "Per the memo,", "Quick fact:", "Listen:", "To be clear,",
                      "One more detail:", "Worth remembering:", "From the notes:")
SYNTH_NEEDLE_REL = ("of", "for", "linked to", "assigned to", "given to", "used by", "tied to", "set for", "kept for",
                    "registered to", "paired with", "on file for", "reserved for")
SYNTH_NEEDLE_SHAPES = ("the {noun} {rel} {key} {verb} {value}", "{key}'s {noun} {verb} {value}",
                       "{value} is the {noun} {rel} {key}", "use {value} as the {noun} {rel} {key}",
                       "{key} holds the {noun} {value}", "{key} -> {noun}: {value}", "{key} ({noun}): {value}",
                       "{noun} {rel} {key} = {value}", "if anyone asks about {key}, the {noun} {verb} {value}",
                       "{key} keeps {value} as its {noun}", "the {noun} you want for {key} {verb} {value}",
                       "{key} and the {noun} {value} go together", "{value}, that is the {noun} {rel} {key}",
                       "as for {key}, its {noun} {verb} {value}", "the {noun} {verb} {value} when it comes to {key}")
SYNTH_NEEDLE_ENDS = ("", "", "", "", " for now", " until further notice", " (confirmed)", " and nothing else",
                     ", so keep it in mind", " - do not lose it", " this time")


class Generator:
    """Examples of about n_chars characters: (prompt ending in the answer prefix, answer, expected values)."""

    def __init__(self, words, sentences, rng, phrasings, ruler_defaults=False, random_noun_frac=0.0,
                 heldout_words=None, vary_frac=0.0, cwe_first_order=False, synth_frac=0.0, synth_needle_frac=0.0):
        """ruler_defaults: vt, cwe and fwe as RULER (and the C++ evaluation) define them: one chain of four
        hops, ten common words, Zipf alpha 2; otherwise training draws vary them around those.
        vary_frac (training only): share of composed examples whose parts are perturbed (see _vary).
        cwe_first_order (training only): cwe answers list the common words in the order of their first
        appearance in the list instead of a random order (RULER scores the set, so either is right).
        synth_frac (training only): share of composed examples whose question and answer start come from the
        SYNTH_* grammar instead of the parts lists.
        synth_needle_frac (training only): share of composed examples whose needle statement comes from the
        SYNTH_NEEDLE_* grammar instead of the parts' needle frames."""
        self.ruler_defaults = ruler_defaults
        self.synth_frac = synth_frac
        self.synth_needle_frac = synth_needle_frac
        self.vary_frac = vary_frac
        self.cwe_first_order = cwe_first_order
        # Training only: the hidden thing may be any noun of the (train) word list, so retrieval cannot
        # lean on a few nouns; words of the held-out parts are never drawn.
        self.random_noun_frac = random_noun_frac
        self.words = words
        self.sentences = sentences
        self.rng = rng
        self.phrasings = phrasings
        single = {w for ws in words.values() for w in ws if w.isalpha()}
        held = heldout_words or set()
        self.single_words = sorted(single)
        self.nouns = [w for w in words["nouns"] if w.isalpha() and w not in held]
        self.fillers = sorted(single - held)

    # ---- atoms
    def key_word(self):
        return f"{self.rng.choice(self.words['adjectives'])}-{self.rng.choice(self.words['nouns'])}"

    def value(self, kind):
        rng = self.rng
        if kind == "numbers":
            return str(rng.randint(1_000_000, 9_999_999))
        if kind == "words":
            return self.key_word()
        if kind == "codes":
            alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
            return "".join(rng.choice(alphabet) for _ in range(4)) + "-" + "".join(
                rng.choice(alphabet) for _ in range(rng.randint(3, 5)))
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    def atom(self, kind):
        return self.key_word() if kind == "words" else self.value(kind)

    # ---- perturbed phrasing parts (training only)
    def _vary(self, part):
        """A copy of a phrasing part with one word replaced, one or two inserted or one dropped (random words
        of the training word lists, never a word of a held-out part), sometimes lower-cased: ~100 train
        parts become many thousands, so the model must find the key and the noun rather than recognise a
        frame. Placeholders stay whole."""
        rng = self.rng
        toks = part.split(" ")
        plain = [i for i, t in enumerate(toks) if "{" not in t]
        r = rng.random()
        if r < 0.35 and plain:
            toks[rng.choice(plain)] = rng.choice(self.fillers)
        elif r < 0.7:
            for _ in range(rng.randint(1, 2)):
                toks.insert(rng.randrange(len(toks)), rng.choice(self.fillers))  # never after the last word
        elif r < 0.85 and len(plain) > 2:
            del toks[rng.choice(plain)]
        out = " ".join(toks)
        return out.lower() if rng.random() < 0.15 else out

    def synth_question(self):
        """(question, answer start) templates from the SYNTH_* grammar, with {nq}, {be} and {query} left."""
        rng = self.rng
        ask, end = rng.choice(SYNTH_ASK)
        rel = rng.choice(SYNTH_REL)
        core = ask.replace("{imp}", rng.choice(SYNTH_IMP)).replace("{rel}", rel)
        ref = rng.choice(SYNTH_REFS)
        lead = rng.choice(SYNTH_LEADS)
        text = core + (" " + ref if ref else "")
        if not lead or lead.endswith((":", ".")):  # a new sentence starts with a capital
            text = text[0].upper() + text[1:]
        question = (lead + " " if lead else "") + text + (end if rng.random() < 0.9 else "")
        prefix = rng.choice(SYNTH_PREFIXES).replace("{rel}", rel)
        return question, prefix

    def synth_needle(self):
        """A needle frame from the SYNTH_NEEDLE_* grammar, with {noun}, {key}, {value} and {verb} left."""
        rng = self.rng
        body = rng.choice(SYNTH_NEEDLE_SHAPES).replace("{rel}", rng.choice(SYNTH_NEEDLE_REL))
        lead = rng.choice(SYNTH_NEEDLE_LEADS)
        if not lead or lead.endswith((":", ".")) or body.startswith("{"):  # a new sentence starts with a capital
            body = body[0].upper() + body[1:]
        return (lead + " " if lead else "") + body + rng.choice(SYNTH_NEEDLE_ENDS) + "."

    def _composed_parts(self):
        """(intro, needle frame, question, prefix, verb) of one composed example, perturbed for a vary_frac
        share of training examples: a random training sentence as the intro, a random word and a colon as
        the answer prefix, or _vary on each part."""
        rng, ph = self.rng, self.phrasings
        parts = [rng.choice(ph[c]) for c in ("intros", "needles", "questions", "prefixes", "verbs")]
        if rng.random() < self.synth_frac:
            parts[2], parts[3] = self.synth_question()
        if rng.random() < self.synth_needle_frac:
            parts[1] = self.synth_needle()
        if rng.random() >= self.vary_frac:
            return parts
        parts = [self._vary(p) if p and rng.random() < 0.5 else p for p in parts]  # "": no answer start
        if rng.random() < 0.25:
            parts[0] = rng.choice(self.sentences)
        if rng.random() < 0.2:
            parts[3] = rng.choice(self.fillers).capitalize() + ":"
        return parts

    # ---- haystacks
    def _haystack(self, kind, n_chars, make_distractor):
        units, total = [], 0
        if kind == "essay":
            i = self.rng.randrange(len(self.sentences))
            while total < n_chars:
                units.append(self.sentences[i % len(self.sentences)])
                total += len(units[-1]) + 1
                i += 1
        elif kind == "noise":
            units = [NOISE_LINE] * (n_chars // (len(NOISE_LINE) + 1) + 1)
        else:
            while total < n_chars:
                units.append(make_distractor())
                total += len(units[-1]) + 1
        return units

    # ---- retrieval
    def example(self, n_chars, task, form="ruler"):
        """task: a RULER_TASKS name, "mixed", "passkey", or one of AGGREGATION_TASKS. form: "ruler" or
        "composed" (from this generator's phrasing parts)."""
        rng = self.rng
        if task == "passkey":
            return self.passkey(n_chars)
        if task == "vt":
            return self.variable_tracking(n_chars)
        if task == "cwe":
            return self.common_words(n_chars)
        if task == "fwe":
            return self.frequent_words(n_chars)
        if task == "mixed":
            hay = rng.choice(["noise", "essay", "needle"])
            key_kind = rng.choice(["words", "words", "uuids", "codes"])
            val_kind = rng.choice(["numbers", "words", "uuids", "codes"])
            n_keys = rng.choice([1, 2, 4, 8])
            spec = (hay, key_kind, val_kind, n_keys, rng.choice([1, 1, 2, 4]), rng.randint(1, n_keys))
        else:
            spec = RULER_TASKS[task]
        hay, key_kind, val_kind, n_keys, n_vals, n_q = spec
        if form == "ruler" and val_kind not in SINGULAR:
            val_kind = "numbers"
        keys = []
        while len(keys) < n_keys:
            k = self.atom(key_kind)
            if k not in keys:
                keys.append(k)
        values = {k: [self.value(val_kind) for _ in range(n_vals)] for k in keys}
        if form == "ruler":
            def needle(k, v):
                return f"One of the special magic {val_kind} for {k} is: {v}."
        else:
            ph = self.phrasings
            if rng.random() < self.random_noun_frac:
                noun_s = rng.choice(self.nouns)
                noun_p = noun_s + ("es" if noun_s.endswith(("s", "x", "ch", "sh")) else "s")
            else:
                noun_s, noun_p = rng.choice(ph["nouns"]).split("|")
            intro, frame, question, prefix_part, verb = self._composed_parts()

            def needle(k, v):
                return frame.format(noun=noun_s, key=k, value=v, verb=verb)
        needles = [(k, v) for k in keys for v in values[k]]
        rng.shuffle(needles)
        texts = [needle(k, v) for k, v in needles]

        def distractor():
            while True:
                k = self.atom(key_kind)
                if k not in values:
                    return needle(k, self.value(val_kind))
        units = self._haystack(hay, max(0, n_chars - sum(len(t) + 1 for t in texts)), distractor)
        pos = sorted(rng.randint(0, len(units)) for _ in texts)  # depths spread through the context
        for off, (p, t) in enumerate(zip(pos, texts)):
            units.insert(p + off, t)
        context = (" " if hay == "essay" else "\n").join(units)
        queries = keys[:n_q]
        rng.shuffle(queries)
        expected = [v for q in queries for v in values[q]]
        query = join_keys(queries)
        one = len(expected) == 1
        be = "is" if one else "are"
        if form == "ruler":
            v = SINGULAR[val_kind] if one else val_kind
            head = (f"{'A' if one else 'Some'} special magic {v} {be} hidden within the following text. Make sure to "
                    f"memorize it. I will quiz you about the {v} afterwards.\n")
            q = f"\nWhat {'is' if one else 'are all'} the special magic {v} for {query} mentioned in the provided text?"
            prefix = f" The special magic {v} for {query} mentioned in the provided text {be}"
        else:
            nq = noun_s if one else noun_p
            head = intro + "\n"
            q = "\n" + question.format(be=be, nq=nq, query=query)
            prefix = " " + prefix_part.format(be=be, nq=nq, query=query) if prefix_part else ""
        answer = " " + join_keys(expected) + "."
        return head + context + q + prefix, answer, expected

    def passkey(self, n_chars):
        key = str(self.rng.randint(10_000, 9_999_999))
        needle = f"The pass key is {key}. Remember it. {key} is the pass key."
        units = self._haystack(self.rng.choice(["noise", "essay"]), n_chars, None)
        units.insert(self.rng.randint(0, len(units)), needle)
        prompt = ("There is important info hidden inside a lot of irrelevant text. Find it and memorize it.\n"
                  + " ".join(units) + "\nWhat is the pass key?" + " The pass key is")
        return prompt, " " + key + ".", [key]

    # ---- RULER's tracing and aggregation tasks (templates as src/eval/ruler_synthetic.cpp)
    def variable_tracking(self, n_chars, chains=None, hops=None):
        rng = self.rng
        chains = chains or (1 if self.ruler_defaults else rng.choice([1, 1, 1, 2, 3]))
        hops = hops or (4 if self.ruler_defaults else rng.choice([2, 3, 4, 4, 4, 5]))
        names, values, chain_names = set(), [], []
        for _ in range(chains):
            v = str(rng.randint(10000, 99999))
            while v in values:
                v = str(rng.randint(10000, 99999))
            values.append(v)
            chain = []
            while len(chain) < hops + 1:
                n = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))
                if n not in names:
                    names.add(n)
                    chain.append(n)
            chain_names.append(chain)
        statements, nxt = [], [0] * chains
        open_chains = list(range(chains))
        while open_chains:
            c = rng.choice(open_chains)
            i = nxt[c]
            nxt[c] += 1
            rhs = values[c] if i == 0 else "VAR " + chain_names[c][i - 1]
            statements.append(f"VAR {chain_names[c][i]} = {rhs}.")
            if nxt[c] == len(chain_names[c]):
                open_chains.remove(c)
        lines = max(1, (n_chars - sum(len(s) + 1 for s in statements)) // (len(NOISE_LINE) + 1))
        at = sorted(rng.randint(0, lines) for _ in statements)
        out, k = [], 0
        for i in range(lines + 1):
            while k < len(statements) and at[k] == i:
                out.append(statements[k])
                k += 1
            if i < lines:
                out.append(NOISE_LINE)
        qc = rng.randrange(chains)
        expected = chain_names[qc]
        head = "Memorize and track every chain of variable assignments hidden in the following text.\n\n"
        tail = (f"\nQuestion: Find all variables that are assigned the value {values[qc]} in the text above. Answer: "
                f"According to the chains of variable assignments in the text above, {len(expected)} variables are "
                f"assigned the value {values[qc]}, they are:")
        return head + "\n".join(out) + tail, " " + ", ".join(expected) + ".", expected

    def common_words(self, n_chars, n_common=None):
        rng = self.rng
        n_common = n_common or (10 if self.ruler_defaults else rng.choice([3, 5, 10, 10, 10]))
        pool = rng.sample(self.single_words, min(len(self.single_words), 4000))
        common = pool[:n_common]
        entry = 9.0  # characters of one "\n123. word" entry, about
        entries = int(n_chars / entry)
        common_freq = min(30, entries // (2 * n_common))
        rare_freq = 3
        if common_freq < rare_freq + 2:
            common_freq = rare_freq + 2
        rare = max(0, min(len(pool) - n_common, (entries - common_freq * n_common) // rare_freq))
        items = [w for w in common for _ in range(common_freq)]
        items += [w for w in pool[n_common:n_common + rare] for _ in range(rare_freq)]
        rng.shuffle(items)
        body = "\n".join(f"{i + 1}. {w}" for i, w in enumerate(items))
        head = ("Below is a numbered list of words. Some of them appear more often than others. Memorize the ones "
                "that appear most often.\n")
        tail = (f"\nQuestion: What are the {n_common} most common words in the above list? Answer: The top {n_common} "
                f"words that appear most often in the list are:")
        order = common[:]
        if self.cwe_first_order:
            first = {}
            for i, w in enumerate(items):
                first.setdefault(w, i)
            order.sort(key=first.__getitem__)
        else:
            rng.shuffle(order)
        return head + body + tail, " " + ", ".join(order) + ".", order

    def frequent_words(self, n_chars, top=3):
        rng = self.rng
        vocab, seen = [], set()
        while len(vocab) < 1000:
            w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 6)))
            if w not in seen:
                seen.add(w)
                vocab.append(w)
        alpha = 2.0 if self.ruler_defaults else rng.choice([2.0, 2.0, 1.6, 2.4])
        cdf, total = [], 0.0
        for r in range(len(vocab)):
            total += (r + 1.0) ** -alpha
            cdf.append(total)
        n = max(8 * top, int(n_chars / 5.5))
        while True:
            draws = [bisect.bisect_right(cdf, rng.random() * total) for _ in range(n)]
            draws = [min(d, len(vocab) - 1) for d in draws]
            counts = {}
            for d in draws:
                counts[d] = counts.get(d, 0) + 1
            ranked = sorted(counts.items(), key=lambda x: (-x[1], x[0]))
            if len(ranked) > top and ranked[top - 1][1] > ranked[top][1]:
                break
        expected = [vocab[r] for r, _ in ranked[:top]]
        head = "Read the following coded text and track how often each coded word appears.\n"
        tail = (f"\nQuestion: What are the {top} most frequent coded words in the above text? Answer: According to "
                f"the coded text above, the {top} most frequent words are:")
        return head + " ".join(vocab[d] for d in draws) + tail, " " + ", ".join(expected) + ".", expected
