"""Deterministic synthetic memories and questions for the speed benchmarks.

Values are sentences over a Zipf-like vocabulary, so a query matches the way real text does:
common words in many memories, rare words in few. Same seed, same data, on every machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

COMMON = (
    "meeting project family weekend coffee work travel music dinner friend book garden city "
    "school doctor holiday birthday movie game phone email car house dog cat team plan"
).split()
RARE_STEMS = (
    "zephyr quokka marimba fjord obsidian saffron tundra lichen basalt cobalt juniper vellum "
    "papyrus quasar nebula tamarind wasabi kumquat ocelot narwhal axolotl gecko ibis heron"
).split()
FILLER = "the a to of and in on with for at about my her his our was is will".split()


@dataclass(frozen=True, slots=True)
class Workload:
    user_id: str
    items: list[tuple[str, str]]
    questions: list[str]


def _rare_word(rng: random.Random) -> str:
    return f"{rng.choice(RARE_STEMS)}{rng.randrange(2000)}"


def sentence(rng: random.Random) -> str:
    words: list[str] = []
    for _ in range(rng.randint(8, 20)):
        roll = rng.random()
        if roll < 0.45:
            words.append(rng.choice(FILLER))
        elif roll < 0.85:
            words.append(COMMON[min(int(rng.paretovariate(1.2)) - 1, len(COMMON) - 1)])
        else:
            words.append(_rare_word(rng))
    return " ".join(words).capitalize() + "."


def make_workload(size: int, questions: int = 200, seed: int = 7) -> Workload:
    rng = random.Random(seed)
    items = [(f"memory-{i:06d}", sentence(rng)) for i in range(size)]
    asked: list[str] = []
    for i in range(questions):
        if i % 2:
            words = [rng.choice(COMMON), rng.choice(COMMON), _rare_word(rng)]
        else:
            words = [_rare_word(rng), _rare_word(rng), rng.choice(COMMON)]
        asked.append("What about " + " and ".join(words) + "?")
    return Workload("bench-user", items, asked)
