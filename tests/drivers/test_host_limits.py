"""The host's limits that every node container shares, checked before anything is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from railyard.drivers.podman import host_problems


def _proc_sys(tmp_path: Path, instances: int, watches: int) -> Path:
    inotify = tmp_path / "fs" / "inotify"
    inotify.mkdir(parents=True)
    (inotify / "max_user_instances").write_text(f"{instances}\n")
    (inotify / "max_user_watches").write_text(f"{watches}\n")
    return tmp_path


def test_debians_default_inotify_limits_are_refused_with_the_fix(tmp_path) -> None:
    problems = host_problems(_proc_sys(tmp_path, 128, 192540))
    assert len(problems) == 2
    instances, watches = problems
    assert instances.startswith("fs.inotify.max_user_instances is 128 on this host, below the 1024")
    assert "too many open files" in instances
    assert "`sysctl -w fs.inotify.max_user_instances=1024`" in instances
    assert "scripts/setup-podman.sh" in instances
    assert watches.startswith("fs.inotify.max_user_watches is 192540 on this host, below the 524288")


def test_limits_at_or_above_the_minimum_pass(tmp_path) -> None:
    assert host_problems(_proc_sys(tmp_path, 1024, 524288)) == []
    assert host_problems(_proc_sys(tmp_path / "more", 8192, 1048576)) == []


def test_an_unreadable_limit_is_left_to_podman(tmp_path) -> None:
    assert host_problems(tmp_path / "absent") == []


def test_the_lab_up_refuses_before_the_image_or_any_node(monkeypatch, tmp_path, lab_plan) -> None:
    from railyard.apply.engine import AutomationError
    from railyard.deploy import automation
    from railyard.drivers import podman
    from railyard.lab import image

    built = []
    monkeypatch.setattr(podman, "host_problems", lambda: host_problems(_proc_sys(tmp_path, 128, 524288)))
    monkeypatch.setattr(image, "ensure_image", lambda: built.append("image") or "img")
    with pytest.raises(AutomationError, match=r"cannot run the lab's node containers:\n- fs.inotify.max_user_instances"):
        automation._ensure_lab_image(lab_plan, lambda line: None)
    assert built == []
