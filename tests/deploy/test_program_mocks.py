"""The resource graph of the program, with Pulumi's mocks: types, parents, dependencies, secrets.

No engine, no containers: the mock monitor records every RegisterResource request.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc

from railyard.apply.playbooks import STEPS
from railyard.load import load_plan
from tests.conftest import LAB, ROOT

SECRET_SIG = rpc._special_secret_sig
NODE = "pulumi-python:dynamic/railyard/metal:Node"
NETWORK = "pulumi-python:dynamic/railyard/lab:Network"
KEY = "pulumi-python:dynamic/railyard/secrets:Key"
PLAYBOOK = "pulumi-python:dynamic/railyard/ansible:Playbook"


@dataclass
class Registered:
    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    secret_outputs: list[str]
    inputs: dict[str, Any]  # the wire form: secrets still wrapped


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        outs = dict(args.inputs)
        if args.typ == NODE:
            outs.update(instance=f"instance-of-{args.name}", power="on", reachable=True)
        if args.typ == KEY:
            outs["value"] = "bW9jaw=="
        return f"{args.name}-id", outs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.registered: list[Registered] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        from google.protobuf import json_format

        self.registered.append(Registered(
            type=request.type,
            name=request.name,
            urn=response.urn,
            parent=request.parent,
            dependencies=list(request.dependencies),
            secret_outputs=list(request.additionalSecretOutputs),
            inputs=json_format.MessageToDict(request.object),
        ))
        return response


def _fake_root(tmp_path: Path) -> Path:
    """A repository root where every role of the table exists, with its real defaults
    (the program reads role facts there, e.g. the API server's port)."""
    root = tmp_path / "repo"
    for step in STEPS:
        tasks = root / "roles" / step.role / "tasks"
        tasks.mkdir(parents=True)
        (tasks / "main.yml").write_text(f"- name: {step.role}\n  ansible.builtin.meta: noop\n")
        real = ROOT / "roles" / step.role / "defaults"
        if real.is_dir():
            shutil.copytree(real, root / "roles" / step.role / "defaults")
    shutil.copy(ROOT / "ansible.cfg", root / "ansible.cfg")
    return root


def run_program(spec: Path, root: Path, config: dict[str, str] | None = None,
                secret_keys: list[str] | None = None,
                remediate: dict[str, tuple[str, ...]] | None = None) -> list[Registered]:
    from railyard.deploy.program import program

    monitor = RecordingMonitor(Mocks())
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack="lab", preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(config or {}, secret_keys or [])
    plan = load_plan(spec)

    @pulumi.runtime.test
    def declare() -> pulumi.Output[Any]:
        ctx = program(plan, root, remediate=remediate)
        return pulumi.Output.all(*(r.urn for r in [*ctx.nodes.values(), *ctx.playbooks.values()]))

    declare()
    return monitor.registered


@pytest.fixture(scope="module")
def lab_graph(tmp_path_factory: pytest.TempPathFactory) -> list[Registered]:
    return run_program(LAB, _fake_root(tmp_path_factory.mktemp("mocks")))


def _by(graph: list[Registered], type_: str) -> dict[str, Registered]:
    return {r.name: r for r in graph if r.type == type_}


def _is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == SECRET_SIG


def _plain(value: Any) -> Any:
    """The wire form with every secret subtree blanked: what is not protected."""
    if _is_secret(value):
        return "[secret]"
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def test_components_and_their_children(lab_graph: list[Registered]) -> None:
    comps = {r.type: r for r in lab_graph if r.type.startswith("railyard:cluster:")}
    assert set(comps) == {
        "railyard:cluster:Fabric", "railyard:cluster:SharedStorage",
        "railyard:cluster:SlurmPartition", "railyard:cluster:KubernetesPartition",
    }
    fabric = comps["railyard:cluster:Fabric"].urn
    nodes = _by(lab_graph, NODE)
    assert sorted(nodes) == sorted(n.name for n in load_plan(LAB).nodes)
    assert all(n.parent == fabric for n in nodes.values())
    nets = _by(lab_graph, NETWORK)
    assert sorted(nets) == ["mgmt", "su1-rail0", "su1-rail1", "su2-rail0", "su2-rail1"]
    assert all(n.parent == fabric for n in nets.values())
    key = _by(lab_graph, KEY)["munge-key"]
    assert key.parent == comps["railyard:cluster:SlurmPartition"].urn
    parent_of = {name: r.parent for name, r in _by(lab_graph, PLAYBOOK).items()}
    assert parent_of["common"] == fabric
    assert parent_of["nfs_client"] == comps["railyard:cluster:SharedStorage"].urn
    assert parent_of["slurm_compute"] == comps["railyard:cluster:SlurmPartition"].urn
    k8s = comps["railyard:cluster:KubernetesPartition"].urn
    assert all(parent_of[r] == k8s for r in ("k8s_control_plane", "k8s_worker", "kueue", "volcano"))


def test_every_role_of_the_table_is_a_playbook_on_its_group(lab_graph: list[Registered]) -> None:
    pbs = _by(lab_graph, PLAYBOOK)
    assert sorted(pbs) == sorted(s.role for s in STEPS)
    hosts = {name: pb.inputs["hosts"] for name, pb in pbs.items()}
    assert hosts["slurm_controller"] == ["ctl1"]
    assert hosts["slurm_compute"] == ["gpu001", "gpu002", "gpu003", "gpu004"]
    assert hosts["nfs_server"] == ["nfs1"]
    assert len(hosts["common"]) == 10
    assert sorted(hosts["munge"]) == ["ctl1", "gpu001", "gpu002", "gpu003", "gpu004", "login1"]
    assert hosts["slurmdbd"] == ["ctl1"]  # partitions.slurm.accounting.host
    assert hosts["k8s_control_plane"] == hosts["kueue"] == hosts["volcano"] == ["kcp1"]
    assert hosts["k8s_worker"] == ["kw1", "kw2"]


def test_dependencies_follow_the_order(lab_graph: list[Registered]) -> None:
    urn = {r.name: r.urn for r in lab_graph if r.type in (PLAYBOOK, NODE, NETWORK)}
    pbs = _by(lab_graph, PLAYBOOK)

    def waits(role: str, *others: str) -> None:
        for other in others:
            assert urn[other] in pbs[role].dependencies, f"{role} does not wait for {other}"

    waits("munge", "common")
    waits("nfs_server", "common")
    waits("nfs_client", "nfs_server")
    waits("slurm_controller", "munge")
    waits("slurm_compute", "slurm_controller", "nfs_client", "gpu001", "gpu004")
    waits("slurm_login", "slurm_controller", "nfs_client", "login1")
    waits("common", *(n.name for n in load_plan(LAB).nodes))
    waits("k8s_control_plane", "common", "kcp1")
    waits("k8s_worker", "k8s_control_plane", "kw1", "kw2")
    waits("kueue", "k8s_control_plane")
    waits("volcano", "k8s_control_plane")
    nodes = _by(lab_graph, NODE)
    assert urn["mgmt"] in nodes["ctl1"].dependencies
    assert {urn["su1-rail0"], urn["su1-rail1"]} <= set(nodes["gpu001"].dependencies)
    assert urn["su2-rail0"] not in nodes["gpu001"].dependencies


def test_secrets_are_secret(lab_graph: list[Registered]) -> None:
    key = _by(lab_graph, KEY)["munge-key"]
    assert key.secret_outputs == ["value"]
    pbs = _by(lab_graph, PLAYBOOK)
    assert _is_secret(pbs["munge"].inputs["secret_vars"])
    assert "bW9jaw==" in json.dumps(pbs["munge"].inputs)  # the key reaches the munge role ...
    assert "bW9jaw==" not in json.dumps(_plain(pbs["munge"].inputs))  # ... only inside a secret
    for pb in pbs.values():
        assert "bW9jaw==" not in json.dumps(_plain(pb.inputs))


def test_the_database_password_is_generated_once_as_a_secret_for_slurmdbd_only(lab_graph: list[Registered]) -> None:
    key = _by(lab_graph, KEY)["slurmdbd-password"]
    assert key.secret_outputs == ["value"] and key.inputs["encoding"] == "hex" and key.inputs["length"] == 32
    pbs = _by(lab_graph, PLAYBOOK)
    assert _is_secret(pbs["slurmdbd"].inputs["secret_vars"])
    assert "slurmdbd_storage_password" in json.dumps(pbs["slurmdbd"].inputs)
    assert not any("slurmdbd_storage_password" in json.dumps(pb.inputs) for name, pb in pbs.items() if name != "slurmdbd")


def test_lab_nodes_carry_the_plan(lab_graph: list[Registered]) -> None:
    nodes = _by(lab_graph, NODE)
    gpu = nodes["gpu001"].inputs
    assert gpu["driver"] == "podman" and gpu["container"] == "railyard-lab-gpu001"
    assert gpu["attachments"][0] == {"network": "railyard-lab-mgmt", "interface": "eth0", "ip": "10.77.0.12",
                                     "aliases": ["gpu001", "gpu001.lab.railyard.test"]}
    assert [a["interface"] for a in gpu["attachments"][1:]] == ["rail0", "rail1"]
    # slurmd's cgroups need a privileged container; slurm_compute makes the stand-in GPUs
    # there, not /dev/null binds, which ConstrainDevices would hide from every job
    assert (gpu["privileged"], gpu["devices"]) == (True, [])
    kw = nodes["kw1"].inputs
    assert (kw["privileged"], kw["devices"]) == (True, ["/dev/nvidia0", "/dev/nvidia1"])
    assert nodes["login1"].inputs["privileged"] is False
    nfs = nodes["nfs1"].inputs
    assert nfs["privileged"] is True
    assert nfs["volumes"] == [
        {"name": "railyard-lab-nfs1-export-shared", "path": "/export/shared", "owner": ""},
        {"name": "railyard-lab-nfs1-export-home", "path": "/export/home", "owner": ""},
    ]
    # The stand-in for the NFS mounts this kernel cannot make: the server's export volumes
    # at the spec's mount points, on every client (the server's, removed only with it).
    for client in ("gpu001", "login1", "ctl1"):
        assert nodes[client].inputs["volumes"] == [
            {"name": "railyard-lab-nfs1-export-shared", "path": "/shared", "owner": "nfs1"},
            {"name": "railyard-lab-nfs1-export-home", "path": "/home", "owner": "nfs1"},
        ]


def test_missing_roles_are_skipped_and_order_holds(tmp_path: Path) -> None:
    root = _fake_root(tmp_path)
    shutil.rmtree(root / "roles" / "munge")
    graph = run_program(LAB, root)
    pbs = _by(graph, PLAYBOOK)
    assert "munge" not in pbs
    common = next(r.urn for r in graph if r.type == PLAYBOOK and r.name == "common")
    assert common in pbs["slurm_controller"].dependencies  # waits for what munge waited for


def test_redfish_passwords_are_secret(tmp_path: Path) -> None:
    spec = ROOT / "inventories" / "dgx-h100" / "cluster.yaml"
    graph = run_program(spec, _fake_root(tmp_path), {"railyard:bmcPassword": "hunter2", "railyard:slurmdbdPassword": "x"},
                        ["railyard:bmcPassword", "railyard:slurmdbdPassword"])
    redfish = [r for r in _by(graph, NODE).values() if r.inputs.get("driver") == "redfish"]
    assert redfish
    for node in redfish:
        assert node.secret_outputs == ["bmc"]
        assert "hunter2" in json.dumps(node.inputs)  # the driver gets it ...
        assert "hunter2" not in json.dumps(_plain(node.inputs))  # ... as a secret only
    assert not _by(graph, NETWORK)  # no lab networks for real machines


def test_drifted_hosts_reach_their_playbooks_only(tmp_path: Path) -> None:
    """A drift report's role -> hosts becomes each Playbook's remediate input (its own hosts)."""
    graph = run_program(LAB, _fake_root(tmp_path), remediate={"slurm_compute": ("gpu002", "ctl1"), "munge": ("ctl1",)})
    books = _by(graph, PLAYBOOK)
    assert books["slurm_compute"].inputs["remediate"] == ["gpu002"]  # ctl1 is not a compute node
    assert books["munge"].inputs["remediate"] == ["ctl1"]
    assert books["common"].inputs["remediate"] == []
