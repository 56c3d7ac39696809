"""Every role's meta/argument_specs.yml documents exactly its defaults (+ required vars)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from railyard.apply import roles as role_facts

ROOT = Path(__file__).resolve().parent.parent
ALL = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
# Helpers (a name starting with "_": roles/_shared) hold task files other roles import: no
# main entry point, defaults or molecule scenario of their own (test_helper_roles).
ROLES = [p for p in ALL if not role_facts.is_helper(p.name)]
HELPERS = [p for p in ALL if role_facts.is_helper(p.name)]


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {} if path.is_file() else {}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role):
    specs = _load(role / "meta" / "argument_specs.yml")
    assert "main" in specs.get("argument_specs", {}), f"{role.name}: meta/argument_specs.yml has no main entry point"
    options = specs["argument_specs"]["main"].get("options") or {}
    defaults = _load(role / "defaults" / "main.yml")
    required = {k for k, v in options.items() if v.get("required")}
    optional_without_default = {
        k for k, v in options.items() if not v.get("required") and k not in defaults and not k.startswith(role.name + "_")
    }
    # Every default is documented, every documented option is a default unless it is a
    # required input or a plan variable the role reads when present (e.g. railyard_gpus).
    assert set(defaults) - set(options) == set(), f"{role.name}: defaults without a spec: {set(defaults) - set(options)}"
    extra = set(options) - set(defaults) - required - optional_without_default
    assert extra == set(), f"{role.name}: specs without a default: {extra}"
    for key in defaults:
        assert key.startswith(role.name + "_"), f"{role.name}: default {key} lacks the {role.name}_ prefix"
        assert "default" in options[key], f"{role.name}: {key} has no default in argument_specs"
        assert options[key]["default"] == defaults[key], (
            f"{role.name}: {key} default {options[key]['default']!r} != defaults/main.yml {defaults[key]!r}"
        )
    for key, spec in options.items():
        assert spec.get("description"), f"{role.name}: {key} has no description"
        assert spec.get("type"), f"{role.name}: {key} has no type"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_layout(role):
    main = (role / "tasks" / "main.yml").read_text()
    for step in ("preflight.yml", "install.yml", "configure.yml"):
        assert step in main, f"{role.name}: tasks/main.yml does not hand off to {step}"
    for template in (role / "templates").glob("**/*.j2") if (role / "templates").is_dir() else []:
        first = template.read_text().splitlines()[0]
        assert "ansible_managed" in first, f"{template.relative_to(ROOT)} does not start with ansible_managed"


def test_every_role_is_a_role_or_a_helper():
    assert [p.name for p in HELPERS] == ["_shared"]
    assert [p.name for p in ROLES if not (p / "tasks" / "main.yml").is_file()] == []


@pytest.mark.parametrize("role", HELPERS, ids=lambda p: p.name)
def test_helper_roles(role):
    """A helper is never run alone: no main.yml, no defaults (an imported role's defaults
    would reach the whole play), no scenario; each task file an entry point whose inputs
    carry the helper's prefix and are documented; a README."""
    assert not (role / "tasks" / "main.yml").exists(), f"{role.name} is a helper: it has no tasks/main.yml"
    assert not (role / "defaults").exists(), f"{role.name}: a helper takes its inputs from the import's vars"
    assert not (role / "molecule").exists(), f"{role.name}: the scenarios of the roles that import it test it"
    assert (role / "README.md").is_file()
    specs = _load(role / "meta" / "argument_specs.yml").get("argument_specs") or {}
    files = sorted(f.stem for f in (role / "tasks").glob("*.yml"))
    assert sorted(specs) == files, f"{role.name}: entry points {sorted(specs)} != task files {files}"
    for entry, spec in specs.items():
        assert spec.get("short_description"), f"{role.name} {entry}: no short_description"
        for key, option in (spec.get("options") or {}).items():
            assert key.startswith(role.name + "_"), f"{role.name} {entry}: {key} lacks the {role.name}_ prefix"
            assert option.get("description") and option.get("type"), f"{role.name} {entry}: {key} needs type, description"
            assert option.get("required") or "default" in option, f"{role.name} {entry}: {key} is optional without a default"


def _imported_roles(role: Path) -> set[str]:
    """Roles whose task files this role's tasks and handlers import or include."""
    out = set()
    for f in [*role.glob("tasks/*.yml"), *role.glob("handlers/*.yml")]:
        def walk(tasks):
            for t in tasks or []:
                for key in ("ansible.builtin.import_role", "ansible.builtin.include_role", "import_role", "include_role"):
                    if key in t:
                        out.add(t[key]["name"])
                for key in ("block", "rescue", "always"):
                    walk(t.get(key))
        walk(yaml.safe_load(f.read_text()))
    return out


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_a_role_declares_the_roles_it_imports(role):
    """meta/railyard.yml's uses lists every role whose task files this one runs, so that
    their files are part of its digest (railyard/apply/playbooks.py, role_digest)."""
    imported = _imported_roles(role)
    declared = set(role_facts.uses(ROOT, role.name))
    assert imported <= declared, f"{role.name}: meta/railyard.yml uses lacks {sorted(imported - declared)}"
    direct = set(role_facts.facts(ROOT, role.name).get("uses") or [])
    assert direct <= imported, f"{role.name}: uses {sorted(direct - imported)}, which it never imports"
    assert all((ROOT / "roles" / r / "tasks").is_dir() for r in declared), f"{role.name}: uses a role that does not exist"
