"""The scorers against the card-literal loop on tiny random models (no network)."""

import pytest
import torch

from base_bench.backends.transformers_scorers import (
    CachedScorer,
    PackedScorer,
    PlainScorer,
    check_packing,
    score_reference,
)
from base_bench.engine.scoring import Encoded, ScoringError, encode_item, max_abs_diff, score_in_batches
from base_bench.items.records import ChoiceScore, Item, pick

from tiny import tiny_model, tiny_tokenizer

TOK = tiny_tokenizer()
CONTEXTS = [
    "The quick brown fox",
    "def add(a, b):\n    return",
    "She put the keys in the drawer and left for work. When she came home, the keys were",
    "SELECT name FROM users WHERE",
    "Water boils at",
    "If all cats are mammals and Tom is a cat, then Tom is",
    "The train left at noon and arrived three hours later, at",
    "x",
    "0123456789 + 1 =",
]
CONTS = [
    (" jumps over the lazy dog.", " a", " sleeps.", " is brown and quick, they said."),
    (" a + b", " a - b", "\n    pass", " None  # nothing"),
]


def make_items(n=24):
    out = []
    for i in range(n):
        ctx = CONTEXTS[i % len(CONTEXTS)] + (" and then" * (i % 4))
        out.append(Item(f"t-{i:03d}", "commonsense", "easy", 1.1, 1.0, 800, ctx, CONTS[i % 2], i % 4))
    return out


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request):
    return tiny_model(request.param, TOK)


@pytest.fixture(scope="module")
def encoded():
    return [encode_item(TOK, it) for it in make_items()]


@pytest.fixture(scope="module")
def reference(model, encoded):
    return [score_reference(model, e) for e in encoded]


@pytest.mark.parametrize("scorer_cls", [PlainScorer, PackedScorer, CachedScorer])
@pytest.mark.parametrize("bs", [1, 3, 8, 32])
def test_batched_equals_unbatched_loop(model, encoded, reference, scorer_cls, bs):
    scorer = scorer_cls(model, pad_id=0)
    got = score_in_batches(scorer, encoded, bs)
    assert scorer.keep_mode == "mask"  # the LM head ran at the scored positions only
    assert max_abs_diff(got, reference) < 1e-4
    assert [pick(g) for g in got] == [pick(r) for r in reference]
    assert [[c.n_tokens for c in g] for g in got] == [[c.n_tokens for c in r] for r in reference]


def test_reference_matches_hand_computation(model):
    """One choice computed by hand from a full forward pass, the card's steps one by one."""
    it = make_items()[2]
    ctx = TOK(it.context, add_special_tokens=False)["input_ids"]
    cont = TOK(it.continuations[1], add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ctx + cont])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    total = sum(logp[len(ctx) + j - 1, t].item() for j, t in enumerate(cont))
    got = score_reference(model, encode_item(TOK, it))[1]
    assert got.n_tokens == len(cont)
    assert got.logprob == pytest.approx(total, abs=1e-5)
    assert got.mean == pytest.approx(total / len(cont), abs=1e-6)


def test_tokenization_is_separate_and_without_special_tokens():
    it = make_items()[0]
    e = encode_item(TOK, it)
    assert list(e.context) == TOK(it.context, add_special_tokens=False)["input_ids"]
    assert TOK.bos_token_id not in e.context
    for c, ids in zip(it.continuations, e.continuations):
        assert list(ids) == TOK(c, add_special_tokens=False)["input_ids"]


def test_add_bos_prepends_bos_only(model):
    it = make_items()[0]
    plain, bos = encode_item(TOK, it), encode_item(TOK, it, add_bos=True)
    assert bos.context == (TOK.bos_token_id,) + plain.context
    assert bos.continuations == plain.continuations
    ref = score_reference(model, bos)
    assert max_abs_diff([PackedScorer(model)([bos])[0]], [ref]) < 1e-4
    assert max_abs_diff([ref], [score_reference(model, plain)]) > 1e-3  # BOS changes the scores


def test_add_bos_without_bos_token_is_an_error():
    tok = tiny_tokenizer()
    tok.bos_token = None
    with pytest.raises(ScoringError, match="no BOS"):
        encode_item(tok, make_items()[0], add_bos=True)


def test_truncation_cuts_context_from_the_left(model):
    it = make_items()[2]
    full = encode_item(TOK, it)
    longest = max(len(c) for c in full.continuations)
    window = longest + 5
    cut = encode_item(TOK, it, window=window)
    assert cut.truncated and not full.truncated
    assert cut.context == full.context[-5:]
    assert all(len(cut.context) + len(c) <= window for c in cut.continuations)
    # with BOS, BOS stays first and the rest is the context's tail
    cut_bos = encode_item(TOK, it, add_bos=True, window=window)
    assert cut_bos.context == (TOK.bos_token_id,) + full.context[-4:]
    small = tiny_model("llama", TOK, window=window)
    ref = score_reference(small, cut)
    assert max_abs_diff(PackedScorer(small)([cut, encode_item(TOK, make_items()[4], window=window)])[:1], [ref]) < 1e-4


def test_continuation_longer_than_window_is_an_error():
    it = make_items()[0]
    with pytest.raises(ScoringError, match="does not fit"):
        encode_item(TOK, it, window=3)


@pytest.mark.parametrize(
    "scores, want",
    [
        ([(-5.0, 1), (-2.0, 2), (-1.0, 1), (-3.0, 3)], 1),  # means -5, -1, -1, -1: tie, lowest index wins
        ([(-3.0, 1), (-4.0, 2), (-1.0, 1), (-1.0, 1)], 2),  # means -3, -2, -1, -1
        ([(-2.0, 2)] * 4, 0),  # all equal
        ([(-4.0, 1), (-6.0, 3), (-2.0, 1), (-9.0, 2)], 1),  # -4, -2, -2, -4.5
        ([(-9.0, 3), (-8.0, 2), (-1.5, 1), (-1.0, 1)], 3),  # a clear winner at the end
    ],
)
def test_highest_mean_wins_and_ties_go_to_the_lowest_index(scores, want):
    assert pick([ChoiceScore(s, n) for s, n in scores]) == want


class _Wrapped(torch.nn.Module):
    """A model inside another module whose `forward` changes what the model is given."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config


def test_packing_check_passes_on_real_models_and_fails_on_mask_ignoring_model(model, encoded):
    ok, diff = check_packing(model, encoded[:8])
    assert ok and diff < 1e-3

    class IgnoresMask(_Wrapped):
        """Wraps a model but drops the attention mask and position ids, as some families do."""

        def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0):
            return self.inner(input_ids=input_ids, use_cache=False, logits_to_keep=logits_to_keep)

    ok, diff = check_packing(IgnoresMask(model), encoded[:8])
    assert not ok and diff > 1e-3


def test_bfloat16_model_gives_float32_log_softmax(encoded):
    m16 = tiny_model("llama", TOK, dtype=torch.bfloat16)
    m32 = tiny_model("llama", TOK)
    a = PackedScorer(m16)(encoded[:4])
    b = [score_reference(m32, e) for e in encoded[:4]]
    # bf16 weights differ from fp32 ones, but scores stay close and are plain Python floats
    assert isinstance(a[0][0].logprob, float)
    assert max_abs_diff(a, b) < 0.5 * max(abs(c.logprob) for r in b for c in r)


def test_packed_handles_single_token_context():
    e = Encoded("one", (5,), ((7, 8), (9,), (10, 11, 12), (13,)))
    m = tiny_model("llama", TOK)
    assert max_abs_diff(PackedScorer(m)([e]), [score_reference(m, e)]) < 1e-4


class _IntKeepOnly(_Wrapped):
    """A model whose `logits_to_keep` takes only an int (older transformers): forces the 'slice' mode."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0):
        if not isinstance(logits_to_keep, int):
            raise TypeError("logits_to_keep must be an int")
        return self.inner(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=logits_to_keep,
        )


class _NoKeep(_IntKeepOnly):
    """A model without `logits_to_keep` at all: forces the 'full' mode."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return self.inner(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        )


@pytest.mark.parametrize("wrapper, mode", [(_IntKeepOnly, "slice"), (_NoKeep, "full")])
@pytest.mark.parametrize("scorer_cls", [PlainScorer, PackedScorer])
def test_models_without_boolean_logits_to_keep_fall_back(model, encoded, reference, wrapper, mode, scorer_cls):
    scorer = scorer_cls(wrapper(model))
    got = score_in_batches(scorer, encoded, 8)
    assert scorer.keep_mode == mode
    assert max_abs_diff(got, reference) < 1e-4


class _HeadTakesIntKeep(_Wrapped):
    """As transformers 5.17 does: a tensor `logits_to_keep` fails at the LM head, after the layers ran
    and appended this pass to the KV cache."""

    def forward(
        self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False, logits_to_keep=0
    ):
        out = self.inner(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep if isinstance(logits_to_keep, int) else 0,
        )
        if not isinstance(logits_to_keep, int):
            raise IndexError("too many indices for tensor")
        return out


def test_kv_cache_scorer_retries_on_a_clean_cache(encoded):
    """The kv-cache scorer's first batch once scored against a cache holding its continuations twice
    (found by bench/gpu_check.py under transformers 5.17)."""
    m = tiny_model("llama", TOK)
    scorer = CachedScorer(_HeadTakesIntKeep(m))
    got = score_in_batches(scorer, encoded, 8)
    assert scorer.keep_mode == "slice"
    assert max_abs_diff(got, [score_reference(m, e) for e in encoded]) < 1e-4


@pytest.mark.parametrize("scorer_cls", [PlainScorer, PackedScorer, CachedScorer])
def test_single_token_continuations_feed_only_the_context(scorer_cls):
    """A continuation's last token is never fed; with one-token continuations only the context is."""
    m = tiny_model("llama", TOK)
    batch = [
        Encoded("a", (5, 6, 7), ((8,), (9,), (10,), (11,))),
        Encoded("b", (5,), ((7, 8), (9,), (10, 11, 12), (13,))),
    ]
    got = scorer_cls(m)(batch)
    assert max_abs_diff(got, [score_reference(m, e) for e in batch]) < 1e-4
    assert [e.packed_length for e in batch] == [3, 1 + 1 + 0 + 2 + 0]
