"""The test suite's tiers and its groups for pytest-xdist; tests/conftest.py takes the hook from here.

    python -m pytest -q -m "not slow"     # the fast tier, while you work
    python -m pytest -q -n 2              # the full suite on two workers, as CI runs it

A test marked `integration` (a real model) is `slow` too, and every `slow` marker gives its reason.
Under `-n N` (pyproject.toml sets `--dist loadgroup`), `group_of` decides what runs on one worker and
`groups` in which order.
"""

import functools
import re

import pytest


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups set here
def pytest_collection_modifyitems(config, items):
    """The two tiers. `python -m pytest -q -m "not slow"` is the fast tier a contributor runs: every
    module's logic, in a few minutes on two cores. `python -m pytest -q` is the full suite, what CI
    runs. A test that needs a real model is marked `integration`, and so `slow` too. A test marked
    `slow` says why in the marker's reason (a real server, a real model, a subprocess per case, a
    browser): a bare `slow` is refused here, so the fast tier never loses a test without a reason.

    Then the groups for `-n N` (pytest-xdist, `--dist loadgroup` from pyproject.toml): see `groups`."""
    bare = []
    for item in items:
        if item.get_closest_marker("integration") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow(reason="integration: a real model"))
        if any(not m.kwargs.get("reason") for m in item.iter_markers("slow")):
            bare.append(item.nodeid)
    if bare:
        raise pytest.UsageError("marked slow without a reason (pytest.mark.slow(reason=...)): " + ", ".join(bare[:5]))
    if getattr(config.option, "loadgroup", False):  # a worker of `-n N --dist loadgroup` (xdist sets it)
        groups(config, items)


# The session fixtures that one worker must hold for every test that uses them, whatever its module:
# the vLLM server takes two minutes and a few GiB to start. A module that names one is in its group.
SHARED_SESSION = ("vllm_server", "ray_cluster")


def group_of(nodeid, root):
    """The group of a test under `-n N`: its module, or the shared session fixture its module uses."""
    module = nodeid.split("::", 1)[0]
    return _shared(root / module) or module


@functools.cache
def _shared(path):
    words = set(re.findall(r"\w+", path.read_text())) if path.suffix == ".py" and path.is_file() else set()
    return next((name for name in SHARED_SESSION if name in words), None)


def groups(config, items):
    """Order a worker's items group by group, heaviest first: a slow test weighs 20 fast ones, and
    the vLLM server's group leads (it starts the server). Every worker orders them the same way, and
    the scheduler hands the groups out in this order to whichever worker is free, so the long ones
    start at once and the many short ones fill the gaps."""
    root = config.rootpath
    weight, first = {}, {}
    for i, item in enumerate(items):
        name = group_of(item.nodeid, root)
        first.setdefault(name, i)
        weight[name] = weight.get(name, 0) + (20 if item.get_closest_marker("slow") else 1)
        weight[name] += 10_000 * (name in SHARED_SESSION)
        item.stash[GROUP] = name
    items.sort(key=lambda item: (-weight[item.stash[GROUP]], first[item.stash[GROUP]]))


GROUP = pytest.StashKey[str]()


# optional: without pytest-xdist installed, pytest never calls it
@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own, which makes LoadGroupScheduling
def pytest_xdist_make_scheduler(config, log):
    """`-n N --dist loadgroup` (pyproject.toml's addopts) schedules by `group_of`, in the workers'
    order. xdist's own LoadGroupScheduling finds its groups in a suffix it adds to each test's node
    id, which pytest 9 no longer lets a plugin change: every test became a group of its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return group_of(nodeid, self.config.rootpath)

    return GroupScheduling(config, log)
