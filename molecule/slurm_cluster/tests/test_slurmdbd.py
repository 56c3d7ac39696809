"""The slurmdbd role on ctl1, converged before slurm_controller as `railyard up` orders it
(slurmctld needs it): slurmdbd and MariaDB up, slurmdbd.conf 0600 slurm, the
accounting database built by slurmdbd itself, the password nowhere readable or logged, bad
passwords refused without being shown, and a new password taken in one run. The password is
the per-run secret the molecule dependency step writes (tests/support/molecule.py)."""

from __future__ import annotations

import shlex

import pytest
import testinfra

from tests.support import molecule as support
from tests.support.verify import assert_running, journal, run_role

NODE = "ctl1"
HOST = testinfra.get_host(f"podman://{NODE}")
PASSWORD = support.SLURMDBD_PASSWORD.read_text()
CONF = "/etc/slurm/slurmdbd.conf"
DB = "slurm_acct_db"


def sql(query: str, user: str | None = None, password: str | None = None):
    """mysql as root through the socket (Debian's unix_socket auth), or as *user*."""
    env = f"MYSQL_PWD={shlex.quote(password)} " if password is not None else ""
    who = f"-u {user} " if user else ""
    return HOST.run(f"{env}mysql {who}--batch --skip-column-names -e {shlex.quote(query)}")


@pytest.mark.parametrize("unit", ["mariadb", "slurmdbd"])
def test_daemons_running(unit):
    assert_running(HOST, unit)


def test_conf_is_secret_and_complete():
    conf = HOST.file(CONF)
    assert conf.mode == 0o600 and conf.user == "slurm" and conf.group == "slurm"
    lines = conf.content_string.splitlines()
    assert any("Ansible managed" in line for line in lines[:3]), lines[:3]
    for want in (
        "AuthType=auth/munge",
        f"DbdHost={NODE}",
        "DbdPort=6819",
        "SlurmUser=slurm",
        "StorageType=accounting_storage/mysql",
        "StorageUser=slurm",
        f"StorageLoc={DB}",
        f"StoragePass={PASSWORD}",
        "LogFile=/var/log/slurm/slurmdbd.log",
    ):
        assert want in lines, f"{want.split('=')[0]} missing or different in {CONF}"


def test_slurmdbd_listens():
    if not HOST.socket("tcp://0.0.0.0:6819").is_listening:
        pytest.fail("nothing listens on 6819" + journal(HOST, "slurmdbd"))


def test_mariadb_has_slurms_settings():
    got = sql(
        "select @@innodb_lock_wait_timeout, @@innodb_log_file_size, @@innodb_buffer_pool_size, @@bind_address"
    )
    assert got.rc == 0, got.stderr + journal(HOST, "mariadb")
    assert got.stdout.split() == ["900", str(64 << 20), str(2048 << 20), "127.0.0.1"]
    dropin = HOST.file("/etc/mysql/mariadb.conf.d/60-slurmdbd.cnf")
    assert dropin.user == "root" and dropin.mode == 0o644


def test_slurmdbd_takes_the_settings():
    """slurmdbd checks MariaDB's InnoDB settings at start and logs an error when they fall short."""
    got = HOST.run("journalctl -u slurmdbd --no-pager -o cat | grep -F 'not recommended'")
    assert got.stdout == "", got.stdout


def test_slurmdbd_built_its_database():
    """The database exists, and slurmdbd (logged in with the password) created its tables."""
    dbs = sql("show databases")
    assert dbs.rc == 0 and DB in dbs.stdout.split(), dbs.stdout + dbs.stderr
    tables = sql(f"show tables from {DB}").stdout.split()
    assert {"tres_table", "cluster_table", "user_table"} <= set(tables), tables + [
        journal(HOST, "slurmdbd")
    ]


def test_database_user_logs_in_with_the_password():
    got = sql("select 1", user="slurm", password=PASSWORD)
    assert got.rc == 0 and got.stdout.strip() == "1", got.stderr


def test_password_in_no_readable_file():
    """Only files others cannot read hold it (slurmdbd.conf, 0600)."""
    found = HOST.run(
        f"grep -rlsF -D skip -e {shlex.quote(PASSWORD)} /etc /var/log /run /tmp /var/tmp /root"
    )
    files = found.stdout.split()
    assert CONF in files, "grep does not find the password in slurmdbd.conf: the search is broken"
    readable = [f for f in files if HOST.file(f).mode & 0o044]
    assert readable == [], f"the password is in files group or others can read: {readable}"


def test_password_not_in_the_journal():
    # export: every field, with the command lines of the processes that logged
    got = HOST.run(f"journalctl --no-pager -o export | grep -caF -e {shlex.quote(PASSWORD)}")
    assert got.stdout.strip() == "0", f"the password is in {got.stdout.strip()} journal entries"
    log = HOST.run(f"grep -cF -e {shlex.quote(PASSWORD)} /var/log/slurm/slurmdbd.log")
    assert log.stdout.strip() == "0", "the password is in slurmdbd.log"


BAD = {
    "empty": "",
    "space": "bad pass1",
    "hash": "bad#pass2",
    "quote": "bad'pass3",
    "double quote": 'bad"pass4',
    "backslash": "bad\\pass5",
    "tab": "bad\tpass6",
    "newline": "badpass7\n",
    "not ascii": "badpäss8",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_preflight_refuses_a_password_slurmdbd_conf_cannot_carry(name):
    bad = BAD[name]
    got = run_role("slurmdbd", {"slurmdbd_storage_password": bad}, "slurmdbd_configure", hosts=NODE)
    assert got["rc"] != 0, f"a password with {name} was taken"
    assert got["task"].endswith("Check the storage password"), got
    assert got["msg"].startswith("slurmdbd: slurmdbd_storage_password must be"), got["msg"]
    assert not bad.strip() or bad.strip() not in got["msg"], "the message shows the password"


def test_a_new_password_is_taken_in_one_run():
    """The user's password and slurmdbd.conf change, slurmdbd restarts and reconnects; the
    same password again changes nothing (mysql_user compares hashes)."""
    new = PASSWORD + "-rotated"
    tags = "slurmdbd_configure,slurmdbd_run"
    try:
        first = run_role("slurmdbd", {"slurmdbd_storage_password": new}, tags, check=False, hosts=NODE)
        assert first["rc"] == 0 and first["changed"] >= 3, first
        assert sql("select 1", user="slurm", password=new).rc == 0
        assert sql("select 1", user="slurm", password=PASSWORD).rc != 0, (
            "the old password still works"
        )
        assert f"StoragePass={new}" in HOST.file(CONF).content_string.splitlines()
        assert_running(HOST, "slurmdbd")
        again = run_role("slurmdbd", {"slurmdbd_storage_password": new}, tags, check=False, hosts=NODE)
        assert again["rc"] == 0 and again["changed"] == 0, again
    finally:
        back = run_role("slurmdbd", {"slurmdbd_storage_password": PASSWORD}, tags, check=False, hosts=NODE)
    assert back["rc"] == 0, back
    assert sql("select 1", user="slurm", password=PASSWORD).rc == 0
