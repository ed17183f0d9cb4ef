"""How `make test` spreads the suite over parallel workers (pytest-xdist, `-n N`).

A test goes to a worker together with its group: the tests that share a costly fixture. A family's contract
tests, across every module that takes `family` (tests/e2e/conftest.py), share that family's server, so they are
one group and the server starts once, not once per worker. Any other test shares its module's group (its
module-scoped servers and gateways). A soak is a group of its own: it holds its worker for its minute.

Groups are handed out in the order the workers collected them, which `in_start_order` makes roughly longest
first (the soaks, then the end-to-end groups with a server each, then the in-process layers), so that no worker
draws a soak at the end while the others stand idle.

Groups are read off the test ids, as the scheduler sees them: pytest-xdist's own `xdist_group` marks reach it
through a rewrite of the test id that pytest 9.2 no longer supports.
"""
from __future__ import annotations

import re

from xdist.scheduler import LoadScopeScheduling

GIB_PER_WORKER = 6  # a worker's peak: its default server, its group's servers and gateway, itself (3 workers: 15 GB)
SOLO_MODULES = ("tests/e2e/test_soak.py",)  # each test a group of its own
# unit modules that hold a worker as long as an end-to-end group (the golden files again in subprocesses, ~80 s):
# started with those, not last
LONG_UNIT_MODULES = ("tests/unit/test_golden_tolerances.py",)
FIRST_LAYERS = ("tests/e2e/", "tests/middle/")  # then everything else
PARAMS = re.compile(r"\[(.*)\]$")


def auto_workers(num_cpus: int, available_gib: float) -> int:
    """Workers for `-n auto`: one more than the cores (a test that waits on a server leaves its core to
    another), as many as the memory holds, at least one."""
    return max(1, min(num_cpus + 1, int(available_gib // GIB_PER_WORKER)))


def available_gib() -> float:
    with open("/proc/meminfo") as meminfo:
        fields = dict(line.split(":", 1) for line in meminfo)
    return int(fields["MemAvailable"].split()[0]) / 2 ** 20


def family_presets() -> list[str]:
    from tests.e2e.conftest import FAMILY_PRESETS
    return sorted(FAMILY_PRESETS, key=len, reverse=True)  # the longest name that fits wins


def group_of(nodeid: str, presets: list[str]) -> str:
    """`family <preset>` for a test of the `family` fixture (its id starts with the preset's name), the test
    itself in a solo module, else its module."""
    module = nodeid.split("::", 1)[0]
    if module in SOLO_MODULES:
        return nodeid
    params = PARAMS.search(nodeid)
    if params and module.startswith("tests/e2e/"):
        for preset in presets:
            if params.group(1) == preset or params.group(1).startswith(preset + "-"):
                return f"family {preset}"
    return module


def start_rank(group: str) -> int:
    """0 for a soak, 1 for an end-to-end group (and a long unit module), 2 for the middle layer, 3 for the rest."""
    if group.startswith(SOLO_MODULES):
        return 0
    if group.startswith("family ") or group in LONG_UNIT_MODULES:
        return 1
    return 1 + next((rank for rank, layer in enumerate(FIRST_LAYERS) if group.startswith(layer)),
                    len(FIRST_LAYERS))


def in_start_order(items: list) -> list:
    """`items` with each group's tests together (in their collected order) and the groups in start order; a
    group begins where its first test was collected."""
    presets = family_presets()
    groups = [group_of(item.nodeid, presets) for item in items]
    first: dict[str, int] = {}
    for index, group in enumerate(groups):
        first.setdefault(group, index)
    order = sorted(range(len(items)), key=lambda i: (start_rank(groups[i]), first[groups[i]], i))
    return [items[i] for i in order]


class GroupScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with our groups as its scopes, handed out in collection order."""

    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # keep `in_start_order`, not "most tests first"
        self._presets = family_presets()

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid, self._presets)
