"""The compiler: a pure, deterministic function from a validated spec to a :class:`Plan`."""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Iterator
from dataclasses import dataclass

from railyard.compiler.fabric import Fabric
from railyard.compiler.inventory import Inventory, compile_inventory
from railyard.compiler.kubernetes import KubernetesPlan, compile_kubernetes
from railyard.compiler.nodes import Node, in_lab
from railyard.compiler.slurm import SlurmPlan, compile_slurm
from railyard.compiler.storage import StoragePlan, compile_storage
from railyard.compiler.validate import check
from railyard.errors import Problem, SpecError
from railyard.spec import Cluster


@dataclass(frozen=True)
class Plan:
    spec: Cluster
    nodes: tuple[Node, ...]
    fabric: Fabric | None
    slurm: SlurmPlan | None
    kubernetes: KubernetesPlan | None
    storage: StoragePlan
    # Allowed but worth saying (railyard.compiler.validate.notes): printed by `railyard validate`.
    notes: tuple[Problem, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.cluster.name

    @functools.cached_property
    def inventory(self) -> Inventory:
        """Built when first read: `railyard validate` checks a spec without it."""
        return compile_inventory(self.spec, list(self.nodes), self.fabric, self.slurm, self.kubernetes, self.storage)

    @property
    def is_lab(self) -> bool:
        """Every node is a podman container on this machine (the lab), none is real."""
        return in_lab(self.nodes)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)


@contextlib.contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """Python's cycle collector off for a while, as it was after.

    Reading and compiling a large spec allocates millions of small objects (a string per
    name, a dict per YAML mapping, a model per group) that live as long as the plan. The collector runs
    every few hundred allocations and now and then walks every object alive, so on a
    70,000-node fabric it took a third of the compile time and freed nothing. Garbage
    made meanwhile is freed as usual; a cycle waits for the next collection after this."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile(cluster: Cluster, source: str = "<spec>") -> Plan:
    """Compile a spec. Raises :class:`SpecError` if the spec breaks a cross-field rule."""
    with cycle_collector_paused():
        nodes, fabric, problems = check(cluster)
        if problems:
            raise SpecError(source, problems)
        slurm = compile_slurm(cluster, nodes, fabric)
        k8s = compile_kubernetes(cluster, nodes, fabric)
        storage = compile_storage(cluster, nodes)
        return Plan(cluster, tuple(nodes), fabric, slurm, k8s, storage)
