"""`contamination probe`: has a model seen the canary? Ask it to finish the canary's GUID.

    backend = transformers_backend(model, tokenizer)        # or any ProbeBackend (llama.cpp, ...)
    result = probe_canary(backend, canary, candidates=999, seed=1234)
    result["rank"], result["p_value"], result["verdict"]

The model gets the canary text up to the first half of its GUID ("BASE-BENCH-BUNDLED-CANARY
395bed8f-52cb-47dc"), and every candidate second half is scored as a continuation of it: the true
one ("-a967-31acfca315c0") and `candidates` second halves of random version-4 GUIDs (the same
format, so no candidate stands out by its shape). The score is the summed log-probability of the
continuation's tokens (the probability of the whole string; the halves have the same length in
characters). The true half's rank among all of them is 1 + the number of random halves that score
at least as high (ties count against it), and the empirical p-value is (1 + that number) / (1 +
candidates): the chance that a model that never saw the GUID ranks it this high. With 999
candidates the smallest possible p is 0.001.

A backend is two functions: `tokenize(text) -> ids` (no special tokens, as the scoring contract
tokenizes) and `score(context_ids, [continuation_ids, ...]) -> [summed log-prob, ...]`. The
transformers backend uses the runner's own PlainScorer; another backend (llama.cpp) only has to
provide these two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..results.markdown import md_cell, md_code, md_text
from .canary import Canary, random_second_halves

ALPHA = 0.01
DEFAULT_CANDIDATES = 999


@dataclass(frozen=True)
class ProbeBackend:
    tokenize: Callable[[str], list[int]]
    score: Callable[[Sequence[int], Sequence[Sequence[int]]], list[float]]
    name: str = "custom"


def transformers_backend(model, tokenizer, batch_size: int = 64) -> ProbeBackend:
    """A loaded transformers model and tokenizer (as a run loads them) as a ProbeBackend."""
    from ..backends.transformers_scorers import PlainScorer
    from ..engine.scoring import Encoded

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    scorer = PlainScorer(model, pad)

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def score(context, continuations) -> list[float]:
        out: list[float] = []
        for s in range(0, len(continuations), batch_size):
            chunk = tuple(tuple(c) for c in continuations[s : s + batch_size])
            out += [c.logprob for c in scorer([Encoded("canary", tuple(context), chunk)])[0]]
        return out

    return ProbeBackend(tokenize, score, "transformers")


def rank_and_p(true_score: float, others: Sequence[float]) -> tuple[int, float]:
    """Rank of the true score among all (1 = best; ties count against it) and the empirical p-value."""
    higher = sum(1 for s in others if s >= true_score)
    return 1 + higher, (1 + higher) / (1 + len(others))


def probe_canary(backend: ProbeBackend, canary: Canary, candidates: int = DEFAULT_CANDIDATES, seed: int = 1234) -> dict:
    """Rank the canary's true GUID second half among `candidates` random ones; a JSON-able dict."""
    if candidates < 1:
        raise ValueError("candidates must be 1 or more")
    halves = [canary.second_half] + random_second_halves(candidates, seed, exclude=canary.second_half)
    prompt = backend.tokenize(canary.prompt)
    scores = backend.score(prompt, [backend.tokenize(h) for h in halves])
    rank, p = rank_and_p(scores[0], scores[1:])
    others = sorted(scores[1:], reverse=True)
    if p <= ALPHA:
        verdict = (
            f"the true second half ranks {rank} of {len(halves)} (p = {p:.3g}): the model has very likely "
            "seen the canary, and so the benchmark's file"
        )
    else:
        verdict = (
            f"the true second half ranks {rank} of {len(halves)} (p = {p:.3g}): no sign that the model has "
            "seen the canary (a model can have seen the items without it)"
        )
    return {
        "canary": canary.text,
        "prompt": canary.prompt,
        "true_second_half": canary.second_half,
        "backend": backend.name,
        "candidates": candidates,
        "seed": seed,
        "true_logprob": scores[0],
        "rank": rank,
        "p_value": p,
        "alpha": ALPHA,
        "seen": p <= ALPHA,
        "random_logprob": {"max": others[0], "median": others[len(others) // 2], "min": others[-1]},
        "best_random": halves[1 + scores[1:].index(others[0])],
        "verdict": verdict,
    }


def render_markdown(res: dict, model: str) -> str:
    return "\n".join(
        [
            "# Canary probe",
            "",
            f"Model: {md_code(model)} ({md_text(res['backend'])} backend).",
            "",
            f"Prompt: {md_code(res['prompt'])}; true second half {md_code(res['true_second_half'])} against "
            f"{res['candidates']} random GUID second halves (seed {res['seed']}).",
            "",
            "| | summed log-prob |",
            "|---|---:|",
            f"| true second half | {res['true_logprob']:.2f} |",
            f"| best random ({md_cell(res['best_random'])}) | {res['random_logprob']['max']:.2f} |",
            f"| median random | {res['random_logprob']['median']:.2f} |",
            "",
            f"Rank **{res['rank']}** of {res['candidates'] + 1}; empirical p-value **{res['p_value']:.3g}**.",
            "",
            f"Verdict: {md_text(res['verdict'])}.",
            "",
        ]
    )
