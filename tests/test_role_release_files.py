"""The release download the Kubernetes roles share (roles/_shared/tasks/release_files.yml),
run by Ansible on this machine against a file server on loopback laid out like
https://dl.k8s.io/release, through k8s_worker's own import of it (its install.yml): a good
file is installed once and left alone after; a file whose checksum does not match (the
published .sha256, or one pinned in the role's variables) is not installed, and the role
fails naming the file, the URL, both checksums and the fix.
(molecule/kubernetes runs the same path inside a node container, with the real kubelet.)"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ROLE = ROOT / "roles" / "k8s_worker"
VERSION = "1.35.4"  # k8s_worker_kubelet_version's default
PAYLOAD = b"\x7fELF not really a kubelet\n" * 1000
WRONG = "0" * 64
# One component (the default also installs kube-proxy): what is tested is how each file is
# fetched and checked, which is the same for every one.
ONE = {"k8s_worker_components": ["kubelet"]}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(base URL, the directory holding v<VERSION>/bin/linux/amd64/) on 127.0.0.1."""
    root = tmp_path / "www"
    (root / "release" / f"v{VERSION}" / "bin/linux/amd64").mkdir(parents=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/release", root / "release" / f"v{VERSION}" / "bin/linux/amd64"
    finally:
        httpd.shutdown()


def _download_task() -> dict:
    """k8s_worker's import of release_files, as the role has it."""
    tasks = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())
    block = next(t for t in tasks if t.get("name") == "Download the agent's release binaries")
    (imp,) = [t for t in block["block"] if "ansible.builtin.import_role" in t]
    assert imp["ansible.builtin.import_role"] == {"name": "_shared", "tasks_from": "release_files"}
    return imp


def _install(tmp_path: Path, extra: dict) -> tuple[int, list[dict]]:
    """Run the role's download on localhost; (exit status, each task's host result)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    play = {"hosts": "localhost", "gather_facts": False, "connection": "local",
            "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml")],
            "tasks": [_download_task()]}
    extravars = {"ansible_python_interpreter": sys.executable, "k8s_worker_bin_dir": str(bin_dir), **ONE, **extra}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-e", json.dumps(extravars),
         "/dev/stdin"],
        input=yaml.safe_dump([play]), capture_output=True, text=True, timeout=180, check=False,
        env={"PATH": "/usr/bin:/bin", "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOCALHOST_WARNING": "false",
             "ANSIBLE_ROLES_PATH": str(ROOT / "roles")},
    )
    results = [{"task": t["task"]["name"].rpartition(" : ")[2], **h} for p in json.loads(proc.stdout)["plays"] for t in p["tasks"]
               for h in t["hosts"].values()]
    return proc.returncode, results


def _failure(results: list[dict]) -> str:
    (fail,) = [r for r in results if r["task"] == "Fail naming the file, its URL and both checksums"
               and r.get("failed")]
    return fail["msg"]


def test_a_good_release_is_installed_once(tmp_path, server):
    url, files = server
    (files / "kubelet").write_bytes(PAYLOAD)
    (files / "kubelet.sha256").write_text(hashlib.sha256(PAYLOAD).hexdigest())  # as dl.k8s.io: the hex alone
    rc, results = _install(tmp_path, {"k8s_worker_release_mirror": url})
    assert rc == 0, results
    installed = tmp_path / "bin" / "kubelet"
    assert installed.read_bytes() == PAYLOAD and installed.stat().st_mode & 0o777 == 0o755
    download = next(r for r in results if r["task"] == "Download the release files of k8s_worker")
    assert download["changed"]
    rc, results = _install(tmp_path, {"k8s_worker_release_mirror": url})
    assert rc == 0 and not any(r.get("changed") for r in results), results


def test_a_published_checksum_that_does_not_match_fails_naming_both(tmp_path, server):
    url, files = server
    (files / "kubelet").write_bytes(PAYLOAD)
    (files / "kubelet.sha256").write_text(WRONG + "\n")
    rc, results = _install(tmp_path, {"k8s_worker_release_mirror": url})
    assert rc != 0
    file_url = f"{url}/v{VERSION}/bin/linux/amd64/kubelet"
    assert _failure(results) == (
        f"k8s_worker: CHECKSUM MISMATCH for kubelet on localhost: {file_url} downloaded with sha256 "
        f"{hashlib.sha256(PAYLOAD).hexdigest()}, but the published checksum {file_url}.sha256 expects {WRONG}. "
        f"The file was not installed ({tmp_path}/bin/kubelet is unchanged): either the download is corrupt "
        "or the server serves another build than the release named. Fix: make k8s_worker_release_url "
        f"({url}/v{VERSION}/bin/linux/amd64; its base is the spec's partitions.kubernetes.release_url, default "
        f"https://dl.k8s.io/release) serve the official Kubernetes v{VERSION} binaries with their .sha256 files, "
        "or, if this build is the one to install, pin its sha256 in k8s_worker_release_checksums.")
    assert not (tmp_path / "bin" / "kubelet").exists()


def test_a_pinned_checksum_wins_and_is_named(tmp_path, server):
    url, files = server
    (files / "kubelet").write_bytes(PAYLOAD)
    (files / "kubelet.sha256").write_text(hashlib.sha256(PAYLOAD).hexdigest())  # not read: the pin decides
    rc, results = _install(tmp_path, {"k8s_worker_release_mirror": url,
                                      "k8s_worker_release_checksums": {"kubelet": f"sha256:{WRONG}"}})
    assert rc != 0
    assert (f"but k8s_worker_release_checksums[kubelet] (pinned) expects {WRONG}. The file was not installed"
            in _failure(results))


def test_a_missing_file_is_named_with_its_url(tmp_path, server):
    url, _files = server
    rc, results = _install(tmp_path, {"k8s_worker_release_mirror": url})
    assert rc != 0
    file_url = f"{url}/v{VERSION}/bin/linux/amd64/kubelet"
    assert _failure(results).startswith(
        f"k8s_worker: cannot download kubelet on localhost from {file_url} (checksum from the published "
        f"checksum {file_url}.sha256): Request failed (HTTP 404) at {file_url}.sha256. Fix: ")


def _preflight(tmp_path: Path, extra: dict) -> tuple[int, list[dict]]:
    """k8s_worker's preflight checks of the release inputs, as the role has them."""
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    block = next(t for t in tasks if t.get("name") == "Check the release URL and checksums")
    play = {"hosts": "localhost", "gather_facts": False, "connection": "local",
            "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml")], "tasks": [block]}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-e",
         json.dumps({"ansible_python_interpreter": sys.executable, **ONE, **extra}), "/dev/stdin"],
        input=yaml.safe_dump([play]), capture_output=True, text=True, timeout=180, check=False,
        env={"PATH": "/usr/bin:/bin", "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOCALHOST_WARNING": "false"},
    )
    return proc.returncode, [h for p in json.loads(proc.stdout)["plays"] for t in p["tasks"]
                             for h in t["hosts"].values() if h.get("failed")]


@pytest.mark.parametrize(("extra", "message"), [
    ({"k8s_worker_release_checksums": {"kubelet": "deadbeef"}},
     ("k8s_worker: k8s_worker_release_checksums must map each of kubelet to 'sha256:<64 hex>' or 'sha256:<url of a "
     "checksum file>', or leave it out (then the release's <url>.sha256 is used); these are not: kubelet.")),
    ({"railyard_k8s_agent": "kwok"},
     ("k8s_worker: KWOK's download (https://github.com/kubernetes-sigs/kwok/releases/download/v0.8.0/kwok-linux-amd64) "
     "needs k8s_worker_kwok_release_checksum, 'sha256:<64 hex>' or 'sha256:<url of a checksum file>' (given ''); "
     "railyard never guesses a checksum.")),
    ({"k8s_worker_release_mirror": "https://mirror.example.com/k8s?x=1"},
     ("k8s_worker: k8s_worker_release_url must be an http(s) URL directory without a trailing '/', '?' or '#' "
     "(given 'https://mirror.example.com/k8s?x=1/v1.35.4/bin/linux/amd64').")),
], ids=["pinned-not-sha256", "kwok-without-checksum", "url-with-query"])
def test_the_preflight_refuses_what_would_install_unchecked(tmp_path, extra, message):
    rc, failed = _preflight(tmp_path, extra)
    assert rc != 0 and [f["msg"] for f in failed] == [message]


def test_the_preflight_takes_the_defaults_and_pinned_checksums(tmp_path):
    assert _preflight(tmp_path, {})[0] == 0
    assert _preflight(tmp_path, {"k8s_worker_release_checksums": {"kubelet": f"sha256:{WRONG}"}})[0] == 0
