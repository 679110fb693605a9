"""The GPU check, one module per check: run it as `python bench/gpu_check.py` (bench/ on sys.path
makes this package `gpu`). gpu/run.py lists the checks in the order they run, with their time
budgets; each check's module says what it checks, what it records and how long it takes.
"""
