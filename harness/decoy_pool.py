"""Decoys gold was seen to fail: the differential check's host-side pool of edits at any literal of a test.

A decoy at the expected literal of an assertion fails whenever its honest copy passes, so the grader can
plant it blind (``differential.py``). Many tests have no such literal, and their decoys take another wrong
form (a ``not``, a swapped assertion, one appended) that a reader of the grader tells from the honest copy.
A decoy at any other literal (an input, an argument, a string) looks like the honest copy, but nothing
proves it fails, so it has to be tried first:

1. ``harness validate`` runs gold once more after its gold and base runs (``<run-id>-probe``, apart from
   the verdicts) with ``HarnessConfig.probe_decoys``: every twinned test also gets up to
   :data:`PROBE_SITES` sites times ``DECOYS`` values of *probes*, decoys at any literal it reaches in an
   assertion, an expected-exception block or a binding of local names (sites drawn per test from a seed
   of its own name; values chosen as a decoy's are, from the module as planted), which the verdict
   leaves out (``Twin.how`` :data:`PROBE`);
2. the probes that run reports failed while their honest twin passed go to the report
   (``ForgeryCheck.probed``); where gold resolved, they join the pool, ``<report-dir>/<run-id>/decoys.json``
   (:func:`write`), by instance, module and test (an edit seen in several runs must fail in each);
3. a graded run given that file (``HarnessConfig.decoy_pool``, ``harness run --decoy-pool``) draws the
   decoys of a test with no expected literal from the pool (a site at random with the host's CSPRNG, its
   proven values) before any other wrong form; how: :data:`VALIDATED`.

The pool lives on the host and holds only edits, never the grader's choice for a run: a forger that reads
it learns which literals matter to the test, which the honest copy shares.

Limit, and why the pool is opt-in: a decoy at an expected literal fails under every correct fix, while an
edit that failed under gold may pass under another correct fix, one that behaves otherwise where the
test's assertions do not look (an input gold's code rejects and the other fix ignores); such a run is
graded unresolved. Use the pool where the grader faces submissions that may have read it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from envfarm.errors import HarnessError

PROBE = "probe"
"""``Twin.how`` of a probe: planted to be tried, never judged."""
VALIDATED = "validated"
"""``Twin.how`` of a decoy drawn from the pool."""
PROBE_SITES = 6
"""Literal sites probed per twinned test (each with up to ``differential.DECOYS`` values)."""
FILE = "decoys.json"


class DecoyPoolError(HarnessError):
    """A decoy pool file that cannot be read (the message names the file and the fix)."""


@dataclass(frozen=True)
class PoolSite:
    """Values of one literal of one test: proven to make it fail under gold (a pool's), or one value tried
    (a probe's, which ``Twin.edit`` holds as :meth:`key`)."""

    cls: str | None
    func: str
    row: int
    """Lines after the test's ``def`` line."""
    start: int
    """UTF-8 byte columns of the literal in that line."""
    end: int
    old: str
    """The literal as the test has it (a site whose text differs is not used)."""
    values: tuple[str, ...]

    def key(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def parse(cls, key: str | Mapping[str, Any]) -> PoolSite:
        d = json.loads(key) if isinstance(key, str) else key
        return cls(d["cls"], str(d["func"]), int(d["row"]), int(d["start"]), int(d["end"]), str(d["old"]),
                   tuple(map(str, d["values"])))


Pools = dict[str, dict[str, tuple[PoolSite, ...]]]
"""instance id -> test module -> sites."""


def gather(runs: Iterable[Sequence[tuple[str, str, bool]]]) -> dict[str, tuple[PoolSite, ...]]:
    """One instance's pool from its gold runs: each run's probes as (module, probe key, failed while the
    honest copy passed). An edit joins when it failed in every run that probed it."""
    seen: dict[tuple[str, str], bool] = {}
    for run in runs:
        for module, key, failed in run:
            seen[module, key] = seen.get((module, key), True) and failed
    sites: dict[tuple[str, PoolSite], list[str]] = {}
    for (module, key), failed in sorted(seen.items()):
        if failed:
            probe = PoolSite.parse(key)
            sites.setdefault((module, replace(probe, values=())), []).extend(probe.values)
    out: dict[str, list[PoolSite]] = {}
    for (module, site), values in sites.items():
        out.setdefault(module, []).append(replace(site, values=tuple(values)))
    return {m: tuple(s) for m, s in out.items()}


def write(path: Path, pools: Mapping[str, Mapping[str, Sequence[PoolSite]]]) -> None:
    data = {iid: {m: [asdict(s) for s in sites] for m, sites in mods.items()}
            for iid, mods in sorted(pools.items()) if mods}
    path.write_text(json.dumps(data, indent=1) + "\n")


def load(path: Path) -> Pools:
    """A pool file (:func:`write`); :class:`DecoyPoolError` when it is missing or malformed."""
    try:
        data = json.loads(path.read_text())
        return {str(iid): {str(m): tuple(map(PoolSite.parse, sites)) for m, sites in mods.items()}
                for iid, mods in data.items()}
    except OSError as e:
        raise DecoyPoolError(f"decoy pool {path}: {e.strerror or e}; pass the {FILE} that `envfarm harness "
                             "validate` wrote") from e
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DecoyPoolError(f"decoy pool {path} is not a {FILE} written by `envfarm harness validate` "
                             f"({type(e).__name__}: {e}); validate the rows again to rewrite it") from e
