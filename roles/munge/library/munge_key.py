#!/usr/bin/python
"""Write a MUNGE key given in base64, as raw bytes, atomically and idempotently."""

from __future__ import annotations

DOCUMENTATION = r"""
module: munge_key
short_description: Write a base64-encoded MUNGE key as raw bytes
description:
  - Decodes O(key) and writes the bytes to O(path) with an atomic rename, only when they
    differ from the file's current bytes (compared by SHA-256, never shown).
  - Supports check mode; the diff never contains key material.
options:
  key:
    description: The key, base64 (whitespace ignored).
    type: str
    required: true
  path:
    description: Destination file.
    type: path
    required: true
  min_bytes:
    description: Smallest accepted decoded size.
    type: int
    default: 32
extends_documentation_fragment: [files]
author: railyard
"""

EXAMPLES = r"""
- name: Write the cluster key
  munge_key:
    key: "{{ munge_key }}"
    path: /etc/munge/munge.key
    owner: munge
    group: munge
    mode: "0400"
  no_log: true
"""

RETURN = r"""
path:
  description: The key file.
  returned: always
  type: str
"""

import base64
import binascii
import hashlib
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "key": {"type": "str", "required": True, "no_log": True},
            "path": {"type": "path", "required": True},
            "min_bytes": {"type": "int", "default": 32},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        data = base64.b64decode("".join(module.params["key"].split()), validate=True)
    except (binascii.Error, ValueError):
        module.fail_json(msg="munge_key is not valid base64", path=path)
    if len(data) < module.params["min_bytes"]:
        module.fail_json(
            msg=f"munge_key decodes to {len(data)} bytes; at least {module.params['min_bytes']} needed",
            path=path,
        )

    current = None
    if os.path.exists(path):
        with open(path, "rb") as fh:
            current = hashlib.sha256(fh.read()).digest()
    changed = current != hashlib.sha256(data).digest()

    if changed and not module.check_mode:
        directory = os.path.dirname(path) or "."
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".munge.key.")
        try:
            os.fchmod(fd, 0o400)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            module.atomic_move(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    file_args = module.load_file_common_arguments(module.params)
    if os.path.exists(path):
        changed = module.set_fs_attributes_if_different(file_args, changed)
    elif module.check_mode:
        changed = True
    module.exit_json(changed=changed, path=path, diff={"before": {"key": "(hidden)" if current else "(absent)"},
                                                      "after": {"key": "(hidden, changed)" if changed else "(hidden)"}})


if __name__ == "__main__":
    main()
