"""The compiler's promises: topology right by construction, one model for every scheduler."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from railyard.compiler.fabric import Fabric, Links
from railyard.compiler.storage import systemd_escape_path
from railyard.hostlist import expand
from railyard.load import load_plan, loads_plan
from railyard.render import SLURM_CONFIG_FILES, plan_summary, render, slurm_config_files
from tests.conftest import EXAMPLES, ROOT

PLANS = {p.parent.name: load_plan(p) for p in EXAMPLES}


def slurm_leaves(plan) -> dict[str, set[str]]:
    return {sw.name: set(expand(sw.nodes)) for sw in plan.slurm.switches if sw.nodes}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_slurm_compute_node_is_under_exactly_one_leaf(name):
    plan = PLANS[name]
    if plan.slurm.topology_format == "block":
        pytest.skip("block topology has no leaves")  # no example uses bare block; kept for new specs
    leaves = slurm_leaves(plan)
    for node in plan.slurm.compute:
        owners = [sw for sw, nodes in leaves.items() if node in nodes]
        assert len(owners) == 1, f"{node} is under {owners}"


@pytest.mark.parametrize("name", sorted(PLANS))
def test_slurm_and_kubernetes_name_the_same_groups(name):
    """For every SU: Slurm's switch ∪ the nodes labelled with it in Kubernetes = the SU."""
    plan = PLANS[name]
    leaves = slurm_leaves(plan)
    key = f"{plan.spec.partitions.kubernetes.label_prefix}/su"
    labelled: dict[str, set[str]] = {}
    for node, labels in plan.kubernetes.labels.items():
        labelled.setdefault(labels[key], set()).add(node)
    for su in plan.fabric.groups["su"]:
        assert leaves.get(su.name, set()) | labelled.get(su.name, set()) == set(su.nodes)
        assert not leaves.get(su.name, set()) & labelled.get(su.name, set())


@pytest.mark.parametrize("name", sorted(PLANS))
def test_volcano_hypernodes_and_kueue_levels_follow_the_fabric(name):
    plan = PLANS[name]
    k = plan.kubernetes
    topology = next(o for o in k.kueue if o["kind"] == "Topology")
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == list(k.label_keys)
    assert k.label_keys[-1] == "kubernetes.io/hostname"
    flavors = [o for o in k.kueue if o["kind"] == "ResourceFlavor"]
    assert flavors and all(f["spec"]["topologyName"] == "fabric" for f in flavors)

    hyper = {o["metadata"]["name"]: o["spec"] for o in k.volcano if o["kind"] == "HyperNode"}
    tier1 = {n: s for n, s in hyper.items() if s["tier"] == 1}
    finest = plan.fabric.levels[-1]
    key = f"{plan.spec.partitions.kubernetes.label_prefix}/{finest}"
    for name_, spec in tier1.items():
        members = {m["selector"]["exactMatch"]["name"] for m in spec["members"]}
        assert members == {n for n, lab in k.labels.items() if lab[key] == name_}
    for spec in hyper.values():  # every HyperNode child exists one tier down
        for m in spec["members"]:
            if m["type"] == "HyperNode":
                assert hyper[m["selector"]["exactMatch"]["name"]]["tier"] == spec["tier"] - 1


def test_lab_topology_is_two_sus_under_one_spine(lab_plan):
    switches = [(s.name, s.nodes, s.switches) for s in lab_plan.slurm.switches]
    assert switches == [("su1", "gpu[001-002]", None), ("su2", "gpu[003-004]", None), ("spine", None, "su[1-2]")]
    assert lab_plan.kubernetes.labels["kw2"]["topology.railyard.dev/su"] == "su2"


def test_node_capacity_is_the_specs_hardware_in_the_apiservers_form(lab_plan):
    """What each worker's Node reports (KWOK) or railyard sets on it (a kubelet's GPUs):
    the lab's kw nodes are 1 socket x 2 cores x 1 thread, 1000 MB and 2 stand-in GPUs."""
    want = {"cpu": "2", "memory": "1000Mi", "pods": "110", "nvidia.com/gpu": "2"}
    assert lab_plan.kubernetes.capacity == {"kw1": want, "kw2": want}
    assert all(lab_plan.inventory.hostvars[n]["railyard_node_capacity"] == want for n in ("kw1", "kw2"))
    assert "railyard_node_capacity" not in lab_plan.inventory.hostvars["gpu001"]  # a Slurm node


def test_dgx_rails_collapse_into_sus():
    plan = PLANS["dgx-h100"]
    assert len(plan.fabric.switches) == 4 * 8 + 16
    assert [s.name for s in plan.slurm.switches] == ["su1", "su2", "su3", "spine"]
    assert slurm_leaves(plan)["su2"] == set(expand("dgx[033-064]"))
    cqs = {o["metadata"]["name"]: o for o in plan.kubernetes.kueue if o["kind"] == "ClusterQueue"}
    gpu = next(r for r in cqs["training"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == "nvidia.com/gpu")
    assert gpu["nominalQuota"] == "192"
    # Quota not given for a resource -> all the partition has: 32 workers x 224 CPUs.
    cpu = cqs["training"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert cpu == {"name": "cpu", "nominalQuota": str(32 * 224)}


def test_gb200_gets_blocks_and_tree_in_topology_yaml():
    plan = PLANS["gb200-nvl72"]
    art = render(plan)
    assert "slurm/topology.conf" not in art
    topo = yaml.safe_load(art["slurm/topology.yaml"])
    assert [t["topology"] for t in topo] == ["fabric", "nvlink", "flat"]
    assert next(iter(topo[0])) == "topology"  # must be the first key
    block = topo[1]["block"]
    assert block["block_sizes"] == [18, 36, 72]
    assert len(block["blocks"]) == 12 and all(len(expand(b["nodes"])) == 18 for b in block["blocks"])
    assert topo[1]["cluster_default"] is True
    assert "PartitionName=gb200-su Nodes=gb[001-216] Default=NO MaxTime=2-00:00:00 Topology=fabric" in art["slurm/slurm.conf"]
    assert "TopologyPlugin" not in art["slurm/slurm.conf"]  # topology.yaml replaces it
    tiers = {o["metadata"]["name"]: o["spec"]["tier"] for o in plan.kubernetes.volcano if o["kind"] == "HyperNode"}
    assert tiers["nvl13"] == 1 and tiers["su4"] == 2 and tiers["spine"] == 3


def test_block_topology_conf_for_24_11(lab):
    lab["cluster"]["versions"]["slurm"] = "24.11"
    lab["fabric"]["rail_optimized"]["nvlink"] = {"domain_nodes": 3}
    art = render(loads_plan(yaml.safe_dump(lab)))
    conf = art["slurm/topology.conf"]
    assert "BlockName=nvl1 Nodes=gpu[001-002]" in conf  # kw1 is not a Slurm node
    # The base block is a domain's Slurm nodes (2, not the domain's 3: 24.11 stops on a
    # block smaller than the base); one block per SU, so no larger size stays in an SU.
    assert "BlockSizes=2\n" in conf
    assert "TopologyPlugin=topology/block" in art["slurm/slurm.conf"]


def test_three_tier_fabric_has_pods_under_core():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compile_bench import spec_text

    plan = loads_plan(spec_text(512))
    names = [s.name for s in plan.slurm.switches]
    assert names[:2] == ["su1", "su2"] and names[-1] == "core"
    pods = {s.name: expand(s.switches) for s in plan.slurm.switches if s.name.startswith("pod")}
    assert pods["pod1"] == ["su1", "su2", "su3", "su4"]
    assert plan.fabric.levels == ("core", "spine", "su")


def test_rail_optimized_links_are_one_bundle_per_su_and_per_spine_group(lab_plan):
    # inventories/lab: SUs gpu[001-002],kw1 and gpu[003-004],kw2; 2 rails; 2 spines, 1 link per leaf
    su1, su2, up = lab_plan.fabric.links
    assert (su1.lower, su1.upper, su1.count) == (("gpu001", "gpu002", "kw1"), ("su1-rail0", "su1-rail1"), 1)
    assert (su2.lower, su2.upper) == (("gpu003", "gpu004", "kw2"), ("su2-rail0", "su2-rail1"))
    assert (up.lower, up.upper) == (("su1-rail0", "su1-rail1", "su2-rail0", "su2-rail1"), ("spine1", "spine2"))
    # 6 nodes x 2 rails, and 4 leaves x 2 spines
    assert [links.total for links in lab_plan.fabric.links] == [6, 6, 8]
    assert plan_summary(lab_plan)["fabric"]["links"] == 20


def test_fabric_cables_are_every_pair_of_ends_of_each_bundle():
    fabric = Fabric("400G", (), (Links(("n1", "n2"), ("leaf1", "leaf2")), Links(("leaf1", "leaf2"), ("spine1",), 3)), ())
    assert sorted(fabric.cables()) == [
        ("leaf1", "spine1", 3), ("leaf2", "spine1", 3),
        ("n1", "leaf1", 1), ("n1", "leaf2", 1), ("n2", "leaf1", 1), ("n2", "leaf2", 1),
    ]
    assert [links.total for links in fabric.links] == [4, 6]


def test_three_tier_links_have_a_bundle_per_pod_and_its_spines_to_the_core():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compile_bench import spec_text

    # 512 nodes: 16 SUs of 32 on 8 rails, 4 SUs per pod (4 pods of 32 spines), 16 // 4 * 32 // 64 * 2 = 4 cores
    plan = loads_plan(spec_text(512))
    links = plan.fabric.links
    assert len(links) == 16 + 4 * 2
    pod1_leaves, pod1_core = links[16], links[17]
    assert len(pod1_leaves.lower) == 4 * 8 and pod1_leaves.upper[0] == "pod1-spine1" and len(pod1_leaves.upper) == 32
    assert pod1_core.upper == ("core1", "core2", "core3", "core4") and len(pod1_core.lower) == 32
    assert sum(1 for _ in plan.fabric.cables()) == 512 * 8 + 4 * 32 * 32 + 4 * 32 * 4


def test_explicit_fabric_leaves_sharing_nodes_are_one_switch(lab):
    nodes = {"a": ["gpu001", "gpu002", "kw1"], "b": ["gpu003", "gpu004", "kw2"]}
    switches = [{"name": f"{g}-{r}", "tier": "leaf", "radix": 8, "group": f"rack{g}"} for g in "ab" for r in (0, 1)]
    switches.append({"name": "spine1", "tier": "spine", "radix": 8})
    links = [{"a": n, "b": f"{g}-{r}"} for g in "ab" for r in (0, 1) for n in nodes[g]]
    links += [{"a": f"{g}-{r}", "b": "spine1"} for g in "ab" for r in (0, 1)]
    lab["fabric"] = {"link_speed": "400G", "explicit": {"switches": switches, "links": links}}
    plan = loads_plan(yaml.safe_dump(lab))
    assert [(s.name, s.nodes, s.switches) for s in plan.slurm.switches] == [
        ("racka", "gpu[001-002]", None), ("rackb", "gpu[003-004]", None), ("spine1", None, "racka,rackb")]


@pytest.mark.parametrize(
    ("version", "cgroups", "present", "absent"),
    [
        ("22.05", False, ["TaskPlugin=task/none", "ProctrackType=proctrack/linuxproc"],
         ["TaskPlugin=task/cgroup", "SlurmctldParameters="]),
        ("22.05", True, ["TaskPlugin=task/cgroup,task/affinity", "ProctrackType=proctrack/cgroup"],
         ["task/none", "SlurmctldParameters="]),
        ("23.11", False, ["ProctrackType=proctrack/linuxproc"], ["TaskPlugin=", "SlurmctldParameters="]),
        ("23.11", True, ["TaskPlugin=task/cgroup,task/affinity", "ProctrackType=proctrack/cgroup"],
         ["task/none", "SlurmctldParameters="]),
        ("24.11", False, ["ProctrackType=proctrack/linuxproc", "SlurmctldParameters=enable_configless"], ["TaskPlugin="]),
        ("24.11", True, ["TaskPlugin=task/cgroup,task/affinity", "ProctrackType=proctrack/cgroup",
                         "SlurmctldParameters=enable_configless"], ["task/none"]),
        ("25.05", False, ["ProctrackType=proctrack/linuxproc", "SlurmctldParameters=enable_configless"], ["TaskPlugin="]),
        ("25.05", True, ["TaskPlugin=task/cgroup,task/affinity", "ProctrackType=proctrack/cgroup",
                         "SlurmctldParameters=enable_configless"], ["task/none"]),
    ],
)
def test_slurm_conf_follows_the_target_version(lab, version, cgroups, present, absent):
    lab["cluster"]["versions"]["slurm"] = version
    lab["partitions"]["slurm"]["cgroups"] = cgroups
    if not cgroups:
        del lab["partitions"]["slurm"]["pam_slurm_adopt"]  # it needs cgroups
    art = render(loads_plan(yaml.safe_dump(lab)))
    conf = art["slurm/slurm.conf"]
    for line in present:
        assert line in conf
    for line in absent:
        assert line not in conf
    assert ("CgroupPlugin=disabled" in art["slurm/cgroup.conf"]) == (not cgroups and version >= "24.05")


def test_accounting_adds_slurmdbd_and_gpu_tres(lab):
    lab["partitions"]["slurm"]["accounting"] = {"host": "ctl1", "storage_host": "ctl1", "storage_password": "env:DBPASS"}
    conf = render(loads_plan(yaml.safe_dump(lab)))["slurm/slurm.conf"]
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
    assert "AccountingStorageTRES=gres/gpu" in conf
    assert "DBPASS" not in conf


def test_lab_slurm_artifacts(lab_plan):
    art = render(lab_plan)
    assert "NodeName=gpu[001-004] Name=gpu Type=standin File=/dev/nvidia[0-1]" in art["slurm/gres.conf"]
    assert ("NodeName=gpu[001-004] CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 "
            "Gres=gpu:standin:2 State=UNKNOWN") in art["slurm/slurm.conf"]
    assert "SchedulerParameters=max_switch_wait=1800" in art["slurm/slurm.conf"]
    assert art["slurm/plugstack.conf.d/pyxis.conf"].splitlines()[-1] == (
        "required /usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so runtime_path=/run/pyxis "
        "execute_entrypoint=0 container_scope=global sbatch_support=1")


@pytest.mark.parametrize("role", ["slurm_controller", "slurm_compute", "slurm_login"])
def test_slurm_roles_copy_every_file_the_render_can_write(role):
    """The roles keep the list as a literal default (usable by Ansible alone); it must be
    render.SLURM_CONFIG_FILES, order included (argument_specs.yml repeats the default:
    tests/test_role_specs.py)."""
    from railyard.apply import roles

    assert roles.default(ROOT, role, f"{role}_config_files") == list(SLURM_CONFIG_FILES)


def test_workers_reach_the_api_port_the_control_plane_serves():
    """The port is k8s_control_plane's (railyard's outputs read it there); k8s_worker keeps
    a literal default so the role works alone, and it must be the same."""
    from railyard.apply import roles

    port = roles.default(ROOT, "k8s_control_plane", "k8s_control_plane_api_port")
    assert port == 6443
    assert roles.default(ROOT, "k8s_worker", "k8s_worker_api_port") == port


def test_the_cluster_dns_image_is_the_coredns_release_the_lab_builds():
    """k8s_control_plane's default image (a site's) and the lab's build name one release."""
    from railyard import builds
    from railyard.apply import roles
    from railyard.apply.playbooks import LAB_DNS_IMAGE

    assert builds.COREDNS == "1.14.7"
    assert roles.default(ROOT, "k8s_control_plane", "k8s_control_plane_dns_image") == "registry.k8s.io/coredns/coredns:v1.14.7"
    assert LAB_DNS_IMAGE == "localhost/railyard/coredns:1.14.7"


def test_each_worker_gets_its_own_block_of_the_pod_network():
    """The lab keeps the default network (10.244.0.0/16 in /24 blocks; Services 10.96.0.0/16):
    a block per worker in the spec's order (kw[1-2]), the DNS at the Service range's tenth address."""
    net = PLANS["lab"].kubernetes.network
    assert net.pod_cidrs == {"kw1": "10.244.0.0/24", "kw2": "10.244.1.0/24"}
    assert (net.pod_cidr, net.service_cidr, net.cluster_dns, net.dns_domain) == (
        "10.244.0.0/16", "10.96.0.0/16", "10.96.0.10", "cluster.local")
    hv = PLANS["lab"].inventory.hostvars
    assert (hv["kw1"]["railyard_pod_cidr"], hv["kw2"]["railyard_pod_cidr"]) == ("10.244.0.0/24", "10.244.1.0/24")
    assert "railyard_pod_cidr" not in hv["kcp1"]


@pytest.mark.parametrize("name", sorted(PLANS))
def test_slurm_config_files_are_the_rendered_top_of_slurm(name):
    art = render(PLANS[name])
    top = tuple(sorted(k.removeprefix("slurm/") for k in art if k.startswith("slurm/") and k.count("/") == 1))
    assert sorted(slurm_config_files(art)) == list(top)
    assert {"slurm.conf", "gres.conf", "cgroup.conf"} <= set(top)
    assert len({"topology.conf", "topology.yaml"} & set(top)) == 1  # tree/block, or yaml


def test_storage_artifacts(lab_plan):
    art = render(lab_plan)
    assert art["storage/exports"].splitlines()[-2:] == [
        "/export/shared 10.77.0.0/24(rw,sync,no_subtree_check,root_squash)",
        "/export/home 10.77.0.0/24(rw,sync,no_subtree_check,root_squash)",
    ]
    unit = art["storage/units/shared.mount"]
    assert "What=nfs1:/export/shared\nWhere=/shared\nType=nfs\n" in unit
    assert 'options lnet networks="tcp0(eth0)"' in art["storage/lustre.conf"]
    assert "What=10.77.0.250@tcp0:/lablfs" in art["storage/units/lustre-lab.mount"]
    dgx = render(PLANS["dgx-h100"])
    assert "What=10.20.0.1@o2ib0,10.10.0.201@tcp0:10.20.0.2@o2ib0:/lfs1" in dgx["storage/units/lustre-lfs1.mount"]
    assert "Access_Type = RO;" in dgx["storage/ganesha.conf"]


def test_each_host_gets_its_own_mount_units(lab):
    """host_vars name the units of the mounts whose clients include the host, by type."""
    lab["storage"]["nfs"]["exports"].append({"path": "/export/scratch"})
    lab["storage"]["nfs"]["mounts"].append(
        {"export": "/export/scratch", "mount_point": "/scratch", "clients": "gpu[001-002]"})
    hv = loads_plan(yaml.safe_dump(lab), "t.yaml").inventory.hostvars
    assert hv["gpu001"]["railyard_mount_units"] == {"lustre": ["lustre-lab.mount"],
                                                    "nfs": ["shared.mount", "home.mount", "scratch.mount"]}
    assert hv["gpu003"]["railyard_mount_units"] == {"lustre": ["lustre-lab.mount"], "nfs": ["shared.mount", "home.mount"]}
    assert hv["ctl1"]["railyard_mount_units"] == {"nfs": ["shared.mount", "home.mount"]}
    assert "railyard_mount_units" not in hv["nfs1"]  # the server mounts nothing


@pytest.mark.parametrize("path", ["/shared", "/lustre/lfs1", "/home/a-b", "/x/.hidden", "/data/gpu_1", "/a//b/"])
def test_mount_unit_names_match_systemd_escape(path):
    tool = shutil.which("systemd-escape")
    if tool is None:
        pytest.skip("systemd-escape is not installed; cannot compare with systemd")
    expected = subprocess.run([tool, "--path", path], capture_output=True, text=True, check=True).stdout.strip()
    assert systemd_escape_path(path) == expected


def test_addresses_are_stable_when_a_pinned_group_grows(lab):
    lab["nodes"][2]["first_address"] = "10.77.0.100"
    before = {n.name: n.address for n in loads_plan(yaml.safe_dump(lab)).nodes}
    lab["nodes"][0]["names"] = "ctl[1-2]"
    lab["partitions"]["slurm"]["controllers"] = "ctl[1-2]"
    after = {n.name: n.address for n in loads_plan(yaml.safe_dump(lab)).nodes}
    assert all(after[n] == before[n] for n in ("gpu001", "gpu004"))
    assert after["gpu001"] == "10.77.0.100"


def test_render_is_identical_across_processes_and_hash_seeds():
    code = "import sys, json; from railyard.load import load_plan; from railyard.render import render, digest; " \
           "print(digest(render(load_plan(sys.argv[1]))))"
    digests = set()
    for seed in ("0", "1", "12345"):
        for spec in EXAMPLES:
            out = subprocess.run([sys.executable, "-c", code, str(spec)], capture_output=True, text=True, check=True,
                                 env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"})
            digests.add((spec.name, spec.parent.name, out.stdout.strip()))
    assert len(digests) == len(EXAMPLES)


def test_plan_json_summarises_nodes_and_topology(lab_plan):
    summary = json.loads(render(lab_plan)["plan.json"])
    assert [n["name"] for n in summary["nodes"]][:2] == ["ctl1", "login1"]
    assert summary["slurm"]["switches"][2] == {"name": "spine", "nodes": None, "switches": "su[1-2]"}


def test_kueue_objects_apply_as_the_api_server_stores_them(lab_plan):
    """LocalQueue namespaces exist before the queues; quantities are strings, as the
    server stores and returns them (what the drift check compares with)."""
    objs = lab_plan.kubernetes.kueue
    kinds = [o["kind"] for o in objs]
    assert kinds[0] == "Namespace" and objs[0]["metadata"]["name"] == "team-a"
    assert kinds.index("Namespace") < kinds.index("LocalQueue")
    for cq in (o for o in objs if o["kind"] == "ClusterQueue"):
        for flavor in cq["spec"]["resourceGroups"][0]["flavors"]:
            assert all(isinstance(r["nominalQuota"], str) for r in flavor["resources"])


@pytest.mark.parametrize("mb,want", [(0, "0"), (1000, "1000Mi"), (1024, "1Gi"), (1536, "1536Mi"),
                                     (64000000, "62500Gi"), (2048000, "2000Gi"), (1024**3, "1Pi")])
def test_memory_quotas_are_rendered_in_canonical_form(mb, want):
    """Kueue writes quotas back canonicalized; any other spelling would make it own the field."""
    from railyard.compiler.kubernetes import _quantity_mb

    assert _quantity_mb(mb) == want


def test_slurm_topology_and_kubernetes_labels_name_the_same_groups(lab_plan):
    """An SU is one set of nodes, whichever scheduler a job asks: Slurm's switch of that
    name plus the workers labelled with it are exactly the fabric's SU."""
    plan = lab_plan
    slurm = {s.name: set(expand(s.nodes)) for s in plan.slurm.switches if s.nodes}
    key = f"{plan.spec.partitions.kubernetes.label_prefix}/su"
    labelled: dict[str, set[str]] = {}
    for node, labels in plan.kubernetes.labels.items():
        labelled.setdefault(labels[key], set()).add(node)
    for su in plan.fabric.groups["su"]:
        assert slurm.get(su.name, set()) | labelled.get(su.name, set()) == set(su.nodes), su.name
    assert set(labelled) <= set(slurm)


def test_slurm_hostlists_keep_ranges_at_the_end_of_names():
    """slurmctld 22.05 refuses ``Switches=lf[3-4]-0`` ("fatal: Invalid switches"); found by
    tests/test_fabric_properties.py. Names that differ before their end are written out."""
    from railyard.compiler.slurm import fold, fold_hostlist

    assert fold(["lf3-0", "lf4-0"]) == "lf3-0,lf4-0"
    assert fold_hostlist("lf[3-4]-0,gpu[002,001]") == "gpu[001-002],lf3-0,lf4-0"
    assert fold(["a1-0", "a1-1", "a2-0", "spine"]) == "a1-[0-1],a2-0,spine"
    assert fold(["gpu001", "gpu002", "gpu004", "kw1"]) == "gpu[001-002,004],kw1"


def test_explicit_unnamed_groups_are_listed_so_slurm_reads_them(lab):
    nodes = {"1": ["gpu001", "gpu002", "kw1"], "2": ["gpu003", "gpu004", "kw2"]}
    switches = [{"name": f"lf{g}-0", "tier": "leaf", "radix": 8} for g in "12"]
    switches.append({"name": "sp1-1", "tier": "spine", "radix": 8})
    links = [{"a": n, "b": f"lf{g}-0"} for g in "12" for n in nodes[g]]
    links += [{"a": f"lf{g}-0", "b": "sp1-1"} for g in "12"]
    for group in lab["nodes"]:
        if group["group"] in ("gpu", "kw"):
            group["hardware"]["nics"] = 1
    lab["fabric"] = {"link_speed": "400G", "explicit": {"switches": switches, "links": links}}
    plan = loads_plan(yaml.safe_dump(lab))
    assert plan.slurm.switches[-1].switches == "lf1-0,lf2-0"


@pytest.mark.parametrize("name", sorted(PLANS))
def test_group_vars_give_every_host_exactly_its_variables(name):
    """The rendered layout (inventory.json + group_vars/<group>.json) gives each host
    exactly plan.inventory.hostvars[host], each variable from one place only."""
    from railyard.compiler.inventory import members, split_vars

    inv = PLANS[name].inventory
    group_vars, host_vars = split_vars(inv)
    groups_of: dict[str, list[str]] = {}
    for group, hosts in members(inv).items():
        for h in hosts:
            groups_of.setdefault(h, []).append(group)
    for host, want in inv.hostvars.items():
        sources = [host_vars[host], *(group_vars.get(g, {}) for g in groups_of.get(host, []))]
        keys = [k for src in sources for k in src]
        assert len(keys) == len(set(keys)), f"{host}: a variable from two places"
        assert {k: v for src in sources for k, v in src.items()} == want
    assert group_vars, "nothing shared: every variable stayed with its host"


def test_what_a_group_shares_is_written_once():
    """dgx-h100: hardware and GPUs of the compute nodes in their group, the fabric in each SU."""
    out = render(PLANS["dgx-h100"])
    assert not [p for p in out if p.startswith("ansible/host_vars/")]
    compute = json.loads(out["ansible/group_vars/slurm_compute.json"])
    assert compute["railyard_gpus"]["count"] == 8 and "railyard_hardware" in compute
    assert json.loads(out["ansible/group_vars/fabric_su1.json"])["railyard_fabric"]["su"] == "su1"
    hosts = json.loads(out["ansible/inventory.json"])["all"]["hosts"]
    some = PLANS["dgx-h100"].slurm.compute[0]
    assert "railyard_address" in hosts[some] and "railyard_gpus" not in hosts[some]
