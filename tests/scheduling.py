"""How `make test`'s parallel workers (pytest-xdist, `-n 2`) share out the tests.

Every test is its own unit of work, handed to whichever worker is free, except the modules in
WHOLE_MODULES: their tests share one costly module fixture that must exist once (a booted systemd
container) and run in file order, so each such module goes whole to one worker. xdist's own
`--dist loadgroup` would do this from `xdist_group` marks, but with pytest 9 it renames
`Item._nodeid`, which pytest no longer reads, so the group is silently split across workers.
Units are handed out largest first (xdist's `--loadscope-reorder`, on by default): a whole module
starts at once and its minutes of waiting overlap the rest of the suite instead of trailing it.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

WHOLE_MODULES = frozenset({"tests/test_systemd_real.py"})


class WholeModulesScheduling(LoadScopeScheduling):
    """xdist's load-by-scope scheduler with one test per scope, but whole modules for WHOLE_MODULES."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return module if module in WHOLE_MODULES else nodeid
