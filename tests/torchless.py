"""Run base-bench in this process and say which model libraries it loaded (for tests/test_no_torch.py).

    python tests/torchless.py [--block] cli --backend llama.cpp --model M.gguf ...   # the command line
    python tests/torchless.py [--block] api M.gguf DATA OUT_DIR ['{"limit": 5}']     # evaluate(llama_cpp.Llama(M), tokenizer, ...)

    verdict = run("cli", "--backend", "llama.cpp", ..., block=True, cache=tmp_path / "cache")   # from a test

`--block` makes torch, transformers, accelerate and peft unimportable in this process (None in
sys.modules: `import torch` raises ImportError and `importlib.util.find_spec("torch")` is None, as
when the package is not installed). Processes this one starts are not blocked. The last line of
stdout is JSON: {"rc": the exit code, "loaded": the modules of those libraries in sys.modules}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "transformers", "accelerate", "peft")
ROOT = Path(__file__).resolve().parents[1]


def run(*args, block: bool, cache: Path | None = None, timeout: int = 900) -> dict:
    """This script in a child process (BASE_BENCH_CACHE=`cache` when given): its JSON verdict, plus
    its stdout and stderr, once its exit code is checked to be 0."""
    cmd = [sys.executable, __file__, *(["--block"] if block else []), *map(str, args)]
    env = {**os.environ, **({"BASE_BENCH_CACHE": str(cache)} if cache else {})}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    return {**json.loads(p.stdout.strip().splitlines()[-1]), "stdout": p.stdout, "stderr": p.stderr}


def loaded() -> list[str]:
    return sorted(m for m, mod in sys.modules.items() if m.split(".")[0] in HEAVY and mod is not None)


def api(gguf: str, data: str, out_dir: str, kwargs: str = "{}") -> int:
    import llama_cpp

    from base_bench import evaluate
    from base_bench.backends.llama_cpp import load_tokenizer

    tokenizer, _ = load_tokenizer(gguf)
    llm = llama_cpp.Llama(model_path=gguf, n_threads=1, verbose=False)
    report = evaluate(llm, tokenizer, data, out_dir=out_dir, progress=False, **json.loads(kwargs))
    print(json.dumps({"items_scored_this_session": report["timing"]["items_scored_this_session"]}))
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--block":
        argv = argv[1:]
        for name in HEAVY:
            sys.modules[name] = None  # type: ignore[assignment]
    sys.path.insert(0, str(ROOT))
    what, rest = argv[0], argv[1:]
    if what == "cli":
        from base_bench.commands.cli import main as cli

        rc = cli(rest)
    else:
        rc = api(*rest)
    print(json.dumps({"rc": rc, "loaded": loaded()}), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
