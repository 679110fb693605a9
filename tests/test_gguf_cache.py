"""The cache of converted GGUF models (base_bench/gguf_cache.py), on a tiny GGUF file written by
the test. Every test points the cache at its own folder."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from base_bench.backends import gguf_cache
from base_bench.backends import transformers as model_mod
from base_bench.backends.transformers import load_model, model_size
from base_bench.commands.cli import main

from fixtures import write_dataset
from tiny import save_tiny
from tiny_gguf import write_tiny_gguf

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b\n",
    " She put the keys in the drawer",
    "SELECT name FROM users WHERE id = 3;",
]


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def root(own_cache):
    return own_cache


@pytest.fixture
def calls(monkeypatch):
    """Every from_pretrained location the loader asks for, in order ("gguf" for the GGUF file)."""
    seen = []
    real = model_mod._from_pretrained

    def spy(where, dtype, **kw):
        seen.append("gguf" if kw.get("gguf_file") else where)
        return real(where, dtype, **kw)

    monkeypatch.setattr(model_mod, "_from_pretrained", spy)
    return seen


def outputs(loaded):
    """Token ids and logits for TEXTS: what scoring reads from a tokenizer and a model."""
    out = []
    for text in TEXTS:
        ids = loaded.tokenizer(text, add_special_tokens=False).input_ids
        with torch.no_grad():
            out.append((ids, loaded.model(torch.tensor([ids])).logits))
    return out


def assert_same(a, b):
    for (ids_a, lg_a), (ids_b, lg_b) in zip(outputs(a), outputs(b)):
        assert ids_a == ids_b
        assert torch.equal(lg_a, lg_b)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        assert getattr(a.tokenizer, name) == getattr(b.tokenizer, name), name
    assert len(a.tokenizer) == len(b.tokenizer)
    assert a.model.config.max_position_embeddings == b.model.config.max_position_embeddings


def entries(root: Path) -> list[str]:
    d = root / "gguf"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


# ------------------------------------------------------------------------------ where and what key


def test_cache_root_env_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("BASE_BENCH_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gguf_cache.cache_root() == tmp_path / "mine"
    monkeypatch.delenv("BASE_BENCH_CACHE")
    assert gguf_cache.cache_root() == tmp_path / "xdg" / "base-bench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert gguf_cache.cache_root() == tmp_path / "home" / ".cache" / "base-bench"


def test_tests_never_use_the_users_cache(gguf_cache_root):
    here = gguf_cache.cache_root()
    assert os.environ["BASE_BENCH_CACHE"] == str(gguf_cache_root) and here == gguf_cache_root
    assert Path.home() / ".cache" not in here.parents


def test_key_covers_what_changes_the_converted_model(monkeypatch):
    key = gguf_cache.entry_key("f" * 32, torch.float32)
    assert key["gguf_fingerprint"] == "f" * 32 and key["dtype"] == "float32"
    assert key["format"] == gguf_cache.FORMAT_VERSION
    others = [gguf_cache.entry_key("e" * 32, torch.float32), gguf_cache.entry_key("f" * 32, torch.bfloat16)]
    monkeypatch.setattr(gguf_cache, "package_version", lambda pkg: "0.0-other")
    others.append(gguf_cache.entry_key("f" * 32, torch.float32))
    monkeypatch.setattr(gguf_cache, "FORMAT_VERSION", gguf_cache.FORMAT_VERSION + 1)
    others.append({**key, "format": gguf_cache.FORMAT_VERSION})
    hashes = {gguf_cache.key_hash(k) for k in [key, *others]}
    assert len(hashes) == 5
    assert {"transformers", "tokenizers", "gguf", "torch"} <= set(key)


# ------------------------------------------------------------------------------------- hit / miss


def test_second_load_is_a_hit_equal_to_a_fresh_conversion(gguf_file, root, calls, capsys):
    first = load_model(str(gguf_file), CPU, torch.float32)
    assert first.info["cache"]["status"] == "written" and calls == ["gguf"]
    entry = Path(first.info["cache"]["path"])
    assert entry.parent == root / "gguf" and (entry / "manifest.json").is_file()
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= {p.name for p in entry.iterdir()}
    assert "cached the converted GGUF model" in capsys.readouterr().err

    second = load_model(str(gguf_file), CPU, torch.float32)
    assert second.info["cache"] == {"status": "hit", "path": str(entry), "bytes": first.info["cache"]["bytes"]}
    assert calls == ["gguf", str(entry)]  # the GGUF file was not converted again

    fresh = load_model(str(gguf_file), CPU, torch.float32, use_cache=False)
    assert fresh.info["cache"] == {"status": "disabled", "path": None}
    assert_same(second, fresh)
    assert_same(first, fresh)
    assert second.info["fingerprint"] == fresh.info["fingerprint"]
    assert model_size(second.model) == model_size(fresh.model)
    assert second.model.config.model_type == fresh.model.config.model_type

    bf16 = load_model(str(gguf_file), CPU, torch.bfloat16)  # another dtype is another entry
    assert bf16.info["cache"]["status"] == "written" and len(entries(root)) == 2
    assert {p.dtype for p in bf16.model.parameters()} == {torch.bfloat16}
    again = load_model(str(gguf_file), CPU, torch.bfloat16)
    assert again.info["cache"]["status"] == "hit"
    assert {p.dtype for p in again.model.parameters()} == {torch.bfloat16}
    assert_same(again, load_model(str(gguf_file), CPU, torch.bfloat16, use_cache=False))


def test_other_transformers_version_misses(gguf_file, root, monkeypatch):
    assert load_model(str(gguf_file), CPU, torch.float32).info["cache"]["status"] == "written"
    real = gguf_cache.package_version
    monkeypatch.setattr(gguf_cache, "package_version", lambda pkg: "99.0" if pkg == "transformers" else real(pkg))
    assert load_model(str(gguf_file), CPU, torch.float32).info["cache"]["status"] == "written"
    assert len(entries(root)) == 2


def test_directory_models_are_not_cached(root, tmp_path):
    loaded = load_model(str(save_tiny(tmp_path / "tiny-dir")), CPU, torch.float32)
    assert loaded.info["cache"] == {"status": "not-gguf", "path": None}
    assert not root.exists()


# ----------------------------------------------------------------------------- incomplete entries


def _no_manifest(entry):
    (entry / "manifest.json").unlink()


def _truncated_weights(entry):
    p = entry / "model.safetensors"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _same_size_other_bytes(entry):
    p = entry / "model.safetensors"
    data = bytearray(p.read_bytes())
    data[-100] ^= 0xFF
    p.write_bytes(bytes(data))


def _missing_tokenizer(entry):
    (entry / "tokenizer.json").unlink()


def _extra_file(entry):
    (entry / "stray.bin").write_bytes(b"x")


def _torn_manifest(entry):
    p = entry / "manifest.json"
    p.write_bytes(p.read_bytes()[:50])


def _other_key(entry):
    p = entry / "manifest.json"
    m = json.loads(p.read_text())
    m["key"]["dtype"] = "bfloat16"
    p.write_text(json.dumps(m))


@pytest.mark.parametrize(
    "damage",
    [
        _no_manifest,
        _truncated_weights,
        _same_size_other_bytes,
        _missing_tokenizer,
        _extra_file,
        _torn_manifest,
        _other_key,
    ],
    ids=lambda f: f.__name__[1:],
)
def test_incomplete_entry_is_rebuilt_never_loaded(gguf_file, root, calls, capsys, damage):
    entry = Path(load_model(str(gguf_file), CPU, torch.float32).info["cache"]["path"])
    damage(entry)
    capsys.readouterr()
    calls.clear()
    loaded = load_model(str(gguf_file), CPU, torch.float32)
    assert calls == ["gguf"]  # converted from the GGUF file; the damaged entry was never loaded
    assert loaded.info["cache"]["status"] == "written" and loaded.info["cache"]["path"] == str(entry)
    err = capsys.readouterr().err
    assert f"the GGUF cache entry {entry} is incomplete or damaged" in err
    assert gguf_cache.problem(entry, gguf_cache.entry_key(loaded.info["fingerprint"], torch.float32)) is None
    assert entries(root) == [entry.name]  # no .tmp or .trash folder left
    assert load_model(str(gguf_file), CPU, torch.float32).info["cache"]["status"] == "hit"


KILL_MID_WRITE = """
import os, signal, sys, torch
from base_bench.backends import gguf_cache
from base_bench.backends.transformers import load_model

def killed(*a, **k):  # tokenizer and weights are on disk, the manifest is not: die here
    os.kill(os.getpid(), signal.SIGKILL)

gguf_cache._manifest = killed
load_model(sys.argv[1], torch.device("cpu"), torch.float32)
"""


@pytest.mark.slow(reason="a subprocess: a GGUF conversion killed while it writes the cache entry")
def test_writer_killed_mid_write_leaves_nothing_loadable(gguf_file, root, calls):
    p = subprocess.run(
        [sys.executable, "-c", KILL_MID_WRITE, str(gguf_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "BASE_BENCH_CACHE": str(root)},
    )
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    (tmp,) = entries(root)
    assert tmp.startswith(".tmp-") and (root / "gguf" / tmp / "model.safetensors").is_file()
    loaded = load_model(str(gguf_file), CPU, torch.float32)
    assert calls == ["gguf"] and loaded.info["cache"]["status"] == "written"
    assert entries(root) == [Path(loaded.info["cache"]["path"]).name]  # the dead writer's folder is gone


def test_second_writer_of_one_entry_discards_its_copy(gguf_file, root):
    first = load_model(str(gguf_file), CPU, torch.float32)
    entry = Path(first.info["cache"]["path"])
    before = {p.name: p.stat().st_mtime_ns for p in entry.iterdir()}
    other = load_model(str(gguf_file), CPU, torch.float32, use_cache=False)  # converted "at the same time"
    key = gguf_cache.entry_key(first.info["fingerprint"], torch.float32)
    rec = gguf_cache.write_entry(root, key, gguf_file, other.tokenizer, other.model)
    assert rec["status"] == "written" and rec["path"] == str(entry) and "another process" in rec["note"]
    assert {p.name: p.stat().st_mtime_ns for p in entry.iterdir()} == before
    assert entries(root) == [entry.name] and gguf_cache.problem(entry, key) is None


def test_stale_tmp_of_a_live_process_is_kept(root):
    d = root / "gguf"
    d.mkdir(parents=True)
    live = d / f".tmp-abc-{socket.gethostname()}-{os.getppid()}-0000"
    live.mkdir()
    dead = d / f".tmp-abc-{socket.gethostname()}-999999999-0000"  # no such pid
    dead.mkdir()
    assert gguf_cache.clean_leftovers(d) == [dead]
    assert live.is_dir()


# ------------------------------------------------------------------------------------ disk space


def test_no_space_skips_caching_with_a_one_line_note(gguf_file, root, monkeypatch, capsys):
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(gguf_cache.shutil, "disk_usage", lambda p: Usage(10 << 30, (10 << 30) - (5 << 20), 5 << 20))
    loaded = load_model(str(gguf_file), CPU, torch.float32)
    rec = loaded.info["cache"]
    assert rec["status"] == "skipped-no-space" and rec["path"] is None and rec["bytes_free"] == 5 << 20
    notes = [x for x in capsys.readouterr().err.splitlines() if x.startswith("note:")]  # not transformers' bars
    assert len(notes) == 1 and re.match(r"note: not caching .* needs [\d.]+ GB .* [\d.]+ GB free", notes[0]), notes
    assert entries(root) == []  # nothing written, not even a temp folder
    assert_same(loaded, load_model(str(gguf_file), CPU, torch.float32, use_cache=False))

    monkeypatch.undo()
    monkeypatch.setenv("BASE_BENCH_CACHE", str(root))
    written = load_model(str(gguf_file), CPU, torch.float32).info["cache"]
    assert written["status"] == "written" and written["bytes"] <= rec["bytes_needed"]  # the estimate covers it


def test_unwritable_cache_does_not_stop_the_load(gguf_file, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("BASE_BENCH_CACHE", str(blocker))
    loaded = load_model(str(gguf_file), CPU, torch.float32)
    assert loaded.info["cache"]["status"] == "skipped-error"
    assert "note: not caching" in capsys.readouterr().err


# ------------------------------------------------------------------------------- the command line


@pytest.mark.slow(reason="whole CLI runs of a GGUF model, with and without the cache")
def test_cli_reports_the_cache_and_no_cache_touches_nothing(gguf_file, root, tmp_path):
    data = tmp_path / "data-root"
    write_dataset(data)
    common = ["--model", str(gguf_file), "--local-data", str(data), "--device", "cpu", "--limit", "6"]

    def run(name, *extra):
        assert main([*common, "--out-dir", str(tmp_path / name), *extra]) == 0
        return json.loads((tmp_path / name / "report.json").read_text())

    off = run("off", "--no-cache")
    assert off["config"]["model"]["cache"] == {"status": "disabled", "path": None}
    assert not root.exists()  # --no-cache neither reads nor writes, nor creates the folder
    on = run("on")
    assert on["config"]["model"]["cache"]["status"] == "written"
    hit = run("hit")
    assert hit["config"]["model"]["cache"]["status"] == "hit"
    assert hit["config"]["model"]["cache"]["path"] == on["config"]["model"]["cache"]["path"]
    assert off["results"] == on["results"] == hit["results"]
    assert [i["choices"] for i in off["items"]] == [i["choices"] for i in hit["items"]]


def test_a_hit_in_a_new_process_reads_no_entry_file_again(gguf_file, root, monkeypatch):
    """The entry's files are hashed once, for the manifest; a later hit finds their digests remembered in
    the cache folder (by each file's stat), so it checks the entry without reading its weights again."""
    from base_bench.backends import identity

    load_model(str(gguf_file), CPU, torch.float32)
    read = []
    real = identity._hash_content
    monkeypatch.setattr(identity, "_hash_content", lambda f, size: read.append(Path(f.name)) or real(f, size))
    monkeypatch.setattr(identity, "_seen", {})  # as a new process: only the memo file in the cache remains
    assert load_model(str(gguf_file), CPU, torch.float32).info["cache"]["status"] == "hit"
    assert not [p for p in read if root in p.parents], read
