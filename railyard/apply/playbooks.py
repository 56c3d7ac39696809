"""Which role runs where, after what, on which inputs: one table, and pure planning over it.

Each role becomes one ``railyard:ansible:Playbook`` over its inventory group (Ansible's
forks do the per-host fan-out). Roles whose hosts overlap run one after the other in
table order; roles on disjoint hosts run side by side. The Playbook's ``digest`` covers the role's files,
those of the roles whose task files it runs (``_shared``), ansible.cfg, the rendered artifacts
the role reads and the host variables of its hosts: a change to any of them re-runs exactly
that role. Roles whose directory does not exist
yet are skipped with a note; whatever depended on them then waits for *their*
dependencies instead, so the order stays right.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from railyard import builds
from railyard.apply.roles import uses as roles_used
from railyard.compiler import Plan
from railyard.hostlist import fold

Component = Literal["fabric", "storage", "slurm", "kubernetes"]


@dataclass(frozen=True, slots=True)
class Step:
    role: str
    group: str  # inventory group (or pattern) the play targets
    after: tuple[str, ...]  # roles that must have run first
    artifacts: tuple[str, ...]  # globs over rendered artifact paths the role reads
    component: Component
    # extravar name -> generated secret (see program.SECRETS); values are base64
    secrets: tuple[tuple[str, str], ...] = ()


# Order: roles whose hosts overlap run in this order (see plan_playbooks); ``after`` adds
# the dependencies that hold across hosts (NFS server before its clients, slurmctld
# before slurmd and the login node).
STEPS: tuple[Step, ...] = (
    Step("common", "all", (), ("ansible/inventory.json",), "fabric"),
    Step("munge", "slurm", ("common",), (), "slurm", (("munge_key", "munge"),)),
    Step("nfs_server", "nfs_server", ("common",), ("storage/exports", "storage/ganesha.conf"), "storage"),
    Step("nfs_client", "nfs_client", ("nfs_server",), ("storage/units/*",), "storage"),
    Step("lustre_client", "lustre_client", ("common",), ("storage/units/*", "storage/lustre.conf"), "storage"),
    # slurmdbd and its database before slurmctld: with accounting, slurmctld reads its
    # associations from slurmdbd, and the controller's role applies the spec's ones there.
    Step("slurmdbd", "slurmdbd", ("munge",), (), "slurm", (("slurmdbd_storage_password", "slurmdbd"),)),
    Step("slurm_controller", "slurm_controller", ("munge", "slurmdbd"), ("slurm/*", "accounting/*"), "slurm"),
    Step("enroot", "slurm_compute:slurm_login", ("common",), ("enroot/*",), "slurm"),
    # Pyxis' plugin before slurmd's first start: in configless mode slurmd fetches the
    # served plugstack.conf and pyxis.conf, loads the `required` plugin at start-up and exits
    # without it ("spank: .../conf-cache/pyxis.conf:3: Failed to load plugin ... Aborting.",
    # "slurmd initialization failed"). The package needs only enroot, not Slurm.
    Step("pyxis", "slurm_compute:slurm_login", ("enroot",), ("slurm/plugstack.conf.d/*",), "slurm"),
    Step("slurm_compute", "slurm_compute",
         ("slurm_controller", "nfs_client", "lustre_client", "enroot", "pyxis"), ("slurm/*",), "slurm"),
    Step("slurm_login", "slurm_login", ("slurm_controller", "nfs_client", "lustre_client", "pyxis"), ("slurm/*",),
         "slurm"),
    Step("k8s_control_plane", "k8s_control_plane", ("common",), (), "kubernetes"),
    # workers register their Node through the control plane (labels from node-labels.yaml
    # reach them as host variables)
    Step("k8s_worker", "k8s_worker", ("k8s_control_plane",), (), "kubernetes"),
    Step("kueue", "k8s_control_plane", ("k8s_control_plane",), ("kubernetes/kueue.yaml",), "kubernetes"),
    Step("volcano", "k8s_control_plane", ("k8s_control_plane",),
         ("kubernetes/volcano.yaml", "kubernetes/volcano-scheduler.conf"), "kubernetes"),
)


def _package(plan: Plan, which: str) -> dict[str, Any] | None:
    spec = plan.spec
    owner = spec.storage.lustre if which == "lustre" else getattr(spec.partitions.slurm, which, None)
    pkg = owner.package if owner is not None else None
    return pkg.model_dump(exclude_none=True) if pkg is not None else None


def _package_vars(prefix: str, which: str) -> Callable[[Plan], dict[str, Any]]:
    return lambda p: {f"{prefix}_package": _package(p, which), f"{prefix}_package_required": not p.is_lab}


# The Kubernetes release scripts/build-k8s.sh builds for the lab; the lab spec pins its
# minor (validate refuses another; tests/test_k8s_objects.py checks the build).
LAB_K8S_RELEASE = builds.KUBERNETES
# The one image the lab's kubelets run (scripts/build-k8s.sh images): workload and sandbox.
LAB_IMAGE = "localhost/railyard/busybox:1"
# CoreDNS as the lab builds it (scripts/build-k8s.sh coredns); a site pulls the official image.
LAB_DNS_IMAGE = f"localhost/railyard/coredns:{builds.COREDNS}"


def lab_k8s_dir() -> Path:
    """Where scripts/build-k8s.sh leaves the lab's binaries (bin/), CRDs and manifests."""
    cache = os.environ.get("RAILYARD_K8S_CACHE") or str(Path.home() / ".cache/railyard/k8s")
    return Path(cache) / f"v{LAB_K8S_RELEASE}"


def _k8s_vars(role: str) -> Callable[[Plan], dict[str, Any]]:
    """Install sources of the Kubernetes roles: the lab's locally built binaries and
    upstream manifests, or (elsewhere) the official releases, from the spec's mirror
    (partitions.kubernetes.release_url) when it names one.

    These apply to every host of the role alike (they are extravars). What differs per
    worker, its agent (kubelet or KWOK), is a host variable of the inventory
    (railyard_k8s_agent, which k8s_worker_kubelet follows), so one play serves a mixed group."""

    def make(plan: Plan) -> dict[str, Any]:
        versions = plan.spec.cluster.versions
        k8s = plan.spec.partitions.kubernetes
        mirror = {f"{role}_release_mirror": k8s.release_url} if k8s is not None and k8s.release_url else {}
        lab = plan.is_lab
        d = lab_k8s_dir()
        if role == "k8s_control_plane":
            if lab:
                return {"k8s_control_plane_install_source": "binaries", "k8s_control_plane_version": LAB_K8S_RELEASE,
                        "k8s_control_plane_binaries_dir": str(d / "bin"), "k8s_control_plane_dns_image": LAB_DNS_IMAGE}
            return {"k8s_control_plane_install_source": "release", **mirror}
        if role == "k8s_worker":
            if lab:  # node containers, the binaries and the image built here
                return {"k8s_worker_install_source": "binaries",
                        "k8s_worker_kubelet_version": LAB_K8S_RELEASE, "k8s_worker_binaries_dir": str(d / "bin"),
                        "k8s_worker_kwok_manifests_dir": str(d / "manifests/kwok"),
                        "k8s_worker_node_in_container": True, "k8s_worker_containerd_snapshotter": "native",
                        "k8s_worker_sandbox_image": LAB_IMAGE,
                        "k8s_worker_image_archives": [str(d / "images/busybox.tar"), str(d / "images/coredns.tar")]}
            # KWOK's stages and ClusterRole come from the controller (scripts/build-k8s.sh crds)
            return {"k8s_worker_install_source": "release", "k8s_worker_kwok_manifests_dir": str(d / "manifests/kwok"),
                    **mirror}
        if role == "kueue":
            return {"kueue_version": versions.kueue, "kueue_binaries_dir": str(d / "bin"), "kueue_manifests_dir": str(d)}
        return {"volcano_version": versions.volcano, "volcano_binaries_dir": str(d / "bin"), "volcano_manifests_dir": str(d)}

    return make


def _enroot_vars(plan: Plan) -> dict[str, Any]:
    """The package source, and the hooks not to run. enroot's 10-cgroups hook mounts the
    job's cgroup into the container: with partitions.slurm.cgroups false, Slurm gives a job
    none, so it has nothing to show. In the lab's podman nodes it fails every start from a
    service such as slurmstepd, with cgroups or without (podman mounts name=systemd twice;
    roles/enroot/README.md), so the lab runs without it: a lab difference."""
    slurm = plan.spec.partitions.slurm
    cgroups = slurm.cgroups if slurm is not None else True
    hook = cgroups and not plan.is_lab
    return _package_vars("enroot", "enroot")(plan) | {"enroot_hooks_disabled": [] if hook else ["10-cgroups.sh"]}


def _slurmdbd_vars(plan: Plan) -> dict[str, Any]:
    """Where slurmdbd's database is: MariaDB on the slurmdbd node, installed by the role, or
    a server the site runs (partitions.slurm.accounting.storage_host names another host)."""
    slurm = plan.spec.partitions.slurm
    acct = slurm.accounting if slurm is not None else None
    if acct is None:
        return {}
    return {"slurmdbd_storage_host": "localhost" if acct.storage_host == acct.host else acct.storage_host,
            "slurmdbd_mariadb": acct.storage_host == acct.host,
            "slurmdbd_storage_port": acct.storage_port, "slurmdbd_storage_user": acct.storage_user,
            "slurmdbd_storage_loc": acct.storage_loc}


# Public role variables that come from the plan (the rest comes from the inventory and
# the rendered artifacts). Enroot, Pyxis and the Lustre client are not in Debian: in the
# lab a missing package is skipped with the reason printed, elsewhere it fails the role.
ROLE_VARS: dict[str, Callable[[Plan], dict[str, Any]]] = {
    "enroot": _enroot_vars,
    "pyxis": _package_vars("pyxis", "pyxis"),
    "lustre_client": _package_vars("lustre_client", "lustre"),
    "slurmdbd": _slurmdbd_vars,
    **{role: _k8s_vars(role) for role in ("k8s_control_plane", "k8s_worker", "kueue", "volcano")},
}

# Mitogen's free strategy for every railyard play (Playbook resources and the drift
# check): one Python interpreter per host for the whole play instead of one per task, and
# no host waits for the slowest at each task. Ansible is CPU-bound here (controller forks,
# module start-up in the nodes). Lab, 2 cores, no-change converge of nfs_client,
# k8s_control_plane and kueue: 116.9 s with "free", 39.2 s with "mitogen_free".
STRATEGY = "mitogen_free"

# The pipelining podman connection (module runs ~3x faster than containers.podman's,
# which has none); looked for in these places, first found wins.
PODMAN_CONNECTION_DIRS = ("plugins/connection",)


def runner_settings(root: Path, inventory: str, private_dir: Path) -> tuple[list[str], dict[str, str]]:
    """Inventory sources and environment for one ansible-runner run in *private_dir*.

    The repository's ansible.cfg and roles, this virtualenv's Ansible, no colour, and
    container hosts moved to the ``podman`` connection through a second inventory source
    written into *private_dir*. Under :data:`STRATEGY` (ansible.cfg finds it in
    plugins/strategy) that name selects Mitogen's podman transport; plays without Mitogen
    get the pipelining plugin in plugins/connection (one ``podman exec`` per module).
    """
    bindir = str(Path(sys.executable).parent)
    inventories = [inventory]
    env = {
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(root / "roles"),
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",  # this venv's ansible
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }
    plugins = connection_plugin_dir(root)
    overrides = podman_overrides(json.loads(Path(inventory).read_text())) if plugins else {}
    if overrides:
        extra = private_dir / "podman-connection.json"
        extra.write_text(json.dumps(overrides))
        inventories.append(str(extra))
        env.update(ANSIBLE_CONNECTION_PLUGINS=str(plugins), ANSIBLE_PIPELINING="true")
    return inventories, env


def connection_plugin_dir(root: Path) -> Path | None:
    return next((root / d for d in PODMAN_CONNECTION_DIRS if (root / d / "podman.py").is_file()), None)


def podman_overrides(inventory: dict[str, Any]) -> dict[str, Any]:
    """A second inventory source moving container hosts to the pipelining connection.

    Host variables, not extravars: an extravar would also apply to ``delegate_to: localhost``.
    """
    hosts = (inventory.get("all") or {}).get("hosts") or {}
    moved = {h: {"ansible_connection": "podman"} for h, hv in hosts.items()
             if (hv or {}).get("ansible_connection") == "containers.podman.podman"}
    return {"all": {"hosts": moved}} if moved else {}


@dataclass(frozen=True, slots=True)
class PlannedPlaybook:
    role: str
    group: str
    hosts: tuple[str, ...]
    after: tuple[str, ...]  # planned roles only (skipped ones resolved through)
    digest: str
    component: Component
    secrets: tuple[tuple[str, str], ...]
    vars: dict[str, Any]


def group_hosts(plan: Plan, pattern: str) -> tuple[str, ...]:
    """Hosts of an inventory pattern: ``all``, a group, a parent group, or ``a:b`` (union)."""
    inv = plan.inventory
    out: list[str] = []
    for part in pattern.split(":"):
        if part == "all":
            names = [n.name for n in plan.nodes]
        elif part in inv.children:
            names = [h for child in inv.children[part] for h in inv.groups.get(child, ())]
        else:
            names = list(inv.groups.get(part, ()))
        out += names
    return tuple(dict.fromkeys(out))  # a host in two of the groups (slurmdbd on a controller) once


# Parts of a role that never reach a host: editing its tests must not re-run it on the cluster.
NOT_SHIPPED = frozenset({"molecule", "tests", "__pycache__", ".pytest_cache", ".cache"})


def tree_digest(path: Path) -> str:
    """Hash of a role's files (names and bytes) in a stable order, tests left out."""
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        rel = f.relative_to(path)
        if f.is_file() and not NOT_SHIPPED & set(rel.parts) and f.suffix not in (".pyc", ".md"):
            h.update(str(rel).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def role_digest(root: Path, role: str) -> str:
    """The role's files and those of every role it uses (``meta/railyard.yml``'s ``uses``,
    e.g. the ``_shared`` task files): editing a shared task file re-runs each role that
    imports it. A role that uses none keeps the digest of its own tree."""
    own = tree_digest(root / "roles" / role)
    used = roles_used(root, role)
    if not used:
        return own
    parts = [own, *([u, tree_digest(root / "roles" / u)] for u in used)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def step_digest(step: Step, role_digest: str, config_digest: str, artifacts: dict[str, str],
                hostvars: dict[str, Any]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([step.role, step.group, role_digest, config_digest]).encode())
    for rel in sorted(artifacts):
        if any(fnmatch.fnmatch(rel, g) for g in step.artifacts):
            h.update(rel.encode() + b"\0" + artifacts[rel].encode() + b"\0")
    h.update(json.dumps(hostvars, sort_keys=True).encode())
    return h.hexdigest()


def plan_playbooks(
    plan: Plan, root: Path, artifacts: dict[str, str], steps: tuple[Step, ...] = STEPS
) -> tuple[list[PlannedPlaybook], list[str]]:
    """The playbooks to declare, in dependency order, and notes on what was skipped and why."""
    roles_dir = root / "roles"
    config = root / "ansible.cfg"
    config_digest = hashlib.sha256(config.read_bytes()).hexdigest() if config.exists() else ""
    by_role = {s.role: s for s in steps}
    planned: dict[str, PlannedPlaybook] = {}
    notes: list[str] = []
    resolved_after: dict[str, tuple[str, ...]] = {}

    def effective(role: str) -> tuple[str, ...]:
        """``role`` itself when planned, else what it would have waited for."""
        if role in planned:
            return (role,)
        return resolved_after.get(role, ())

    for step in steps:
        deps: list[str] = []
        for dep in step.after:
            if dep not in by_role:
                raise ValueError(f"step {step.role} waits for unknown role {dep}")
            deps += [d for d in effective(dep) if d not in deps]
        resolved_after[step.role] = tuple(deps)
        hosts = group_hosts(plan, step.group)
        if not hosts:
            continue  # nothing in the spec needs this role (e.g. no Lustre): no note
        role_path = roles_dir / step.role
        if not (role_path / "tasks" / "main.yml").is_file():
            notes.append(f"role {step.role} skipped: {role_path.relative_to(root)}/tasks/main.yml does not exist yet")
            continue
        # One role at a time on a host, as in one playbook: two plays on one host race
        # (apt and dpkg locks, a cache one play updates while the other reads it).
        # Disjoint host sets still run in parallel (e.g. nfs_server next to munge).
        deps += [p.role for p in planned.values() if p.role not in deps and set(p.hosts) & set(hosts)]
        hv = {h: plan.inventory.hostvars[h] for h in hosts}
        digest = step_digest(step, role_digest(root, step.role), config_digest, artifacts, hv)
        role_vars = ROLE_VARS.get(step.role, lambda _p: {})(plan)
        planned[step.role] = PlannedPlaybook(
            step.role, step.group, hosts, tuple(deps), digest, step.component, step.secrets, role_vars
        )
    return list(planned.values()), notes


def playbook_yaml(group: str, roles: list[str]) -> str:
    """The one play a Playbook resource runs.

    Like the roles' molecule scenarios: no implicit fact gathering (each role gathers
    what it needs); Mitogen's free strategy (:data:`STRATEGY`).
    """
    play = {"name": f"railyard: {', '.join(roles)}", "hosts": group, "gather_facts": False,
            "strategy": STRATEGY, "roles": roles}
    return json.dumps([play], indent=1) + "\n"  # JSON is YAML


def changed_hosts(olds: dict[str, Any], news: dict[str, Any]) -> list[str]:
    """Hosts that are new or are a new instance (recreated, reinstalled) since the last run."""
    old = olds.get("instances") or {}
    new = news.get("instances") or {}
    return sorted(h for h in news.get("hosts", []) if h not in old or old.get(h) != new.get(h))


# ------------------------------------------------------------------------ progress


class Progress:
    """ansible-runner events -> readable lines, as (kind, text): kind 'status' is transient
    (the resource's progress row), 'info' is kept in the summary.

    Kept: every failure and unreachable host with Ansible's message as it happens; at the
    end, one line per task that changed something, naming its hosts as a hostlist (the
    free strategy interleaves hosts and tasks), and a recap. Only task
    names, hosts and module messages are shown, never module arguments; tasks with
    ``no_log`` are censored by Ansible before they get here.
    """

    def __init__(self) -> None:
        self.changed: dict[str, list[str]] = {}  # task -> hosts, in the order seen
        self.failures: list[str] = []
        self.stats: dict[str, dict[str, int]] = {}

    def feed(self, event: dict[str, Any]) -> list[tuple[str, str]]:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host, where = data.get("host", ""), _where(data)
        res = data.get("res") or {}
        if kind == "playbook_on_task_start":
            return [("status", f"TASK [{where}]")]
        if kind == "runner_on_ok":
            if res.get("changed"):
                self.changed.setdefault(where, []).append(host)
                return [("status", f"changed: [{host}] {where}")]
            return [("status", f"ok: [{host}] {where}")]
        if kind == "runner_on_skipped":
            return [("status", f"skipping: [{host}] {where}")]
        if kind == "runner_on_failed" and data.get("ignore_errors"):
            return [("status", f"failed (ignored): [{host}] {where}")]
        if kind in ("runner_on_failed", "runner_on_unreachable"):
            word = "FAILED" if kind == "runner_on_failed" else "UNREACHABLE"
            line = f"{word}: [{host}] {where}: {_msg(res)}"
            self.failures.append(line)
            return [("info", line)]
        if kind == "playbook_on_stats":
            self.stats = recap(data)
            return [*self._flush(), ("info", recap_line(self.stats))]
        return []

    def _flush(self) -> list[tuple[str, str]]:
        out = [("info", f"changed: {task} on {fold(hosts)}") for task, hosts in self.changed.items()]
        self.changed = {}
        return out


def _where(data: dict[str, Any]) -> str:
    task, role = str(data.get("task", "")), str(data.get("role", ""))
    return f"{role} : {task}" if role and not task.startswith(role) else task


def _msg(res: dict[str, Any]) -> str:
    """A failed result in one line. A command's own "non-zero return code" says nothing:
    then its exit status and the last line of its stderr, where commands put the reason."""
    msg = str(res.get("msg") or "").strip()
    err = [line for line in str(res.get("stderr") or "").splitlines() if line.strip()]
    if err and msg in ("", "non-zero return code"):
        return f"exit {res.get('rc')}: {err[-1].strip()}"[:300]
    text = msg or str(res.get("reason") or "").strip()
    return text.splitlines()[0][:300] if text else ""


def recap(stats: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per-host counters from a ``playbook_on_stats`` event."""
    keys = ("ok", "changed", "failures", "dark", "skipped")
    hosts = sorted({h for k in keys for h in (stats.get(k) or {})})
    return {h: {k: int((stats.get(k) or {}).get(h, 0)) for k in keys} for h in hosts}


def recap_line(stats: dict[str, dict[str, int]]) -> str:
    """One line for a whole play: totals, and which hosts changed or failed (as hostlists)."""
    total = {k: sum(s[k] for s in stats.values()) for k in ("ok", "changed", "failures", "dark")}
    line = (f"recap: {len(stats)} hosts, ok={total['ok']} changed={total['changed']} "
            f"failed={total['failures']} unreachable={total['dark']}")
    for key, word in (("changed", "changed on"), ("failures", "FAILED on"), ("dark", "UNREACHABLE")):
        hosts = [h for h, s in stats.items() if s[key]]
        if hosts:
            line += f"; {word} {fold(hosts)}"
    return line
