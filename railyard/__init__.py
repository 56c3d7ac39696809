"""railyard: one spec of nodes and fabric -> a Slurm partition, a Kubernetes partition and shared storage."""

import os

# Before anything imports gRPC (pulumi does). railyard forks ansible-playbook (ansible-runner,
# through pexpect) from processes that run an inline Pulumi program, a gRPC server. With gRPC's
# fork handlers on, the child can re-create gRPC's poller before exec and die on the fds pexpect
# closes ("Epoll1Poller ... epoll_wait error: Bad file descriptor"): a playbook that never ran.
# The engine's own processes get the same setting (railyard.apply.engine.engine_env).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from railyard.errors import Problem, SpecError
from railyard.load import load, load_plan, loads, loads_plan
from railyard.spec import Cluster

__all__ = ["Cluster", "Problem", "SpecError", "load", "load_plan", "loads", "loads_plan"]
