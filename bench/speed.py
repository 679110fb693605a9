"""How fast is the card's scoring here, against the machine's FLOP floor and against lm-evaluation-harness?

    python bench/speed.py --model PATH.gguf --threads 2            # writes bench/RESULTS.md
    python bench/speed.py --model PATH.gguf --limit 40 --out /tmp/r.md   # a quick look

Everything is measured in one process, on one machine, with one model and the same (context,
continuation) pairs: the bundled set's items, each with its four continuations.

* GEMM rate: the model's own linear layers (one decoder layer's seven projections, FLOP-weighted)
  on 1,024 tokens, in float32 and bfloat16. This is the best the model's matrix shapes reach here.
* FLOP floor: the FLOPs of the card's scoring when each context is computed once (every linear
  layer on every token that must be fed: the context and each continuation but its last token,
  which is only predicted; attention over the pairs each token really attends to; the LM head only
  at positions that predict a continuation token), divided by the float32 GEMM rate.
* Methods, each timed over all pairs:
  - runner: base-bench's packed scorer at its CPU batch size, the way `base-bench` runs it;
  - single: the same batches with one item per row (the layout before rows held several items);
  - tokens: the runner with `--batch-tokens N` for each N of `--batch-tokens` ("all": a budget that
    holds every item in one pass), rows packed first-fit-decreasing up to the longest item;
  - kv-cache: the other way to compute each context once (contexts fill a cache, choices extend it);
  - loop: the card read literally, one unpadded forward pass per (context, continuation);
  - lm-eval: lm-evaluation-harness's HFLM.loglikelihood on the same model object, at the fastest
    of the batch sizes tried on a subset first;
  - runner bfloat16: the runner with the model cast to bfloat16 (log_softmax stays float32).
* For each: seconds, pair tokens/s (tokens of context + continuation summed over all pairs, the
  same count for every method), ratio to the floor, speed-up over lm-eval, the largest |delta| of a
  choice's summed log-prob against the loop, and how many predictions differ from the loop's; and
  the positions it feeds the model (padding and recomputed contexts included) against the positions
  the items hold (each context once, each continuation but its last token), with the FLOPs of both
  (`fed_flops`: linear layers on every fed position, attention over every (query, key) pair a pass
  computes, the LM head where the method computes it; `flop_count`'s "once" for what is held).

lm-eval tokenizes each pair its own way (context + continuation encoded together, then split), so
its |delta| includes tokenization differences, not only arithmetic.

bench/RESULTS.md: "Scoring speed: base-bench vs the card-literal loop vs lm-evaluation-harness" (written to
--out, by default bench/RESULTS.md itself); with --methods, "CPU speed by batch setting (measured)" and "Speed
against llama.cpp's own prompt processing".
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import torch
from benchlib import ROOT, child_json, cpu_name, load_cpu_model, markdown_table, memory_gib, timed, timed_call

from base_bench.backends.transformers_scorers import (
    CachedScorer,
    PackedScorer,
    check_packing,
    model_window,
    score_reference,
)
from base_bench.engine.batching import CPU_AUTO
from base_bench.engine.packing import Batching, longest_first, pack_rows, row_layout
from base_bench.engine.scoring import encode_item, max_abs_diff, packing_probe, score_in_batches
from base_bench.items.dataset import load_dataset_file
from base_bench.items.records import ChoiceScore, pick


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def machine() -> str:
    gib = memory_gib()
    mem = f", {gib:.0f} GiB RAM" if gib is not None else ""
    simd = ", ".join(sorted(f for f in cpu_flags() if f.startswith(("avx512", "amx")) or f in ("avx2", "fma"))) or "n/a"
    return (
        f"{cpu_name()}, {os.cpu_count()} logical CPUs{mem}, {platform.system()} {platform.machine()}; "
        f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()} kernels), "
        f"torch threads {torch.get_num_threads()}; CPU flags: {simd}"
    )


@torch.inference_mode()
def gemm_rate(model, dtype, tokens=1024) -> float:
    """FLOP/s of one decoder layer's linear projections on `tokens` rows, FLOP-weighted."""
    layer = model.model.layers[0] if hasattr(model, "model") and hasattr(model.model, "layers") else None
    linears = [m for m in (layer or model).modules() if isinstance(m, torch.nn.Linear)]
    flops = seconds = 0.0
    for lin in linears:
        w = lin.weight.detach().to(dtype)
        x = torch.randn(tokens, w.shape[1], dtype=dtype)
        seconds += timed(lambda x=x, w=w: torch.nn.functional.linear(x, w))
        flops += 2.0 * tokens * w.numel()
    return flops / seconds


def flop_count(model, encs) -> dict:
    """FLOPs of scoring `encs` with each context computed once, and with each choice recomputing it."""
    cfg = model.config
    head = model.get_output_embeddings().weight
    linear_params = sum(
        m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m.weight is not head
    )
    layers = cfg.num_hidden_layers
    qk_dim = cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    once = recompute = 0.0
    for e in encs:
        L = len(e.context)
        fed = [len(c) - 1 for c in e.continuations]  # a continuation's last token is predicted, never fed
        pairs_once = L * (L + 1) / 2 + sum(n * L + n * (n + 1) / 2 for n in fed)
        pairs_each = sum((L + n) * (L + n + 1) / 2 for n in fed)
        head_once = 1 + sum(len(c) - 1 for c in e.continuations)
        head_each = sum(len(c) for c in e.continuations)
        attn = 4.0 * layers * qk_dim  # QK^T and AV, 2 FLOPs per multiply-add
        once += 2.0 * linear_params * e.packed_length + attn * pairs_once + 2.0 * head.numel() * head_once
        recompute += 2.0 * linear_params * sum(L + n for n in fed) + attn * pairs_each + 2.0 * head.numel() * head_each
    return {"once": once, "recompute": recompute, "linear_params": linear_params}


def _sizes(model) -> tuple[int, float, int]:
    """(linear parameters but the LM head's, attention FLOPs per (query, key) pair, LM head parameters)."""
    cfg = model.config
    head = model.get_output_embeddings().weight
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m.weight is not head)
    qk = cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    return linear, 4.0 * cfg.num_hidden_layers * qk, head.numel()


def fed_flops(model, passes) -> dict:
    """What a method feeds the model, from its passes: each a dict with `rows` and `width` (a [rows,
    width] input), `pairs` (the (query, key) pairs attention computes; rows × width² under a dense
    mask) and `head` (positions the LM head runs at)."""
    linear, attn, head = _sizes(model)
    positions = sum(p["rows"] * p["width"] for p in passes)
    pairs = sum(p["pairs"] for p in passes)
    kept = sum(p["head"] for p in passes)
    return {"positions": positions, "flops": 2.0 * linear * positions + attn * pairs + 2.0 * head * kept}


def _kept(e) -> int:
    """Positions whose logits score a continuation token: the context's last, and each fed continuation token."""
    return 1 + sum(len(c) - 1 for c in e.continuations)


def packed_passes(batches, row_length) -> list[dict]:
    """The packed scorer's passes: each batch laid out by `row_layout` (None: one item per row)."""
    out = []
    for batch in batches:
        lengths = [e.packed_length for e in batch]
        rows = row_layout(lengths, row_length)
        width = max(sum(lengths[i] for i in r) for r in rows)
        out.append(dict(rows=len(rows), width=width, pairs=len(rows) * width**2, head=sum(map(_kept, batch))))
    return out


def cached_passes(batches) -> list[dict]:
    """The kv-cache scorer: the contexts left-padded, then one row per choice over the cache."""
    out = []
    for batch in batches:
        P = max(len(e.context) for e in batch)
        K = len(batch[0].continuations)
        C = max(len(c) for e in batch for c in e.continuations) - 1
        out.append(dict(rows=len(batch), width=P, pairs=len(batch) * P * P, head=len(batch)))
        if C > 0:
            n = len(batch) * K
            out.append(dict(rows=n, width=C, pairs=n * C * (P + C), head=sum(_kept(e) - 1 for e in batch)))
    return out


def loop_passes(encs) -> list[dict]:
    """The card-literal loop: context + whole continuation, one pass a pair, logits everywhere."""
    out = []
    for e in encs:
        for c in e.continuations:
            n = len(e.context) + len(c)
            out.append(dict(rows=1, width=n, pairs=n * n, head=n))
    return out


def lm_eval_passes(tok, items, batch_size) -> list[dict]:
    """lm-eval HFLM's passes as its Collator cuts them, computed, not traced: pairs sorted longest
    first, batches of `batch_size` right-padded to their longest, (context + continuation)[:-1] fed,
    logits everywhere."""
    lens = sorted(
        (len(tok(it.context + c, add_special_tokens=False)["input_ids"]) - 1 for it in items for c in it.continuations),
        reverse=True,
    )
    out = []
    for s in range(0, len(lens), batch_size):
        b = lens[s : s + batch_size]
        out.append(dict(rows=len(b), width=b[0], pairs=len(b) * b[0] ** 2, head=len(b) * b[0]))
    return out


def lm_eval_scores(model, tok, items, batch_size):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size, device=str(next(model.parameters()).device))
    reqs = [
        Instance("loglikelihood", {}, (it.context, c), i * 4 + k)
        for i, it in enumerate(items)
        for k, c in enumerate(it.continuations)
    ]
    out, seconds = timed_call(lm.loglikelihood, reqs, disable_tqdm=True)
    lens = []
    for it in items:
        for c in it.continuations:  # lm-eval's own split: whole pair encoded, context prefix removed
            whole = tok(it.context + c, add_special_tokens=False)["input_ids"]
            ctx = tok(it.context, add_special_tokens=False)["input_ids"]
            lens.append(max(1, len(whole) - len(ctx)))
    scores = [[ChoiceScore(out[i * 4 + k][0], lens[i * 4 + k]) for k in range(4)] for i in range(len(items))]
    return seconds, scores


METHODS = ("runner", "single", "tokens", "kv-cache", "loop", "lm-eval", "bfloat16", "llama.cpp")


def llama_rows(args, encs, reference, rate_now, gemm) -> list[str]:
    """The llama.cpp backend on the same GGUF and the same token ids: its shared-context scorer (the
    runner's way, start-up check included) and its plain path, each after a fresh torch GEMM rate;
    then llama.cpp's own prompt-processing rate on the tokens the shared path feeds, in child
    processes (bench/llama_pp.py): with base-bench's pinned kernels, and with llama.cpp's defaults
    (llama-bench's pp512). Returns the markdown section."""
    import json
    import tempfile

    from base_bench.backends.llama_cpp import LlamaCppBackend, PlainScorer
    from base_bench.engine.distributed import Ranks

    backend = LlamaCppBackend.load(args.model, device="cpu", threads=args.threads)
    order = longest_first(encs)
    out = {}
    rate = gemm()
    (scorer, check), check_s = timed_call(backend.pick_scorer, order, 0, Ranks.current())
    before = dict(scorer.counts)  # the start-up check's tokens, timed apart
    shared, seconds = timed_call(score_in_batches, scorer, encs, CPU_AUTO)
    out["llama.cpp backend (shared context)"] = dict(
        seconds=seconds,
        scores=shared,
        rate=rate,
        fed=sum(scorer.counts[k] - before[k] for k in ("tokens", "pads")),
        logit_rows=scorer.counts["logit_rows"] - before["logit_rows"],
    )
    print(
        f"llama.cpp shared: {out['llama.cpp backend (shared context)']['seconds']:.1f} s "
        f"(+{check_s:.1f} s start-up check)",
        flush=True,
    )
    rate = gemm()
    plain_scorer = PlainScorer(backend, 64)
    plain, seconds = timed_call(score_in_batches, plain_scorer, encs, CPU_AUTO)
    out["llama.cpp plain (one sequence per choice)"] = dict(
        seconds=seconds,
        scores=plain,
        rate=rate,
        fed=plain_scorer.counts["tokens"] + plain_scorer.counts["pads"],
    )
    print(f"llama.cpp plain: {out['llama.cpp plain (one sequence per choice)']['seconds']:.1f} s", flush=True)
    system, version = backend.describe()["llama_cpp"]["system_info"], backend.versions()["llama-cpp-python"]
    del scorer, plain_scorer
    backend.close()
    # what the shared path feeds (each context once, each continuation but its last token) and where
    # it asks for logits: the context's last row (each continuation's first token) and every fed
    # continuation token (the next one)
    fed_tokens, want = [], []
    for e in order:
        fed_tokens += e.context
        want += [0] * (len(e.context) - 1) + [1]
        for c in e.continuations:
            fed_tokens += c[:-1]
            want += [1] * (len(c) - 1)
    pp = {}
    with tempfile.TemporaryDirectory() as tmp:
        path, want_path = Path(tmp) / "tokens.json", Path(tmp) / "want.json"
        path.write_text(json.dumps(fed_tokens))
        want_path.write_text(json.dumps(want))
        for name, extra in (
            ("pinned", ["--pinned"]),
            ("pinned-logits", ["--pinned", "--want", str(want_path)]),
            ("defaults", []),
        ):
            rate = gemm()
            pp_cmd = [sys.executable, str(ROOT / "bench" / "llama_pp.py"), "--model", args.model]
            pp_cmd += ["--tokens", str(path), "--threads", str(args.threads), *extra]
            pp[name] = dict(child_json(pp_cmd, f"llama_pp.py ({name})"), rate=rate)
            print(f"llama.cpp pp ({name}): {pp[name]['tokens_per_s']:.0f} tokens/s", flush=True)
    shared_row = out["llama.cpp backend (shared context)"]
    backend_rate = shared_row["fed"] / shared_row["seconds"]
    ref_pred = [pick(s) for s in reference]
    cells = []
    for name, r in out.items():
        changed = sum(a != b for a, b in zip(ref_pred, (pick(s) for s in r["scores"])))
        cells.append(
            [name, f"{r['seconds']:.1f}", r["fed"], f"{r['fed'] / r['seconds']:.0f}", f"{r['rate'] / 1e12:.3f}"]
            + [f"{max_abs_diff(r['scores'], plain):.1e}", f"{max_abs_diff(r['scores'], reference):.2f}"]
            + [f"{changed} of {len(encs)}"]
        )
    for name, r in pp.items():
        what = {
            "pinned": "llama.cpp pp, base-bench's pinned kernels (48-token micro-batches)",
            "pinned-logits": f"llama.cpp pp, pinned kernels, logits at the {r['logit_rows']} rows the card needs",
            "defaults": "llama.cpp pp, llama.cpp's defaults (llama-bench pp512)",
        }[name]
        cells.append(
            [what, f"{r['seconds']:.1f}", r["tokens"], f"{r['tokens_per_s']:.0f}", f"{r['rate'] / 1e12:.3f}"]
            + ["n/a"] * 3
        )
    head = ["method", "seconds", "tokens fed", "fed tokens/s", "GEMM TFLOP/s just before", "max abs delta vs plain"]
    head += ["max abs delta vs torch reference", "predictions ≠ torch reference"]
    lines = [
        "## llama.cpp rows (same GGUF, same token ids)",
        "",
        f"llama-cpp-python {version}, {args.threads} threads; {system}. Tokens fed: the context once and each continuation "
        "but its last token (pads that keep a decode from being one token or one output included).",
        "",
        *markdown_table(head, "lrrrrrrr", cells),
    ]
    lines += [
        "",
        f"- logit rows: the backend asked for {shared_row['logit_rows']}, of {shared_row['fed']} tokens fed.",
        f"- start-up check: {check_s:.1f} s, shared vs plain on {len(check['checked_items'])} items: "
        f"max |delta| {check['max_abs_diff_vs_plain']:.1e} (ok={check['ok']}).",
        f"- llama.cpp's own rate over the backend's: {pp['pinned']['tokens_per_s'] / backend_rate:.2f}× with the same "
        f"pinned kernels and llama-bench's one logit row per prompt (the target: at most 1.2×); "
        f"{pp['pinned-logits']['tokens_per_s'] / backend_rate:.2f}× when llama.cpp also computes the logits at the "
        f"{pp['pinned-logits']['logit_rows']} rows the backend needs (the same work: what is left is Python, "
        f"log_softmax and bookkeeping); {pp['defaults']['tokens_per_s'] / backend_rate:.2f}× "
        "against llama.cpp's default kernels (repack buffers, tiled matmul, 512-token micro-batches), which the "
        "backend gives up to be exact and batch-invariant.",
        "",
    ]
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, help="only the first N items (a quick look; RESULTS.md wants all)")
    p.add_argument("--lm-eval-batch-sizes", default="1,4,16,64")
    p.add_argument(
        "--batch-tokens",
        default="2048,4096,all",
        help="token budgets for the tokens method, comma-separated; 'all' holds every item in one pass",
    )
    p.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"))
    p.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated, of {','.join(METHODS)} (default: all); the loop is the reference when run, "
        "else the runner",
    )
    args = p.parse_args(argv)
    methods = set(args.methods.split(","))
    if methods - set(METHODS) or "runner" not in methods:
        p.error(f"--methods takes runner plus any of {','.join(METHODS)}")
    torch.set_num_threads(args.threads)

    items = list(load_dataset_file(ROOT / "data" / "test.jsonl").items)[: args.limit]
    loaded, load_s = load_cpu_model(args.model)
    print(f"model loaded in {load_s:.0f} s", flush=True)
    model, tok = loaded.model, loaded.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    encs = [encode_item(tok, it, window=model_window(model, tok)) for it in items]
    pair_tokens = sum(len(e.context) * len(e.continuations) + sum(map(len, e.continuations)) for e in encs)

    rate32 = gemm_rate(model, torch.float32)
    rate16 = gemm_rate(model, torch.bfloat16)
    fl = flop_count(model, encs)
    floor = fl["once"] / rate32
    print(
        f"GEMM float32 {rate32 / 1e12:.3f} TFLOP/s, bfloat16 {rate16 / 1e12:.3f} TFLOP/s; "
        f"{fl['once'] / 1e12:.2f} TFLOP with each context once -> floor {floor:.1f} s",
        flush=True,
    )

    rows = {}

    rate_now = [rate32]

    def record(name, batch, seconds, scores, passes, note=""):
        feed = fed_flops(model, passes)
        rows[name] = dict(batch=batch, seconds=seconds, scores=scores, note=note, rate=rate_now[0], **feed)
        print(
            f"{name}: {seconds:.1f} s; {feed['positions']} positions fed of {held} held, "
            f"{feed['flops'] / 1e12:.2f} TFLOP fed",
            flush=True,
        )
        rate_now[0] = gemm_rate(model, torch.float32)  # this machine's speed drifts; re-measure before each method

    order = longest_first(encs)
    held = sum(e.packed_length for e in encs)
    row_length = order[0].packed_length
    items_cut = Batching(items=CPU_AUTO).cut(order, row_length)
    probe = packing_probe(order)
    (ok, diff), check_s = timed_call(check_packing, model, probe, pad)
    packed, score_s = timed_call(score_in_batches, PackedScorer(model, pad), encs, CPU_AUTO)
    record(
        "runner (packed)",
        CPU_AUTO,
        check_s + score_s,
        packed,
        packed_passes(items_cut, row_length),
        f"{score_s:.1f} s scoring plus {check_s:.1f} s start-up packing check on {len(probe)} items (a median-length "
        f"one in a row of its own, the two shortest together in another) (ok={ok}, max delta vs plain {diff:.1e})",
    )
    if "single" in methods:
        single = PackedScorer(model, pad)
        t = time.perf_counter()
        got = [None] * len(encs)
        where = {id(e): i for i, e in enumerate(encs)}
        for batch in items_cut:
            for e, sc in zip(batch, single(batch)):  # row_length None: one item per row
                got[where[id(e)]] = sc
        record("one item per row", CPU_AUTO, time.perf_counter() - t, got, packed_passes(items_cut, None))
    if "tokens" in methods:
        everything = len(pack_rows(order, row_length)) * row_length
        for budget in args.batch_tokens.split(","):
            n = everything if budget == "all" else int(budget)
            got, seconds = timed_call(score_in_batches, PackedScorer(model, pad), encs, batch_tokens=n)
            cut = Batching(tokens=n)
            record(
                f"runner, --batch-tokens {n}" + (" (all items in one pass)" if budget == "all" else ""),
                f"{n} tokens",
                seconds,
                got,
                packed_passes(cut.cut(order, row_length), cut.row_capacity(row_length)),
            )
    if "kv-cache" in methods:
        cached, seconds = timed_call(score_in_batches, CachedScorer(model, pad), encs, CPU_AUTO)
        record("kv-cache", CPU_AUTO, seconds, cached, cached_passes(items_cut))

    loop = packed
    if "loop" in methods:
        loop, seconds = timed_call(lambda: [score_reference(model, e) for e in encs])
        record("card-literal loop", 1, seconds, loop, loop_passes(encs))

    if "lm-eval" in methods:
        sub = items[: min(len(items), 40)]
        trials = {}
        for bs in [int(x) for x in args.lm_eval_batch_sizes.split(",")]:
            trials[bs] = lm_eval_scores(model, tok, sub, bs)[0]
            print(f"lm-eval trial, batch {bs}: {trials[bs]:.1f} s on {len(sub)} items", flush=True)
        best = min(trials, key=trials.get)
        seconds, scores = lm_eval_scores(model, tok, items, best)
        record(
            "lm-eval HFLM",
            best,
            seconds,
            scores,
            lm_eval_passes(tok, items, best),
            "batch sizes tried on the first 40 items: "
            + ", ".join(f"{b}: {s:.1f} s" for b, s in trials.items())
            + "; its positions are computed from how its Collator batches (longest first, right-padded), not traced",
        )

    if "bfloat16" in methods:
        model.to(torch.bfloat16)
        b16, seconds = timed_call(score_in_batches, PackedScorer(model, pad), encs, CPU_AUTO)
        record("runner bfloat16", CPU_AUTO, seconds, b16, packed_passes(items_cut, row_length))
        model.to(torch.float32)

    llama_lines = (
        llama_rows(args, encs, loop, rate_now, lambda: gemm_rate(model, torch.float32))
        if "llama.cpp" in methods
        else []
    )

    lm_s = rows["lm-eval HFLM"]["seconds"] if "lm-eval HFLM" in rows else None
    loop_pred = [pick(s) for s in loop]
    ref_name = "loop" if "loop" in methods else "runner"
    head = ["method", "batch", "seconds", "pair tokens/s", "GEMM TFLOP/s just before", "floor s", "× floor"]
    head += ["speed-up over lm-eval", f"max abs delta vs {ref_name}", f"predictions ≠ {ref_name}"]
    head += ["positions fed", "positions held", "fed ÷ held", "TFLOP fed", "TFLOP held"]
    cells = []
    for name, r in rows.items():
        changed = sum(a != b for a, b in zip(loop_pred, (pick(s) for s in r["scores"])))
        fl_s = fl["once"] / r["rate"]
        over_lm = f"{lm_s / r['seconds']:.2f}" if lm_s else "n/a"
        cells.append(
            [name, r["batch"], f"{r['seconds']:.1f}", f"{pair_tokens / r['seconds']:.0f}", f"{r['rate'] / 1e12:.3f}"]
            + [f"{fl_s:.1f}", f"{r['seconds'] / fl_s:.2f}", over_lm, f"{max_abs_diff(r['scores'], loop):.1e}"]
            + [f"{changed} of {len(items)}", r["positions"], held, f"{r['positions'] / held:.3f}"]
            + [f"{r['flops'] / 1e12:.2f}", f"{fl['once'] / 1e12:.2f}"]
        )
    lines = markdown_table(head, "l" + "r" * 14, cells)
    b16_line = []
    if "runner bfloat16" in rows:
        b16_changed = sum(pick(a) != pick(b) for a, b in zip(packed, rows["runner bfloat16"]["scores"]))
        b16_line = [
            f"bfloat16 vs float32 (runner, batch {CPU_AUTO}): "
            f"{rows['runner (packed)']['seconds'] / rows['runner bfloat16']['seconds']:.2f}× the float32 speed; "
            f"{b16_changed} of {len(items)} predictions change "
            f"({100 * (1 - b16_changed / len(items)):.1f}% unchanged).",
            "",
        ]
    notes = [f"- {name}: {r['note']}" for name, r in rows.items() if r["note"]]
    text = "\n".join(
        [
            "# Scoring speed: base-bench vs the card-literal loop vs lm-evaluation-harness",
            "",
            f"Written by `python bench/speed.py --model {Path(args.model).name} --threads {args.threads}"
            + (f" --limit {args.limit}" if args.limit else "")
            + (f" --methods {args.methods}" if methods != set(METHODS) else "")
            + f"` on {time.strftime('%Y-%m-%d')}.",
            "",
            f"Machine: {machine()}.",
            "",
            f"Model: `{Path(args.model).name}`, float32 on the CPU; {len(items)} items, {sum(len(e.continuations) for e in encs)} "
            f"pairs, {pair_tokens} pair tokens (context + continuation over all pairs), "
            f"{sum(e.packed_length for e in encs)} tokens with each context once.",
            "",
            f"GEMM rate (one decoder layer's projections on 1,024 tokens) at the start: float32 {rate32 / 1e12:.3f} "
            f"TFLOP/s, bfloat16 {rate16 / 1e12:.3f} TFLOP/s. This machine's speed drifts by tens of percent over "
            f"minutes, so the float32 rate is measured again right before each method, and each method's floor "
            f"uses that rate.",
            f"FLOPs: {fl['once'] / 1e12:.2f} TFLOP with each context once, {fl['recompute'] / 1e12:.2f} TFLOP when every "
            f"pair recomputes its context. Floor at the starting rate: {floor:.1f} s (float32).",
            "",
            *lines,
            "",
            *b16_line,
            *notes,
            "",
            *llama_lines,
        ]
    )
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
