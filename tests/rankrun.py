"""Run the base-bench command line as one rank of a torchrun job, with a fault on one rank.

    torchrun --nproc_per_node 2 tests/rankrun.py [base-bench flags]

The fault comes from environment variables, so the production code has no test hooks:

    RANKRUN_RANK=1                 the rank the fault applies to (default 1)
    RANKRUN_FAULT=kill-after:N     that rank SIGKILLs itself right after its N-th save of results,
                                   having first listed the ids it scored in RANKRUN_LOG
    RANKRUN_FAULT=oom              every forward on that rank runs out of memory
    RANKRUN_FAULT=oom-after:N      every forward after the first N runs out of memory
    RANKRUN_FAULT=oom-above:K      forwards of more than K items on that rank run out of memory
    RANKRUN_FAULT=oom-fed-above:N  forwards feeding more than N positions (rows × the longest row) on
                                   that rank run out of memory
    RANKRUN_FAULT=arg:FLAG=VALUE   that rank runs with FLAG VALUE instead (e.g. arg:--local-data=/x)
    RANKRUN_FAULT=own-disk         that rank does not see rank 0's out-dir (as on another machine
                                   without a shared filesystem), so rank 0 saves its results
    RANKRUN_COUNT=PATH             every rank appends one line per forward call of the model to
                                   PATH.<rank> (to check that all ranks call the model equally often)
    RANKRUN_AS_GPU=1               every rank's backend says it is on cuda while the model stays on
                                   the CPU, so `--batch-size auto` searches as it does on a GPU
    RANKRUN_TEARDOWN=term          that rank sends itself SIGTERM as it starts destroying its process
                                   group (as torchrun does to the ranks still running once one has
                                   exited), then writes "destroyed" to RANKRUN_LOG.<rank> once the
                                   group is gone

The out-of-memory faults wrap the packed scorer's forward (`score_rows`), which the start-up
packing check also goes through.
"""

import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from base_bench.backends import transformers_scorers as scoring  # noqa: E402
from base_bench.backends.transformers import TransformersBackend  # noqa: E402
from base_bench.commands.cli import main  # noqa: E402
from base_bench.engine.runstore import RunStore  # noqa: E402

rank = int(os.environ.get("RANK", "0"))
fault = os.environ.get("RANKRUN_FAULT", "")
argv = sys.argv[1:]

if fault and rank == int(os.environ.get("RANKRUN_RANK", "1")):
    kind, _, value = fault.partition(":")
    if kind == "kill-after":
        real_append, saves = RunStore.append_many, []

        def append_then_die(self, rows):
            real_append(self, rows)
            saves.append([r.id for r in rows])
            if len(saves) == int(value):
                Path(os.environ["RANKRUN_LOG"]).write_text(json.dumps(sum(saves, [])))
                os.kill(os.getpid(), signal.SIGKILL)

        RunStore.append_many = append_then_die
    elif kind in ("oom", "oom-above", "oom-after", "oom-fed-above"):
        n = int(value) if value else 0
        real_call, calls = scoring.PackedScorer.score_rows, []

        def short_of_memory(self, batch, rows):
            calls.append(len(batch))
            fed = len(rows) * max(sum(batch[i].packed_length for i in row) for row in rows)
            size = {"oom-after": len(calls), "oom-fed-above": fed}.get(kind, len(batch))
            if size > n:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated on this rank)")
            return real_call(self, batch, rows)

        scoring.PackedScorer.score_rows = short_of_memory
    elif kind == "own-disk":
        real_is_file = Path.is_file

        def is_file(self):
            return False if self.name.startswith(".rank-check-") else real_is_file(self)

        Path.is_file = is_file
    elif kind == "arg":
        flag, _, new = value.partition("=")
        argv[argv.index(flag) + 1] = new

if os.environ.get("RANKRUN_TEARDOWN") == "term" and rank == int(os.environ.get("RANKRUN_RANK", "1")):
    import torch.distributed as dist

    real_destroy = dist.destroy_process_group

    def destroy_under_sigterm(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        real_destroy(*args, **kwargs)
        Path(f"{os.environ['RANKRUN_LOG']}.{rank}").write_text("destroyed")

    dist.destroy_process_group = destroy_under_sigterm

if os.environ.get("RANKRUN_AS_GPU"):
    real_init = TransformersBackend.__init__

    def on_a_gpu(self, model, tokenizer):
        real_init(self, model, tokenizer)
        self.device = torch.device("cuda")

    TransformersBackend.__init__ = on_a_gpu

if os.environ.get("RANKRUN_COUNT"):
    from transformers import PreTrainedModel

    real_call_impl = torch.nn.Module._call_impl
    counter = Path(f"{os.environ['RANKRUN_COUNT']}.{rank}")

    def counted(self, *args, **kwargs):
        if isinstance(self, PreTrainedModel) and self.__class__.__name__.endswith("ForCausalLM"):
            with counter.open("a") as f:
                f.write("forward\n")
        return real_call_impl(self, *args, **kwargs)

    torch.nn.Module.__call__ = counted

sys.exit(main(argv))
