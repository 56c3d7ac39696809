"""Ansible inventory plugin: a railyard cluster spec is an inventory.

    ansible-inventory -i inventories/lab/cluster.yaml --graph

ansible.cfg at the repository root enables it. The plugin compiles the spec with the same
compiler `railyard render` uses, so the groups and host vars are the plan's.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: railyard
short_description: railyard cluster spec as inventory
description:
  - Reads inventories/<env>/cluster.yaml, validates and compiles it, and adds the plan's
    hosts, groups (roles, Slurm partitions, fabric SUs) and host variables.
options: {}
"""

import os

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin


class InventoryModule(BaseInventoryPlugin):
    NAME = "railyard"

    def verify_file(self, path):
        return super().verify_file(path) and os.path.basename(path) in ("cluster.yaml", "cluster.yml")

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        try:
            from railyard.compiler.inventory import to_script
            from railyard.errors import SpecError
            from railyard.load import load_plan
        except ImportError as exc:
            raise AnsibleParserError(f"railyard is not importable by this Ansible's Python: {exc}") from exc
        try:
            plan = load_plan(path)
        except SpecError as exc:
            raise AnsibleParserError(str(exc)) from exc
        data = to_script(plan)
        hostvars = data.pop("_meta")["hostvars"]
        all_group = data.pop("all")
        for group in data:
            self.inventory.add_group(group)
        for group, body in data.items():
            for host in body.get("hosts", []):
                self.inventory.add_host(host, group=group)
            for child in body.get("children", []):
                self.inventory.add_child(group, child)
        for host, hv in hostvars.items():
            self.inventory.add_host(host)
            for key, value in hv.items():
                self.inventory.set_variable(host, key, value)
        for key, value in all_group["vars"].items():
            self.inventory.set_variable("all", key, value)
