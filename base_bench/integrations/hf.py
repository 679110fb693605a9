"""Score the model a transformers `Trainer` is training, as it trains.

    from base_bench.integrations import BaseBenchCallback
    trainer = Trainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    trainer.add_callback(BaseBenchCallback(trainer, out_dir="runs/train-bench", every_n_steps=500))
    trainer.train()
    # then: base-bench trajectory runs/train-bench

At each evaluation of the Trainer (`eval_strategy`), and every `every_n_steps` optimizer steps if
set, the callback calls `base_bench.evaluate` on the live model: no copy of the weights, the model's
training flag restored afterwards, no gradients. It then

* logs `base_bench/overall_elo`, `base_bench/overall_elo_ci95_lo`/`_hi`, `base_bench/overall_elo_se`,
  `base_bench/<category>_elo`, `base_bench/raw_accuracy` and `base_bench/weighted_accuracy`
  through `trainer.log`, so TensorBoard, W&B and `trainer.state.log_history` all receive them;
* writes `out_dir/step-<N>/report.json` (the full report plus `training_step`, and `tokens_seen`
  where the Trainer counts them) and its `predictions.md`, which `base-bench trajectory out_dir`
  turns into Elo-over-training plots;
* with `store`, writes the step's row to that results store (base_bench/store), labelled with the
  step, the tokens seen, `group` and `tags`. A store that cannot be written is a warning of one
  line, and training goes on (the step's files are still written; `base-bench store ingest
  out_dir` adds them later).

The callback takes the trainer itself, as TRL's callbacks do, because a transformers callback is not
otherwise given a way to log. Under several processes every rank calls `evaluate` (a sharded model
needs every rank in each forward) and only the main process logs and writes. A `limit` (or a
`limit_per_category`, which touches every category) makes each evaluation quicker and its reports
non-official, as always.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from transformers import TrainerCallback

from ..engine.distributed import Ranks
from ..errors import StoreError
from ..evaluation import check_arguments, check_store_url, evaluate, write_row
from ..results.labels import Labels
from ..results.report import dumps, render_markdown
from ..results.reports_io import write_atomic

log = logging.getLogger("base_bench")


def metrics(report: dict) -> dict[str, float]:
    """The numbers the callback logs, named `base_bench/...`, from a report."""
    res = report["results"]
    o = res["overall"]
    out = {
        "base_bench/overall_elo": o["elo"],
        "base_bench/overall_elo_se": o["elo_se"],
        "base_bench/overall_elo_ci95_lo": o["elo_ci95"][0],
        "base_bench/overall_elo_ci95_hi": o["elo_ci95"][1],
    }
    out.update({f"base_bench/{cat}_elo": c["elo"] for cat, c in res["categories"].items()})
    out["base_bench/raw_accuracy"] = o["raw_accuracy"]
    out["base_bench/weighted_accuracy"] = o["weighted_accuracy"]
    return out


class BaseBenchCallback(TrainerCallback):
    """Run base-bench on the live model at evaluation time and/or every `every_n_steps` steps.

    trainer        the Trainer the callback is added to (used to log, and for its tokenizer)
    tokenizer      defaults to `trainer.processing_class`
    data           as `evaluate` takes it: "bundled" or None (the bundled set, the default: no
                   network, no token), "hub" (the official gated file), or a path
    out_dir        where `step-<N>/report.json` go; None logs only
    every_n_steps  also score every N optimizer steps (None: only when the Trainer evaluates)
    on_evaluate    score when the Trainer evaluates (default True)
    limit, limit_per_category, batch_size, batch_tokens, add_bos, progress   passed to `evaluate`
                   (give limit or limit_per_category, not both; batch_size or batch_tokens, not
                   both; neither: 8 items per pass)
    store          also write each step's result to this results store: sqlite:///PATH, PATH.db or
                   postgresql://USER:PASSWORD@HOST/DB (None: no store)
    group, tags    label every step's run (the step and the tokens seen are labelled by the callback)
    """

    def __init__(
        self,
        trainer,
        tokenizer=None,
        data=None,
        *,
        out_dir: str | Path | None = None,
        every_n_steps: int | None = None,
        on_evaluate: bool = True,
        limit: int | None = None,
        limit_per_category: int | None = None,
        batch_size: int | str | None = None,
        batch_tokens: int | None = None,
        add_bos: bool = False,
        progress: bool = False,
        store: str | None = None,
        group: str | None = None,
        tags=(),
    ):
        if every_n_steps is not None and (not isinstance(every_n_steps, int) or every_n_steps < 1):
            raise ValueError(f"every_n_steps must be a whole number of 1 or more, or None; got {every_n_steps!r}")
        # now, not at the first evaluation hours later
        check_arguments(limit, batch_size, batch_tokens, limit_per_category)
        self.labels = Labels.make(group=group, tags=tags)
        self.store = check_store_url(store)  # its URL read, not connected to
        self.trainer = trainer
        self.tokenizer = tokenizer
        self.data = data
        self.out_dir = Path(out_dir).expanduser() if out_dir is not None else None
        self.every_n_steps = every_n_steps
        self.score_on_evaluate = on_evaluate
        self.options = {
            "limit": limit,
            "limit_per_category": limit_per_category,
            "batch_size": batch_size,
            "batch_tokens": batch_tokens,
            "add_bos": add_bos,
            "progress": progress,
        }
        self.scored_steps: list[int] = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every_n_steps and state.global_step % self.every_n_steps == 0:
            self._score(state, control, model)

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if self.score_on_evaluate:
            self._score(state, control, model)

    def _score(self, state, control, model) -> dict | None:
        step = state.global_step
        if self.scored_steps and self.scored_steps[-1] == step:
            return None  # the same weights were scored at this step already
        model = model if model is not None else self.trainer.model
        tokenizer = self.tokenizer if self.tokenizer is not None else self.trainer.processing_class
        seen = getattr(state, "num_input_tokens_seen", 0)
        labels = {
            "group": self.labels.group,
            "step": step,
            "tokens": seen if isinstance(seen, int) and seen > 0 else None,
            "tags": self.labels.tags,
        }
        report = evaluate(model, tokenizer, self.data, **self.options, **labels)
        self.scored_steps.append(step)
        if state.is_world_process_zero:
            self._log(control, metrics(report))
            if self.out_dir is not None:
                self._write(step, report)
        if self.store is not None:
            self._store(step, report)
        return report

    def _store(self, step: int, report: dict) -> None:
        """The step's row, its source the step's folder (every rank calls this; rank 0 writes). A store
        that cannot be written is one warning, and training goes on."""
        where = self.out_dir / f"step-{step}" if self.out_dir is not None else None
        try:
            write_row(self.store, report, dumps(report), where, Ranks.current())
        except StoreError as exc:
            if Ranks.current().is_main:
                later = f"; `base-bench store ingest {where}` adds it later" if where else ""
                log.warning(f"base-bench: step {step} was not stored: {exc.why}{later}; training goes on")

    def _log(self, control, values: dict) -> None:
        """trainer.log, without its side effect on the step's own plans: Trainer.log runs the on_log
        event, which clears `should_log`, and the loss of this step would then never be logged."""
        flags = ("should_log", "should_evaluate", "should_save", "should_training_stop", "should_epoch_stop")
        before = {f: getattr(control, f) for f in flags}
        self.trainer.log(values)
        for c in {id(control): control, id(self.trainer.control): self.trainer.control}.values():
            for f, v in before.items():
                setattr(c, f, v)

    def _write(self, step: int, report: dict) -> None:
        where = self.out_dir / f"step-{step}"
        if os.path.lexists(where / "report.json"):
            log.warning(f"base-bench: {where}/report.json exists already; not overwritten")
            return
        where.mkdir(parents=True, exist_ok=True)
        write_atomic(where / "predictions.md", render_markdown(report))
        write_atomic(where / "report.json", dumps(report))
