"""The llama.cpp backend on tiny GGUF files written by the tests (tests/tiny_gguf.py): exactness against
one sequence per choice, batch invariance, what is fed and asked for, the report, BOS, devices and
bad files. Needs llama-cpp-python (`pip install -e '.[llama]'`); CI builds it, elsewhere the module
is skipped without it. The GGUF header reader and the file-type names are tested without it."""

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from base_bench.backends.gguf_file import file_type_name, read_header
from base_bench.commands.cli import main
from base_bench.errors import ModelError

from fixtures import write_dataset
from tiny_gguf import write_bare_gguf, write_tiny_gguf

HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
needs_llama = pytest.mark.skipif(
    not HAVE_LLAMA and not os.environ.get("CI"), reason="llama-cpp-python is not installed (pip install -e '.[llama]')"
)
Q8_0 = 7  # LLAMA_FTYPE_MOSTLY_Q8_0


# ------------------------------------------------------------------ no llama.cpp needed


@pytest.mark.parametrize(
    "ftype, name",
    [
        (0, "F32"),
        (1, "F16"),
        (2, "Q4_0"),
        (3, "Q4_1"),
        (7, "Q8_0"),
        (15, "Q4_K_M"),
        (17, "Q5_K_M"),
        (18, "Q6_K"),
        (32, "BF16"),
        (1024 | 2, "Q4_0 (guessed)"),
        (9999, "ftype-9999"),
        (None, None),
    ],
)
def test_file_type_names(ftype, name):
    assert file_type_name(ftype) == name


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", file_type=Q8_0)


def test_header_of_a_good_file(tiny, tmp_path):
    h = read_header(tiny)
    assert (h.architecture, h.file_type, h.add_bos_token) == ("llama", "Q8_0", False)
    assert h.file_size == tiny.stat().st_size and h.data_end <= h.file_size < h.data_end + 32  # padded to 32
    assert h.n_tensors == 2 + 9 * 2 + 1
    assert read_header(write_tiny_gguf(tmp_path / "b.gguf", add_bos=True)).add_bos_token is True
    assert read_header(write_tiny_gguf(tmp_path / "n.gguf")).file_type is None  # the file states none


def _offset_of_tensor_table(path: Path) -> int:
    """Where the tensor table starts, for cutting a file inside it."""
    import gguf

    r = gguf.GGUFReader(str(path))
    return max(f.offset + sum(p.nbytes for p in f.parts) for f in r.fields.values())


def test_broken_files_get_one_line(tiny, tmp_path):
    data = tiny.read_bytes()
    cases = {
        "empty.gguf": (b"", "not a GGUF file"),
        "text.gguf": (b"hello, this is not a model at all\n" * 10, "not a GGUF file"),
        "header.gguf": (data[:12], "truncated: it has 12 bytes, less than its 24-byte header"),
        "meta.gguf": (data[:200], "truncated: it ends inside its metadata, at 200 bytes"),
        "table.gguf": (data[: _offset_of_tensor_table(tiny) + 20], "truncated: it ends inside its tensor table"),
        "data.gguf": (data[:-1000], f"({read_header(tiny).data_end - len(data) + 1000} bytes missing)"),
    }
    for name, (content, fragment) in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(ModelError) as ei:
            read_header(p)
        assert fragment in str(ei.value) and "\n" not in str(ei.value), name


def test_transformers_backend_says_truncated_too(tiny, tmp_path, capsys):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny.read_bytes()[: tiny.stat().st_size // 2])
    write_dataset(tmp_path / "d")
    assert (
        main(
            [
                "--model",
                str(cut),
                "--local-data",
                str(tmp_path / "d"),
                "--out-dir",
                str(tmp_path / "o"),
                "--device",
                "cpu",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "the GGUF file is truncated" in err and "unpack_from" not in err and err.count("\n") <= 2
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ llama.cpp


@pytest.fixture(scope="module")
def backend(tiny):
    from base_bench.backends.llama_cpp import LlamaCppBackend

    return LlamaCppBackend.load(tiny, device="cpu", threads=1)


def _items(vocab: int, n: int = 24, seed: int = 0):
    """Random token-id items with contexts around the chunk size (1 token, 47 to 49, 63 to 65, 130)
    and continuations of 1 to 7 tokens; one item with 2 and one with 5 continuations."""
    from base_bench.engine.scoring import Encoded

    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = 2 if i == 3 else 5 if i == 7 else 4
        L = rng.choice([1, 2, 5, 47, 48, 49, 63, 64, 65, 130])
        out.append(
            Encoded(
                f"it-{i}",
                tuple(rng.randrange(vocab) for _ in range(L)),
                tuple(tuple(rng.randrange(vocab) for _ in range(rng.choice([1, 2, 3, 7]))) for _ in range(k)),
            )
        )
    return out


@needs_llama
def test_log_probs_is_log_softmax_in_float64():
    from base_bench.backends.llama_cpp import log_probs

    logits = np.array([[0.0, 0.0, 0.0], [0.0, np.log(3.0), -np.inf]], dtype=np.float32)
    got = log_probs(logits, [(0, 2), (1,)])
    assert got == pytest.approx([np.log(1 / 3), np.log(1 / 3), np.log(3 / 4)], abs=1e-7)
    big = np.array([[1e4, 1e4 - 1.0]], dtype=np.float32)  # no overflow: the max is taken out first
    assert log_probs(big, [(1,)]) == pytest.approx([-1.0 - np.log1p(np.exp(-1.0))], abs=1e-6)


def _exact_log_softmax(row: np.ndarray, targets) -> list[float]:
    """log_softmax(row)[t] in float64 with an exactly rounded sum (math.fsum): the yardstick."""
    import math

    r = row.astype(np.float64)
    m = r.max()
    lse = m + math.log(math.fsum(np.exp(r - m)))
    return [r[t] - lse for t in targets]


@pytest.mark.parametrize("vocab", [262_144, 49_152, 50_257, 7])
def test_log_probs_within_1e_7_of_float64_and_each_row_its_own(vocab):
    """float32 exp, a float64 sum and the rest in float64: every log-prob within 1e-7 of the
    exactly summed float64 formula, on logits shaped like a model's (a few tokens far ahead, some
    masked to -inf), for Gemma's and SmolLM2's vocabularies, an odd one and a tiny one;
    and a row's result does not depend on the rows decoded with it (the backend is batch-invariant)."""
    from base_bench.backends.llama_cpp import log_probs

    rng = np.random.default_rng(vocab)
    rows = []
    for scale, lead in ((1.0, 0.0), (3.0, 15.0), (5.0, 30.0), (0.5, 40.0), (2.0, -60.0)):
        x = rng.standard_normal((4, vocab)) * scale
        x[:, : min(3, vocab - 1)] += lead
        rows.append(x)
    logits = np.concatenate(rows).astype(np.float32)
    logits[1, -1] = -np.inf
    targets = [tuple(int(t) for t in rng.integers(0, vocab, size=2)) + (0,) for _ in range(len(logits))]
    got = log_probs(logits, targets)
    want = [v for row, ts in zip(logits, targets) for v in _exact_log_softmax(row, ts)]
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-7
    alone = [v for i in range(len(logits)) for v in log_probs(logits[i : i + 1], targets[i : i + 1])]
    threes = [v for i in range(0, len(logits), 3) for v in log_probs(logits[i : i + 3], targets[i : i + 3])]
    assert got == alone == threes


def test_log_probs_scratch_is_float32():
    """The logits are never copied to float64: 16 rows of Gemma's vocabulary (16 MB in float32) need
    at most 20 MB of scratch (the float64 path took a 32 MB copy, and more)."""
    import tracemalloc

    from base_bench.backends.llama_cpp import log_probs

    logits = np.random.default_rng(0).standard_normal((16, 262_144)).astype(np.float32)
    targets = [(i, i + 1) for i in range(16)]
    tracemalloc.start()
    try:
        log_probs(logits, targets)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 20e6, peak


def test_default_threads_counts_cores_not_hyperthreads(tmp_path, monkeypatch):
    from base_bench.backends.llama_cpp import default_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for cpu, siblings in enumerate(["0,4", "1,5", "2,6", "3,7", "0,4", "1,5", "2,6", "3,7"]):
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(siblings + "\n")
    (tmp_path / "cpufreq").mkdir()  # not a CPU
    assert default_threads(tmp_path) == 4
    assert default_threads(tmp_path / "absent") >= 1  # no sysfs: os.cpu_count()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_threads(tmp_path) == 3


@pytest.mark.slow(reason="a subprocess: a fresh interpreter, for torch's own choice of threads")
def test_default_threads_is_torchs_choice_here(monkeypatch):
    """The physical cores from sysfs, as a fresh torch counts them (asked in a new process: a test
    earlier in the session may have set this process's torch threads)."""
    pytest.importorskip("torch")
    from base_bench.backends.llama_cpp import default_threads

    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"):
        pytest.skip("thread counts set in the environment")
    fresh = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert default_threads() == int(fresh.stdout)


@pytest.mark.parametrize("name", ["cpu", "cuda", "cuda:0", "cuda:3", "mps"])
def test_device_names_and_types_as_torch_gives_them(name):
    torch = pytest.importorskip("torch")
    from base_bench.backends.base import Device
    from base_bench.evaluation import device_type

    d = Device.parse(name)
    assert (str(d), d.type, d.index) == (str(torch.device(name)), torch.device(name).type, torch.device(name).index)
    assert device_type(d) == device_type(name) == device_type(torch.device(name)) == torch.device(name).type


@needs_llama
@pytest.mark.parametrize("weights", ["Q8_0", "F32"])
def test_shared_context_equals_one_sequence_per_choice_bit_for_bit(weights, backend, tmp_path):
    """Q8_0 fails without the pinned kernels (up to 0.013 nats apart); F32 fails without the pad that
    keeps llamafile's sgemm from handing a one-row product to another kernel (1.8e-7 apart)."""
    from base_bench.backends.llama_cpp import LlamaCppBackend, PlainScorer, SharedContextScorer, max_abs_diff

    if weights == "F32":
        backend = LlamaCppBackend.load(write_tiny_gguf(tmp_path / "f32.gguf", quantized=False), threads=1)
    items = _items(backend.vocab_size, n=40)
    shared = SharedContextScorer(backend, max(e.packed_length for e in items))(items)
    plain = PlainScorer(backend, 8)(items)  # grows its context as items need
    assert max_abs_diff(shared, plain) == 0.0
    assert [len(s) for s in shared] == [len(e.continuations) for e in items]
    assert [[c.n_tokens for c in s] for s in shared] == [[len(c) for c in e.continuations] for e in items]
    assert all(np.isfinite(c.logprob) and c.logprob < 0 for s in shared for c in s)


@needs_llama
def test_scores_do_not_depend_on_the_batch(backend):
    from base_bench.backends.llama_cpp import SharedContextScorer

    items = _items(backend.vocab_size, seed=1)
    scorer = SharedContextScorer(backend, 16)
    whole = scorer(items)
    alone = [scorer([e])[0] for e in items]
    backwards = scorer(items[::-1])[::-1]
    assert whole == alone == backwards


@needs_llama
def test_context_fed_once_and_logits_only_where_a_token_is_predicted(backend, monkeypatch):
    from base_bench.backends import llama_cpp
    from base_bench.backends.llama_cpp import UBATCH, SharedContextScorer

    calls = []
    real = llama_cpp._Context._decode

    def spy(self, tokens, pos, seqs, want):
        calls.append((len(tokens), sum(want)))
        return real(self, tokens, pos, seqs, want)

    monkeypatch.setattr(llama_cpp._Context, "_decode", spy)
    items = _items(backend.vocab_size, seed=2)
    scorer = SharedContextScorer(backend, 16)
    scorer(items)
    c = scorer.counts
    assert c["tokens"] == sum(e.packed_length for e in items)  # each context once, no last token fed
    assert c["logit_rows"] == sum(1 + sum(len(x) - 1 for x in e.continuations) for e in items)
    assert c["decodes"] == len(calls)
    # every llama_decode: at most UBATCH tokens plus a pad, never one token, never exactly one output
    assert all(2 <= n <= UBATCH + 1 and out != 1 for n, out in calls)
    assert sum(n for n, _ in calls) == c["tokens"] + c["pads"]


@needs_llama
def test_memory_is_cleared_between_items(backend):
    from base_bench.backends.llama_cpp import SharedContextScorer, lib

    items = _items(backend.vocab_size, n=3)
    scorer = SharedContextScorer(backend, 16)
    scorer(items)
    L = lib()
    assert all(L.llama_memory_seq_pos_max(scorer._ctx.mem, s) == -1 for s in range(scorer._ctx.n_seq))


@needs_llama
def test_threads_reach_llama_cpp(tiny):
    from base_bench.backends.llama_cpp import LlamaCppBackend, SharedContextScorer, lib

    for n in (1, 3):
        b = LlamaCppBackend.load(tiny, threads=n)
        ctx = SharedContextScorer(b, 8)._ctx.ctx
        assert (lib().llama_n_threads(ctx), lib().llama_n_threads_batch(ctx), b.threads) == (n, n, n)


@pytest.fixture(scope="module")
def tokenizer(tiny):
    pytest.importorskip("llama_cpp") if not os.environ.get("CI") else None
    from base_bench.backends.llama_cpp import load_tokenizer

    tok, _ = load_tokenizer(tiny)
    return tok


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    write_dataset(d)
    return d


@needs_llama
def test_tokenizer_differences_names_each_text_where_the_ids_differ(backend, tokenizer, data):
    """Equal on the tiny GGUF's own converted tokenizer; a tokenizer that gives one text other ids is
    reported for every place that text appears (the check the real-model tests and bench/llama_exactness.py run)."""
    from base_bench.items.dataset import load_dataset_file

    items = load_dataset_file(data / "data" / "test.jsonl").items[:6]
    assert backend.tokenizer_differences(tokenizer, items) == []

    target = items[0].continuations[2]

    class Shifted:  # the tiny tokenizer, except that one text gets an extra id
        bos_token_id = tokenizer.bos_token_id

        def __call__(self, text, add_special_tokens=False):
            ids = tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
            return {"input_ids": ids + [0] if text == target else ids}

    want = [f"{it.id} continuation {k}" for it in items for k, c in enumerate(it.continuations) if c == target]
    assert want and backend.tokenizer_differences(Shifted(), items) == want


@needs_llama
def test_evaluate_reports_backend_version_and_file_type(backend, tokenizer, data):
    from base_bench import evaluate
    from base_bench.backends.identity import package_version

    rep = evaluate(backend, tokenizer, str(data), limit=6, progress=False)
    cfg = rep["config"]
    assert (cfg["backend"], cfg["dtype"], cfg["model"]["gguf_file_type"], cfg["device"]) == (
        "llama.cpp",
        "Q8_0",
        "Q8_0",
        "cpu",
    )
    assert cfg["versions"]["llama-cpp-python"] == package_version("llama_cpp_python") is not None
    assert cfg["scorer"] == "llama.cpp-shared-context" and cfg["threads"] == 1
    assert cfg["packing_check"]["ok"] and cfg["packing_check"]["max_abs_diff_vs_plain"] == 0.0
    assert cfg["model"]["llama_cpp"]["repack_buffers"] is False and cfg["model"]["llama_cpp"]["tiled_matmul"] is False
    assert cfg["bos_note"] is None and len(rep["items"]) == 6


@needs_llama
def test_batch_size_does_not_change_a_score(backend, tokenizer, data):
    from base_bench import evaluate

    settings = [{"batch_size": bs} for bs in (1, 5, 32)] + [{"batch_tokens": 150}]
    runs = [evaluate(backend, tokenizer, str(data), limit=12, progress=False, **how) for how in settings]
    scores = [[(i["id"], [c["logprob"] for c in i["choices"]]) for i in r["items"]] for r in runs]
    assert scores[0] == scores[1] == scores[2] == scores[3]
    assert runs[3]["config"]["batch_tokens_used"] == 150 and runs[3]["config"]["row_length"] is None  # no rows


@needs_llama
def test_bos_note_follows_the_gguf_add_bos_token(tmp_path, data, caplog):
    from base_bench import evaluate
    from base_bench.backends.llama_cpp import LlamaCppBackend, load_tokenizer

    path = write_tiny_gguf(tmp_path / "bos.gguf", add_bos=True)
    b = LlamaCppBackend.load(path, threads=1)
    assert b.expects_bos
    tok, _ = load_tokenizer(path)
    with caplog.at_level("WARNING", logger="base_bench"):
        rep = evaluate(b, tok, str(data), limit=2, progress=False)
    assert "--add-bos" in rep["config"]["bos_note"] and rep["config"]["bos_note"] in caplog.text
    assert evaluate(b, tok, str(data), limit=2, add_bos=True, progress=False)["config"]["bos_note"] is None


@needs_llama
def test_evaluate_takes_a_llama_object(tiny, backend, tokenizer, data):
    import llama_cpp

    from base_bench import evaluate

    llm = llama_cpp.Llama(model_path=str(tiny), n_threads=1, verbose=False)
    a = evaluate(llm, tokenizer, str(data), limit=4, progress=False)
    b = evaluate(backend, tokenizer, str(data), limit=4, progress=False)
    assert a["config"]["backend"] == "llama.cpp" and a["items"] == b["items"]


@needs_llama
def test_converted_tokenizer_is_cached(tmp_path):
    from base_bench.backends.llama_cpp import load_tokenizer

    path = write_tiny_gguf(tmp_path / "t.gguf", seed=3)
    first, rec1 = load_tokenizer(path)
    again, rec2 = load_tokenizer(path)
    _, rec3 = load_tokenizer(path, use_cache=False)
    assert (rec1["status"], rec2["status"], rec3["status"]) == ("written", "hit", "disabled")
    assert rec1["path"] == rec2["path"] and not (Path(rec1["path"]) / "model.safetensors").exists()
    text = "She put the keys in the drawer."
    assert again(text, add_special_tokens=False)["input_ids"] == first(text, add_special_tokens=False)["input_ids"]


# ------------------------------------------------------------------ the command line


def cli(*args):
    return main([*map(str, args)])


@needs_llama
def test_cli_run_and_resume_signature_names_the_backend(tiny, data, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        cli(
            "--backend",
            "llama.cpp",
            "--model",
            tiny,
            "--local-data",
            data,
            "--out-dir",
            out,
            "--limit",
            5,
            "--threads",
            1,
        )
        == 0
    )
    rep = json.loads((out / "report.json").read_text())
    assert rep["config"]["backend"] == "llama.cpp" and rep["config"]["threads"] == 1
    sig = json.loads((out / "run_config.json").read_text())["signature"]
    assert (sig["backend"], sig["dtype"]) == ("llama.cpp", "Q8_0")
    capsys.readouterr()
    # the same file under the transformers backend is another computation: --resume refuses it
    assert cli("--model", tiny, "--local-data", data, "--out-dir", out, "--resume", "--device", "cpu") == 2
    err = capsys.readouterr().err
    assert "--resume refused" in err and "backend" in err
    # and under llama.cpp it continues
    assert (
        cli("--backend", "llama.cpp", "--model", tiny, "--local-data", data, "--out-dir", out, "--resume", "--limit", 8)
        == 0
    )
    assert json.loads((out / "report.json").read_text())["timing"]["items_scored_this_session"] == 3


@needs_llama
def test_cli_reads_the_tokenizer_before_it_maps_the_model(tiny, data, tmp_path, monkeypatch):
    """Reading a large tokenizer takes passing memory (0.35 GB for Gemma 3's 262k tokens): done
    before llama.cpp maps the model, it does not come on top of the model's pages (bench/memory.py)."""
    from base_bench.backends import llama_cpp

    order = []
    real_tokenizer, real_load = llama_cpp.load_tokenizer, llama_cpp.LlamaCppBackend.load.__func__

    def tokenizer(*a, **k):
        order.append("tokenizer")
        return real_tokenizer(*a, **k)

    def load(cls, *a, **k):
        order.append("model")
        return real_load(cls, *a, **k)

    monkeypatch.setattr(llama_cpp, "load_tokenizer", tokenizer)
    monkeypatch.setattr(llama_cpp.LlamaCppBackend, "load", classmethod(load))
    out = tmp_path / "run"
    assert cli("--backend", "llama.cpp", "--model", tiny, "--local-data", data, "--out-dir", out, "--limit", 2) == 0
    assert order == ["tokenizer", "model"]


@needs_llama
@pytest.mark.parametrize(
    "case, fragment",
    [
        ("truncated", "the GGUF file is truncated"),
        ("text", "not a GGUF file"),
        ("arch", "does not know the model architecture 'frobnicator'"),
        ("cuda", "built without GPU support"),
        ("dtype", "--dtype does not apply to --backend llama.cpp"),
        ("dir", "--backend llama.cpp scores a .gguf file"),
    ],
)
def test_cli_bad_input_one_line_exit_2(case, fragment, tiny, data, tmp_path, capsys):
    from base_bench.backends.llama_cpp import lib

    model, extra = tiny, []
    if case == "truncated":
        model = tmp_path / "cut.gguf"
        model.write_bytes(tiny.read_bytes()[:-1000])
    elif case == "text":
        model = tmp_path / "notes.gguf"
        model.write_text("not a model\n")
    elif case == "arch":
        model = write_bare_gguf(tmp_path / "frob.gguf", "frobnicator")
    elif case == "cuda":
        if lib().llama_supports_gpu_offload():
            pytest.skip("this llama-cpp-python was built with GPU support")
        extra = ["--device", "cuda"]
    elif case == "dtype":
        extra = ["--dtype", "float32"]
    elif case == "dir":
        model = tmp_path
    assert (
        cli("--backend", "llama.cpp", "--model", model, "--local-data", data, "--out-dir", tmp_path / "o", *extra) == 2
    )
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") <= 2 and "Traceback" not in err
    assert not (tmp_path / "o").exists()
