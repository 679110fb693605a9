"""`--batch-size auto`'s search and the out-of-memory back-off (no GPU needed)."""

import json

import pytest
import torch

from base_bench.backends import transformers_scorers as scoring
from base_bench.commands.cli import main
from base_bench.engine.batching import attempt, is_oom, largest_fitting
from base_bench.engine.scoring import Encoded

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
