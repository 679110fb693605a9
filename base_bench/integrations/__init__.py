"""base-bench inside other tools' loops. `BaseBenchCallback` (in `hf.py`) scores the live model of a
transformers `Trainer`; it is imported lazily, so `import base_bench.integrations` needs no Trainer."""

__all__ = ["BaseBenchCallback"]


def __getattr__(name):
    if name == "BaseBenchCallback":
        from .hf import BaseBenchCallback

        return BaseBenchCallback
    raise AttributeError(f"module 'base_bench.integrations' has no attribute {name!r}")
