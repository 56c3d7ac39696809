"""The files layer's fast path (railyard.drift.baseline): the probe for real on this machine,
and the collector's choice of what still runs in check mode, with Ansible stubbed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from railyard.deploy.playbooks import PlannedPlaybook
from railyard.drift import collect as C
from railyard.drift.baseline import Store, Targets, fingerprint, key_of, probe_argv, targets_of
from railyard.drift.collect import FilesRun, HostUnreachable, Result

PLAY = "railyard: "


def _probe(paths: Sequence[str]) -> dict:
    argv = probe_argv(paths, [])
    argv[0] = sys.executable  # the nodes' python3; here, any python 3
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(proc.stdout)


def test_the_probe_sees_content_mode_and_presence_for_real(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("MpiDefault=none\n")
    conf.chmod(0o644)
    link = tmp_path / "current"
    link.symlink_to(conf)
    paths = [str(conf), str(tmp_path), str(link), str(tmp_path / "gone"), "user:root", "group:root"]
    before = _probe(paths)["files"]
    import hashlib

    assert before[str(conf)].startswith("file 0644 ")
    assert before[str(conf)].split()[-1] == hashlib.sha1(b"MpiDefault=none\n").hexdigest()
    assert before[str(tmp_path)].startswith("dir ")
    assert before[str(link)].endswith(f"-> {conf}")
    assert before[str(tmp_path / "gone")] == "absent"
    assert before["user:root"].startswith("0 0 ") and before["group:root"].startswith("0 ")

    conf.write_text("MpiDefault=pmi2\n")  # edited by hand
    edited = _probe(paths)["files"]
    assert edited[str(conf)] != before[str(conf)] and edited[str(conf)].startswith("file 0644 ")
    conf.write_text("MpiDefault=none\n")
    assert _probe(paths)["files"][str(conf)] == before[str(conf)]  # same bytes: same fingerprint
    conf.chmod(0o600)
    assert _probe(paths)["files"][str(conf)].startswith("file 0600 ")


def test_an_unreadable_file_leaves_its_pair_without_a_fingerprint(tmp_path):
    """An ssh user that is not root and a 0400 file: run as nobody (setpriv, util-linux)."""
    key = tmp_path / "munge.key"
    key.write_text("x")
    key.chmod(0o400)
    argv = probe_argv([str(key)], [])
    argv[0] = sys.executable
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=60, check=True)
    probe = json.loads(proc.stdout)
    assert probe["files"][str(key)].startswith("unreadable: ")
    assert fingerprint(Targets((str(key),)), probe) is None


def _ok(role: str, host: str, module: str, res: dict, event: str = "runner_on_ok", task: str = "t") -> dict:
    return {"event": event, "event_data": {"play": PLAY + role, "host": host, "task": task,
                                           "resolved_action": f"ansible.builtin.{module}", "res": res}}


def test_targets_are_what_the_role_wrote_read_and_started():
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
        _ok("common", "gpu001", "user", {"name": "slurm"}),
        _ok("munge", "gpu001", "copy", {"censored": "the output has been hidden", "changed": False}),
        {"event": "runner_on_ok", "event_data": {"play": "someone else's play", "host": "gpu001",
                                                 "res": {"dest": "/etc/x"}}},
        {"event": "runner_on_skipped", "event_data": {"play": PLAY + "pyxis", "host": "gpu001", "res": {}}},
    ]
    t = targets_of(events, PLAY)
    assert set(t) == {("slurm_compute", "gpu001"), ("common", "gpu001"), ("munge", "gpu001")}
    sc = t[("slurm_compute", "gpu001")]
    assert sc.paths == ("/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/slurm/cgroup.conf",
                        "/var/spool/slurmd", "/dev/nvidia0")
    assert sc.units == ("slurmd.service",) and sc.uncacheable == ""
    assert sc.checksums == (("/etc/slurm/cgroup.conf", "abc"),)
    assert t[("common", "gpu001")].paths == ("user:slurm",)
    assert "no_log" in t[("munge", "gpu001")].uncacheable


def test_a_fingerprint_needs_every_target_seen():
    t = Targets(("/a", "/b"), ("x.service",))
    probe = {"files": {"/a": "file 0644 root root 1", "/b": "absent"}, "units": {"x.service": "active"},
             "packages": "p"}
    assert fingerprint(t, probe) == {"files": {"/a": "file 0644 root root 1", "/b": "absent"},
                                     "units": {"x.service": "active"}, "packages": "p"}
    assert fingerprint(t, {**probe, "files": {"/a": "file 0644 root root 1"}}) is None
    assert fingerprint(t, {**probe, "files": {**probe["files"], "/b": "unreadable: Permission denied"}}) is None
    assert fingerprint(t, {**probe, "units": {}}) is None


def test_the_key_moves_with_the_plan_and_the_secret():
    assert key_of("d1", {}) == key_of("d1", {})
    assert key_of("d1", {}) != key_of("d2", {})
    assert key_of("d1", {"munge": "a"}) != key_of("d1", {"munge": "b"})
    assert "s3cret" not in key_of("d1", {"munge": "s3cret"})  # only a hash of it


def test_the_store_is_private_and_forgets_another_version(tmp_path):
    path = tmp_path / "drift" / "lab.json"
    store = Store(path)
    store.put("common", "gpu001", "k", Targets(("/etc/hosts",)), {"files": {}})
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
    """Node state the probe reads: host -> {path: fingerprint text}; a host missing is unreachable."""

    def __init__(self) -> None:
        self.files = {h: {"/etc/demo.conf": "file 0644 root root aaa"} for h in ("gpu001", "gpu002", "kcp1")}
        self.probes: list[str] = []

    def run(self, host: str, argv: Sequence[str], timeout: float) -> Result:
        if host not in self.files:
            raise HostUnreachable("gone")
        self.probes.append(host)
        want = json.loads(argv[-1])
        files = {p: self.files[host].get(p, "absent") for p in want["paths"]}
        return Result(0, json.dumps({"files": files, "units": {u: "active running enabled no"
                                                                for u in want["units"]}, "packages": "p1"}), "")


def _scripted(monkeypatch, hosts: Hosts, dirty: set[tuple[str, str]] = frozenset(), digest: str = "d"):
    """collect_files over a demo role (gpu001, gpu002) and an API-object role (kcp1), with
    check mode answering: every asked pair clean unless in ``dirty``. Returns the plays asked."""
    demo = PlannedPlaybook("demo", "all", ("gpu001", "gpu002"), (), digest, "fabric", (), {})
    api = PlannedPlaybook("objects", "k8s_control_plane", ("kcp1",), (), digest, "kubernetes", (), {}, True)
    run = FilesRun("", "inventory.json", {}, ("gpu001", "gpu002", "kcp1"), ("demo", "objects"), [], (demo, api))
    monkeypatch.setattr(C, "prepare_files", lambda *_a, **_k: run)
    asked: list[dict[str, list[str]]] = []

    def check(limited: FilesRun, *_a, **_k):
        plays = {p["roles"][0]: p["hosts"].split(",") for p in json.loads(limited.playbook)}
        asked.append(plays)
        events = []
        for role, hs in plays.items():
            for h in hs:
                res = {"dest": "/etc/demo.conf", "checksum": "aaa", "state": "file", "changed": (role, h) in dirty}
                if (role, h) in dirty:
                    res["diff"] = [{"before": "a\n", "after": "b\n", "before_header": "/etc/demo.conf"}]
                events.append(_ok(role, h, "copy", res))
        return events + [{"event": "playbook_on_stats", "event_data": {}}], ("successful", 0, "")

    monkeypatch.setattr(C, "run_check_mode", check)
    return asked


def test_only_what_moved_since_a_clean_check_runs_in_check_mode(lab_plan, monkeypatch, tmp_path):
    hosts = Hosts()
    asked = _scripted(monkeypatch, hosts)
    obs, notes = C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked == [{"demo": ["gpu001", "gpu002"], "objects": ["kcp1"]}]  # no baseline yet: everything
    assert obs.changes == () and "0 of 3 role-host pairs unchanged" in notes[-1]

    asked.clear()
    obs, notes = C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    # nothing moved: only the API-object role runs (the probe reads hosts, not the apiserver)
    assert asked == [{"objects": ["kcp1"]}]
    assert "2 of 3 role-host pairs unchanged since a clean check (one probe per host); 1 ran" in notes[-1]

    hosts.files["gpu002"]["/etc/demo.conf"] = "file 0644 root root bbb"  # edited by hand
    asked.clear()
    asked_dirty = _scripted(monkeypatch, hosts, dirty={("demo", "gpu002")})
    obs, _ = C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked_dirty == [{"demo": ["gpu002"], "objects": ["kcp1"]}]
    assert [(c.host, c.role, c.path) for c in obs.changes] == [("gpu002", "demo", "/etc/demo.conf")]

    # still drifted: a finding leaves no baseline behind, so the next check runs it again
    asked_again = _scripted(monkeypatch, hosts, dirty={("demo", "gpu002")})
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked_again == [{"demo": ["gpu002"], "objects": ["kcp1"]}]


def test_a_baseline_never_outlives_its_plan_and_full_ignores_it(lab_plan, monkeypatch, tmp_path):
    hosts = Hosts()
    _scripted(monkeypatch, hosts)
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    asked = _scripted(monkeypatch, hosts, digest="another plan")  # role, artifacts or host vars changed
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked == [{"demo": ["gpu001", "gpu002"], "objects": ["kcp1"]}]
    asked = _scripted(monkeypatch, hosts, digest="another plan")
    C.collect_files(lab_plan, root=tmp_path, runner=hosts, full=True)
    assert asked == [{"demo": ["gpu001", "gpu002"], "objects": ["kcp1"]}]


def test_baselines_live_on_this_machine_and_api_roles_have_none(lab_plan, monkeypatch, tmp_path):
    """Nothing on a node can vouch for a node: the probe only reports, and what it is
    compared with stays on the machine that runs the check (0600), under the plan's key."""
    hosts = Hosts()
    _scripted(monkeypatch, hosts)
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    path = C.baseline_path(tmp_path, lab_plan)
    assert path.stat().st_mode & 0o777 == 0o600
    assert "gpu001" in json.loads(path.read_text())["pairs"]["demo"]
    assert not any(h.startswith("kcp") for h in json.loads(path.read_text())["pairs"].get("objects", {}))


def test_an_unreachable_host_runs_in_check_mode(lab_plan, monkeypatch, tmp_path):
    hosts = Hosts()
    _scripted(monkeypatch, hosts)
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    del hosts.files["gpu001"]  # the probe cannot reach it: Ansible's check says what is wrong
    asked = _scripted(monkeypatch, hosts)
    C.collect_files(lab_plan, root=tmp_path, runner=hosts)
    assert asked == [{"demo": ["gpu001"], "objects": ["kcp1"]}]


def test_a_file_that_moved_between_the_check_and_the_probe_gets_no_baseline(lab_plan, monkeypatch, tmp_path):
    hosts = Hosts()
    hosts.files["gpu001"]["/etc/demo.conf"] = "file 0644 root root changed-after-the-check"
    _scripted(monkeypatch, hosts)  # the check's result says checksum aaa
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
        f"- name: Install target.conf\n  ansible.builtin.copy:\n    content: \"a=1\\n\"\n    dest: {target}\n")
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"gpu001": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    from railyard.drift.files import check_playbook

    run = FilesRun(check_playbook([("demo", "all")]), str(inventory), {}, ("gpu001",), ("demo",))
    events, (status, _rc, _tail) = C.run_check_mode(run, tmp_path, C.Timeouts(files=120))
    assert status == "successful"
    t = targets_of(events, PLAY)[("demo", "gpu001")]
    assert t.paths == (str(target),) and t.uncacheable == ""
    assert len(t.checksums) == 1 and t.checksums[0][0] == str(target)
