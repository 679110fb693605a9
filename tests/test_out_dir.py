"""One spelling for where a subcommand writes: every subcommand that writes files takes `--out-dir`
(the run itself, `compare`, `leaderboard`, `trajectory`); `leaderboard` and `trajectory` still take
their older `--out` as an alias of the same option. Hand-made reports, no model is loaded."""

import json

import pytest
from test_compare import A_RIGHT, B_RIGHT, make_report, write_run

from base_bench.commands.cli import main
from base_bench.commands.compare import OUT_DIR_FILES, render_markdown
from base_bench.commands.compare import build_parser as compare_parser
from base_bench.commands.leaderboard import build_parser as leaderboard_parser
from base_bench.commands.trajectory import build_parser as trajectory_parser


@pytest.fixture
def pair(tmp_path):
    return (
        write_run(tmp_path, "a", make_report(A_RIGHT, spec="org/model-a", tag="a")),
        write_run(tmp_path, "b", make_report(B_RIGHT, spec="org/model-b", tag="b")),
    )


@pytest.fixture
def steps(tmp_path):
    """Two per-step reports laid out as BaseBenchCallback writes them."""
    bench = tmp_path / "bench"
    for step, right in ((1, A_RIGHT), (2, B_RIGHT)):
        write_run(bench, f"step-{step}", dict(make_report(right), training_step=step))
    return bench


def test_out_dir_and_out_are_one_option():
    for parser, positionals in ((leaderboard_parser(), ["r1", "r2"]), (trajectory_parser(), ["bench"])):
        new = parser.parse_args([*positionals, "--out-dir", "somewhere"])
        old = parser.parse_args([*positionals, "--out", "somewhere"])
        assert vars(new) == vars(old) and new.out_dir == "somewhere"
    assert leaderboard_parser().parse_args(["r1"]).out_dir == "leaderboard"  # the default is unchanged
    assert trajectory_parser().parse_args(["bench"]).out_dir is None  # (default: the input DIR)
    assert compare_parser().parse_args(["a", "b", "--out-dir", "x"]).out_dir == "x"


@pytest.mark.parametrize("flag", ["--out-dir", "--out"])
def test_leaderboard_writes_into_out_dir(pair, tmp_path, capsys, flag):
    out = tmp_path / "board"
    assert main(["leaderboard", str(pair[0]), str(pair[1]), flag, str(out)]) == 0
    assert {"leaderboard.md", "leaderboard.html"} <= {p.name for p in out.iterdir()}
    assert f"wrote {out}/leaderboard.md" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--out-dir", "--out"])
def test_trajectory_writes_into_out_dir(steps, tmp_path, flag):
    out = tmp_path / "traj"
    assert main(["trajectory", str(steps), flag, str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["trajectory.html", "trajectory.md", "trajectory.png"]
    assert not list(steps.glob("trajectory.*"))


def test_compare_out_dir_writes_both_files_and_keeps_them(pair, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", str(pair[0]), str(pair[1]), "--out-dir", str(out), "--resamples", "50"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(OUT_DIR_FILES)
    cmp = json.loads((out / "compare.json").read_text())
    assert cmp["bootstrap"]["resamples"] == 50 and (out / "compare.md").read_text() == render_markdown(cmp)
    assert f"wrote {out}/compare.json" in capsys.readouterr().out
    # a second run into the same folder is refused without --force, and leaves the files alone
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["compare", str(pair[0]), str(pair[1]), "--out-dir", str(out), "--resamples", "60"]) == 2
    err = capsys.readouterr().err
    assert "already exists; add --force" in err and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert main(["compare", str(pair[0]), str(pair[1]), "--out-dir", str(out), "--resamples", "60", "--force"]) == 0
    assert json.loads((out / "compare.json").read_text())["bootstrap"]["resamples"] == 60


def test_compare_out_dir_with_json_or_markdown_is_a_usage_error(pair, tmp_path, capsys):
    for extra in (["--json", str(tmp_path / "c.json")], ["--markdown", str(tmp_path / "c.md")]):
        with pytest.raises(SystemExit) as exit_:
            main(["compare", str(pair[0]), str(pair[1]), "--out-dir", str(tmp_path / "o"), *extra])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "--out-dir names both output files" in err and err.count("\n") == 2 and "Traceback" not in err
    assert not list(tmp_path.glob("c.*")) and not (tmp_path / "o").exists()


@pytest.mark.parametrize("sub", ["compare", "leaderboard", "trajectory"])
def test_out_dir_that_is_a_file_is_refused_in_one_line(pair, steps, tmp_path, capsys, sub):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep")
    inputs = {"compare": [str(pair[0]), str(pair[1])], "leaderboard": [str(pair[0])], "trajectory": [str(steps)]}
    assert main([sub, *inputs[sub], "--out-dir", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert err == f"base-bench: error: --out-dir {blocker} is a file, not a directory\n"
    assert blocker.read_text() == "keep"


@pytest.mark.parametrize("sub", ["compare", "leaderboard", "trajectory"])
def test_every_writing_subcommand_documents_out_dir_in_its_help(capsys, sub):
    with pytest.raises(SystemExit) as exit_:
        main([sub, "--help"])
    assert exit_.value.code == 0
    assert "--out-dir" in capsys.readouterr().out
