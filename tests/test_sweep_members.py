"""A sweep's members: MODEL arguments -> (model, revision), folder names, steps; the watch's idea of a
complete checkpoint. Pure functions and small folders, no model."""

import json
import os

import pytest

from base_bench.errors import UsageError
from base_bench.sweep.members import expand, member, member_name, read_models_file, step_of_name, trainer_step
from base_bench.sweep.watch import Watcher

STEPS = [  # (model, revision, step)
    ("/runs/a/checkpoint-1000", None, 1000),
    ("/runs/a/step-2000/hf", None, 2000),
    ("/runs/a/step3000", None, 3000),
    ("/runs/a/step_4000", None, 4000),
    ("/runs/a/global_step_5000", None, 5000),
    ("/runs/a/global_step6000", None, 6000),
    ("/runs/a/iter_0007000", None, 7000),
    ("/runs/a/iter-8", None, 8),
    ("/runs/a/Checkpoint-9", None, 9),
    ("/runs/a/step-10.gguf", None, 10),
    ("/runs/step-5/checkpoint-11", None, 11),  # the last part that names a step
    ("/runs/a/model", None, None),
    ("/runs/a/steps-12", None, None),  # not a step name
    ("/runs/a/checkpoint-best", None, None),
    ("/step-1/x/y/z", None, None),  # a step four parts up is the path's, not the checkpoint's
    ("org/model", "step13", 13),
    ("org/model", "main", None),
    ("org/checkpoint-14", "step15", 15),  # the revision first
]


@pytest.mark.parametrize("model,revision,step", STEPS)
def test_step_of_name(model, revision, step):
    assert step_of_name(model, revision) == step


NAMES = [  # (model, revision, readable start)
    ("/ckpt/run1/checkpoint-500", None, "run1-checkpoint-500-"),
    ("/ckpt/step-1000/hf", None, "step-1000-hf-"),
    ("/models/base.gguf", None, "models-base-"),
    ("org/Model-X", "step1000", "org-model-x-step1000-"),
    ("/a b/ünï côdé", None, "a-b-n-c-d-"),
    ("ollama:smollm2:135m", None, "ollama-smollm2-135m-"),
    ("ollama:hf.co/org/Foo-GGUF:Q4_K_M", None, "ollama-hf.co-org-foo-gguf-q4_k_m-"),
]


@pytest.mark.parametrize("model,revision,start", NAMES)
def test_member_name_is_readable_and_ends_in_a_digest_of_its_own_path(model, revision, start):
    name = member_name(model, revision)
    assert name.startswith(start), name
    assert len(name.rsplit("-", 1)[1]) == 8 and name == member_name(model, revision)


def test_two_members_never_share_a_folder():
    # the same last two parts under different roots; the same path at two revisions
    a, b = member_name("/x/run/checkpoint-1"), member_name("/y/run/checkpoint-1")
    c, d = member_name("org/m", "step1"), member_name("org/m", "step2")
    assert len({a, b, c, d, member_name("org/m")}) == 5
    assert a.rsplit("-", 1)[0] == b.rsplit("-", 1)[0]  # readable alike, told apart by the digest
    long = member_name("/r/" + "x" * 300 + "/checkpoint-1")
    assert len(long) <= 69


def test_expand_globs_paths_hub_ids_and_a_models_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for n in (300, 100, 200):
        (tmp_path / "ckpt" / f"checkpoint-{n}").mkdir(parents=True)
    (tmp_path / "base.gguf").write_bytes(b"GGUF")
    (tmp_path / "models.txt").write_text("# baselines\norg/base@v1  # pinned\n\nbase.gguf\n")
    got = expand(["ckpt/checkpoint-*", "org/other", "ckpt/checkpoint-100"], "models.txt")
    ck = [str(tmp_path / "ckpt" / f"checkpoint-{n}") for n in (100, 200, 300)]
    # sorted glob, absolute paths, duplicates dropped (the first kept)
    assert got == [(c, None) for c in ck] + [
        ("org/other", None),
        ("org/base", "v1"),
        (str(tmp_path / "base.gguf"), None),
    ]
    assert read_models_file("models.txt") == ["org/base@v1", "base.gguf"]


@pytest.mark.parametrize(
    "models,words",
    [
        ([], "give the models"),
        (["nothing/here/at/all"], "no such file or folder"),
        (["ckpt-*"], "no model matches"),
        (["org/name@"], "revision after @"),
        ([" "], "empty MODEL"),
        (["ollama:../x"], "not an Ollama model name"),
        (["ollama:smollm2@sha256:ab"], "not an Ollama model name"),
    ],
)
def test_bad_models_are_refused_in_one_line(tmp_path, monkeypatch, models, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as e:
        expand(models)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_ollama_models_are_members_under_the_names_ollama_list_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no store needed: a member is found when its run starts
    got = expand(
        ["ollama:smollm2:135m", "ollama:smollm2", "ollama:smollm2:latest", "ollama:registry.ollama.ai/me/m:v1"]
    )
    assert got == [("ollama:smollm2:135m", None), ("ollama:smollm2:latest", None), ("ollama:me/m:v1", None)]
    m = member(*got[0], tokens_per_step=10)
    assert (m.model, m.step, m.tokens, m.local) == ("ollama:smollm2:135m", None, None, False)
    assert m.name.startswith("ollama-smollm2-135m-") and m.name != member(*got[1]).name


def test_a_glob_that_matches_nothing_is_fine_for_a_watch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert expand(["ckpt-*"], allow_empty=True) == []


def test_a_models_file_that_is_too_big_or_not_text_is_refused(tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes(b"a\n" * (1 << 20))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00")
    for f, words in ((big, "MiB"), (bad, "UTF-8"), (tmp_path, "not a file")):
        with pytest.raises(UsageError, match=words):
            read_models_file(f)


def test_the_step_from_trainer_state_and_tokens_per_step(tmp_path):
    d = tmp_path / "final"
    d.mkdir()
    assert trainer_step(d) is None and member(str(d)).step is None
    (d / "trainer_state.json").write_text(json.dumps({"global_step": 1234}))
    m = member(str(d), tokens_per_step=1000)
    assert (m.step, m.tokens) == (1234, 1_234_000)
    named = tmp_path / "checkpoint-50"
    named.mkdir()
    (named / "trainer_state.json").write_text(json.dumps({"global_step": 7}))
    assert member(str(named)).step == 50  # the name wins
    for bad in ('{"global_step": "12"}', '{"global_step": -1}', "[1]", "{", '{"global_step": true}'):
        (d / "trainer_state.json").write_text(bad)
        assert trainer_step(d) is None, bad


def test_a_watch_takes_an_hf_checkpoint_at_once_and_others_once_settled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    now = [0.0]
    w = Watcher(["ckpt/*"], None, settle=60, clock=lambda: now[0])
    hf, plain = tmp_path / "ckpt" / "checkpoint-1", tmp_path / "ckpt" / "step-2"
    hf.mkdir(parents=True)
    plain.mkdir()
    (hf / "model.safetensors").write_bytes(b"x")
    (plain / "model.safetensors").write_bytes(b"x")
    assert w.ready(set()) == []  # the HF one has no trainer_state.json yet
    (hf / "trainer_state.json").write_text("{}")
    assert w.ready(set()) == [(str(hf), None)]
    now[0] = 59
    assert w.ready({(str(hf), None)}) == []
    (plain / "model.safetensors").write_bytes(b"xy")  # still being written: the clock starts again
    now[0] = 100
    assert w.ready(set()) == [(str(hf), None)]
    now[0] = 159
    assert (str(plain), None) not in w.ready(set())
    now[0] = 160
    assert (str(plain), None) in w.ready(set())
    os.utime(plain / "model.safetensors", ns=(1, 1))  # touched: not settled
    assert (str(plain), None) not in w.ready(set())


def test_every_command_is_listed_in_the_runs_help(capsys):
    from base_bench.commands.cli import SUBCOMMANDS, main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert f"  base-bench {name} " in out, name
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = capsys.readouterr().out
    for flag in ("--engine", "--workers", "--watch", "--until-step", "--lease-timeout", "--max-attempts",
                 "--slurm-partition", "--ray-address", "--limit-per-category", "--backend"):  # fmt: skip
        assert flag in out, flag
