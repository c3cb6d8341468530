"""Interchangeable parts of retrieval prompts: what is hidden, how it is stated, asked and answered.

A retrieval example composes one part of each category: an intro line, a noun for the hidden thing, a
needle frame (and the verb it links with), a question frame and an answer prefix. extract_corpus.py
splits every category in two by a hash of the part (split_parts below): training composes examples from
one side only, the evaluation's held-out-phrasing tasks from the other, so a model that scores on them
read the context rather than recognising a template it was trained on.

Placeholders: {key} and {value} (needles), {noun} (singular, needles), {verb} (needles), {query}, {nq}
(the noun, plural when several values are asked for) and {be} ("is" or "are") in questions and prefixes.
Nouns are "singular|plural". No part uses the words of RULER's template (special, magic, number, word,
uuid), which the model does see in training.
"""
import hashlib

HELDOUT_MOD = 4  # one part in four (by hash) is held out for evaluation

PARTS = {
    "nouns": [
        "code|codes", "password|passwords", "identifier|identifiers", "passcode|passcodes", "token|tokens",
        "serial|serials", "label|labels", "tag|tags", "reference|references", "access code|access codes",
        "PIN|PINs", "ticket|tickets", "secret|secrets", "value|values", "combination|combinations",
        "voucher|vouchers", "codeword|codewords", "registration|registrations", "signature|signatures",
        "locker code|locker codes", "keyword|keywords", "cipher|ciphers", "counter|counters", "marker|markers",
        "entry|entries", "credential|credentials", "handle|handles", "stamp|stamps", "symbol|symbols",
        "setting|settings", "figure|figures", "index|indices", "coupon|coupons", "pass phrase|pass phrases",
    ],
    "verbs": [
        "is", "was set to", "equals", "reads", "has been recorded as", "is listed as", "is written as",
        "was changed to", "is given as", "turned out to be", "is stored as", "remains",
        "has become", "is recorded as", "was noted as", "stands at", "is registered as", "is shown as",
        "was reported as", "is kept as", "was assigned as", "is marked as",
    ],
    "needles": [
        "The {noun} of {key} {verb} {value}.",
        "Remember this: the secret {noun} of {key} {verb} {value}.",
        "For {key}, the {noun} {verb} {value}.",
        "{key} has the {noun} {value}.",
        "The {noun} assigned to {key} {verb} {value}.",
        "Note: the {noun} for {key} {verb} {value}.",
        "Remember that {key} goes with the {noun} {value}.",
        "Keep in mind that the {noun} belonging to {key} {verb} {value}.",
        "{value} is the {noun} of {key}.",
        "Write down the {noun} for {key}: {value}.",
        "In the records, {key} appears with the {noun} {value}.",
        "Important: {key} uses the {noun} {value}.",
        "It is known that the {noun} linked to {key} {verb} {value}.",
        "Do not forget that the {noun} for {key} {verb} {value}.",
        "The {noun} that belongs to {key} {verb} {value}.",
        "According to the file, the {noun} of {key} {verb} {value}.",
        "{key}: {noun} {value}.",
        "Someone wrote that {key} has {value} as its {noun}.",
        "The {noun} associated with {key} {verb} {value}.",
        "Please note that {key} has the {noun} {value}.",
        "By the way, the {noun} for {key} {verb} {value}.",
        "For future reference, {key} was given the {noun} {value}.",
        "Record: {key} / {noun} / {value}.",
        "The {noun} attached to {key} {verb} {value}, as agreed.",
        "Everyone should know that the {noun} of {key} {verb} {value}.",
        "Hidden fact: the {noun} connected to {key} {verb} {value}.",
        "We confirmed that {key} has {value} as its {noun}.",
        "{key} was issued the {noun} {value}.",
        "Update: the {noun} of {key} {verb} now {value}.",
        "According to the log, {key} carries the {noun} {value}.",
        "Make a note: {value} is the {noun} that goes with {key}.",
        "The {noun} registered under {key} {verb} {value}.",
    ],
    "questions": [
        "What {be} the {nq} of {query}?",
        "Which {nq} {be} assigned to {query} in the text above?",
        "What {be} the {nq} stored for {query}?",
        "Tell me the {nq} for {query}.",
        "Can you recall the {nq} of {query}?",
        "What {nq} did the text give for {query}?",
        "Please state the {nq} of {query}.",
        "Find the {nq} linked to {query}.",
        "Look back at the text: what {be} the {nq} for {query}?",
        "Question: what {be} the {nq} of {query}?",
        "I need the {nq} for {query}.",
        "Recall the {nq} mentioned for {query}.",
        "Which {nq} went with {query}?",
        "From the document above, give the {nq} of {query}.",
        "What {be} the {nq} associated with {query}?",
        "Do you remember the {nq} of {query}?",
        "Which {nq} {be} recorded for {query}?",
        "Please give me the {nq} attached to {query}.",
        "Based on the text, what {be} the {nq} of {query}?",
        "Report the {nq} for {query}.",
        "What {nq} {be} connected to {query}?",
        "Quick question: what {be} the {nq} for {query}?",
        "Identify the {nq} that the text gives for {query}.",
        "Name the {nq} of {query}.",
        "What was the {nq} registered under {query}?",
        "Could you tell me which {nq} {be} linked to {query}?",
    ],
    "prefixes": [
        "The {nq} of {query} {be}",
        "Answer:",
        "The {nq} for {query} {be}",
        "Sure. The {nq} {be}",
        "The answer is",
        "According to the text, the {nq} of {query} {be}",
        "Here {be} the {nq}:",
        "The requested {nq} {be}",
        "From the text:",
        "Recalled {nq}:",
        "What the text says for {query}:",
        "Looking back, the {nq} {be}",
        "Sure, the {nq} of {query} {be}",
        "The {nq} associated with {query} {be}",
        "It says the {nq} {be}",
        "Based on the text, the {nq} {be}",
        "The text gives",
        "Result:",
        "Of course. For {query}, the {nq} {be}",
        "I remember: the {nq} {be}",
        "The {nq} recorded for {query} {be}",
        "Found it. The {nq} {be}",
    ],
    "intros": [
        "Read the following text carefully.",
        "Below is a long document. Some facts are hidden in it; remember them.",
        "The text below contains a few important details among many unimportant ones.",
        "Pay attention to every detail in the document that follows.",
        "Here is some text. You will be asked about it afterwards.",
        "Study the passage below. A question follows it.",
        "Memorize the facts hidden in the following text.",
        "Important information is buried in the text below.",
        "Go through this document and keep track of what it says.",
        "The following notes contain several records.",
        "A document follows. Keep its details in mind.",
        "Some of the lines below matter; most do not.",
        "Read this carefully; a question about it comes at the end.",
        "The document below hides a few records among ordinary text.",
        "Keep the following material in mind.",
        "This is a long text with a few facts worth remembering.",
        "Look through the text below for the relevant details.",
        "Below you will find a lengthy passage.",
        "Attention: some details below will be asked about.",
        "Here is the material for the upcoming question.",
    ],
}


def is_heldout(category: str, part: str) -> bool:
    h = hashlib.blake2b(f"phrase:{category}:{part}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") % HELDOUT_MOD == 0


def split_parts():
    """{category: (train parts, held-out parts)}; every side of every category is non-empty."""
    out = {}
    for cat, parts in PARTS.items():
        train = [p for p in parts if not is_heldout(cat, p)]
        held = [p for p in parts if is_heldout(cat, p)]
        if not train or not held:
            raise SystemExit(f"phrasing_parts: category {cat} has an empty side ({len(train)} train, "
                             f"{len(held)} held out); add parts")
        out[cat] = (train, held)
    return out
