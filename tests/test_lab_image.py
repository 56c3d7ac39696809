"""The lab node image: built offline, cached by recipe, boots systemd under podman."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import pytest

from railyard.lab import image as lab_image

# --------------------------------------------------------------------------- pure


def test_host_debian_sources_reads_deb822_and_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("RAILYARD_DEBIAN_MIRROR", raising=False)
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb deb-src\n"
        "# a comment\n"
        "URIs: http://mirror.example/debian/\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main contrib\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        "\n"
        "Types: deb\n"
        "URIs: http://mirror.example/other\n"
        "Suites: bookworm\n"
        "Components: main\n"
        "Enabled: no\n"
    )
    (d / "sec.list").write_text(
        "deb [arch=amd64 trusted=yes] http://mirror.example/debian-security bookworm-security main\n"
        "deb http://elsewhere.example/apt nodistro main\n"
    )
    (d / "ignored.list.disabled").write_text("deb http://ignored.example/debian bookworm main\n")
    sources = lab_image.host_debian_sources("bookworm", apt_dir=tmp_path, host_suite="")
    assert [(s.uri, s.suites) for s in sources] == [
        ("http://mirror.example/debian-security", ["bookworm-security"]),
        ("http://mirror.example/debian", ["bookworm", "bookworm-updates"]),
    ]
    sec, main = sources
    assert sec.trusted and sec.architectures == ["amd64"]
    assert main.components == ["main", "contrib"]
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in main.deb822()


def test_host_debian_sources_without_the_suite_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv("RAILYARD_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("deb http://mirror.example/debian trixie main\n")
    with pytest.raises(lab_image.ImageBuildError, match="RAILYARD_DEBIAN_MIRROR"):
        lab_image.host_debian_sources("bookworm", apt_dir=tmp_path, host_suite="")


def test_an_older_host_lends_its_archives_to_the_image_suite(tmp_path, monkeypatch):
    """A Debian 12 host lists only bookworm: its archives, keyring and options are reused
    for the trixie image, with the suite names swapped."""
    monkeypatch.delenv("RAILYARD_DEBIAN_MIRROR", raising=False)
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\n"
        "URIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        "\n"
        "Types: deb\n"
        "URIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\n"
        "Components: main\n"
    )
    (d / "other.list").write_text("deb http://elsewhere.example/apt nodistro main\n")
    sources = lab_image.host_debian_sources("trixie", apt_dir=tmp_path, host_suite="bookworm")
    assert [(s.uri, s.suites) for s in sources] == [
        ("http://mirror.example/debian", ["trixie", "trixie-updates"]),
        ("http://mirror.example/debian-security", ["trixie-security"]),
    ]
    assert sources[0].signed_by == "/usr/share/keyrings/debian-archive-keyring.gpg"
    # Without the host's own release to reuse, the error says what to set.
    with pytest.raises(lab_image.ImageBuildError, match="RAILYARD_DEBIAN_MIRROR"):
        lab_image.host_debian_sources("trixie", apt_dir=tmp_path, host_suite="bullseye")


def test_host_codename_reads_os_release(tmp_path):
    (tmp_path / "os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_CODENAME=bookworm\n')
    assert lab_image.host_codename(tmp_path / "os-release") == "bookworm"
    assert lab_image.host_codename(tmp_path / "missing") is None


def test_recipe_hash_follows_the_package_list(monkeypatch):
    before = lab_image.recipe_hash()
    assert before == lab_image.recipe_hash()
    monkeypatch.setattr(lab_image, "PACKAGES", (*lab_image.PACKAGES, "munge"))
    assert lab_image.recipe_hash() != before


# --------------------------------------------------------------------------- podman


@pytest.fixture(scope="module")
def podman_image():
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/setup-podman.sh installs it)")
    t0 = time.monotonic()
    first = lab_image.ensure()
    print(
        f"\nensure_image: {'built' if first.built else 'reused'} {first.ref} "
        f"in {time.monotonic() - t0:.1f} s"
    )
    return first


@pytest.mark.podman
def test_ensure_image_builds_labelled_image_and_caches_it(podman_image):
    first = podman_image
    info = lab_image.image_info(first.ref)
    assert info is not None, f"{first.ref} missing after ensure()"
    assert info["Id"] == first.image_id
    assert info["Labels"][lab_image.RECIPE_LABEL] == lab_image.recipe_hash()
    assert info["Config"]["Cmd"] == ["/sbin/init"]

    t0 = time.monotonic()
    ref = lab_image.ensure_image()
    elapsed = time.monotonic() - t0
    assert ref == lab_image.IMAGE_REF == first.ref
    assert lab_image.image_info(ref)["Id"] == first.image_id, "second ensure_image() rebuilt"
    print(f"second ensure_image(): {elapsed:.1f} s (an inspect, no build)")

    again = lab_image.ensure()
    assert not again.built and again.image_id == first.image_id


def _podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check)


@pytest.mark.podman
def test_nodes_boot_systemd_and_resolve_each_other(podman_image):
    tag = uuid.uuid4().hex[:8]
    net, names = f"rytest-{tag}", [f"rytest-{tag}-a", f"rytest-{tag}-b"]
    _podman("network", "create", net)
    try:
        for name in names:
            _podman(
                "run", "-d", "--name", name, "--hostname", name, "--network", net, podman_image.ref
            )
        for name in names:
            # `--wait` blocks until boot finishes. Right after `podman run` the exec itself
            # can fail on a loaded machine, so retry until a deadline.
            deadline = time.monotonic() + 180
            while True:
                res = _podman("exec", name, "systemctl", "is-system-running", "--wait", check=False)
                state = res.stdout.strip()
                if state in ("running", "degraded") or time.monotonic() > deadline:
                    break
                time.sleep(1)
            failed = _podman(
                "exec", name, "systemctl", "--failed", "--no-legend", check=False
            ).stdout
            assert state == "running", f"{name}: systemd {state!r} ({res.stderr.strip()}), failed units:\n{failed}"
        peer = _podman("exec", names[0], "getent", "hosts", names[1], check=False)
        assert peer.returncode == 0 and peer.stdout.split()[1].startswith(names[1]), peer
        ping = _podman("exec", names[1], "ping", "-c1", "-W5", names[0], check=False)
        assert ping.returncode == 0, ping.stdout + ping.stderr
    finally:
        for name in names:
            _podman("rm", "-f", "-t", "2", name, check=False)
        _podman("network", "rm", "-f", net, check=False)
