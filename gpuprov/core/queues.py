"""Teams and their share of each pool, as the inventory's top group declares them (``kube_queues``).

The shape is checked here (one error per wrong key or value); which pools and resources exist,
and whether the shares fit a pool's capacity, is ``gpuprov.core.cluster.queues``' part, since
only the plan knows the pools. A share is an absolute count (an integer) or a fraction of the
pool's capacity (a float from 0.0 to 1.0), of every resource of the pool or of one resource.

>>> spec = teams({"team-a": {"quota": {"shared": 0.5}, "cohort": "gpus"}})
>>> spec[0].quota
(Share(pool='shared', resource=None, amount=0.5),)
>>> Share("mig", "nvidia.com/mig-1g.10gb", 3).of(14), Share("shared", None, 0.5).of(33)
(3, 16)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprov.core import kube_names
from gpuprov.core.errors import shown
from gpuprov.host.contract import MODES

VOLCANO_PLUGINS = ("capacity", "proportion")  # Volcano's queue plugins; never both
# Volcano's Queue weight is an int32 from 1 to 65535 (volcano-sh/apis
# pkg/apis/scheduling/v1beta1/types.go, reference/scheduling.md 1.4).
WEIGHT_MAX = 65535
PRIORITY_MAX = 2**31 - 1  # Volcano's Queue priority is an int32 >= 0
TEAMS_MAX = 256  # Kueue counts each ClusterQueue in a cohort: far past any team list
NAMESPACES_MAX = 64
SHARE_MAX = 2**53  # a count beyond this is a typo (and not a float's exact integer)
OVERCOMMIT_MAX = 100
TEAM_KEYS = (
    "quota",
    "cohort",
    "borrowing_limit",
    "lending_limit",
    "guarantee",
    "parent",
    "namespaces",
    "weight",
    "priority",
)
_SHARE_KEYS = ("quota", "borrowing_limit", "lending_limit", "guarantee")


@dataclass(frozen=True)
class Share:
    """A team's share of one pool (``resource`` None: of each of its resources)."""

    pool: str
    resource: str | None
    amount: int | float  # int: a count; float: a fraction of the capacity

    def of(self, capacity: int) -> int:
        """The count this share is of ``capacity`` (a fraction rounds down: never above it)."""
        if isinstance(self.amount, float):
            return int(self.amount * capacity)
        return self.amount


@dataclass(frozen=True)
class TeamSpec:
    """One team as written: its queue's shares, cohort, parent and namespaces."""

    name: str
    quota: tuple[Share, ...]
    borrowing_limit: tuple[Share, ...] | None
    lending_limit: tuple[Share, ...] | None
    guarantee: tuple[Share, ...]
    cohort: str | None
    parent: str | None
    namespaces: tuple[str, ...]
    weight: int | None
    priority: int | None


def teams(value: Any) -> tuple[TeamSpec, ...]:
    """``kube_queues`` as TeamSpecs; ValueError naming the team and key that is wrong.

    >>> teams({"a": {"quota": {"shared": 2.0}}})
    Traceback (most recent call last):
    ...
    ValueError: team 'a': quota: shared: a fraction must be from 0.0 to 1.0, got 2.0
    """
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of team name to its queue, got {shown(value)}")
    if len(value) > TEAMS_MAX:
        raise ValueError(f"must hold at most {TEAMS_MAX} teams, got {len(value)}")
    out = tuple(_team(name, spec) for name, spec in value.items())
    names = {t.name for t in out}
    for team in out:
        if team.parent is not None and team.parent not in names:
            raise ValueError(f"team {shown(team.name)}: parent {shown(team.parent)} is no team")
    for team in out:
        _no_cycle(team, {t.name: t.parent for t in out})
    return out


def overcommit(value: Any) -> dict[str, float]:
    """``kube_queues_overcommit``: pool -> how many times its capacity the teams' quotas may
    sum to (at least 1)."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of pool to a factor, got {shown(value)}")
    for pool, factor in value.items():
        _pool(pool)
        if (
            isinstance(factor, bool)
            or not isinstance(factor, (int, float))
            or not 1 <= factor <= OVERCOMMIT_MAX
        ):
            raise ValueError(
                f"{pool}: must be a number from 1 to {OVERCOMMIT_MAX}, got {shown(factor)}"
            )
    return dict(value)


def _team(name: Any, spec: Any) -> TeamSpec:
    if not isinstance(name, str) or kube_names.subdomain_problem(name):
        why = kube_names.subdomain_problem(name) if isinstance(name, str) else "must be a string"
        raise ValueError(f"team {shown(name)}: a team names its queues, and a queue name {why}")
    where = f"team {shown(name)}"
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: must be a mapping of {', '.join(TEAM_KEYS)}, got {shown(spec)}")
    unknown = [k for k in spec if k not in TEAM_KEYS]
    if unknown:
        raise ValueError(
            f"{where}: unknown key {shown(unknown[0])} (known: {', '.join(TEAM_KEYS)})"
        )
    if "quota" not in spec:
        raise ValueError(f"{where}: quota is required (pool -> share)")
    shares = {key: _shares(f"{where}: {key}", spec[key]) for key in _SHARE_KEYS if key in spec}
    cohort = _name(where, "cohort", spec.get("cohort"))
    for limit in ("borrowing_limit", "lending_limit"):
        if limit in spec and cohort is None:
            # Kueue: "borrowingLimit must be nil when cohort is empty" (CRD CEL), lendingLimit
            # likewise (webhook validateLimit; reference/scheduling.md 1.3).
            raise ValueError(f"{where}: {limit} needs a cohort to borrow from or lend to")
    parent = _name(where, "parent", spec.get("parent"))
    if parent == name:
        raise ValueError(f"{where}: parent: a team cannot be its own parent")
    namespaces = spec.get("namespaces", [name])
    if (
        not isinstance(namespaces, list)
        or not 1 <= len(namespaces) <= NAMESPACES_MAX
        or len(set(map(str, namespaces))) != len(namespaces)
    ):
        raise ValueError(
            f"{where}: namespaces must be a list of 1 to {NAMESPACES_MAX} distinct namespaces, "
            f"got {shown(namespaces)}"
        )
    for namespace in namespaces:
        why = kube_names.label_problem(namespace) if isinstance(namespace, str) else "is no string"
        if why:
            raise ValueError(f"{where}: namespaces: a namespace {why}, got {shown(namespace)}")
    return TeamSpec(
        name,
        shares["quota"],
        shares.get("borrowing_limit"),
        shares.get("lending_limit"),
        shares.get("guarantee", ()),
        cohort,
        parent,
        tuple(namespaces),
        _bounded(where, "weight", spec.get("weight"), 1, WEIGHT_MAX),
        _bounded(where, "priority", spec.get("priority"), 0, PRIORITY_MAX),
    )


def _shares(where: str, value: Any) -> tuple[Share, ...]:
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{where}: must be a mapping of pool to a share, got {shown(value)}")
    out = []
    for pool, share in value.items():
        _pool(pool)
        if isinstance(share, dict):
            if not share:
                raise ValueError(f"{where}: {pool}: name at least one resource")
            for resource, amount in share.items():
                if not isinstance(resource, str) or kube_names.subdomain_problem(
                    resource.rpartition("/")[0] or "x"
                ):
                    raise ValueError(f"{where}: {pool}: {shown(resource)} is no resource name")
                out.append(Share(pool, resource, _amount(f"{where}: {pool}: {resource}", amount)))
        else:
            out.append(Share(pool, None, _amount(f"{where}: {pool}", share)))
    return tuple(out)


def _amount(where: str, value: Any) -> int | float:
    if isinstance(value, float):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{where}: a fraction must be from 0.0 to 1.0, got {shown(value)}")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SHARE_MAX:
        raise ValueError(
            f"{where}: must be a count (an integer >= 0) or a fraction of the pool "
            f"(0.0 to 1.0), got {shown(value)}"
        )
    return value


def _pool(pool: Any) -> None:
    if pool not in MODES:
        raise ValueError(
            f"{shown(pool)} is no pool (pools are the mode groups: {', '.join(MODES)})"
        )


def _name(where: str, key: str, value: Any) -> str | None:
    if value is None:
        return None
    why = kube_names.subdomain_problem(value) if isinstance(value, str) else "must be a string"
    if why:
        raise ValueError(f"{where}: {key} {why}, got {shown(value)}")
    return value


def _bounded(where: str, key: str, value: Any, low: int, high: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(
            f"{where}: {key} must be an integer from {low} to {high}, got {shown(value)}"
        )
    return value


def _no_cycle(team: TeamSpec, parents: dict[str, str | None]) -> None:
    seen = [team.name]
    while (parent := parents[seen[-1]]) is not None:
        if parent in seen:
            raise ValueError(
                f"team {shown(team.name)}: parents loop ({' -> '.join([*seen, parent])})"
            )
        seen.append(parent)
