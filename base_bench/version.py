"""The version of base-bench, as `base-bench --version`, report.json and the wheel give it."""

__version__ = "0.2.0"
