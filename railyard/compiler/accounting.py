"""Accounting: what slurmdbd's database holds for this cluster, in sacctmgr's own terms.

``associations(cluster)`` is the desired state the role's ``slurm_associations`` module
applies and checks (rendered to ``accounting/associations.json``): QOS, the account tree parents
first, and each user's associations. Every limit is given, an unset one as ``""``, so that a
limit removed from the spec is cleared in the database, not left behind. Option names are
sacctmgr's ``set`` options; the module maps them to the columns ``sacctmgr show`` prints.
"""

from __future__ import annotations

from typing import Any

from railyard.spec import Account, Accounting, Cluster

# The TRES gres/gpu is tracked under (AccountingStorageTRES in slurm.conf).
GPU_TRES = "gres/gpu"


def tres(limits: dict[str, int]) -> str:
    """{gres/gpu: 8, cpu: 64} -> 'cpu=64,gres/gpu=8' (sorted: one spelling per limit set)."""
    return ",".join(f"{name}={count}" for name, count in sorted(limits.items()))


def _count(value: int | None) -> str:
    return "" if value is None else str(value)


def _parents_first(accounts: list[Account]) -> list[Account]:
    """The account tree in an order sacctmgr can create it: each parent before its children."""
    by_name = {a.name: a for a in accounts}
    done: set[str] = {"root"}
    out: list[Account] = []

    def visit(a: Account, seen: frozenset[str] = frozenset()) -> None:
        if a.name in done or a.name in seen:
            return
        parent = by_name.get(a.parent)
        if parent is not None:
            visit(parent, seen | {a.name})
        done.add(a.name)
        out.append(a)

    for a in accounts:
        visit(a)
    return out


def associations(cluster: Cluster) -> dict[str, Any] | None:
    slurm = cluster.partitions.slurm
    acct: Accounting | None = slurm.accounting if slurm is not None else None
    if acct is None:
        return None
    qos = {
        q.name: {
            "Priority": str(q.priority),
            "GrpTRES": tres(q.grp_tres),
            "MaxTRESPerUser": tres(q.max_tres_per_user),
            "MaxTRESPerJob": tres(q.max_tres_per_job),
            "MaxJobsPerUser": _count(q.max_jobs_per_user),
            "MaxSubmitJobsPerUser": _count(q.max_submit_jobs_per_user),
            "MaxWall": q.max_wall or "",
        }
        for q in acct.qos
    }
    accounts = [
        {
            "name": a.name,
            "parent": a.parent,
            "options": {
                "Fairshare": str(a.fairshare),
                "GrpTRES": tres(a.grp_tres),
                "MaxTRES": tres(a.max_tres_per_job),
                "MaxJobs": _count(a.max_jobs),
                # an account without its own list keeps what it inherits (Slurm's normal)
                "QOS": ",".join(sorted(a.qos)),
                "DefaultQOS": a.default_qos or "",
            },
        }
        for a in _parents_first(acct.accounts)
    ]
    users = [
        {
            "name": u.name,
            "default_account": u.default_account,
            "accounts": {
                name: {"Fairshare": str(u.fairshare), "MaxJobs": _count(u.max_jobs), "GrpTRES": tres(u.grp_tres)}
                for name in dict.fromkeys([u.default_account, *u.accounts])
            },
        }
        for u in acct.users
    ]
    return {"cluster": cluster.cluster.name, "qos": qos, "accounts": accounts, "users": users}
