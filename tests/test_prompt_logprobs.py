"""PromptScorer and check_engine (backends/prompt_logprobs.py) on engines built here: a correct one (a
fixed rule that copies from its context, and a tiny torch model), and the ways servers get it wrong
(values one position early or late, paired with the wrong logits row, the generated token only,
values that depend on what else is computed)."""

import logging
import math

import pytest
import torch

from base_bench.backends.prompt_logprobs import (
    ALIGN_MIN_DROP,
    COPY_MIN_GAIN,
    SPREAD_MAX,
    EngineCheckError,
    PromptScorer,
    check_engine,
)
from base_bench.backends.transformers_scorers import score_reference
from base_bench.engine.scoring import Encoded, ScoringError, encode_item
from base_bench.errors import ModelError
from base_bench.items.records import Item

from tiny import tiny_model, tiny_tokenizer

V = 500  # vocabulary of the rule-based engines


def copy_rule(prompt: list[int], i: int, row: int | None = None) -> float:
    """log p(prompt[i] | what the row sees): a fixed rule that copies from its context, like an
    induction head. The row for position i sees prompt[:i] (row None) or prompt[:row + 1]. If the
    last token it sees occurred before, the token that followed it then gets 0.9; the others share
    the rest, with a small deterministic wobble that depends on the whole prefix."""
    seen = prompt[: i if row is None else row + 1]
    last = seen[-1]
    earlier = [k for k in range(len(seen) - 1) if seen[k] == last]
    if earlier:
        predicted = seen[earlier[-1] + 1]
        return math.log(0.9) if prompt[i] == predicted else math.log(0.1 / (V - 1))
    wobble = (hash(tuple(seen)) % 97) / 970.0
    return -math.log(V) - wobble


def correct(prompts):
    return [[None] + [copy_rule(p, i) for i in range(1, len(p))] for p in prompts]


def early(prompts):  # each value belongs to the next token; the last one is the generated token's
    return [[None] + v[2:] + [-1.5] for v in correct(prompts)]


def late(prompts):  # each value belongs to the token before; the second token gets a made-up 0.0
    return [[None, 0.0] + v[1:-1] for v in correct(prompts)]


def wrong_row(prompts):  # llama-cpp-python's server: log p(token_i) read from the row that predicts i + 1
    return [[None] + [copy_rule(p, i, row=i) for i in range(1, len(p))] for p in prompts]


def generated_only(prompts):  # llama.cpp's server: log-probs of the generated token only
    return [[-2.0] for _ in prompts]


def none_for_prompt(prompts):
    return [[None] * len(p) for p in prompts]


class OrderDependent:
    """Correct values, plus `step` nats for every earlier call that saw the same first 16 tokens: the
    stale-cache behaviour of a prefix cache."""

    def __init__(self, step: float):
        self.step, self.seen = step, {}

    def __call__(self, prompts):
        out = []
        for p, v in zip(prompts, correct(prompts)):
            key = tuple(p[:16])
            shift = self.step * self.seen.get(key, 0)
            self.seen[key] = self.seen.get(key, 0) + 1
            out.append([None] + [x - shift for x in v[1:]])
        return out


def test_a_correct_engine_passes_and_the_record_says_what_was_measured():
    rec = check_engine(correct, V)
    assert rec["ok"] and rec["note"] is None
    assert rec["copy"]["gain"] > COPY_MIN_GAIN
    assert rec["copy"]["first_mean"] < -6 and rec["copy"]["second_mean"] > -0.2
    assert all(d > ALIGN_MIN_DROP for d in rec["alignment"]["drops"])
    assert rec["invariance"]["spread"] == 0.0 and rec["invariance"]["threshold"] == SPREAD_MAX


def test_the_check_sends_the_same_prompts_every_time_and_avoids_special_tokens():
    sent = []

    def spy(prompts):
        sent.append(prompts)
        return correct(prompts)

    check_engine(spy, V, avoid=range(0, 250))
    first = [list(map(list, x)) for x in sent]
    sent.clear()
    check_engine(spy, V, avoid=range(0, 250))
    assert sent == first
    assert min(t for call in sent for p in call for t in p) >= 250


@pytest.mark.parametrize(
    "engine, words",
    [
        (early, "one position early"),
        (late, "one position off"),
        (wrong_row, "copy test"),
        (generated_only, "no log-probs for the prompt"),
        (none_for_prompt, "no log-probs for the prompt"),
        (OrderDependent(0.01), "depend on what else it computes"),
        (lambda ps: correct(ps)[:-1] if len(ps) > 1 else [], "results for"),
        (lambda ps: [v[:-1] for v in correct(ps)], "not return one log-prob per prompt token"),
        (lambda ps: [v[:-1] + [float("nan")] for v in correct(ps)], "nan"),
        (lambda ps: [v[:-1] + [0.5] for v in correct(ps)], "0.5"),
    ],
    ids=["early", "late", "wrong-row", "generated-only", "none", "order", "count", "length", "nan", "positive"],
)
def test_a_wrong_engine_is_refused_with_one_line_naming_the_fault_and_the_known_servers(engine, words):
    with pytest.raises(EngineCheckError) as err:
        check_engine(engine, V, label="the server at http://x/v1")
    msg = str(err.value)
    assert isinstance(err.value, ModelError)
    assert words in msg and "\n" not in msg
    assert msg.startswith("the server at http://x/v1")
    assert "known to work: vLLM" in msg and "llama-cpp-python's server" in msg and "llama.cpp's server" in msg


def test_a_small_order_dependence_passes_with_a_note(caplog):
    with caplog.at_level(logging.WARNING, logger="base_bench"):
        rec = check_engine(OrderDependent(SPREAD_MAX / 10), V)
    assert 0 < rec["invariance"]["spread"] <= SPREAD_MAX
    assert rec["note"] and rec["note"] in caplog.text


def test_a_tiny_random_model_cannot_copy_so_the_check_refuses_it():
    tok = tiny_tokenizer()
    with pytest.raises(EngineCheckError, match="copy test"):
        check_engine(torch_engine(tiny_model("llama", tok)), len(tok), avoid=tok.all_special_ids, length=24)


def torch_engine(model):
    @torch.no_grad()
    def engine(prompts):
        out = []
        for p in prompts:
            ids = torch.tensor([p])
            lp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
            out.append([None] + [lp[i - 1, p[i]].item() for i in range(1, len(p))])
        return out

    return engine


def test_prompt_scorer_equals_the_card_literal_loop_on_a_tiny_model():
    tok = tiny_tokenizer()
    model = tiny_model("llama", tok)
    conts = (" jumps over the lazy dog.", " a", " sleeps.", " is brown and quick, they said.")
    contexts = ["The quick brown fox", "x", "She put the keys in the drawer and left for work. The keys were"]
    items = [Item(f"t-{i}", "commonsense", "easy", 1.1, 1.0, 800, c, conts, 0) for i, c in enumerate(contexts)]
    encoded = [encode_item(tok, it) for it in items]
    got = PromptScorer(torch_engine(model))(encoded)
    for e, row in zip(encoded, got):
        ref = score_reference(model, e)
        assert [c.n_tokens for c in row] == [c.n_tokens for c in ref]
        assert max(abs(a.logprob - b.logprob) for a, b in zip(row, ref)) < 1e-5


def test_prompt_scorer_sums_the_continuation_tokens_only():
    enc = Encoded("x", (5, 6, 7), ((8,), (9, 10)))
    sent = []

    def engine(prompts):
        sent.extend(prompts)
        return [[None] + [-float(t) for t in p[1:]] for p in prompts]

    got = PromptScorer(engine)([enc])
    assert sent == [[5, 6, 7, 8], [5, 6, 7, 9, 10]]
    assert [(c.logprob, c.n_tokens) for c in got[0]] == [(-8.0, 1), (-19.0, 2)]


@pytest.mark.parametrize(
    "reply, words",
    [
        (lambda ps: [[None] * len(p) for p in ps], "item x, choice 0: the server returned None"),
        (lambda ps: [[None] + [-1.0] * (len(p) - 2) for p in ps], "returned 3 log-probs for a prompt of 4"),
        (lambda ps: [[None] + [float("inf")] * (len(p) - 1) for p in ps], "inf"),
        (lambda ps: [], "returned 0 results for 2 prompts"),
    ],
)
def test_prompt_scorer_refuses_a_reply_it_cannot_score_naming_the_item(reply, words):
    with pytest.raises(ScoringError, match=words):
        PromptScorer(reply)([Encoded("x", (5, 6, 7), ((8,), (9, 10)))])
