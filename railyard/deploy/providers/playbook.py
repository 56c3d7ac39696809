"""``railyard:ansible:Playbook``: one role over one inventory group, through ansible-runner.

* Runs in a private directory (mode 0700, removed afterwards) holding a generated play
  ``- hosts: <group>  roles: [<role>]``, with ANSIBLE_CONFIG and ANSIBLE_ROLES_PATH
  pointing into the repository.
* Secret variables go to ansible-runner as extravars (its env/extravars file inside the
  private directory, never a command line); outputs keep only their hash, and events are
  not written to disk (the event handler returns False).
* Progress: each task and host result reaches the Pulumi output under this resource
  (changed/failed/unreachable lines and a recap are kept, ok/skipped are transient).
* A changed digest, group or variable re-runs the role on all its hosts; only new or
  recreated nodes (``instances``) re-run it on those hosts alone.
* ``read`` echoes: whether hosts still match the role is the drift check's job
  (``--check --diff``), too slow for every refresh.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import pulumi
from pulumi.dynamic import CheckFailure, CreateResult, ReadResult, Resource, UpdateResult

from railyard.deploy.playbooks import (
    Progress,
    changed_hosts,
    connection_plugin_dir,
    playbook_yaml,
    podman_overrides,
)
from railyard.deploy.providers.base import LOG_URN, Provider, ResourceLog, log_urn, sha256_json

STATE_KEYS = ("recap",)
# Where things are, not what they are: their content is in ``digest``.
LOCATION_KEYS = frozenset({"root", "inventory", "artifacts_dir"})


class PlaybookError(RuntimeError):
    pass


class PlaybookProvider(Provider):
    state_keys: ClassVar[frozenset[str]] = frozenset(STATE_KEYS)
    ignore_keys: ClassVar[frozenset[str]] = frozenset({LOG_URN}) | LOCATION_KEYS

    def comparable(self, inputs: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in inputs.items() if k != "secret_vars"}
        if "secret_vars" in inputs:
            out["secret_vars_sha256"] = sha256_json(inputs["secret_vars"])
        return out

    def problems(self, news: dict[str, Any]) -> list[CheckFailure]:
        root = Path(str(news.get("root", "")))
        missing = [r for r in news.get("roles", []) if not (root / "roles" / r / "tasks" / "main.yml").is_file()]
        if missing:
            return [CheckFailure("roles", f"no role {', '.join(missing)} under {root / 'roles'}")]
        return []

    def create(self, props: dict[str, Any]) -> CreateResult:
        stats = run(props, ResourceLog(props.get(LOG_URN)))
        return CreateResult(props["name"], self.outputs(props, {"recap": stats}))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        log = ResourceLog(news.get(LOG_URN))
        changed = set(self.changed_keys(olds, news))
        if changed <= {"instances", "hosts"}:
            limit = changed_hosts(olds, news)
            if not limit:
                return UpdateResult(self.outputs(news, {"recap": olds.get("recap") or {}}))
            log(f"new or recreated hosts: running on {', '.join(limit)} only")
            stats = run(news, log, limit)
            return UpdateResult(self.outputs(news, {"recap": {**(olds.get("recap") or {}), **stats}}))
        log(f"changed: {', '.join(sorted(changed))}")
        return UpdateResult(self.outputs(news, {"recap": run(news, log)}))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Nothing to undo: roles configure hosts, and hosts go with their Node."""

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, props)


def run(props: dict[str, Any], log: ResourceLog, limit: list[str] | None = None) -> dict[str, Any]:
    """Run the play; the per-host recap. Raises :class:`PlaybookError` naming what failed."""
    import ansible_runner

    root = Path(props["root"])
    roles: list[str] = list(props["roles"])
    progress = Progress()

    def on_event(event: dict[str, Any]) -> bool:
        for kind, text in progress.feed(event):
            (log.status if kind == "status" else log)(text)
        return False  # keep events (and anything in them) off the disk

    bindir = str(Path(sys.executable).parent)
    plugins = connection_plugin_dir(root)
    extravars = {**(props.get("vars") or {}), **(props.get("secret_vars") or {}),
                 "railyard_artifacts_dir": props["artifacts_dir"]}
    with tempfile.TemporaryDirectory(prefix="railyard-ansible-") as tmp:
        os.chmod(tmp, 0o700)
        project = Path(tmp) / "project"
        project.mkdir()
        (project / "site.yml").write_text(playbook_yaml(props["group"], roles))
        inventories = [props["inventory"]]
        overrides = podman_overrides(json.loads(Path(props["inventory"]).read_text())) if plugins else {}
        if overrides:
            (Path(tmp) / "podman-connection.json").write_text(json.dumps(overrides))
            inventories.append(str(Path(tmp) / "podman-connection.json"))
        log.status(f"ansible-playbook {', '.join(roles)} on {props['group']}"
                   + (f" (limit {','.join(limit)})" if limit else ""))
        result = ansible_runner.run(
            private_data_dir=tmp,
            playbook="site.yml",
            inventory=inventories,
            extravars=extravars,
            limit=",".join(limit) if limit else None,
            quiet=True,
            event_handler=on_event,
            envvars={
                "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
                "ANSIBLE_ROLES_PATH": str(root / "roles"),
                "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",  # this venv's ansible
                "ANSIBLE_FORCE_COLOR": "0",
                "ANSIBLE_NOCOLOR": "1",
                # The pipelining podman connection: one `podman exec` per module instead of four.
                **({"ANSIBLE_CONNECTION_PLUGINS": str(plugins), "ANSIBLE_PIPELINING": "true"} if plugins else {}),
            },
        )
        if result.rc != 0 or result.status != "successful":
            tail = "" if progress.failures else _tail(result)
            raise PlaybookError(
                f"role {', '.join(roles)} on {props['group']}: ansible-playbook {result.status} "
                f"(exit {result.rc})" + "".join(f"\n  {f}" for f in progress.failures[:10]) + tail
            )
    return dict(progress.stats)


def _tail(result: Any) -> str:
    """The last lines Ansible printed, for failures that produced no task event (syntax errors)."""
    try:
        lines = result.stdout.read().strip().splitlines()[-8:]
    except Exception:  # noqa: BLE001
        return ""
    return "".join(f"\n  {line}" for line in lines)


class Playbook(Resource, module="railyard/ansible", name="Playbook"):
    recap: pulumi.Output[dict]

    def __init__(
        self,
        name: str,
        *,
        roles: list[str],
        group: str,
        hosts: list[str],
        instances: pulumi.Input[dict[str, str]],
        digest: str,
        inventory: str,
        artifacts_dir: str,
        root: str,
        vars: dict[str, Any] | None = None,
        secret_vars: pulumi.Input[dict[str, Any]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "name": name,
            "roles": roles,
            "group": group,
            "hosts": hosts,
            "instances": instances,
            "digest": digest,
            "vars": vars or {},
            "secret_vars": pulumi.Output.secret(secret_vars or {}),
            "inventory": inventory,
            "artifacts_dir": artifacts_dir,
            "root": root,
            LOG_URN: log_urn(type(self), name, opts),
            "recap": None,
        }
        super().__init__(PlaybookProvider(), name, props, opts)
