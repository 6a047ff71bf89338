"""A small English-like corpus, built deterministically: the offline data of the example model.

Trials must never download anything, and a shipped text big enough to train
on would bloat the wheel, so the corpus is generated from a tiny grammar and a
fixed seed. It has the structure a byte-level model learns in a few dozen
steps (spelling, spaces, capitals after a full stop) and more that it learns
only with more steps and capacity (agreement of subject and verb, which names
go with which places, number words that follow one another), so better
configurations reach a visibly lower validation loss.

Only ``random.Random.random()`` is used: Python guarantees its sequence for a
given seed across versions and platforms, which ``choice``/``randrange`` do
not, so every node builds byte-identical data.
"""

from __future__ import annotations

import hashlib
import random

VERSION = 1  # bump when the grammar changes: the token file's name includes it
DEFAULT_BYTES = 1 << 20  # 1 MiB: ~500 steps of batch 32 x 64 tokens before any window repeats often
_SEED = 20240917

NAMES = ("Ada", "Bruno", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana", "Ines", "Jonas", "Kofi", "Lena")
# Each name has a home town, so "X lives in Y" is learnable, not noise.
PLACES = ("Oslo", "Lima", "Porto", "Kyoto", "Accra", "Quito", "Hanoi", "Turin", "Riga", "Dakar", "Perth", "Cork")
NOUNS = (
    ("cat", "cats"), ("dog", "dogs"), ("bird", "birds"), ("farmer", "farmers"), ("baker", "bakers"),
    ("child", "children"), ("teacher", "teachers"), ("sailor", "sailors"), ("fox", "foxes"), ("horse", "horses"),
)
THINGS = ("apple", "letter", "stone", "book", "lamp", "basket", "coin", "map", "boat", "candle", "key", "drum")
ADJECTIVES = ("old", "young", "small", "quiet", "happy", "tired", "clever", "brave", "green", "red", "bright", "lazy")
# (singular present, plural present, past)
VERBS = (
    ("sees", "see", "saw"), ("finds", "find", "found"), ("carries", "carry", "carried"), ("likes", "like", "liked"),
    ("paints", "paint", "painted"), ("hides", "hide", "hid"), ("sells", "sell", "sold"), ("keeps", "keep", "kept"),
)
PREPOSITIONS = ("near", "under", "behind", "beside", "above", "inside")
NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


class _Pick:
    """Choices from ``random.random()`` alone, for byte-identical output everywhere."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def index(self, n: int) -> int:
        return min(int(self._rng.random() * n), n - 1)

    def one(self, options: tuple[str, ...]) -> str:
        return options[self.index(len(options))]

    def chance(self, p: float) -> bool:
        return self._rng.random() < p


def _noun_phrase(pick: _Pick) -> tuple[str, bool]:
    """A subject and whether it is plural."""
    singular, plural = NOUNS[pick.index(len(NOUNS))]
    many = pick.chance(0.4)
    det = pick.one(("the", "some", "two", "many")) if many else pick.one(("the", "a", "one", "every"))
    adjective = pick.one(ADJECTIVES) + " " if pick.chance(0.5) else ""
    if det == "a" and adjective[:1] in "aeiou" and adjective:
        det = "an"
    return f"{det} {adjective}{plural if many else singular}", many


def _sentence(pick: _Pick) -> str:
    kind = pick.index(6)
    if kind == 0:  # agreement: the verb follows the subject's number
        subject, many = _noun_phrase(pick)
        present_s, present_p, _ = VERBS[pick.index(len(VERBS))]
        place = f" {pick.one(PREPOSITIONS)} the {pick.one(THINGS)}" if pick.chance(0.5) else ""
        return f"{subject} {present_p if many else present_s} the {pick.one(THINGS)}{place}."
    if kind == 1:  # past tense, a name as subject
        _, _, past = VERBS[pick.index(len(VERBS))]
        return f"{pick.one(NAMES)} {past} a {pick.one(ADJECTIVES)} {pick.one(THINGS)} yesterday."
    if kind == 2:  # a fixed fact per name
        i = pick.index(len(NAMES))
        return f"{NAMES[i]} lives in {PLACES[i]}."
    if kind == 3:  # counting: the next number word is determined by the previous one
        start = pick.index(len(NUMBERS) - 3)
        return f"{NUMBERS[start]}, {NUMBERS[start + 1]}, {NUMBERS[start + 2]}, {NUMBERS[start + 3]}."
    if kind == 4:  # small sums, in digits
        a, b = pick.index(10), pick.index(10)
        return f"{a} plus {b} is {a + b}."
    subject, many = _noun_phrase(pick)
    return f"{subject} {'are' if many else 'is'} {pick.one(ADJECTIVES)} today."


def build(size: int = DEFAULT_BYTES, seed: int = _SEED) -> bytes:
    """``size`` bytes of text: paragraphs of 3-7 sentences, one paragraph per line."""
    pick = _Pick(seed)
    out: list[str] = []
    total = 0
    while total < size:
        paragraph = " ".join(s[:1].upper() + s[1:] for s in (_sentence(pick) for _ in range(3 + pick.index(5)))) + "\n"
        out.append(paragraph)
        total += len(paragraph)
    return "".join(out).encode("ascii")[:size]


def name(size: int = DEFAULT_BYTES) -> str:
    """The token file's name: changes whenever the bytes could."""
    tag = hashlib.sha256(f"{VERSION}:{size}:{_SEED}".encode()).hexdigest()[:10]
    return f"tinycorpus-v{VERSION}-{tag}.u8"
