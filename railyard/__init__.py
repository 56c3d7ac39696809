"""railyard: one spec of nodes and fabric -> a Slurm partition, a Kubernetes partition and shared storage."""

from railyard.errors import Problem, SpecError
from railyard.load import load, load_plan, loads, loads_plan
from railyard.spec import Cluster

__all__ = ["Cluster", "Problem", "SpecError", "load", "load_plan", "loads", "loads_plan"]
