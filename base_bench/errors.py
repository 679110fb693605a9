"""The one exception family of base-bench.

    from base_bench import BaseBenchError
    try:
        report = evaluate(model, tokenizer)
    except BaseBenchError as exc:
        print(exc)          # one line that says what is wrong and what to do

Every error a user can cause is a subclass, raised `from None` so that no chained traceback hides
the message: bad data (DataError), a model or tokenizer that cannot be scored (ModelError; a model
server that cannot be reached or answers with an error is a ServerError, and an engine whose
prompt log-probs fail the server check an EngineCheckError), an item that cannot be scored under
the contract (ScoringError), a refused download (HubError), an
out-dir that would be overwritten, does not match or is in use (RunError; in use by another live
process: RunInUse), a run's file that could
not be written (StorageError: a full disk, an I/O error), a results store that cannot be reached or
used (StoreError), an unreadable report (ReportError), an
argument out of range (UsageError), ranks that cannot work together (DistributedError). Anything
else that escapes is a bug in base-bench. The classes live here, in a module that imports nothing,
so `import base_bench` stays light.
"""


class BaseBenchError(Exception):
    """Something the user can fix; the message says what, in a line."""


class UsageError(BaseBenchError):
    """An argument that cannot be used as given (a limit below 1, an unknown batch size...)."""


class DataError(BaseBenchError):
    """The data file cannot be used. The message is one line naming the first problems; `problems`
    lists every one."""

    SHOWN = 10

    def __init__(self, message: str, problems: list[str] | None = None):
        self.problems = list(problems or [])
        if self.problems:
            more = len(self.problems) - self.SHOWN
            message += ": " + "; ".join(self.problems[: self.SHOWN]) + (f"; … and {more} more" if more > 0 else "")
        super().__init__(message)


class ModelError(BaseBenchError):
    """The model, its tokenizer or the device cannot be used; the message says why in a line."""


class ServerError(ModelError):
    """A model server could not be reached, or answered with an error (after the retries the
    message counts). `status` is the last HTTP status (None when there was no answer)."""

    def __init__(self, message: str, status: int | None = None, detail: str | None = None):
        super().__init__(message)
        self.status = status
        self.detail = detail or message


class EngineCheckError(ModelError):
    """A served or in-process engine's prompt log-probs cannot be trusted (backends/prompt_logprobs.py);
    one line says what it did wrong."""


class ScoringError(BaseBenchError):
    """An item cannot be scored under the contract (for example a continuation longer than the window)."""


class HubError(BaseBenchError):
    """The Hub could not give us what we asked for; the message says what to do instead."""


class RunError(BaseBenchError):
    """The out-dir cannot be used as asked; nothing in it was changed."""


class RunInUse(RunError):
    """Another live process holds the out-dir's lock (the message names it); nothing was changed."""


class StorageError(BaseBenchError):
    """A run's file could not be written (no space left, an I/O error...). What was saved before it
    is intact and complete; the message says what failed and how to continue (--resume)."""


class StoreError(BaseBenchError):
    """The results store (base_bench/store/) cannot be reached or used as asked: a server that does not
    answer, a wrong password, a schema newer than this base-bench, a selection that matches nothing.
    The message names the store without its password."""


class ReportError(BaseBenchError):
    """A run cannot be read or used as asked; nothing was written."""


class DistributedError(BaseBenchError):
    """The ranks of a multi-process run cannot work together (no rendezvous, disagreeing data or
    model); raised on every rank."""
