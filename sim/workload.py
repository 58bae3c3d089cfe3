"""What the seed has producers and operators do: submissions single and in batches (with and without idempotency
keys, some repeated, some for another principal's site), imports in steps (some of them truncated files), and the
operator's cancels, pauses, redrives, replays and quotas. Each is an actor: its port calls are steps like any."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from random import Random
from typing import Any

from botocore.exceptions import ClientError

from chaos.invariants import DriverLedger, Violations
from sitedispatch.domain.dependencies import BreakerState
from sitedispatch.domain.errors import Backpressure, SiteDispatchError
from sitedispatch.domain.model import RUNNABLE, Kind, Status
from sitedispatch.local.synthetic import write_wxr
from sitedispatch.operations.batch import BatchItem
from sitedispatch.operator.access import Caller
from sitedispatch.operator.reads import DeadLetterFilter
from sitedispatch.operator.redrive import RedriveReport
from tests.fakes import MemoryWorld

from .dependencies import DEPENDENCY_IDS
from .wiring import Core

OPERATOR = Caller("sim-operator", operator=True)
PROVISION = {"title": "Simulated", "admin_email": "sim@example.org"}
SUBMIT_TRIES = 3  # a client with an idempotency key tries again after a 5xx


@cache
def wxr_files() -> dict[str, Path]:
    """The import files every seed draws from (written once per process; the same bytes every time)."""
    folder = Path(tempfile.mkdtemp(prefix="sitedispatch-sim-"))
    files = {}
    for n in range(3):
        files[f"good-{n}"] = folder / f"good-{n}.xml"
        write_wxr(files[f"good-{n}"], posts=4 + 4 * n, seed=n + 1)
    truncated = folder / "truncated.xml"
    truncated.write_bytes(files["good-1"].read_bytes()[:1500])
    files["truncated"] = truncated
    return files


@dataclass
class Tenancy:
    sites: list[str]
    owner: dict[str, str]
    tenants: dict[str, list[str]]  # principal -> its tenants ("" stands for the principal itself)

    @classmethod
    def drawn(cls, rng: Random) -> Tenancy:
        principals = [f"principal-{n}" for n in range(rng.randint(1, 3))]
        sites = [f"site-{n}" for n in range(rng.randint(2, 6))]
        owner = {site: principals[n % len(principals)] for n, site in enumerate(sites)}
        tenants = {p: [""] + [f"customer-{n}" for n in range(rng.randint(0, 3))] for p in principals}
        return cls(sites, owner, tenants)


@dataclass
class Workload:
    core: Core
    world: MemoryWorld
    tenancy: Tenancy
    rng: Random
    ledger: DriverLedger
    violations: Violations
    claimed: set[str] = field(default_factory=set)
    paused: set[str] = field(default_factory=set)
    keys: list[tuple[str, str, str, dict[str, Any]]] = field(default_factory=list)  # (site, kind, key, params)

    # -- the plan ----------------------------------------------------------------------------------------------

    def plan(self, work_s: float, submissions: int, actions: int) -> list[tuple[float, str]]:
        """(when, what) for the whole workload: every site provisioned first, then the rest at random times."""
        planned = [(self.rng.uniform(0, 2.0), f"provision {site}") for site in self.tenancy.sites]
        for _ in range(submissions):
            what = self.rng.choices(
                ["publish", "wp_cron", "import", "poison", "batch", "repeat", "foreign", "recover"],
                [6, 2, 4, 1, 3, 1, 1, 1],
            )[0]
            planned.append((self.rng.uniform(1.0, work_s), what))
        for _ in range(actions):
            what = self.rng.choices(["cancel", "pause", "redrive", "fix", "replay", "quota"], [3, 2, 3, 1, 1, 1])[0]
            planned.append((self.rng.uniform(1.0, work_s), what))
        return sorted(planned)

    def body(self, what: str) -> Any:
        """The actor that does `what`."""
        name, _, arg = what.partition(" ")
        return lambda: getattr(self, f"do_{name}")(arg) if arg else getattr(self, f"do_{name}")()

    # -- producers ---------------------------------------------------------------------------------------------

    def do_provision(self, site: str) -> None:
        self.submit(site, "provision", PROVISION, key=f"provision-{site}")

    def do_publish(self) -> None:
        self.submit(self.site(), "publish", {}, keyed=self.rng.random() < 0.7)

    def do_wp_cron(self) -> None:
        self.submit(self.site(), "wp_cron", {}, keyed=self.rng.random() < 0.7)

    def do_import(self) -> None:
        site = self.site()
        name = self.rng.choice(["good-0", "good-1", "good-2"])
        params = self.core.submitter().stage_upload(site, wxr_files()[name], self.tenancy.owner[site])
        self.submit(site, "import", params)

    def do_poison(self) -> None:
        site = self.site()
        params = self.core.submitter().stage_upload(site, wxr_files()["truncated"], self.tenancy.owner[site])
        self.submit(site, "import", params)

    def do_recover(self) -> None:
        """Roll a site back to, or restore its head from, an earlier revision of its history."""
        site = self.site()
        history = sorted((c for c in self.world.db.commits.values() if c.site_id == site), key=lambda c: c.version)
        if history:
            revision = self.rng.choice(history).revision_id
            mode = self.rng.choice(["rollback", "restore"])
            self.submit(site, "recover", {"revision_id": revision, "mode": mode})

    def do_repeat(self) -> None:
        """The same idempotency key again, with the same input: the same operation, nothing new."""
        if not self.keys:
            return
        site, kind, key, params = self.rng.choice(self.keys)
        self.submit(site, kind, params, key=key)

    def do_foreign(self) -> None:
        """A principal submits to a site another principal claimed: refused, and nothing is written for it."""
        others = [s for s in sorted(self.claimed) if len(set(self.tenancy.owner.values())) > 1]
        if not others:
            return
        site = self.rng.choice(others)
        intruder = next(p for p in sorted(set(self.tenancy.owner.values())) if p != self.tenancy.owner[site])
        try:
            submitted = self.core.submitter().submit(
                kind="publish", site_id=site, principal=intruder, params={}, idempotency_key=f"foreign-{site}"
            )
        except (SiteDispatchError, ClientError):
            return
        self.violations.add("a principal acts only on its own sites", f"{intruder} submitted {submitted} to {site}")

    def do_batch(self) -> None:
        principal = self.rng.choice(sorted(set(self.tenancy.owner.values())))
        sites = [s for s in self.tenancy.sites if self.tenancy.owner[s] == principal]
        items = [
            BatchItem(
                self.rng.choice(["publish", "wp_cron"]),
                self.rng.choice(sites),
                f"batch-{self.rng.getrandbits(40):x}",
                {},
                tenant=self.tenant(principal),
            )
            for _ in range(self.rng.randint(2, 8))
        ]
        try:
            answers = self.core.batch().submit(principal, items)
        except (SiteDispatchError, ClientError):
            return
        for answer in answers:
            if answer.submitted is not None:
                self.ledger.accepted.add(answer.submitted.operation.operation_id)

    def submit(self, site: str, kind: str, params: dict[str, Any], key: str | None = None, keyed: bool = True) -> None:
        principal = self.tenancy.owner[site]
        if key is None and keyed:
            key = f"{kind}-{self.rng.getrandbits(40):x}"
        tenant = self.tenant(principal)
        for _ in range(SUBMIT_TRIES if key else 1):
            try:
                submitted = self.core.submitter().submit(
                    kind=kind, site_id=site, principal=principal, params=params, idempotency_key=key, tenant=tenant
                )
            except ClientError:
                continue  # a 5xx: the client tries again with the same key (without one it cannot know)
            except (Backpressure, SiteDispatchError):
                return
            self.ledger.accepted.add(submitted.operation.operation_id)
            self.claimed.add(site)
            if key is not None:
                self.keys.append((site, kind, key, params))
            return

    def site(self) -> str:
        return self.rng.choice(self.tenancy.sites)

    def tenant(self, principal: str) -> str | None:
        return self.rng.choice(self.tenancy.tenants[principal]) or None

    # -- operators ---------------------------------------------------------------------------------------------

    def act(self, action: str, call: Any) -> bool:
        """An operator's action through the controls; counted (the audit must show it) once it returned, a redrive
        once it selected something (one that matched nothing, its index read lagging, names no operation)."""
        try:
            done = call()
        except (SiteDispatchError, ClientError):
            return False
        if isinstance(done, RedriveReport) and not done.selected:
            return False
        self.ledger.actions[action] += 1
        return True

    def do_cancel(self) -> None:
        open_ops = sorted(i for i in self.ledger.accepted if self.world.db.operations[i].status in RUNNABLE)
        if open_ops:
            op_id = self.rng.choice(open_ops)
            self.act("cancel", lambda: self.core.controls().cancel(OPERATOR, op_id, "sim: cancel"))

    def do_pause(self) -> None:
        site = self.site()
        paused = site not in self.paused
        if self.act(
            "pause" if paused else "resume", lambda: self.core.controls().set_paused(OPERATOR, site, paused, "sim")
        ):
            (self.paused.add if paused else self.paused.discard)(site)

    def do_redrive(self) -> None:
        dead = sorted(i for i, op in self.world.db.operations.items() if op.status == Status.DEAD)
        if not dead:
            return
        op = self.world.db.operations[self.rng.choice(dead)]
        where = self.rng.choice(
            [DeadLetterFilter(), DeadLetterFilter(site_id=op.site_id), DeadLetterFilter(error_code=op.error_code)]
        )
        self.act("redrive", lambda: self.core.controls().redrive(OPERATOR, where=where, reason="sim: redrive"))

    def do_fix(self) -> None:
        """The recovery a dead import's evidence names: redrive it with a corrected file, uploaded by the operator."""
        dead = sorted(
            i for i, op in self.world.db.operations.items() if op.status == Status.DEAD and op.kind == Kind.IMPORT
        )
        if not dead:
            return
        op = self.world.db.operations[self.rng.choice(dead)]
        submitter = self.core.submitter()
        params = submitter.stage_upload(op.site_id, wxr_files()["good-0"], OPERATOR.identity)
        fixed = submitter.store_input(Kind.IMPORT, op.site_id, OPERATOR.identity, params)
        self.act(
            "redrive",
            lambda: self.core.controls().redrive(
                OPERATOR, operation_id=op.operation_id, new_input=fixed, reason="sim: fixed file"
            ),
        )

    def do_replay(self) -> None:
        dead = sorted(i for i, op in self.world.db.operations.items() if op.status == Status.DEAD)
        if dead:
            op_id = self.rng.choice(dead)
            self.act("replay", lambda: self.core.controls().replay(OPERATOR, op_id, reason="sim: replay"))

    def do_quota(self) -> None:
        principal = self.rng.choice(sorted(set(self.tenancy.owner.values())))
        tenant = self.tenant(principal)
        controls = self.core.controls()
        if self.rng.random() < 0.5:
            self.act(
                "quota",
                lambda: controls.set_quota(
                    OPERATOR,
                    principal,
                    max_outstanding=self.rng.randint(1, 6),
                    max_running=self.rng.randint(1, 2),
                    reason="sim: quota",
                    tenant=tenant,
                ),
            )
        else:
            self.act("quota", lambda: controls.clear_quota(OPERATOR, principal, "sim: quota", tenant=tenant))

    def do_dependency_pause(self, dependency_id: str) -> None:
        self.act(
            "pause-dependency",
            lambda: self.core.controls().set_dependency_paused(OPERATOR, dependency_id, True, "sim: maintenance"),
        )

    def do_dependency_resume(self, dependency_id: str) -> None:
        self.act(
            "resume-dependency",
            lambda: self.core.controls().set_dependency_paused(OPERATOR, dependency_id, False, "sim: done"),
        )

    def do_dependency_move(self, site: str) -> None:
        """The site's owner names other dependencies (some of the drawn ones, or none): work not yet started takes
        its places on the new ones, and waits by the new set once nothing of the site is outstanding."""
        ids = [i for i in DEPENDENCY_IDS if self.rng.random() < 0.5]
        owner = Caller(self.tenancy.owner[site], False)
        self.act(
            "site-dependencies", lambda: self.core.controls().set_site_dependencies(owner, site, ids, "sim: moved")
        )

    def do_settle(self) -> None:
        """Faults have stopped: the operator resumes every paused site and dependency and lifts every quota, as one
        would (an open breaker is left to its probe)."""
        controls = self.core.controls()
        for dependency in sorted(self.world.db.dependencies.values(), key=lambda d: d.dependency_id):
            if dependency.state == BreakerState.PAUSED:
                self.do_dependency_resume(dependency.dependency_id)
        for site in self.tenancy.sites:
            current = self.world.db.sites.get(site)
            if current is not None and current.paused:
                self.act("resume", lambda site=site: controls.set_paused(OPERATOR, site, False, "sim: settle"))
        for principal in sorted(set(self.tenancy.owner.values())):
            for tenant in self.tenancy.tenants[principal]:
                self.act(
                    "quota", lambda p=principal, t=tenant: controls.clear_quota(OPERATOR, p, "sim", tenant=t or None)
                )
