"""railyard: one spec of nodes and fabric -> a Slurm partition, a Kubernetes partition and shared storage."""

from railyard.errors import Problem, SpecError
from railyard.spec import Cluster, load, load_plan, loads, loads_plan

__all__ = ["Cluster", "Problem", "SpecError", "load", "load_plan", "loads", "loads_plan"]
