"""Canary strings: a GUID that marks the benchmark's text wherever a copy of it goes.

    canaries = canaries_of(items)      # the bundled set's canary, and any GUID canary in the items' tags
    c.text, c.guid, c.key              # key: the GUID as it looks after normalisation (scan)
    c.prompt, c.second_half            # the probe: text up to the GUID's first half / the rest
    random_second_halves(999, seed)    # second halves of random version-4 GUIDs, to rank the true one among

The bundled set carries BUNDLED_CANARY (base_bench/dataset.py) as the last tag of every record (see
data/README.md for why there). A scan looks for each canary's GUID in every document's normalised
text: lowercased with hyphens and quotes gone, so the GUID is found in JSON, in prose, with its
hyphens dropped, or in capitals.
"""

from __future__ import annotations

import random
import re
import uuid
from dataclasses import dataclass

from ..items.dataset import BUNDLED_CANARY

GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
HALF = 18  # "xxxxxxxx-xxxx-xxxx" | "-xxxx-xxxxxxxxxxxx"


@dataclass(frozen=True)
class Canary:
    text: str  # the whole canary string, e.g. "BASE-BENCH-BUNDLED-CANARY 395bed8f-..."
    guid: str

    @property
    def key(self) -> bytes:
        return self.guid.replace("-", "").lower().encode()

    @property
    def prompt(self) -> str:
        """The canary text up to and including the first half of its GUID."""
        at = self.text.index(self.guid)
        return self.text[: at + HALF]

    @property
    def second_half(self) -> str:
        return self.guid[HALF:]


def parse(text: str) -> Canary | None:
    m = GUID.search(text)
    return Canary(text, m.group()) if m else None


def canaries_of(items) -> list[Canary]:
    """The bundled canary, and every tag of `items` that holds a GUID (once each, in order)."""
    out: dict[str, Canary] = {}
    for text in [BUNDLED_CANARY] + [t for it in items for t in it.tags]:
        c = parse(text)
        if c and c.guid.lower() not in out:
            out[c.guid.lower()] = c
    return list(out.values())


def random_second_halves(n: int, seed: int, exclude: str = "") -> list[str]:
    """Second halves of `n` distinct random version-4 GUIDs (the true GUID's form), none equal to `exclude`."""
    rng = random.Random(seed)
    out: list[str] = []
    seen = {exclude.lower()}
    while len(out) < n:
        h = str(uuid.UUID(int=rng.getrandbits(128), version=4))[HALF:]
        if h not in seen:
            seen.add(h)
            out.append(h)
    return out
