"""`--batch-size auto`'s search, over items on a CPU and over a token budget on a GPU, the
out-of-memory back-off, and `--batch-tokens` (no GPU needed: out-of-memory is simulated)."""

import json

import pytest
import torch

from base_bench import ScoringError, evaluate
from base_bench.backends import transformers_scorers as scoring
from base_bench.backends.transformers import TransformersBackend
from base_bench.commands.cli import main
from base_bench.engine.batching import CPU_AUTO, attempt, auto_batch_tokens, auto_batching, is_oom, largest_fitting
from base_bench.engine.packing import Batching, batch_cost
from base_bench.engine.scoring import Encoded
from base_bench.items.records import ChoiceScore

from fixtures import write_dataset
from tiny import save_tiny, tiny_model, tiny_tokenizer


@pytest.mark.parametrize(
    "limit, upper, expected",
    [
        (0, 64, 0),  # nothing fits
        (1, 64, 1),
        (5, 64, 5),  # between powers of two
        (8, 64, 8),  # exactly a power of two
        (63, 64, 63),
        (64, 64, 64),
        (1000, 64, 64),  # capped by the number of items
        (1000, 50, 50),  # cap that is not a power of two
        (37, 50, 37),
    ],
)
def test_largest_fitting_finds_the_exact_limit(limit, upper, expected):
    calls = []

    def fits(n):
        calls.append(n)
        assert 1 <= n <= upper
        return n <= limit

    assert largest_fitting(fits, upper) == expected
    assert len(calls) <= 2 * upper.bit_length() + 1


def test_is_oom():
    assert is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"))
    assert not is_oom(RuntimeError("shape mismatch"))
    assert not is_oom(ValueError("out of memory"))


def test_run_halves_the_batch_on_out_of_memory_and_scores_the_same(tmp_path, monkeypatch, capsys):
    model = save_tiny(tmp_path / "tiny-llama")
    write_dataset(tmp_path / "data")
    common = ["--model", str(model), "--local-data", str(tmp_path / "data"), "--device", "cpu", "--limit", "40"]
    assert main([*common, "--out-dir", str(tmp_path / "a"), "--batch-size", "1"]) == 0

    real_call = scoring.PackedScorer.__call__

    def small_memory(self, batch):
        if len(batch) > 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_call(self, batch)

    monkeypatch.setattr(scoring.PackedScorer, "__call__", small_memory)
    assert main([*common, "--out-dir", str(tmp_path / "b"), "--batch-size", "16"]) == 0
    err = capsys.readouterr().err
    assert "batch size lowered to 8" in err and "batch size lowered to 4" in err
    a = json.loads((tmp_path / "a" / "report.json").read_text())
    b = json.loads((tmp_path / "b" / "report.json").read_text())
    assert b["config"]["batch_size_used"] == 4
    assert b["config"]["scorer"] == "packed"
    assert [i["prediction"] for i in a["items"]] == [i["prediction"] for i in b["items"]]
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for p, q in zip(a["items"], b["items"])
        for x, y in zip(p["choices"], q["choices"])
    )
    assert worst < 1e-4


def test_auto_on_cpu_uses_the_measured_default(tmp_path):
    model = save_tiny(tmp_path / "tiny-llama")
    write_dataset(tmp_path / "data")
    assert (
        main(
            [
                "--model",
                str(model),
                "--local-data",
                str(tmp_path / "data"),
                "--device",
                "cpu",
                "--limit",
                "10",
                "--out-dir",
                str(tmp_path / "r"),
                "--batch-size",
                "auto",
            ]
        )
        == 0
    )
    cfg = json.loads((tmp_path / "r" / "report.json").read_text())["config"]
    assert cfg["batch_size"] == "auto" and cfg["batch_size_used"] == 8


def test_attempt_returns_none_only_on_out_of_memory():
    cpu = torch.device("cpu")
    assert attempt(lambda: 7, cpu) == 7

    def oom():
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    def other():
        raise RuntimeError("shape mismatch")

    assert attempt(oom, cpu) is None
    with pytest.raises(RuntimeError, match="shape mismatch"):
        attempt(other, cpu)


def test_out_of_memory_with_a_boolean_logits_to_keep_propagates_and_keeps_the_mode():
    """An OOM must reach the caller's back-off, not switch the scorer to a slower fallback."""
    m = tiny_model("llama", tiny_tokenizer())
    real_forward = m.forward

    def forward(input_ids=None, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0):
        if isinstance(logits_to_keep, torch.Tensor):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return real_forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
        )

    m.forward = forward
    scorer = scoring.PackedScorer(m)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        scorer([Encoded("x", (5, 6), ((7, 8), (9,)))])
    assert scorer.keep_mode == "mask"


# ---------------------------------------------------------------- the token budget


def item(name: str, length: int) -> Encoded:
    """An item whose packed row is `length` positions long."""
    return Encoded(name, tuple(range(5, 4 + length)), ((7,), (8, 9), (10,), (11,)))


# packed lengths of 12 items, longest first; rows of at most 12 (first fit, decreasing):
# [12], [11, 1], [9, 3], [8, 4], [7, 5], [2, 2, 1]: every row but the last is 12 wide
LENGTHS = [12, 11, 9, 8, 7, 5, 4, 3, 2, 2, 1, 1]


class MemoryOf:
    """A packed scorer on a device that holds `limit` fed positions a pass: more runs out of memory."""

    def __init__(self, limit: int):
        self.limit, self.row_length, self.fed = limit, None, []

    def __call__(self, batch):
        fed = batch_cost(batch, self.row_length)
        self.fed.append(fed)
        if fed > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return [[ChoiceScore(-1.0, 1)] * 4 for _ in batch]


@pytest.mark.parametrize(
    "limit, budget, probes",
    [
        (40, 36, [12, 24, 48, 36]),  # 1, 2, 4 rows, then bisect to 3 rows: 3 × 12
        (12, 12, [12, 24]),  # one row fits, two do not
        (11, 0, [12]),  # not even one row
        (1000, 72, [12, 24, 48, 72]),  # every row at once: 6 rows × 12
        (59, 48, [12, 24, 48, 72, 60]),  # 4 rows fit, 5 (60) and 6 (72) do not
    ],
)
def test_auto_searches_the_token_budget_over_packed_rows(limit, budget, probes):
    order = [item(f"i{k:02d}", n) for k, n in enumerate(LENGTHS)]
    scorer = MemoryOf(limit)
    scorer.row_length = 12
    assert auto_batch_tokens(scorer, order, 12, torch.device("cuda")) == budget
    assert scorer.fed == probes


def test_auto_batching_is_items_on_a_cpu_and_tokens_on_a_gpu():
    order = [item(f"i{k:02d}", n) for k, n in enumerate(LENGTHS)]
    scorer = MemoryOf(40)
    scorer.row_length = 12
    assert auto_batching(scorer, order, 12, torch.device("cpu")) == Batching(items=CPU_AUTO)
    assert scorer.fed == []  # nothing probed on a CPU
    assert auto_batching(scorer, order, 12, torch.device("cuda")) == Batching(tokens=36)
    assert auto_batching(MemoryOf(5), order, 12, torch.device("cuda")) is None


def test_auto_token_search_takes_what_every_rank_allows():
    """Under several ranks each probe's verdict is made common: here a second rank holds 30."""
    order = [item(f"i{k:02d}", n) for k, n in enumerate(LENGTHS)]
    scorer = MemoryOf(40)
    scorer.row_length = 12

    def agree(fits_here: bool) -> bool:
        return fits_here and scorer.fed[-1] <= 30

    assert auto_batch_tokens(scorer, order, 12, torch.device("cuda"), agree) == 24


@pytest.fixture
def on_a_gpu(monkeypatch):
    """The transformers backend says it is on cuda; the model stays on the CPU."""
    real_init = TransformersBackend.__init__

    def init(self, model, tokenizer):
        real_init(self, model, tokenizer)
        self.device = torch.device("cuda")

    monkeypatch.setattr(TransformersBackend, "__init__", init)


def short_of_memory(monkeypatch, limit: int, spare: int = 0) -> list[int]:
    """The packed scorer runs out of memory on passes feeding more than `limit` positions, but for
    the first `spare` passes; returns the list the fed positions of every pass are appended to."""
    real = scoring.PackedScorer.score_rows
    fed = []

    def score_rows(self, batch, rows):
        n = len(rows) * max(sum(batch[i].packed_length for i in row) for row in rows)
        fed.append(n)
        if n > limit and len(fed) > spare:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(self, batch, rows)

    monkeypatch.setattr(scoring.PackedScorer, "score_rows", score_rows)
    return fed


def same_scores(a: dict, b: dict) -> float:
    return max(
        abs(x["logprob"] - y["logprob"])
        for p, q in zip(a["items"], b["items"])
        for x, y in zip(p["choices"], q["choices"])
    )


@pytest.fixture(scope="module")
def tiny():
    tok = tiny_tokenizer()
    return tiny_model("llama", tok), tok


@pytest.fixture(scope="module")
def one_at_a_time(tiny):
    model, tok = tiny
    return evaluate(model, tok, limit=40, batch_size=1, progress=False)


def test_auto_on_a_gpu_searches_tokens_then_scores_the_same(tiny, one_at_a_time, on_a_gpu, monkeypatch, caplog):
    model, tok = tiny
    fed = short_of_memory(monkeypatch, 1500)
    with caplog.at_level("INFO", logger="base_bench"):
        rep = evaluate(model, tok, limit=40, batch_size="auto", progress=False)
    cfg = rep["config"]
    assert cfg["device"] == "cuda" and cfg["batch_size"] == "auto" and cfg["batch_size_used"] is None
    budget, row = cfg["batch_tokens_used"], cfg["row_length"]
    assert 0 < budget <= 1500 < budget + row  # the most whole rows of the longest items that fit
    assert f"--batch-size auto: {budget} tokens per pass on cuda" in caplog.text
    assert "lowered" not in caplog.text  # every later pass fits the budget the search found
    assert max(fed) > 1500  # the search did try more than fits
    assert same_scores(one_at_a_time, rep) < 1e-5 and rep["results"] == one_at_a_time["results"]


@pytest.mark.slow(reason="whole evaluate() runs under a simulated out-of-memory, one per budget it halves to")
def test_token_budget_halves_on_out_of_memory_then_stops_at_one_item(tiny, one_at_a_time, monkeypatch, caplog):
    model, tok = tiny
    short_of_memory(monkeypatch, 700)
    with caplog.at_level("INFO", logger="base_bench"):
        rep = evaluate(model, tok, limit=40, batch_tokens=4000, progress=False)
    assert "tokens per pass lowered to 2000" in caplog.text and "tokens per pass lowered to 500" in caplog.text
    assert rep["config"]["batch_tokens"] == 4000 and rep["config"]["batch_tokens_used"] == 500
    assert same_scores(one_at_a_time, rep) < 1e-5 and rep["results"] == one_at_a_time["results"]

    short_of_memory(monkeypatch, 10, spare=1)  # the start-up check passes, then no item fits:
    with pytest.raises(ScoringError, match="out of accelerator memory even at one item per pass"):  # not 1 token
        evaluate(model, tok, limit=40, batch_tokens=4000, progress=False)


@pytest.mark.slow(reason="two whole CLI runs of the tiny model")
def test_batch_tokens_flag(tmp_path, capsys):
    model = save_tiny(tmp_path / "tiny-llama")
    write_dataset(tmp_path / "data")
    common = ["--model", str(model), "--local-data", str(tmp_path / "data"), "--device", "cpu", "--limit", "30"]
    assert main([*common, "--out-dir", str(tmp_path / "items"), "--batch-size", "1"]) == 0
    assert main([*common, "--out-dir", str(tmp_path / "tokens"), "--batch-tokens", "600"]) == 0
    a = json.loads((tmp_path / "items" / "report.json").read_text())
    b = json.loads((tmp_path / "tokens" / "report.json").read_text())
    cfg = b["config"]
    assert (cfg["batch_size"], cfg["batch_tokens"], cfg["batch_size_used"], cfg["batch_tokens_used"]) == (
        None,
        600,
        None,
        600,
    )
    assert 0 < cfg["row_length"] <= 600  # rows up to the longest item (or the budget, were it smaller)
    assert "at most 600 tokens per pass" in (tmp_path / "tokens" / "predictions.md").read_text()
    assert a["config"]["batch_tokens"] is None and a["config"]["batch_size_used"] == 1
    assert same_scores(a, b) < 1e-5 and a["results"] == b["results"]
    # the signature --resume checks does not depend on how passes are cut: a run started by tokens
    # resumes by items (and the other way round), and scores the same
    half = [c if c != "30" else "15" for c in common]
    assert main([*half, "--out-dir", str(tmp_path / "resumed"), "--batch-tokens", "300"]) == 0
    signature = json.loads((tmp_path / "resumed" / "run_config.json").read_text())
    assert main([*common, "--out-dir", str(tmp_path / "resumed"), "--resume", "--batch-size", "4"]) == 0
    assert json.loads((tmp_path / "resumed" / "run_config.json").read_text()) == signature
    c = json.loads((tmp_path / "resumed" / "report.json").read_text())
    assert c["timing"]["items_scored_this_session"] == 15 and c["config"]["batch_size_used"] == 4
    assert same_scores(a, c) < 1e-5 and a["results"] == c["results"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as ei:
        main([*common, "--out-dir", str(tmp_path / "both"), "--batch-size", "8", "--batch-tokens", "600"])
    assert ei.value.code == 2
    assert "argument --batch-tokens: not allowed with argument --batch-size" in capsys.readouterr().err
    assert not (tmp_path / "both").exists()
    with pytest.raises(SystemExit) as ei:
        main([*common, "--batch-tokens", "0"])
    assert ei.value.code == 2
