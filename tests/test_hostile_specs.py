"""Issue 20: every spec, however wrong or hostile, gets a clear answer: no crash, no silent
guess, no injected config. One case per class the issue lists."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from railyard import exitcodes
from railyard.errors import SpecError
from railyard.fieldtypes import IPv4Addr
from railyard.load import load_plan, loads_plan
from railyard.specload import MAX_ALIAS_NODES, MAX_BYTES, MAX_DEPTH, parse
from tests.conftest import LAB, ROOT


def refused(text: str, path: str | None = None) -> str:
    """The report of a refused spec; with ``path``, the message at that YAML path."""
    with pytest.raises(SpecError) as info:
        loads_plan(text, "hostile.yaml")
    if path is None:
        return str(info.value)
    found = [p for p in info.value.problems if p.path == path]
    assert found, f"nothing at {path} in:\n{info.value}"
    assert all(p.line for p in found), found
    return " ".join(p.message for p in found)


def lab_with(old: str, new: str) -> str:
    text = LAB.read_text()
    assert old in text, old
    return text.replace(old, new, 1)


def dump(spec: dict) -> str:
    return yaml.safe_dump(spec, sort_keys=False)


# ---------------------------------------------------------------- crashes and hangs


def test_alias_bomb_is_refused_at_the_limit():
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(9)]
    message = refused("\n".join(lines) + "\n")
    assert f"more than {MAX_ALIAS_NODES} values, the limit" in message


def test_deep_nesting_is_refused_at_the_limit():
    block = "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5))
    assert f"deeper than {MAX_DEPTH} levels, the limit" in refused(block)
    flow = "a: " + "[" * 200_000 + "]" * 200_000 + "\n"
    assert f"deeper than {MAX_DEPTH} levels, the limit" in refused(flow)


def test_huge_hostlist_and_pattern_width_are_refused_before_expanding():
    msg = refused(lab_with("names: kw[1-2]", "names: kw[1-999999999]"), "nodes[4].names")
    assert "more than 100000 hosts, the limit" in msg
    msg = refused(lab_with("gpu{index:03}", "gpu{index:0999999999}"), "nodes[2].pattern")
    assert "{index:0N}" in msg
    msg = refused(lab_with("count: 4", "count: 100000000"), "nodes[2].count")
    assert "100000" in msg


def test_many_large_hostlists_are_refused_before_expanding(lab):
    lab["partitions"]["slurm"]["partitions"] += [
        {"name": f"p{i}", "nodes": "x[1-99999]"} for i in range(12)]
    msg = refused(dump(lab), "<root>")
    assert "limit of 1000000" in msg


def test_file_size_limit(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_BYTES + 1))
    with pytest.raises(SpecError) as info:
        load_plan(big)
    assert f"limit of {MAX_BYTES // (1024 * 1024)} MiB" in str(info.value)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (LAB.read_text().replace("Every node", "Every n\u00e9ud").encode("latin-1"), "is not UTF-8 (in Latin-1 it would be 'é')"),
        (b"cluster: {name: lab}\n\x00\x01", "not valid YAML"),
        (b"\xff\xfe\x00", "UTF-16"),
        (b"", "must be a mapping"),
        (b"- a\n- b\n", "must be a mapping"),
        (b"a: 1\n---\nb: 2\n", "more than one YAML document"),
        (b"a: !!python/object:os.system x\n", "is not used in a spec"),
        (b"? [a, b]\n: c\n", "a key must be plain text"),
        (b"a: *nowhere\n", "has no anchor"),
    ],
    ids=["latin-1", "nul", "bad-utf16", "empty", "list", "two-documents", "python-tag", "complex-key", "alias"],
)
def test_any_bytes_give_a_clean_error(tmp_path, data, fragment):
    spec = tmp_path / "cluster.yaml"
    spec.write_bytes(data)
    with pytest.raises(SpecError) as info:
        load_plan(spec)
    assert fragment in str(info.value)


def test_duplicate_keys_name_both_lines():
    text = lab_with("  name: lab\n", "  name: lab\n  name: lab2\n")
    msg = refused(text, "cluster.name")
    assert "appears twice" in msg and "lines 6 and 7" in msg


def test_merge_keys_still_work():
    parsed = parse("a: &x {b: 1, e: 5}\nc:\n  <<: *x\n  b: 3\n", "m")
    assert parsed.data["c"] == {"b": 3, "e": 5}


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(alphabet="yYnNtTfFoOeElsu", min_size=1, max_size=8),
                 st.text(alphabet="0123456789.:-+_eETZ", min_size=1, max_size=24),
                 st.sampled_from(["10.0.0.5", "1.5", "1.5.6", "2002-12-14", "2001-12-14t21:59:43.10-05:00",
                                  "190:20:30.15", "1_000.5", "0.5e+3", "falsey", "nodes", "no", "Off"])))
def test_plain_text_is_read_as_pyyaml_reads_it(value):
    # the short cut (specload._only_text) decides before PyYAML's resolvers would
    text = f"v: {value}\n"
    try:
        expected = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError):
        return  # not a scalar PyYAML reads (nor does railyard: it reports the text)
    assert parse(text, "t").data == expected
    assert type(parse(text, "t").data["v"]) is type(expected["v"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 300).map(str), st.sampled_from(["00", "01", "010", "255", "256", "-1", "", " 1", "1a"])),
                min_size=3, max_size=5).map(".".join))
def test_an_address_is_read_as_ipaddress_reads_it(text):
    try:
        expected = ipaddress.IPv4Address(text)
    except ValueError:
        with pytest.raises(ValidationError, match="is not an IPv4 address"):
            TypeAdapter(IPv4Addr).validate_python(text)
        return
    assert TypeAdapter(IPv4Addr).validate_python(text) == expected


def railyard(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "railyard"), *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, check=False)


def test_internal_error_has_its_own_exit_code_and_says_how_to_report(tmp_path, monkeypatch):
    from railyard import cli

    def boom(_spec):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(cli, "_plan", boom)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = cli.main(["validate", str(LAB)])
    assert code == exitcodes.INTERNAL and code not in (exitcodes.OK, exitcodes.ERROR, exitcodes.DRIFT)
    saved = list(tmp_path.glob("railyard-internal-*.txt"))
    assert saved and "RecursionError" in saved[0].read_text()


def test_validate_prints_notes_for_a_valid_spec(tmp_path):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(lab_with('{name: su2, nodes: "gpu[003-004],kw2"}', '{name: su2, nodes: "gpu[003-004]"}')
                    .replace("workers: kw[1-2]", "workers: kw1").replace("names: kw[1-2]", "names: kw1"))
    res = railyard("validate", str(spec))
    assert res.returncode == 0, res.stderr
    assert "note" in res.stdout and "scalable units differ in size (su1 3, su2 2 nodes)" in res.stdout
    data = json.loads(railyard("validate", str(spec), "--json").stdout)
    assert data["valid"] and any("differ in size" in n["message"] for n in data["notes"])


# ---------------------------------------------------------------- injection and unsafe paths


@pytest.mark.parametrize(
    ("old", "new", "path", "fragment"),
    [
        ("names: ctl1", 'names: "ctl1\\n"', "nodes[0].names", "a control character"),
        ("{name: research, weight: 1}", '{name: "research\\n", weight: 1}', "partitions.kubernetes.volcano.queues[0].name",
         "a control character"),
        ("{path: /export/shared}", '{path: /export/shared, options: ["rw)\\n/ *(rw,no_root_squash"]}',
         "storage.nfs.exports[0].options[0]", "is not an NFS export option"),
        ("{path: /export/shared}", "{path: /export/shared, options: [rw, ro]}",
         "storage.nfs.exports[0].options", "both 'rw' and 'ro'"),
        ("{path: /export/shared}", '{path: "/export/shared\\n/ *(rw)"}', "storage.nfs.exports[0].path", "holds"),
        ("mount_point: /shared}", 'mount_point: /shared, options: ["hard\\nExecStartPre=/bin/sh"]}',
         "storage.nfs.mounts[0].options[0]", "a control character"),
        ("mount_point: /shared}", 'mount_point: /shared, options: ["hard,suid"]}',
         "storage.nfs.mounts[0].options[0]", "one option per list item"),
        ("fsname: lablfs", "fsname: lablfs\n    options: ['defaults # x']", "storage.lustre.options[0]", "a space"),
        ("max_time: \"1-00:00:00\"", 'max_time: "1-00:00:00 State=DOWN"', "partitions.slurm.partitions[0].max_time",
         "is not a Slurm time"),
        ("gpus: {type: standin, count: 2, stand_in: true}\n  - group: kcp",
         "gpus: {type: standin, count: 2, devices: '/dev/nvidia0 Flags=x', stand_in: true}\n  - group: kcp",
         "nodes[2].hardware.gpus.devices", "is not a device list"),
        ("nics: 2\n      gpus: {type: standin, count: 2, stand_in: true}\n  - group: kcp",
         ("nics: 2\n      nic_names: ['mlx5_0', 'mlx5_1\\nNCCL_DEBUG=INFO']\n      gpus: {type: standin, count: 2, "
          "stand_in: true}\n  - group: kcp"), "nodes[2].hardware.nic_names[1]", "is not an RDMA device name"),
        ("package: {path: /var/cache/railyard/packages/enroot_4.1.2-1_amd64.deb}",
         "package: {path: /var/cache/railyard/packages/enroot_4.1.2-1_amd64.deb}\n      cache_path: '/x/$(rm -rf /)'",
         "partitions.slurm.enroot.cache_path", "holds"),
        ("cohorts: [{name: lab}]", "cohorts: [{name: \"lab\\nkind: Secret\"}]",
         "partitions.kubernetes.kueue.cohorts[0].name", "a control character"),
    ],
    ids=["hostlist-trailing-newline", "name-trailing-newline", "export-option-newline", "export-rw-and-ro", "export-path-newline", "mount-option-newline",
         "mount-option-comma", "lustre-option-comment", "slurm-time-extra", "gres-devices", "nic-name-newline",
         "enroot-shell", "kueue-name"],
)
def test_no_string_can_add_a_line_or_directive(old, new, path, fragment):
    assert fragment in refused(lab_with(old, new), path)


@pytest.mark.parametrize(
    ("old", "new", "path", "fragment"),
    [
        ("{path: /export/shared}", "{path: /export/../etc}", "storage.nfs.exports[0].path", "'..' part"),
        ("{path: /export/shared}", "{path: /}", "storage.nfs.exports[0].path", "system path"),
        ("mount_point: /shared}", "mount_point: /proc}", "storage.nfs.mounts[0].mount_point", "system path"),
        ("mount_point: /shared}", "mount_point: /etc/x}", "storage.nfs.mounts[0].mount_point", "system path"),
        ("mount_point: /shared}", "mount_point: shared}", "storage.nfs.mounts[0].mount_point", "not an absolute path"),
        ("mount_point: /lustre/lab", "mount_point: //shared", "storage.lustre.mount_point", "overlaps /shared"),
        ("mount_point: /lustre/lab", "mount_point: //usr/", "storage.lustre.mount_point", "the system path '/usr'"),
    ],
    ids=["dotdot", "root", "proc", "etc", "relative", "double-slash-overlap", "double-slash-system"],
)
def test_unsafe_paths(old, new, path, fragment):
    assert fragment in refused(lab_with(old, new), path)


def test_double_slash_is_normalised_in_the_plan():
    plan = loads_plan(lab_with("mount_point: /lustre/lab", "mount_point: //lustre//lab/"), "x.yaml")
    assert plan.spec.storage.lustre.mount_point == "/lustre/lab"
    assert any(m.unit == "lustre-lab.mount" for m in plan.storage.mounts)


@pytest.mark.parametrize(
    ("address", "fragment"),
    [("https://admin:calvin@{name}-bmc", "holds credentials"),
     ("https://{name.__class__}-bmc", "other than {name}"),
     ("https://{name}-bmc/\nx", "control character")],
    ids=["password-in-url", "format-field", "newline"],
)
def test_bmc_url_without_credentials(lab, address, fragment):
    next(g for g in lab["nodes"] if g["group"] == "gpu")["provision"] = {
        "driver": "redfish", "bmc": {"address": address, "username": "admin", "password": "env:BMC"}}
    assert fragment in refused(dump(lab), "nodes[2].provision.bmc.address")


def test_package_url_without_credentials(lab):
    lab["partitions"]["slurm"]["enroot"]["package"] = {"url": "https://u:p@mirror.example.com/e.deb"}
    assert "holds credentials" in refused(dump(lab), "partitions.slurm.enroot.package.url")


def test_release_url_without_credentials(lab):
    lab["partitions"]["kubernetes"]["release_url"] = "https://u:p@mirror.example.com/k8s/release"
    assert "holds credentials" in refused(dump(lab), "partitions.kubernetes.release_url")


def test_render_refuses_what_the_types_would_have(lab_plan):
    """Defence in depth: a value that reaches a template with a newline stops the render."""
    import dataclasses

    from railyard.render import RenderRefused, render

    st = lab_plan.storage
    bad = dataclasses.replace(st, exports=(dataclasses.replace(st.exports[0], path="/x\n/ *(rw)"),))
    with pytest.raises(RenderRefused):
        render(dataclasses.replace(lab_plan, storage=bad))


# ---------------------------------------------------------------- silent guesses


def test_pinned_address_collision_names_both_nodes(lab):
    next(g for g in lab["nodes"] if g["group"] == "kw")["first_address"] = "10.77.0.12"
    msg = refused(dump(lab), "nodes[4].first_address")
    assert "kw1 would get 10.77.0.12" in msg and "already the address of gpu001" in msg


def test_nic_names_must_cover_every_rail(lab):
    next(g for g in lab["nodes"] if g["group"] == "gpu")["hardware"]["nic_names"] = ["mlx5_0"]
    assert "lists 1 name(s) but nics is 2" in refused(dump(lab), "nodes[2].hardware")


def test_gpu_devices_must_match_the_count(lab):
    next(g for g in lab["nodes"] if g["group"] == "gpu")["hardware"]["gpus"]["devices"] = "/dev/nvidia[0-3]"
    assert "names 4 device(s) but count is 2" in refused(dump(lab), "nodes[2].hardware.gpus")


def test_default_time_within_max_time(lab):
    lab["partitions"]["slurm"]["partitions"][0]["default_time"] = "2-00:00:00"
    msg = refused(dump(lab), "partitions.slurm.partitions[0]")
    assert "default_time 2-00:00:00 is longer than max_time 1-00:00:00" in msg


def test_kueue_cohort_cycle(lab):
    lab["partitions"]["kubernetes"]["kueue"]["cohorts"] = [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]
    lab["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0]["cohort"] = "a"
    msg = refused(dump(lab), "partitions.kubernetes.kueue.cohorts[0].parent")
    assert "cohorts form a cycle (a -> b -> a)" in msg


def test_local_queue_in_an_excluded_namespace(lab):
    lab["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0]["namespaces"] = ["team-b"]
    msg = refused(dump(lab), "partitions.kubernetes.kueue.local_queues[0].namespace")
    assert "could never admit a job" in msg and "team-a" in msg


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [(("storage", "nfs", "server"), "nfs1,ctl1", "storage.nfs.server"),
     (("storage", "nfs", "server"), "nfs[1-2]", "storage.nfs.server")],
    ids=["comma", "range"],
)
def test_a_list_where_one_node_is_expected(lab, field, value, path):
    target = lab
    for k in field[:-1]:
        target = target[k]
    target[field[-1]] = value
    assert "takes exactly one node" in refused(dump(lab), path)


def test_accounting_host_is_one_node(lab):
    lab["partitions"]["slurm"]["accounting"] = {"host": "ctl1,login1", "storage_host": "db.example.com",
                                                "storage_password": "env:DB"}
    assert "takes exactly one node" in refused(dump(lab), "partitions.slurm.accounting.host")


# ---------------------------------------------------------------- messages that lead to the fix


@pytest.mark.parametrize(
    ("old", "new", "path", "fragment"),
    [
        ('slurm: "24.11"', "slurm: 23.11", "cluster.versions.slurm", '23.11 was read as a number; write "23.11"'),
        ('kubernetes: "1.35"', "kubernetes: 1.30", "cluster.versions.kubernetes", '1.30 was read as a number; write "1.30"'),
        ('max_time: "1-00:00:00"', "max_time: 120", "partitions.slurm.partitions[0].max_time",
         '120 was read as a number; write "120"'),
        ('max_time: "1-00:00:00"', "max_time: 1:00:00", "partitions.slurm.partitions[0].max_time",
         '1:00:00 was read as a number; write "1:00:00"'),
        ("cidr: 10.77.0.0/24", "cidr: 10.77.0.1/24", "network.management.cidr",
         "has host bits set: the address part goes past the /24 prefix; the network is '10.77.0.0/24'"),
        ("names: ctl1", "names: c" + "t" * 69, "nodes[0]", "is 70 characters; a hostname may have at most 63"),
        ("names: ctl1", "names: Ctl1", "nodes[0]", "upper-case letters; a hostname is lower case: write 'ctl1'"),
        ("{name: gpu, cohort: lab}", "{name: " + "q" * 64 + ", cohort: lab}",
         "partitions.kubernetes.kueue.cluster_queues[0].name", "is 64 characters; a name may have at most 63"),
        ("{name: research, weight: 1}", "{name: Research, weight: 1}", "partitions.kubernetes.volcano.queues[0].name",
         "write 'research'"),
        ("names: kw[1-2]", "names: kw[2-1]", "nodes[4].names", "range 2-1 runs backwards; write 1-2"),
        ("stand_in: true}\n  - group: kcp", "stand_in: yes}\n  - group: kcp", None, None),
    ],
    ids=["slurm-23.11", "k8s-1.30", "max-time-120", "max-time-sexagesimal", "host-bits", "hostname-63",
         "hostname-upper", "k8s-name-length", "k8s-name-upper", "range-backwards", "yes-is-fine-for-a-bool"],
)
def test_messages_quote_the_value_as_typed(old, new, path, fragment):
    text = lab_with(old, new)
    if path is None:
        loads_plan(text, "ok.yaml")
        return
    assert fragment in refused(text, path)
