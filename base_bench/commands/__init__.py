"""The command lines: `base-bench` (a run), `compare`, `leaderboard`, `trajectory`, `contamination`.

Each module parses its flags, calls the layers below and turns a `BaseBenchError` into one line
and an exit code (`cliargs.py`). Nothing here computes a score.
"""
