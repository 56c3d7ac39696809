"""The files layer's fast path (railyard.drift.baseline): the probe for real on this machine,
and the collector's choice of what still runs in check mode, with Ansible stubbed."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from railyard.apply.playbooks import PlannedPlaybook
from railyard.drift import collect as C
from railyard.drift.baseline import Store, Targets, fingerprint, key_of, probe_argv, targets_of
from railyard.drift.collect import FilesRun, HostUnreachable, Result

PLAY = "railyard: "


def _probe(items: Sequence[str]) -> dict:
    argv = probe_argv(items)
    argv[0] = sys.executable  # the nodes' python3; here, any python 3
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(proc.stdout)


def test_the_probe_sees_content_mode_and_presence_for_real(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("MpiDefault=none\n")
    conf.chmod(0o644)
    link = tmp_path / "current"
    link.symlink_to(conf)
    cat = "cmd:" + json.dumps(["cat", str(conf)])
    paths = [str(conf), str(tmp_path), str(link), str(tmp_path / "gone"), "user:root", "group:root", cat]
    before = _probe(paths)["items"]
    assert before[str(conf)].startswith("file 0644 ")
    assert before[str(conf)].split()[-1] == hashlib.sha1(b"MpiDefault=none\n").hexdigest()
    assert before[str(tmp_path)].startswith("dir ")
    assert before[str(link)].endswith(f"-> {conf}")
    assert before[str(tmp_path / "gone")] == "absent"
    assert before["user:root"].startswith("0 0 ") and before["group:root"].startswith("0 ")
    assert before[cat] == "rc=0 " + hashlib.sha1(b"MpiDefault=none\n").hexdigest()  # a re-run read

    conf.write_text("MpiDefault=pmi2\n")  # edited by hand
    edited = _probe(paths)["items"]
    assert edited[str(conf)] != before[str(conf)] and edited[str(conf)].startswith("file 0644 ")
    assert edited[cat] != before[cat]
    conf.write_text("MpiDefault=none\n")
    assert _probe(paths)["items"][str(conf)] == before[str(conf)]  # same bytes: same fingerprint
    conf.chmod(0o600)
    assert _probe(paths)["items"][str(conf)].startswith("file 0600 ")
    conf.unlink()
    assert _probe([cat])["items"][cat].startswith("rc=1 ")


def test_an_unreadable_file_leaves_its_pair_without_a_fingerprint(tmp_path):
    """An ssh user that is not root and a 0400 file: run as nobody (setpriv, util-linux)."""
    key = tmp_path / "munge.key"
    key.write_text("x")
    key.chmod(0o400)
    argv = probe_argv([str(key)])
    argv[0] = sys.executable
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=60, check=True)
    probe = json.loads(proc.stdout)
    assert probe["items"][str(key)].startswith("unreadable: ")
    assert fingerprint(Targets((("gpu001", str(key)),)), {"gpu001": probe}) is None


def _ok(role: str, host: str, module: str, res: dict, event: str = "runner_on_ok", task: str = "t") -> dict:
    return {"event": event, "event_data": {"play": PLAY + role, "host": host, "task": task,
                                           "resolved_action": f"ansible.builtin.{module}", "res": res}}


KUBECTL_DIFF = ["kubectl", "diff", "--server-side", "-f", "/etc/kubernetes/railyard/node-kw1.yaml"]


def test_targets_are_what_the_role_wrote_read_started_and_ran():
    on_kcp1 = {"_ansible_delegated_vars": {"ansible_host": "railyard-lab-kcp1", "ansible_connection": "podman"}}
    events = [
        _ok("slurm_compute", "gpu001", "find", {"files": [{"path": "/etc/slurm/slurm.conf"},
                                                          {"path": "/etc/slurm/gres.conf"}]}),
        _ok("slurm_compute", "gpu001", "copy", {"dest": "/etc/slurm/cgroup.conf", "checksum": "abc",
                                                "state": "file"}, event="runner_item_on_ok"),
        _ok("slurm_compute", "gpu001", "copy", {"results": [{"dest": "/ignored/loop/summary"}]}),
        _ok("slurm_compute", "gpu001", "systemd_service", {"name": "slurmd"}),
        _ok("slurm_compute", "gpu001", "file", {"path": "/var/spool/slurmd", "state": "directory"}),
        _ok("slurm_compute", "gpu001", "stat", {"stat": {"exists": False},
                                                "invocation": {"module_args": {"path": "/dev/nvidia0"}}}),
        _ok("slurm_compute", "gpu001", "command", {"cmd": ["dpkg-query", "-W", "slurmd"], "rc": 0}),
        _ok("slurm_compute", "gpu001", "assert", {}),
        _ok("common", "gpu001", "user", {"name": "slurm"}),
        _ok("munge", "gpu001", "copy", {"censored": "the output has been hidden", "changed": False}),
        _ok("pyxis", "gpu001", "copy", {"censored": "the output has been hidden", "changed": False}),
        _ok("k8s_worker", "kw1", "copy", {"dest": "/etc/kubernetes/railyard/node-kw1.yaml", **on_kcp1}),
        _ok("k8s_worker", "kw1", "command", {"cmd": KUBECTL_DIFF, "rc": 0, **on_kcp1}),
        _ok("kueue", "kcp1", "command", {"cmd": ["kubectl", "apply", "-f", "-"], "rc": 0,
                                         "invocation": {"module_args": {"stdin": "{}"}}}),
        _ok("volcano", "kcp1", "uri", {"status": 200}),
        _ok("enroot", "gpu001", "copy", {"dest": "/etc/x", "_ansible_delegated_vars": {"ansible_host": "elsewhere"}}),
        _ok("pyxis", "gpu002", "stat", {"invocation": {"module_args": {"path": "/var/cache/pkgs/pyxis.deb"}},
                                        "_ansible_delegated_vars": {"ansible_host": "localhost",
                                                                    "ansible_connection": "local"}}),
        _ok("pyxis", "gpu002", "validate_argument_spec", {}),
        {"event": "runner_on_ok", "event_data": {"play": "someone else's play", "host": "gpu001",
                                                 "res": {"dest": "/etc/x"}}},
        {"event": "runner_on_skipped", "event_data": {"play": PLAY + "lustre_client", "host": "gpu001", "res": {}}},
    ]
    t = targets_of(events, PLAY, by_address={"railyard-lab-kcp1": "kcp1"},
                   hidden_paths={"munge": ("/etc/munge/munge.key",)})
    sc = t[("slurm_compute", "gpu001")]
    assert [i for h, i in sc.reads if h == "gpu001"] == [
        "/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/slurm/cgroup.conf", "unit:slurmd.service",
        "/var/spool/slurmd", "/dev/nvidia0", 'cmd:["dpkg-query","-W","slurmd"]']
    assert sc.hosts() == ("gpu001",) and sc.uncacheable == ""
    assert sc.checksums == (("gpu001", "/etc/slurm/cgroup.conf", "abc"),)
    assert t[("common", "gpu001")].reads == (("gpu001", "user:slurm"),)
    assert t[("munge", "gpu001")].reads == (("gpu001", "/etc/munge/munge.key"),)  # meta/railyard.yml
    assert t[("munge", "gpu001")].uncacheable == ""
    assert "no_log" in t[("pyxis", "gpu001")].uncacheable  # lists no hidden paths
    # a delegated task is probed where it ran: the Node's manifest and its diff on the control plane
    assert t[("k8s_worker", "kw1")].reads == (("kcp1", "/etc/kubernetes/railyard/node-kw1.yaml"),
                                               ("kcp1", "cmd:" + json.dumps(KUBECTL_DIFF, separators=(",", ":"))))
    assert "cannot re-run" in t[("kueue", "kcp1")].uncacheable
    assert "module uri" in t[("volcano", "kcp1")].uncacheable
    assert "delegate" in t[("enroot", "gpu001")].uncacheable
    # read on the machine that runs the check (the roles find their packages there)
    assert t[("pyxis", "gpu002")].reads == (("localhost", "/var/cache/pkgs/pyxis.deb"),)
    assert t[("pyxis", "gpu002")].uncacheable == ""
    assert ("lustre_client", "gpu001") not in t


def test_a_fingerprint_needs_every_target_seen():
    t = Targets((("gpu001", "/a"), ("gpu001", "/b"), ("kcp1", "unit:x.service")))
    probes = {"gpu001": {"items": {"/a": "file 0644 root root 1", "/b": "absent"}, "packages": "p"},
              "kcp1": {"items": {"unit:x.service": "active"}, "packages": "q"}}
    assert fingerprint(t, probes) == {
        "items": {"gpu001|/a": "file 0644 root root 1", "gpu001|/b": "absent", "kcp1|unit:x.service": "active"},
        "packages": {"gpu001": "p", "kcp1": "q"}}
    assert fingerprint(t, {"gpu001": probes["gpu001"]}) is None  # kcp1 did not answer
    assert fingerprint(t, {**probes, "gpu001": {"items": {"/a": "file 0644 root root 1"}}}) is None
    unreadable = {"items": {"/a": "unreadable: Permission denied", "/b": "absent"}}
    assert fingerprint(t, {**probes, "gpu001": unreadable}) is None


def test_hidden_paths_come_from_the_role_and_resolve_through_its_variables(tmp_path):
    from railyard.drift.baseline import hidden_paths

    assert hidden_paths(Path(C.ROOT), "munge", {}) == ("/etc/munge/munge.key",)  # the real role
    assert hidden_paths(Path(C.ROOT), "munge", {"munge_key_path": "/srv/munge.key"}) == ("/srv/munge.key",)
    assert hidden_paths(Path(C.ROOT), "munge", {"munge_key_path": "{{ elsewhere }}"}) is None
    assert hidden_paths(Path(C.ROOT), "common", {}) is None  # lists none


def test_the_key_moves_with_the_plan_and_the_secret():
    assert key_of("d1", {}) == key_of("d1", {})
    assert key_of("d1", {}) != key_of("d2", {})
    assert key_of("d1", {"munge": "a"}) != key_of("d1", {"munge": "b"})
    assert "s3cret" not in key_of("d1", {"munge": "s3cret"})  # only a hash of it


def test_the_store_is_private_and_forgets_another_version(tmp_path):
    path = tmp_path / "drift" / "lab.json"
    store = Store(path)
    store.put("common", "gpu001", "k", Targets((("gpu001", "/etc/hosts"),)), {"items": {}})
    store.save()
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert Store.load(path).get("common", "gpu001", "k") is not None
    assert Store.load(path).get("common", "gpu001", "another plan") is None
    path.write_text(json.dumps({"version": 0, "pairs": {"common": {"gpu001": {"key": "k"}}}}))
    assert Store.load(path).pairs == {}
    path.write_text("{not json")
    assert Store.load(path).pairs == {}


# --------------------------------------------------------------------------- the collector


class Hosts:
    """Node state the probe reads: host -> {item: text}; a host missing is unreachable."""

    def __init__(self) -> None:
        self.items = {h: {"/etc/demo.conf": "file 0644 root root aaa"} for h in ("gpu001", "gpu002", "kcp1")}
        self.items["kcp1"]["cmd:" + json.dumps(KUBECTL_DIFF, separators=(",", ":"))] = "rc=0 da39"

    def run(self, host: str, argv: Sequence[str], timeout: float) -> Result:
        if host not in self.items:
            raise HostUnreachable("gone")
        want = json.loads(argv[-1])
        items = {i: self.items[host].get(i, "absent") for i in want}
        return Result(0, json.dumps({"items": items, "packages": "p1"}), "")


def _scripted(monkeypatch, dirty: frozenset[tuple[str, str]] = frozenset(), digest: str = "d"):
    """collect_files over a demo role (gpu001, gpu002) and an API-object role that runs on
    kcp1, with check mode answering: every asked pair clean unless in ``dirty``. Returns
    the plays asked."""
    demo = PlannedPlaybook("demo", "all", ("gpu001", "gpu002"), (), digest, "fabric", (), {})
    api = PlannedPlaybook("objects", "k8s_control_plane", ("kcp1",), (), digest, "kubernetes", (), {})
    run = FilesRun("", "inventory.json", {}, ("gpu001", "gpu002", "kcp1"), ("demo", "objects"), [], (demo, api))
    monkeypatch.setattr(C, "prepare_files", lambda *_a, **_k: run)
    asked: list[dict[str, list[str]]] = []

    def check(limited: FilesRun, *_a, **_k):
        plays = {p["roles"][0]: p["hosts"].split(",") for p in json.loads(limited.playbook)}
        asked.append(plays)
        events = []
        for role, hs in plays.items():
            for h in hs:
                changed = (role, h) in dirty
                if role == "objects":
                    events.append(_ok(role, h, "command", {"cmd": KUBECTL_DIFF, "rc": int(changed),
                                                           "changed": changed, "stdout": ""}))
                    continue
                res = {"dest": "/etc/demo.conf", "checksum": "aaa", "state": "file", "changed": changed}
                if changed:
                    res["diff"] = [{"before": "a\n", "after": "b\n", "before_header": "/etc/demo.conf"}]
                events.append(_ok(role, h, "copy", res))
        return events + [{"event": "playbook_on_stats", "event_data": {}}], ("successful", 0, "")

    monkeypatch.setattr(C, "run_check_mode", check)
    return asked


def test_only_what_moved_since_a_clean_check_runs_in_check_mode(lab_plan, monkeypatch, tmp_path):
    hosts = Hosts()
    asked = _scripted(monkeypatch)
    obs, notes = C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked == [{"demo": ["gpu001", "gpu002"], "objects": ["kcp1"]}]  # no baseline yet: everything
    assert obs.changes == () and "0 of 3 role-host pairs unchanged" in notes[-1]

    asked.clear()
    obs, notes = C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked == []  # nothing moved: no Ansible at all
    assert "3 of 3 role-host pairs unchanged since a clean check (one probe per host); 0 ran" in notes[-1]

    hosts.items["gpu002"]["/etc/demo.conf"] = "file 0644 root root bbb"  # edited by hand
    asked = _scripted(monkeypatch, dirty=frozenset({("demo", "gpu002")}))
    obs, _ = C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked == [{"demo": ["gpu002"]}]
    assert [(c.host, c.role, c.path) for c in obs.changes] == [("gpu002", "demo", "/etc/demo.conf")]

    # still drifted: a finding leaves no baseline behind, so the next check runs it again
    asked = _scripted(monkeypatch, dirty=frozenset({("demo", "gpu002")}))
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked == [{"demo": ["gpu002"]}]


def test_an_api_object_edited_on_the_apiserver_moves_the_re_run_read(lab_plan, monkeypatch, tmp_path):
    """The probe re-runs the role's own `kubectl diff`: exit 1 once the object was edited."""
    hosts = Hosts()
    _scripted(monkeypatch)
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    hosts.items["kcp1"]["cmd:" + json.dumps(KUBECTL_DIFF, separators=(",", ":"))] = "rc=1 5b2e"
    asked = _scripted(monkeypatch, dirty=frozenset({("objects", "kcp1")}))
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked == [{"objects": ["kcp1"]}]


def test_a_baseline_never_outlives_its_plan_and_full_ignores_it(lab_plan, monkeypatch, tmp_path):
    hosts = Hosts()
    _scripted(monkeypatch)
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    asked = _scripted(monkeypatch, digest="another plan")  # role, artifacts or host vars changed
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked == [{"demo": ["gpu001", "gpu002"], "objects": ["kcp1"]}]
    asked = _scripted(monkeypatch, digest="another plan")
    C.collect_files(lab_plan, root=tmp_path, runner=hosts, full=True)
    assert asked == [{"demo": ["gpu001", "gpu002"], "objects": ["kcp1"]}]


def test_baselines_live_on_this_machine(lab_plan, monkeypatch, tmp_path):
    """Nothing on a node can vouch for a node: the probe only reports, and what it is
    compared with stays on the machine that runs the check (0600), under the plan's key."""
    hosts = Hosts()
    _scripted(monkeypatch)
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    path = C.baseline_path(tmp_path, lab_plan)
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(json.loads(path.read_text())["pairs"]["demo"]) == ["gpu001", "gpu002"]


def test_an_unreachable_host_runs_in_check_mode(lab_plan, monkeypatch, tmp_path):
    hosts = Hosts()
    _scripted(monkeypatch)
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    del hosts.items["gpu001"]  # the probe cannot reach it: Ansible's check says what is wrong
    asked = _scripted(monkeypatch)
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked == [{"demo": ["gpu001"]}]


def test_a_file_that_moved_between_the_check_and_the_probe_gets_no_baseline(lab_plan, monkeypatch, tmp_path):
    hosts = Hosts()
    hosts.items["gpu001"]["/etc/demo.conf"] = "file 0644 root root changed-after-the-check"
    _scripted(monkeypatch)  # the check's result says checksum aaa
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    pairs = json.loads(C.baseline_path(tmp_path, lab_plan).read_text())["pairs"]
    assert sorted(pairs["demo"]) == ["gpu002"]


def test_paths_of_a_real_role_run_are_named(tmp_path: Path):
    """Sanity of the event fields targets_of reads, from one real check-mode run (local)."""
    strategies = Path(C.ROOT) / "plugins" / "strategy"
    (tmp_path / "ansible.cfg").write_text(f"[defaults]\nstrategy_plugins = {strategies}\n")
    role = tmp_path / "roles" / "demo" / "tasks"
    role.mkdir(parents=True)
    target = tmp_path / "target.conf"
    target.write_text("a=1\n")
    role.joinpath("main.yml").write_text(
        f"---\n- name: Probe first\n  ansible.builtin.find:\n    paths: {tmp_path}\n    patterns: target.conf\n"
        f"- name: Read it\n  ansible.builtin.command:\n    argv: [cat, {target}]\n  changed_when: false\n"
        f"  check_mode: false\n"
        f"- name: Install target.conf\n  ansible.builtin.copy:\n    content: \"a=1\\n\"\n    dest: {target}\n")
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"gpu001": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    from railyard.drift.files import check_playbook

    run = FilesRun(check_playbook([("demo", "all")]), str(inventory), {}, ("gpu001",), ("demo",))
    events, (status, _rc, tail) = C.run_check_mode(run, tmp_path, C.Timeouts(files=120))
    failed = [(e.get("event"), (e.get("event_data") or {}).get("task"), (e.get("event_data") or {}).get("res"))
              for e in events if e.get("event") in ("runner_on_failed", "runner_on_unreachable", "error")]
    assert status == "successful", (status, tail, failed)
    t = targets_of(events, PLAY)[("demo", "gpu001")]
    assert t.reads == (("gpu001", str(target)), ("gpu001", "cmd:" + json.dumps(["cat", str(target)],
                                                                                separators=(",", ":"))))
    assert t.uncacheable == ""
    assert len(t.checksums) == 1 and t.checksums[0][1] == str(target)
