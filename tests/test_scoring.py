"""The scorers against the card-literal loop on tiny random models (no network)."""

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2LMHeadModel

from base_bench.backends.transformers_scorers import (
    CachedScorer,
    PackedScorer,
    PlainScorer,
    check_packing,
    pack_tensors,
    score_reference,
    sliding_window,
    window_mask,
)
from base_bench.engine.packing import Batching, row_layout
from base_bench.engine.scoring import (
    Encoded,
    ScoringError,
    encode_item,
    length_order,
    max_abs_diff,
    packing_probe,
    score_in_batches,
)
from base_bench.items.records import ChoiceScore, Item, pick

from tiny import GEMMA3_WINDOW, tiny_config, tiny_model, tiny_tokenizer

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


# ---------------------------------------------------------------- several items in one row


def _passes(encs, batch_size=None, batch_tokens=None):
    """The passes score_in_batches makes, each as its rows of item lengths."""
    plan = Batching(items=batch_size, tokens=batch_tokens)
    order = [encs[i] for i in length_order(encs)]
    cap = plan.row_capacity(order[0].packed_length)
    out = []
    for batch in plan.cut(order, order[0].packed_length):
        lengths = [e.packed_length for e in batch]
        out.append([[lengths[i] for i in row] for row in row_layout(lengths, cap)])
    return out


SETTINGS = [
    {"batch_size": 3},
    {"batch_size": 24},  # every item in one pass
    {"batch_tokens": 1},  # below every item: one item per pass
    {"batch_tokens": 150},
    {"batch_tokens": 400},
    {"batch_tokens": 100_000},  # every item in one pass
]


@pytest.fixture(scope="module", params=[("llama", torch.float32), ("gpt2", torch.float64), ("gemma3", torch.float32)])
def packed_case(request, encoded):
    kind, dtype = request.param
    m = tiny_model(kind, TOK, dtype=dtype)
    return m, dtype, [score_reference(m, e) for e in encoded]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_several_items_in_one_row_equal_the_loop(packed_case, encoded, setting):
    """Rows of several items (block-diagonal mask, positions restarting per item) against the
    card-literal loop, at item and token settings, in float32 and float64, on a Llama (rotary
    positions), a GPT-2 (learned absolute positions) and a Gemma 3 (a sliding-window layer whose
    window is shorter than every item)."""
    m, dtype, reference = packed_case
    got = score_in_batches(PackedScorer(m, pad_id=0), encoded, **setting)
    tol = 1e-4 if dtype == torch.float32 else 1e-6
    assert max_abs_diff(got, reference) < tol
    assert [pick(g) for g in got] == [pick(r) for r in reference]
    passes = _passes(encoded, **setting)
    if setting.get("batch_tokens", 0) > 1 or setting.get("batch_size", 0) > 3:
        assert any(len(row) > 1 for p in passes for row in p)  # rows really held several items
    if "batch_tokens" in setting:
        n = setting["batch_tokens"]
        assert all(len(p) * max(map(sum, p)) <= max(n, sum(p[0])) for p in passes)


def test_the_sliding_window_is_cut_by_position():
    """A 4D mask reaches sliding-window layers as it is: without the cut the tiny Gemma 3, whose
    window is shorter than the items, scores them far from the loop."""
    m = tiny_model("gemma3", TOK)
    encs = [encode_item(TOK, it) for it in make_items(8)]
    assert all(len(e.context) > GEMMA3_WINDOW for e in encs)
    reference = [score_reference(m, e) for e in encs]
    scorer = PackedScorer(m)
    assert (scorer.window, scorer.window_layers) == (GEMMA3_WINDOW, ("full_attention", "sliding_attention"))
    assert max_abs_diff(score_in_batches(scorer, encs, batch_tokens=300), reference) < 1e-4
    scorer.window = None  # what the scorer did before: the whole item, past the window
    assert max_abs_diff(score_in_batches(scorer, encs, batch_tokens=300), reference) > 0.1


def test_sliding_window_of_other_families():
    """Every layer sliding (Mistral: one mask), and none (Llama)."""
    from transformers import MistralConfig

    mistral = AutoModelForCausalLM.from_config(
        MistralConfig(
            vocab_size=len(TOK),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=5,
            max_position_embeddings=256,
        )
    ).eval()
    assert sliding_window(mistral) == (5, None)
    assert sliding_window(tiny_model("llama", TOK)) == (None, None)
    encs = [encode_item(TOK, it) for it in make_items(6)]
    reference = [score_reference(mistral, e) for e in encs]
    assert max_abs_diff(score_in_batches(PackedScorer(mistral), encs, batch_tokens=300), reference) < 1e-4


# One row of two items, one row of one item: a = context (5, 6), continuations (7, 8) and (9,);
# b = context (10,), continuations (11, 12, 13) and (14,); c = context (20, 21, 22, 23),
# continuations (24,) and (25,). Packed lengths: a 2 + 1 + 0 = 3, b 1 + 2 + 0 = 3, c 4.
A = Encoded("a", (5, 6), ((7, 8), (9,)))
B = Encoded("b", (10,), ((11, 12, 13), (14,)))
C = Encoded("c", (20, 21, 22, 23), ((24,), (25,)))
X = "x"  # allowed
ALLOWED_AB = [  # row [a, b]: columns 5 6 7 | 10 11 12
    "x.....",  # a ctx 5
    "xx....",  # a ctx 6
    "xxx...",  # a cont0 7: the context and itself
    "...x..",  # b ctx 10: its own item only
    "...xx.",  # b cont0 11
    "...xxx",  # b cont0 12
]
ALLOWED_C = [  # row [c], 4 positions: context only, no padding
    "x...",
    "xx..",
    "xxx.",
    "xxxx",
]


@pytest.mark.parametrize(
    "batch, rows, ids, pos, allowed, targets",
    [
        (
            [A, B],
            [[0, 1]],
            [[5, 6, 7, 10, 11, 12]],
            [[0, 1, 2, 0, 1, 2]],
            [ALLOWED_AB],
            # (row, column, token, segment): a's choices are segments 0 and 1, b's 2 and 3
            [(0, 1, 7, 0), (0, 2, 8, 0), (0, 1, 9, 1), (0, 3, 11, 2), (0, 4, 12, 2), (0, 5, 13, 2), (0, 3, 14, 3)],
        ),
        (
            [C, A, B],
            [[0], [1, 2]],
            [[20, 21, 22, 23, 0, 0], [5, 6, 7, 10, 11, 12]],
            [[0, 1, 2, 3, 0, 0], [0, 1, 2, 0, 1, 2]],
            [[r + ".." for r in ALLOWED_C] + ["....x.", ".....x"], ALLOWED_AB],  # padding sees itself only
            [
                (0, 3, 24, 0),
                (0, 3, 25, 1),
                (1, 1, 7, 2),
                (1, 2, 8, 2),
                (1, 1, 9, 3),
                (1, 3, 11, 4),
                (1, 4, 12, 4),
                (1, 5, 13, 4),
                (1, 3, 14, 5),
            ],
        ),
        (
            [A, B],
            [[1], [0]],  # rows in any order; segments stay in batch order
            [[10, 11, 12], [5, 6, 7]],
            [[0, 1, 2], [0, 1, 2]],
            [[r[3:] for r in ALLOWED_AB[3:]], [r[:3] for r in ALLOWED_AB[:3]]],
            [(1, 1, 7, 0), (1, 2, 8, 0), (1, 1, 9, 1), (0, 0, 11, 2), (0, 1, 12, 2), (0, 2, 13, 2), (0, 0, 14, 3)],
        ),
    ],
)
def test_pack_tensors(batch, rows, ids, pos, allowed, targets):
    p = pack_tensors(batch, rows, pad_id=0)
    assert p.ids.tolist() == ids
    assert p.pos.tolist() == pos
    assert [["x" if a else "." for a in line] for r in p.allowed.tolist() for line in r] == [
        list(line) for r in allowed for line in r
    ]
    got = sorted(zip([r for r, _ in p.targets.at], [c for _, c in p.targets.at], p.targets.tokens, p.targets.segments))
    assert got == sorted(targets)
    assert p.segments == 2 * len(batch)


def test_window_mask_counts_positions_not_columns():
    pos = torch.tensor([[0, 1, 2, 3, 0, 1]])  # two items in one row
    near = window_mask(pos, 2)[0]
    # the query at column 3 is at position 3: it reaches back to position 2, and columns 4 and 5, at
    # positions 0 and 1, are out of its window although they come later (the mask it is ANDed with
    # keeps another item's columns out anyway)
    assert near[3].tolist() == [False, False, True, True, False, False]
    assert near[5].tolist() == [True] * 6  # position 1 reaches back to position 0 wherever it is


class ColumnPositions(GPT2LMHeadModel):
    """A GPT-2 that honours the 4D mask but takes each item after the first in a row at the column it
    starts in (as a model that reads positions from the columns would): one item per row is scored
    right, several are not."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
        if position_ids is not None:
            cols = torch.arange(position_ids.shape[1], device=position_ids.device).expand_as(position_ids)
            restart = position_ids == 0
            start = torch.cummax(torch.where(restart, cols, torch.zeros_like(cols)), dim=1).values
            position_ids = position_ids + start
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs)


def column_positions_model() -> ColumnPositions:
    m = ColumnPositions(tiny_config("gpt2", len(TOK)))
    m.load_state_dict(tiny_model("gpt2", TOK).state_dict())
    return m.eval()


def test_packing_check_covers_several_items_in_one_row(encoded):
    m = column_positions_model()
    probe = packing_probe([encoded[i] for i in length_order(encoded)])
    assert len(probe) == 3
    plain = PlainScorer(m)(probe)
    alone = PackedScorer(m).score_rows(probe, [[0], [1], [2]])
    assert max_abs_diff(alone, plain) < 1e-4  # one item per row: a check of that alone would pass
    ok, diff = check_packing(m, probe)
    assert not ok and diff > 1e-3
    ok, diff = check_packing(tiny_model("gpt2", TOK), probe)
    assert ok and diff < 1e-4


def test_packing_check_covers_the_window_cut_when_an_item_reaches_past_it():
    """On a model with sliding-window layers the start-up check also scores the item that reaches
    furthest, when it reaches past the window: the mask's cut is checked on a real item."""
    from base_bench import evaluate

    rep = evaluate(tiny_model("gemma3", TOK), TOK, limit=10, batch_tokens=400, progress=False)
    check = rep["config"]["packing_check"]
    assert rep["config"]["scorer"] == "packed" and check["ok"] and len(check["checked_items"]) == 4
    ref = evaluate(tiny_model("gemma3", TOK), TOK, limit=10, batch_size=1, progress=False)
    assert (
        max(
            abs(x["logprob"] - y["logprob"])
            for p, q in zip(ref["items"], rep["items"])
            for x, y in zip(p["choices"], q["choices"])
        )
        < 1e-4
    )
