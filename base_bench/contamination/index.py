"""The n-gram index of the benchmark's items, and the matcher that finds its n-grams in a text.

    index = ItemIndex.build(items, n=None)      # n=None: GPT-3's N from the items themselves
    index.n, index.p5, index.grams, index.items
    found = index.find(words(text))             # [(gram number, word position in the text), ...]
    index.datatrove_hashes()                    # the N-grams as datatrove's NGramsDecontFilter hashes them

Which n-grams an item gives (item_grams; every one N words long unless said otherwise). C is the
item's context, A its correct continuation, W one of its wrong continuations, all as normalised words:

* context: every N-gram inside C;
* answer:  every N-gram inside A;
* leak:    every N-gram of C+A that starts in C and ends in A (the end of the context running into the
           answer: a match means the answer leaked together with its question);
* wrong:   every N-gram of C+W that ends in W, for each wrong continuation (reported apart).

A sequence (C, A, W, C+A or C+W) shorter than N but at least 8 words long is also matched whole, so
that short answers and short items can be found; anything shorter than 8 words is never matched
alone (common phrases would match everywhere). The positions of context, answer and leak n-grams
are in C+A's coordinates, so the words they cover give the item's coverage fraction.

Matching: each word becomes its number in the items' vocabulary (or none). Only windows made of
vocabulary words can match (in English text about 1% of 8-word windows, found with a running count
of unknown words); each gets a 64-bit polynomial hash from one prefix sum (numpy, wrapping mod
2^64; the base is odd so its powers are invertible). A bitmap of the items' hashes throws out
nearly all of them; the few that pass are checked word by word against the item n-gram, so a
reported match is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat

import numpy as np

from .normalize import N_MIN, choose_n, words

KINDS = ("context", "answer", "leak", "wrong")
COVERING = frozenset({"context", "answer", "leak"})  # kinds whose n-grams lie in C+A
_BASE = 0x9E3779B97F4A7C15  # odd, so invertible mod 2^64
_MASK64 = (1 << 64) - 1
_BLOOM_BITS = 23  # a 8 MiB bitmap: with ~60k n-grams, 0.7% of windows go on to the exact check


@dataclass(frozen=True)
class ItemWords:
    """One benchmark item as normalised words."""

    id: str
    context: tuple[bytes, ...]
    continuations: tuple[tuple[bytes, ...], ...]
    label: int

    @property
    def answer(self) -> tuple[bytes, ...]:
        return self.continuations[self.label]

    @property
    def length(self) -> int:
        """Words of the context plus the correct continuation (the unit of the coverage fraction)."""
        return len(self.context) + len(self.answer)

    @classmethod
    def of(cls, item) -> ItemWords:
        return cls(item.id, tuple(words(item.context)), tuple(tuple(words(c)) for c in item.continuations), item.label)


@dataclass(frozen=True)
class Gram:
    item: int  # the item's position in the index
    kind: str  # context | answer | leak | wrong
    choice: int  # the continuation it runs into (-1 for context)
    start: int  # first word, in C+A (or C+W for wrong) coordinates
    length: int


def _windows(total: int, n: int, lo: int, hi: int):
    """Starts s of the n-windows [s, s+n) of a sequence of `total` words with lo <= s and s + n <= hi.
    A sequence shorter than n (but at least N_MIN) gives itself whole, as (0, total)."""
    if total < n:
        return [(0, total)] if total >= N_MIN and lo == 0 and hi == total else []
    return [(s, n) for s in range(max(lo, 0), hi - n + 1)]


def item_grams(item: ItemWords, index: int, n: int) -> list[Gram]:
    """Every n-gram of one item, by the rules in the module docstring."""
    c = len(item.context)
    out = []
    for s, L in _windows(c, n, 0, c):
        out.append(Gram(index, "context", -1, s, L))
    for k, cont in enumerate(item.continuations):
        w = len(cont)
        if w == 0:
            continue
        right = k == item.label
        # inside the continuation alone
        inside = [(s + c, L) for s, L in _windows(w, n, 0, w)]
        # running from the context into the continuation
        if c == 0:
            span = []
        elif c + w < n:
            span = [(0, c + w)] if c + w >= N_MIN else []
        else:
            span = [(s, n) for s in range(max(0, c - n + 1), c) if s + n <= c + w]
        if right:
            out += [Gram(index, "answer", k, s, L) for s, L in inside]
            out += [Gram(index, "leak", k, s, L) for s, L in span]
        else:
            out += [Gram(index, "wrong", k, s, L) for s, L in inside + span]
    return out


def gram_words(item: ItemWords, g: Gram) -> tuple[bytes, ...]:
    seq = item.context + (item.answer if g.kind != "wrong" else item.continuations[g.choice])
    return seq[g.start : g.start + g.length]


def _hash(ids) -> int:
    """The polynomial hash the matcher gives a window of word numbers: sum (id + 1) * B^k mod 2^64."""
    h, p = 0, 1
    for i in ids:
        h = (h + (i + 1) * p) & _MASK64
        p = (p * _BASE) & _MASK64
    return h


class ItemIndex:
    """Every item n-gram, with the vocabulary, hashes and bitmap the matcher needs."""

    def __init__(self, items: list[ItemWords], n: int, p5: int | None = None):
        self.items = list(items)
        self.n = n
        self.p5 = p5
        self.grams: list[Gram] = []
        for i, it in enumerate(self.items):
            grams = item_grams(it, i, n)
            # a wrong continuation that starts like the right one shares n-grams with it: those say
            # nothing about the wrong one, so they count on the right side only
            right = {gram_words(it, g) for g in grams if g.kind != "wrong"}
            self.grams += [g for g in grams if g.kind != "wrong" or gram_words(it, g) not in right]
        self.vocab: dict[bytes, int] = {}
        for it in self.items:
            for seq in (it.context, *it.continuations):
                for w in seq:
                    self.vocab.setdefault(w, len(self.vocab))
        self.gram_ids = [tuple(self.vocab[w] for w in gram_words(self.items[g.item], g)) for g in self.grams]
        self.by_key: dict[tuple[int, int], list[int]] = {}
        for gi, ids in enumerate(self.gram_ids):
            self.by_key.setdefault((len(ids), _hash(ids)), []).append(gi)
        self.lengths = sorted({len(ids) for ids in self.gram_ids})
        self._bloom = None
        self._pw = self._ipw = None

    @classmethod
    def build(cls, items, n: int | None = None) -> ItemIndex:
        """From dataset Items (or ItemWords); n=None takes GPT-3's N from their lengths."""
        iw = [it if isinstance(it, ItemWords) else ItemWords.of(it) for it in items]
        n_auto, p5 = choose_n([it.length for it in iw])
        return cls(iw, n or n_auto, p5)

    def __deepcopy__(self, memo):  # fixed once built: datatrove copies the pipeline for every task
        return self

    def __getstate__(self):  # ship the index small to workers; the arrays are rebuilt there
        return {k: v for k, v in self.__dict__.items() if k not in ("_bloom", "_pw", "_ipw")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._bloom = self._pw = self._ipw = None

    # ---------------------------------------------------------------- matching

    def _prepare(self, n_words: int) -> None:
        if self._bloom is None:
            self._bloom = np.zeros(1 << _BLOOM_BITS, dtype=bool)
            keys = np.array([k for _, k in self.by_key], dtype=np.uint64)
            self._bloom[keys >> np.uint64(64 - _BLOOM_BITS)] = True
        if self._pw is None or self._pw.size < n_words + 1:
            size = max(n_words + 1, 1 << 16, 2 * (0 if self._pw is None else self._pw.size))
            self._pw = np.cumprod(np.full(size, _BASE, dtype=np.uint64))
            self._pw[1:] = self._pw[:-1].copy()
            self._pw[0] = 1
            inv = pow(_BASE, -1, 1 << 64)
            self._ipw = np.cumprod(np.full(size, inv, dtype=np.uint64))
            self._ipw[1:] = self._ipw[:-1].copy()
            self._ipw[0] = 1

    def find(self, ws: list[bytes]) -> list[tuple[int, int]]:
        """(gram number, position of its first word in `ws`) for every item n-gram that occurs in `ws`."""
        n = len(ws)
        if not self.lengths or n < self.lengths[0]:
            return []
        self._prepare(n)
        ids = np.fromiter(map(self.vocab.get, ws, repeat(-1)), dtype=np.int64, count=n)
        unknown = np.zeros(n + 1, dtype=np.int64)  # unknown[j]: words before j that are in no item
        np.cumsum(ids < 0, out=unknown[1:])
        x = (ids + 1).astype(np.uint64)
        prefix = np.zeros(n + 1, dtype=np.uint64)
        np.cumsum(x * self._pw[:n], out=prefix[1:])
        shift = np.uint64(64 - _BLOOM_BITS)
        found = []
        for L in self.lengths:
            if L > n:
                break
            m = n - L + 1
            # only windows of known words can be an item n-gram (in English text about 1% of 8-word windows)
            cand = np.flatnonzero(unknown[L:] == unknown[:m])
            if not cand.size:
                continue
            h = (prefix[cand + L] - prefix[cand]) * self._ipw[cand]
            keep = self._bloom[h >> shift]
            for i, hv in zip(cand[keep].tolist(), h[keep].tolist()):
                for gi in self.by_key.get((L, hv), ()):
                    if tuple(ids[i : i + L].tolist()) == self.gram_ids[gi]:
                        found.append((gi, i))
        return found

    # ---------------------------------------------------------------- datatrove's format

    def datatrove_hashes(self) -> np.ndarray:
        """The 64-bit SHA-1 hash of each n-gram's words joined by spaces, as datatrove's NGramsDecontFilter
        hashes its documents' n-grams (with steps.WordTokenizerGPT3, steps.IDENTITY_NORM and
        steps.DATATROVE_HASH). Only the N-word n-grams: datatrove's filter looks at N-grams alone.
        (SHA-1, not datatrove's default xxhash: its filter passes str, which xxhash 4 no longer takes.)"""
        from datatrove.utils.hashing import HashConfig, create_hash_func

        h = create_hash_func(HashConfig(precision=64, hash_fc="sha1"))
        out = {
            h(b" ".join(gram_words(self.items[g.item], g)).decode("utf-8", "surrogatepass"))
            for g in self.grams
            if g.length == self.n
        }
        return np.array(sorted(out), dtype=np.uint64)
