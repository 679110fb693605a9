"""The state the GPU checks share, and the record of one check. `Ctx` builds each model, encoding
and score once, on first use, and hands it to any check that asks, so that any check can run alone
(`--only NAME`); `Check` is what each check module exports as CHECK and gpu/run.py lists.

    ctx = Ctx(dry=True, budget_s=450, work=Path("/tmp/w"), items=None)
    ref, seconds = ctx.reference("tiny", "float32")            # the card-literal loop
    got, seconds = ctx.scores("tiny", "float32", "packed", 8)   # one scorer at one batch size
    compare(got, ref, ctx.ids)["max_abs_delta"]

On a GPU the device is cuda:0 and the big model is the 1B-shaped one; in the dry run (`dry=True`)
the device is the CPU, the big model is the tiny one and 20 items are scored. "bfloat16" is the
float32 model's weights cast with its float32 buffers kept, as from_pretrained(dtype=bfloat16)
leaves the rotary inv_freq; "bfloat16-cast" casts those buffers too.
"""

from __future__ import annotations

import copy
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpu.common import DRY_ITEMS, EVAL_BATCH, sync
from gpu.models import BIG, TINY, build_model, load_tokenizer


class Ctx:
    """What the checks share: device, data, tokenizer, models and every score computed so far (each
    computed once, on first use, so any check can run without the others)."""

    def __init__(self, dry: bool, budget_s: float, work: Path, items: int | None):
        import torch

        from base_bench.items.datasource import open_data

        self.dry = dry
        self.device = torch.device("cpu") if dry else torch.device("cuda", 0)
        self.work = work
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.deadline = self.t0 + budget_s
        self.tok = load_tokenizer()
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        self.source = open_data(None)
        n = DRY_ITEMS if dry and items is None else items
        self.limit = n if n and n < len(self.source.dataset.items) else None
        self.items = list(self.source.dataset.items[: self.limit] if self.limit else self.source.dataset.items)
        self.ids = [it.id for it in self.items]
        self.big = TINY if dry else BIG
        self.models: dict = {}
        self.memo: dict = {}
        self.notes: list[str] = []
        self.threads = torch.get_num_threads() if dry else None  # passed on to the subprocesses

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.t0 + self.budget_s - time.monotonic()

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def model(self, key: str, dtype: str):
        """The model `key` in `dtype`. "bfloat16" is the float32 model's weights cast, with its float32
        buffers kept (as from_pretrained(dtype=torch.bfloat16) leaves the rotary inv_freq);
        "bfloat16-cast" is `model.to(torch.bfloat16)`, which casts those buffers too."""
        if (key, dtype) not in self.models:
            t = time.perf_counter()
            if dtype == "float32":
                m = build_model(key, self.tok, self.device)
            else:
                import torch

                m32 = self.model(key, "float32")
                m = copy.deepcopy(m32).to(torch.bfloat16).eval()
                if dtype == "bfloat16":
                    for (_name, b16), (_, b32) in zip(m.named_buffers(), m32.named_buffers()):
                        if b32.dtype == torch.float32:
                            b16.data = b32.data.clone()
            sync(self.device)
            self.models[(key, dtype)] = m
            self.memo[("build_s", key, dtype)] = round(time.perf_counter() - t, 3)
        return self.models[(key, dtype)]

    def encoded(self, key: str):
        from base_bench.backends.transformers_scorers import model_window
        from base_bench.engine.scoring import encode_item

        model = self.model(key, "float32")
        window = model_window(model, self.tok)
        if ("enc", window) not in self.memo:
            self.memo[("enc", window)] = [encode_item(self.tok, it, window=window) for it in self.items]
        return self.memo[("enc", window)]

    def reference(self, key: str, dtype: str):
        """The card-literal loop's scores and seconds."""
        from base_bench.backends.transformers_scorers import score_reference

        k = ("ref", key, dtype)
        if k not in self.memo:
            model, encs = self.model(key, dtype), self.encoded(key)
            sync(self.device)
            t = time.perf_counter()
            scores = [score_reference(model, e) for e in encs]
            sync(self.device)
            self.memo[k] = (scores, time.perf_counter() - t)
        return self.memo[k]

    def scores(self, key: str, dtype: str, scorer: str, batch_size: int | None = None, batch_tokens: int | None = None):
        """One scorer's scores (input order) and seconds, at `batch_size` items or at most
        `batch_tokens` fed positions per pass, cut as the runner cuts them (score_in_batches: the
        packed scorer's rows hold several items, up to the longest item's length)."""
        from base_bench.backends.transformers_scorers import CachedScorer, PackedScorer, PlainScorer
        from base_bench.engine.scoring import score_in_batches

        k = ("scores", key, dtype, scorer, batch_size if batch_tokens is None else ("tokens", batch_tokens))
        if k not in self.memo:
            cls = {"packed": PackedScorer, "plain": PlainScorer, "kv-cache": CachedScorer}[scorer]
            model, encs = self.model(key, dtype), self.encoded(key)
            scorer = cls(model, self.pad_id)
            sync(self.device)
            t = time.perf_counter()
            got = score_in_batches(scorer, encs, batch_size, batch_tokens=batch_tokens)
            sync(self.device)
            self.memo[k] = (got, time.perf_counter() - t)
            self.memo[("keep_mode",) + k[1:]] = scorer.keep_mode
        return self.memo[k]

    def saved_dir(self, key: str) -> Path:
        """The bfloat16 model and the tokenizer, saved as a local export the command line can load."""
        k = ("dir", key)
        if k not in self.memo:
            where = self.work / f"{key}-bfloat16"
            model = self.model(key, "bfloat16")
            t = time.perf_counter()
            model.save_pretrained(where)
            self.tok.save_pretrained(where)
            self.memo[("save_s", key)] = round(time.perf_counter() - t, 3)
            self.memo[k] = where
        return self.memo[k]

    def evaluate_report(self, key: str) -> dict:
        """evaluate() on the in-memory bfloat16 model, batch EVAL_BATCH, writing a run to the work dir."""
        from base_bench import evaluate

        k = ("evaluate", key)
        if k not in self.memo:
            out = self.work / f"evaluate-{key}"
            t = time.perf_counter()
            report = evaluate(
                self.model(key, "bfloat16"),
                self.tok,
                None,
                limit=self.limit,
                batch_size=EVAL_BATCH,
                out_dir=out,
                progress=False,
            )
            sync(self.device)
            self.memo[k] = (report, time.perf_counter() - t, out)
        return self.memo[k]

    def free(self, keep: tuple = ()) -> None:
        for k in [k for k in self.models if k not in keep]:
            del self.models[k]
        gc.collect()
        if self.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()


@dataclass(frozen=True)
class Check:
    """One check of the run: its name (for --only), its title (in the Markdown), the function that
    measures it, and the seconds it is given (estimates; the run skips a check that would not fit)."""

    name: str
    title: str
    fn: Callable[[Ctx], dict]
    estimate_s: float  # on the H200; a guess until the first run there
    estimate_dry_s: float
