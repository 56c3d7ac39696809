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
* ``remediate``: hosts where the drift check (``railyard drift``, the role in check mode)
  found that the role would change something. ``railyard up`` runs that check first and
  passes its hosts here: the role re-runs on exactly those hosts. The input is never kept
  in the state, so the next run without drift is a no-change one.
* ``read`` echoes: whether hosts still match the role is the drift check's job, too slow
  for every refresh.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import pulumi
from pulumi.dynamic import CheckFailure, CreateResult, ReadResult, Resource, UpdateResult

from railyard.apply.playbooks import (
    Progress,
    changed_hosts,
    playbook_yaml,
    runner_settings,
)
from railyard.deploy.providers.base import LOG_URN, Provider, ResourceLog, log_urn, sha256_json

STATE_KEYS = ("recap",)
REMEDIATE = "remediate"
# Where things are, not what they are: their content is in ``digest``.
LOCATION_KEYS = frozenset({"root", "inventory", "artifacts_dir"})


class PlaybookError(RuntimeError):
    pass


class PlaybookProvider(Provider):
    state_keys: ClassVar[frozenset[str]] = frozenset(STATE_KEYS)
    ignore_keys: ClassVar[frozenset[str]] = frozenset({LOG_URN, REMEDIATE}) | LOCATION_KEYS

    def comparable(self, inputs: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in inputs.items() if k not in ("secret_vars", REMEDIATE)}
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

    def drifted(self, _olds: dict[str, Any], news: dict[str, Any]) -> bool:
        return bool(news.get(REMEDIATE))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        log = ResourceLog(news.get(LOG_URN))
        changed = set(self.changed_keys(olds, news))
        if changed <= {"instances", "hosts"}:
            new_hosts = changed_hosts(olds, news)
            drifted = [h for h in news.get(REMEDIATE) or [] if h not in new_hosts]
            limit = sorted(set(new_hosts) | set(drifted))
            if not limit:
                return UpdateResult(self.outputs(news, {"recap": olds.get("recap") or {}}))
            if new_hosts:
                log(f"new or recreated hosts: running on {', '.join(new_hosts)}")
            if drifted:
                log(f"drifted from the plan: running on {', '.join(drifted)}")
            stats = run(news, log, limit)
            return UpdateResult(self.outputs(news, {"recap": {**(olds.get("recap") or {}), **stats}}))
        log(f"changed: {', '.join(sorted(changed))}")
        return UpdateResult(self.outputs(news, {"recap": run(news, log)}))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Nothing to undo: roles configure hosts, and hosts go with their Node."""

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, props)


def whole_numbers(value: Any) -> Any:
    """Pulumi carries every number as a float (protobuf Struct): 3306 arrives as 3306.0,
    which a role would write as it is (slurmdbd refuses ``StoragePort=3306.0``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


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

    extravars = whole_numbers({**(props.get("vars") or {}), **(props.get("secret_vars") or {}),
                               "railyard_artifacts_dir": props["artifacts_dir"]})
    with tempfile.TemporaryDirectory(prefix="railyard-ansible-") as tmp:
        os.chmod(tmp, 0o700)
        project = Path(tmp) / "project"
        project.mkdir()
        (project / "site.yml").write_text(playbook_yaml(props["group"], roles))
        inventories, envvars = runner_settings(root, props["inventory"], Path(tmp))
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
            envvars=envvars,
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
        remediate: list[str] | None = None,
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
            REMEDIATE: remediate or [],
            LOG_URN: log_urn(type(self), name, opts),
            "recap": None,
        }
        super().__init__(PlaybookProvider(), name, props, opts)
