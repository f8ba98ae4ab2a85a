"""The choices of preferred topology levels and sub-gangs (design §3.9, §3.10) for one gang.

Lives here: :class:`LevelChoice`, which :class:`~ome_scheduler.plugins.gangpack.planner.PinPlanner`
asks for a fresh pin when the gang has ``ome.io/topology-preferred-keys`` (each level in order,
then the required key) or sub-gangs (the required key's domains that take every sub-gang whole),
and the candidate narrowings of a gang pinned at the required key: the fewest sub-domains
(:func:`fewest_subdomains`) and the sub-gangs' quotas (:func:`subgroup_candidates`). It reads
the gang's state and records warnings; surveys and the pin itself come from the planner through
the callables it passes (a survey of a level, the choice of a pin in a survey).

Upstream has no counterpart (kube-scheduler has no gangs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ome_scheduler.framework.status import Status
from ome_scheduler.framework.topology import domain_value, label_of
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.logs import get_logger
from ome_scheduler.plugins.gangpack.gang import Gang, Placement
from ome_scheduler.plugins.gangpack.levels import SUBGROUP_INDEX_LABEL, plan_subgroups
from ome_scheduler.plugins.gangpack.pins import Domain, Pin
from ome_scheduler.plugins.gangpack.placement import DomainPlan, GangPlanner, group_by_domain
from ome_scheduler.plugins.gangpack.state import GangState
from ome_scheduler.plugins.gangpack.survey import DomainSurvey

log = get_logger()

Surveyed = tuple[GangPlanner[PodInfo, NodeInfo], DomainSurvey]
"""A gang's planner and its survey of one level."""
SurveyAt = Callable[[str], Surveyed]
"""Survey the gang's domains at a level key."""
Choose = Callable[[DomainSurvey, Sequence[str], Callable[[str], bool] | None], Pin | Status]
"""Choose a fresh pin in a survey: (survey, levels relaxed, allowed domains or None) -> pin or why not."""


class LevelChoice:
    """§3.9 and §3.10 pin choices over one OMEGangPack instance's :class:`GangState`."""

    def __init__(self, state: GangState) -> None:
        self.state = state
        self.pins = state.pins
        self.metrics = state.metrics

    def held(self, survey: DomainSurvey) -> Callable[[str], bool]:
        """Whether a domain of the survey's level is held by a forming gang's pin."""
        pins, tk = self.pins, survey.topology_key

        def held(d: str) -> bool:
            if pins.reserved.get(Domain(tk, d), 0) > 0:
                return True
            # A domain under another key that shares a physical node with a hold is held too.
            return bool(pins.reserved_nodes) and any(pins.reserved_nodes.get(n, 0) > 0 for n in survey.node_names_of(d))

        return held

    def check_nesting(self, gang: Gang, survey: DomainSurvey) -> None:
        """§3.9: a preferred level's value seen under two values of the required key is two
        domains; the gang's PodGroup gets one ``TopologyNotNested`` warning per level saying so."""
        level = survey.topology_key
        if (gang.key, gang.uid, level) in self.state.warned:
            return
        parents: dict[str, list[str]] = {}
        for d in survey.domain_names():
            r, _, p = d.partition(",")
            parents.setdefault(p, []).append(r)
        shared = sorted((p, rs) for p, rs in parents.items() if len(rs) > 1)
        if not shared:
            return
        p, rs = shared[0]
        more = f" (and {len(shared) - 1} more)" if len(shared) > 1 else ""
        note = (
            f"{label_of(level)}={p} appears under {gang.topology_key}={', '.join(rs)}{more}: "
            "each is treated as a separate domain"
        )
        self.state.warn_once(gang.key, gang.uid, level, "TopologyNotNested", note)

    def open_fit(self, survey: DomainSurvey, failed: set[Domain]) -> str | None:
        """Best fit among the survey's domains that are neither held nor failed (None: none)."""
        held, tk = self.held(survey), survey.topology_key
        return survey.best_fit(lambda x: held(x) or Domain(tk, x) in failed)

    def choose_level(
        self, gang: Gang, surveyed: Surveyed, survey_at: SurveyAt, choose: Choose
    ) -> tuple[Pin | Status, GangPlanner[PodInfo, NodeInfo], DomainSurvey]:
        """§3.9: a fresh pin at the tightest level with a fitting domain (neither held nor failed),
        else at the required topology key, whose ``Pinned`` event names the levels relaxed.
        ``surveyed`` is the survey already made (of the topology key); returns the pin (or why
        none) with the planner and survey of the level pinned."""
        if gang.subgroup_size:
            return self.choose_subgroups(gang, surveyed, survey_at, choose)
        relaxed: list[str] = []
        failed = self.state.failed.get((gang.key, gang.uid), set())
        for level in gang.levels[:-1]:
            planner, survey = survey_at(level)
            self.check_nesting(gang, survey)
            if self.open_fit(survey, failed) is not None:
                return choose(survey, relaxed, None), planner, survey
            relaxed.append(label_of(level))
        planner, survey = surveyed
        if survey.topology_key != gang.topology_key:
            planner, survey = survey_at(gang.topology_key)
        return choose(survey, relaxed, None), planner, survey

    def choose_subgroups(
        self, gang: Gang, surveyed: Surveyed, survey_at: SurveyAt, choose: Choose
    ) -> tuple[Pin | Status, GangPlanner[PodInfo, NodeInfo], DomainSurvey]:
        """§3.10: a fresh pin for a gang of sub-gangs: best fit among the domains of the required key
        whose sub-domains take all its sub-gangs whole (:func:`plan_subgroups`); the pin records
        the quota per sub-domain. Without such a domain the usual choice says why (no room, held),
        or, when room alone would fit, that no domain fits the sub-gangs."""
        planner, survey = surveyed
        size, count = gang.subgroup_size, gang.min_member // gang.subgroup_size
        _, sub = survey_at(gang.sub_level)
        by_parent: dict[str, dict[str, int]] = {}
        for d, r in sub.raw_rooms().items():
            by_parent.setdefault(d.partition(",")[0], {})[d] = r
        plans = {r: q for r, rooms in by_parent.items() if (q := plan_subgroups(rooms, {}, size, count)) is not None}
        if not plans and survey.best_fit(lambda _: False) is not None:
            self.metrics.pin("no_fit")
            why = Status.unschedulable(
                f"no domain has room for gang {gang.key}: no {gang.topology_key} domain takes {count} sub-gangs of "
                f"{size} members, each inside one {gang.subgroup_key} domain"
            )
            log.info("gangpack.pinGang.no_fit", v=4, gang=gang.key, status=why.message())
            return why, planner, survey
        pin = choose(survey, (), lambda d: d in plans)
        if isinstance(pin, Pin):
            pin.quota = plans[pin.domain.value]
        return pin, planner, survey


def subgroup_candidates(
    pod: PodInfo,
    gang: Gang,
    pin: Pin,
    planner: GangPlanner[PodInfo, NodeInfo],
    plan: DomainPlan[NodeInfo],
    cands: list[NodeInfo],
    placed: Placement,
) -> list[NodeInfo] | Status:
    """§3.10: the candidates in the sub-domains whose quota is not yet filled; a member labelled
    ``ome.io/subgroup-index`` goes where its sub-gang's placed members are. An adopted pin (no
    quota yet) is planned from the placed members."""
    level, size = gang.sub_level, gang.subgroup_size
    by = group_by_domain(plan.nodes, lambda n: domain_value(n.labels, level))
    counts: dict[str, int] = {}
    mine: set[str] = set()
    idx = _subgroup_index(pod)
    for p, n in placed.members:
        d = domain_value(n.labels, level)
        counts[d] = counts.get(d, 0) + 1
        if idx and _subgroup_index(p) == idx:
            mine.add(d)
    if not pin.quota:
        rooms = {d: planner.plan_domain(d, ns).room for d, ns in by.items()}
        quota = plan_subgroups(rooms, counts, size, gang.min_member // size)
        if quota is None:
            return Status.unschedulable(
                f"pinned domain {pin.domain.value} cannot take the sub-gangs of gang {gang.key} whole"
            )
        pin.quota = quota
    open_ = {d for d, q in pin.quota.items() if counts.get(d, 0) < q}
    if mine:
        open_ &= mine
    elif idx:
        # A labelled sub-gang not yet placed needs a sub-domain with room for all of it.
        open_ = {d for d in open_ if pin.quota[d] - counts.get(d, 0) >= size} or open_
    narrowed = [n for n in cands if domain_value(n.labels, level) in open_]
    if not narrowed:
        return Status.unschedulable(
            f"pinned domain {pin.domain.value} has no node left in the sub-domains planned for gang {gang.key}"
        )
    return narrowed


def _subgroup_index(p: PodInfo) -> str:
    return p.pod.metadata.labels.get(SUBGROUP_INDEX_LABEL, "")


def fewest_subdomains(
    planner: GangPlanner[PodInfo, NodeInfo],
    plan: DomainPlan[NodeInfo],
    cands: list[NodeInfo],
    placed: Placement,
    need: int,
    level: str,
) -> list[NodeInfo]:
    """§3.9: the candidates in the fewest domains of ``level`` (a preferred level) inside the
    pinned domain ``plan`` that still hold the ``need`` members left: the sub-domains the placed
    members use first, then the others by room (most first, ties by name), until their summed
    room covers ``need``. Taking the largest rooms first is what makes the count the fewest.
    Returns ``cands`` unchanged when no sub-domain of ``level`` holds a candidate."""
    by = group_by_domain(plan.nodes, lambda n: domain_value(n.labels, level))
    used = {domain_value(n.labels, level) for _, n in placed.members}
    room = {d: planner.plan_domain(d, ns).room for d, ns in by.items()}
    order = sorted(by, key=lambda d: (d not in used, -room[d] if d not in used else 0, d))
    chosen: set[str] = set()
    total = 0
    for d in order:
        if total >= need and d not in used:
            break
        chosen.add(d)
        total += room[d]
    narrowed = [n for n in cands if domain_value(n.labels, level) in chosen]
    return narrowed or cands
