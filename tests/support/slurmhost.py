"""Run a rendered Slurm config on a real, private slurmctld on this host.

``SlurmHost(conf_dir)`` copies the files in *conf_dir* (slurm.conf,
topology.conf, gres.conf, cgroup.conf, ...) into a private temp dir, rewrites
only what has to change to run here, starts a private ``munged`` and
``slurmctld -D`` and answers ``scontrol`` queries against it::

    with SlurmHost(out_dir) as host:
        topo = host.show_topology()

The host's own munge and Slurm (sockets, ports, /etc/slurm, /var/spool) are
never touched.  What is rewritten in slurm.conf, and why:

* ``SlurmctldHost`` -> ``<this host's short name>(127.0.0.1)``; slurmctld
  refuses to run on a host that is not listed ("This host ... not a valid
  controller"), and the address keeps clients off DNS.  Backup controllers and
  the legacy ControlMachine/ControlAddr/BackupController/BackupAddr and
  SlurmctldAddr keys are dropped.
* ``SlurmctldPort``/``SlurmdPort`` -> free local ports, so several harnesses
  (and a host Slurm) can run side by side.
* ``StateSaveLocation``, ``SlurmdSpoolDir``, ``Slurm{ctld,d}LogFile``,
  ``Slurm{ctld,d}PidFile`` (and ``SlurmSchedLogFile`` / filetext
  ``JobCompLoc`` if set) -> inside the temp dir.
* ``SlurmUser``/``SlurmdUser`` -> the user running the tests (root in CI), who
  owns the temp state dir.
* ``AuthInfo`` -> ``socket=<private munged socket>`` (other AuthInfo options
  are kept); the private munged has its own random key.
* every non-DEFAULT ``NodeName`` line gets ``NodeAddr=127.0.0.1`` (replacing
  any NodeAddr).  22.05 slurmctld *tolerates* unresolvable node names but
  retries getaddrinfo() 10 times a second apart for every node at start-up
  (``error: slurm_set_addr: Unable to resolve "gpu001"``), i.e. 10 s per node;
  and a real NodeAddr would make slurmctld ping addresses that are not ours.
* ``Include`` lines whose file was copied along are pointed at the copy.
* with ``accounting="none"`` (the default) an ``accounting_storage/slurmdbd``
  setup becomes ``accounting_storage/none`` and the other
  ``AccountingStorage*`` keys are dropped: without a reachable slurmdbd 22.05
  dies with "fatal: You are running with a database but for some reason we
  have no TRES from it", and ``AccountingStorageTRES=gres/gpu`` without
  slurmdbd is fatal as well.  ``accounting="keep"`` leaves them alone.

``host.rewrites`` lists what was changed; the rewritten file is
``host.slurm_conf``.

Nothing else (nodes, partitions, topology, gres, plugins) is changed.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Self

from ClusterShell.NodeSet import NodeSet

__all__ = [
    "SlurmHost",
    "SlurmctldError",
    "expand",
    "parse_kv_line",
    "slurm_missing_reason",
]

SLURMCTLD = "/usr/sbin/slurmctld"  # must be run through this name, not *-wlm
MUNGED = "/usr/sbin/munged"
SCONTROL = "scontrol"

LOG_TAIL_LINES = 40

# Global slurm.conf keys the harness owns (lower-case; keys are case-insensitive).
_DROPPED_KEYS = {
    "slurmctldhost",
    "controlmachine",
    "controladdr",
    "backupcontroller",
    "backupaddr",
    "slurmctldaddr",
}
# First keys that start a record line (NodeName=..., PartitionName=...), not globals.
_RECORD_KEYS = {"nodename", "partitionname", "nodeset", "frontendname", "downnodes"}

_TOKEN_RE = re.compile(r'([^\s=]+)=("(?:[^"\\]|\\.)*"|\S*)|(\S+)')
_KV_RE = re.compile(r"(?:(?<=\s)|^)([A-Za-z][\w/.:\-]*)=")


class SlurmctldError(RuntimeError):
    """slurmctld exited or never became ready.

    ``fatal`` is the first ``fatal:`` line slurmctld printed (or None),
    ``log`` its whole output, ``returncode`` its exit status (None if it was
    still running and had to be killed).
    """

    def __init__(self, message: str, *, fatal: str | None, log: str, returncode: int | None):
        self.fatal = fatal
        self.log = log
        self.returncode = returncode
        tail = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
        super().__init__(
            f"{message}\n--- last {LOG_TAIL_LINES} lines of slurmctld output ---\n{tail}"
        )


def slurm_missing_reason() -> str | None:
    """Why the real-daemon tests cannot run here, or None if they can."""
    for path in (SLURMCTLD, MUNGED):
        if not os.access(path, os.X_OK):
            return f"{path} not installed (run scripts/setup-slurm-host.sh)"
    if shutil.which(SCONTROL) is None:
        return "scontrol not installed (run scripts/setup-slurm-host.sh)"
    real = os.path.realpath(SLURMCTLD)
    if "emulator" in os.path.basename(real):
        return f"{SLURMCTLD} points at {real} (run scripts/setup-slurm-host.sh)"
    return None


def expand(hostlist: str | None) -> frozenset[str]:
    """Expand a Slurm hostlist (``gpu[001-004]``, ``su[1-2]``) into a set of names."""
    if not hostlist or hostlist in ("(null)", "None"):
        return frozenset()
    return frozenset(NodeSet(hostlist))


def parse_kv_line(line: str) -> dict[str, str]:
    """Parse one ``Key=Value Key2=Value two`` line of scontrol output.

    A value runs up to the next `` Key=``, so values with spaces (Reason=...)
    survive as long as they contain no ``word=``.
    """
    line = line.strip()
    matches = list(_KV_RE.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _strip_comment(line: str) -> str:
    # '#' starts a comment unless escaped as '\#'.
    m = re.search(r"(?<!\\)#", line)
    return line[: m.start()] if m else line


def _tokens(line: str) -> list[tuple[str | None, str]]:
    """Split a slurm.conf line into (key, value) pairs; bare words get key None."""
    out: list[tuple[str | None, str]] = []
    for m in _TOKEN_RE.finditer(line):
        if m.group(3) is not None:
            out.append((None, m.group(3)))
        else:
            out.append((m.group(1), m.group(2)))
    return out


def _join(tokens: Iterable[tuple[str | None, str]]) -> str:
    return " ".join(v if k is None else f"{k}={v}" for k, v in tokens)


class SlurmHost:
    """A private munged + slurmctld running a copy of a rendered config.

    Use as a context manager (raises :class:`SlurmctldError` if slurmctld does
    not come up), or call :meth:`start` / :meth:`stop` yourself.  For configs
    that are meant to fail use :meth:`expect_fatal`.

    ``SlurmctldError.fatal`` is the first ``fatal:`` line, or -- when
    slurmctld exited without one -- its last ``error:`` line, or the
    "cannot stat file" error it would otherwise retry for 60 s.

    ``overrides`` adds or replaces global slurm.conf options (e.g.
    ``{"AccountingStorageType": "accounting_storage/none"}``) after the
    harness's own rewrites.  ``keep=True`` (or env ``RAILYARD_KEEP_SLURMHOST=1``)
    leaves the temp dir behind for inspection.
    """

    def __init__(
        self,
        conf_dir: Path | str,
        *,
        timeout: float = 30.0,
        overrides: Mapping[str, str] | None = None,
        accounting: str = "none",
        keep: bool | None = None,
    ):
        if accounting not in ("none", "keep"):
            raise ValueError("accounting must be 'none' or 'keep'")
        self.accounting = accounting
        self.rewrites: list[str] = []
        self.conf_dir = Path(conf_dir)
        if not (self.conf_dir / "slurm.conf").is_file():
            raise FileNotFoundError(f"{self.conf_dir}/slurm.conf")
        self.timeout = timeout
        self.overrides = dict(overrides or {})
        self.keep = keep if keep is not None else os.environ.get("RAILYARD_KEEP_SLURMHOST") == "1"
        self.hostname = _short_hostname()
        self.workdir: Path | None = None
        self.slurm_conf: Path | None = None
        self._munged: subprocess.Popen | None = None
        self._ctld: subprocess.Popen | None = None
        self._ctld_out = None
        self.timings: dict[str, float] = {}

    # ----------------------------------------------------------------- setup
    def prepare(self) -> None:
        """Write the private copy of the config (done by :meth:`start`)."""
        if self.workdir is not None and self.workdir.exists():
            return
        self.workdir = Path(tempfile.mkdtemp(prefix="railyard-slurmhost-"))
        # munged insists that everyone can traverse its socket's directory.
        self.workdir.chmod(0o755)
        for sub in ("etc", "state", "spool", "log", "run", "munge"):
            (self.workdir / sub).mkdir(mode=0o755)
        etc = self.workdir / "etc"
        for f in sorted(self.conf_dir.iterdir()):
            if f.is_file():
                shutil.copy2(f, etc / f.name)
        self.munge_socket = self.workdir / "munge" / "munge.socket"
        self.munge_key = self.workdir / "munge.key"
        self.munge_key.write_bytes(os.urandom(1024))
        self.munge_key.chmod(0o600)
        self.ctld_port = _free_port()
        self.slurmd_port = _free_port()
        self.slurm_conf = etc / "slurm.conf"
        self.slurm_conf.write_text(self._rewrite((self.conf_dir / "slurm.conf").read_text()))

    def _rewrite(self, text: str) -> str:
        w = self.workdir
        assert w is not None
        user = getpass.getuser()
        lines = [(raw, _strip_comment(raw).strip()) for raw in text.splitlines()]
        parsed = [(raw, line, _tokens(line) if line else []) for raw, line in lines]

        # First pass: the global settings as written (last one wins, like Slurm).
        glob: dict[str, str] = {}
        for _raw, _line, toks in parsed:
            if toks and (toks[0][0] or "").lower() not in _RECORD_KEYS | {"include"}:
                for k, v in toks:
                    if k is not None:
                        glob[k.lower()] = v.strip('"')

        header: dict[str, str] = {
            "SlurmctldHost": f"{self.hostname}(127.0.0.1)",
            "SlurmctldPort": str(self.ctld_port),
            "SlurmdPort": str(self.slurmd_port),
            "SlurmUser": user,
            "SlurmdUser": user,
            "AuthInfo": ",".join(
                [f"socket={self.munge_socket}"]
                + [
                    o
                    for o in glob.get("authinfo", "").split(",")
                    if o and not o.startswith("socket=")
                ]
            ),
            "StateSaveLocation": str(w / "state"),
            "SlurmdSpoolDir": str(w / "spool"),
            "SlurmctldLogFile": str(w / "log" / "slurmctld.log"),
            "SlurmdLogFile": str(w / "log" / "slurmd.log"),
            "SlurmctldPidFile": str(w / "run" / "slurmctld.pid"),
            "SlurmdPidFile": str(w / "run" / "slurmd.pid"),
        }
        drop = set(_DROPPED_KEYS)
        self.rewrites = [
            f"SlurmctldHost={header['SlurmctldHost']} (was {glob.get('slurmctldhost')})",
            (
                "SlurmctldPort/SlurmdPort, SlurmUser/SlurmdUser, AuthInfo socket, "
                "state/spool/log/pid paths -> private"
            ),
            "NodeAddr=127.0.0.1 on every NodeName line",
        ]
        if "slurmschedlogfile" in glob:
            header["SlurmSchedLogFile"] = str(w / "log" / "sched.log")
        if glob.get("jobcomptype") == "jobcomp/filetext":
            header["JobCompLoc"] = str(w / "log" / "jobcomp.log")
        if (
            self.accounting == "none"
            and glob.get("accountingstoragetype") == "accounting_storage/slurmdbd"
        ):
            # 22.05 slurmctld with an unreachable slurmdbd and no state files:
            # "fatal: You are running with a database but for some reason we
            # have no TRES from it."  TRES gres/gpu without slurmdbd is fatal
            # too, and Enforce without it logs an error.
            header["AccountingStorageType"] = "accounting_storage/none"
            drop |= {k for k in glob if k.startswith("accountingstorage")} - {
                "accountingstoragetype"
            }
            self.rewrites.append(
                "AccountingStorageType=accounting_storage/none (was slurmdbd); dropped "
                + ", ".join(sorted(k for k in glob if k.startswith("accountingstorage")))
            )
        header.update(self.overrides)
        owned = drop | {k.lower() for k in header}

        body: list[str] = []
        for raw, line, toks in parsed:
            if not toks:
                body.append(raw)
                continue
            first = (toks[0][0] or toks[0][1]).lower()
            if first == "include":
                body.append(self._rewrite_include(line))
            elif first == "nodename" and toks[0][1].lower() != "default":
                kept = [(k, v) for k, v in toks if (k or "").lower() != "nodeaddr"]
                kept.insert(1, ("NodeAddr", "127.0.0.1"))
                body.append(_join(kept))
            elif first in _RECORD_KEYS:
                body.append(line)
            else:
                kept = [(k, v) for k, v in toks if k is None or k.lower() not in owned]
                if kept:
                    body.append(_join(kept))
        head = ["# --- railyard SlurmHost rewrites (tests/support/slurmhost.py) ---"]
        head += [f"{k}={v}" for k, v in header.items()]
        head.append(f"# --- original {self.conf_dir}/slurm.conf follows ---")
        return "\n".join(head + body) + "\n"

    def _rewrite_include(self, line: str) -> str:
        parts = line.split(None, 1)
        if len(parts) == 2:
            name = Path(parts[1].strip().strip('"')).name
            assert self.slurm_conf is not None
            if (self.slurm_conf.parent / name).is_file():
                return f"{parts[0]} {self.slurm_conf.parent / name}"
        return line

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.slurm_conf)
        return env

    # ------------------------------------------------------------- lifecycle
    def start(self) -> Self:
        """Start munged and slurmctld; return once ``scontrol ping`` answers.

        Raises :class:`SlurmctldError` (with ``.fatal`` and the log tail) if
        slurmctld exits or is not ready within ``timeout``; everything is
        stopped and cleaned up before it raises.
        """
        reason = slurm_missing_reason()
        if reason:
            raise RuntimeError(reason)
        t0 = time.monotonic()
        try:
            self.prepare()
            self._start_munged()
            self._start_ctld()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.timings["start_to_ready"] = time.monotonic() - t0
        return self

    def expect_fatal(self, timeout: float | None = None) -> str:
        """Start a config that must fail; return slurmctld's first fatal line.

        Raises AssertionError if slurmctld came up instead (it is then stopped).
        The full output stays available as :attr:`last_log`.
        """
        if timeout is not None:
            self.timeout = timeout
        try:
            self.start()
        except SlurmctldError as e:
            self.last_log = e.log
            if e.fatal is None:
                raise AssertionError(f"slurmctld failed without a fatal line: {e}") from e
            return e.fatal
        log = self.log()
        self.stop()
        self.last_log = log
        raise AssertionError(f"slurmctld started although a fatal error was expected:\n{log}")

    def _start_munged(self) -> None:
        assert self.workdir is not None
        w = self.workdir
        self._munged_out = open(w / "log" / "munged.out", "wb")  # noqa: SIM115 (daemon lifetime)
        self._munged = subprocess.Popen(
            [
                MUNGED,
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={self.munge_key}",
                f"--pid-file={w / 'munge' / 'munged.pid'}",
                f"--seed-file={w / 'munge' / 'munged.seed'}",
                f"--log-file={w / 'log' / 'munged.log'}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._munged_out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not self.munge_socket.exists():
            if self._munged.poll() is not None or time.monotonic() > deadline:
                out = (w / "log" / "munged.out").read_text(errors="replace")
                raise RuntimeError(f"munged did not start (rc={self._munged.poll()}):\n{out}")
            time.sleep(0.02)

    def _start_ctld(self) -> None:
        assert self.workdir is not None
        self._ctld_out_path = self.workdir / "log" / "slurmctld.out"
        self._ctld_out = open(self._ctld_out_path, "wb")  # noqa: SIM115 (daemon lifetime)
        # -D: foreground, logs to stderr as well; started via the `slurmctld`
        # name (run_in_daemon() keys off argv[0]; under *-wlm Gres= is dropped).
        self._ctld = subprocess.Popen(
            [SLURMCTLD, "-D"],
            env=self.env,
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._ctld_out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _wait_ready(self) -> None:
        assert self._ctld is not None
        deadline = time.monotonic() + self.timeout
        while True:
            rc = self._ctld.poll()
            if rc is not None:
                self._fail(f"slurmctld exited with status {rc} before it was ready", rc)
            if time.monotonic() > deadline:
                self._fail(f"slurmctld not ready after {self.timeout:.0f}s", None)
            # No raw TCP probe: slurmctld logs every empty connection as
            # "slurm_receive_msg ... Zero Bytes were transmitted or received".
            # A refused `scontrol ping` returns in a few milliseconds.
            p = subprocess.run(
                [SCONTROL, "ping"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            if p.returncode == 0 and " is UP" in p.stdout:
                return
            # A missing Include/topology.conf is not fatal at once: slurmctld
            # logs "s_p_parse_file: cannot stat file ..., retrying in 1sec up
            # to 60sec" and only then dies.  Fail fast on it.
            stuck = [line for line in self.log().splitlines() if "cannot stat file" in line]
            if stuck:
                self._fail("slurmctld cannot read a config file", None, fatal=stuck[0])
            time.sleep(0.05)

    def _fail(self, message: str, rc: int | None, fatal: str | None = None) -> None:
        if rc is None:
            self._stop_ctld(grace=1)
        log = self.log()
        if fatal is None:
            fatal = self.fatal_message(log)
        if fatal is None and rc is not None:
            # Some start-up failures exit(1) after a plain error, e.g.
            # "error: This host (vm/vm) not a valid controller".
            errors = [line for line in log.splitlines() if "error:" in line]
            fatal = errors[-1] if errors else None
        if fatal is not None:
            fatal = fatal.removeprefix("slurmctld: ").strip()
        raise SlurmctldError(message, fatal=fatal, log=log, returncode=rc)

    def stop(self) -> None:
        """Stop slurmctld and munged, then remove the temp dir (unless ``keep``)."""
        t0 = time.monotonic()
        self._stop_ctld()
        if self._munged is not None:
            _terminate(self._munged, 5)
            self._munged = None
            self._munged_out.close()
        self.timings["stop"] = time.monotonic() - t0
        if self.workdir is not None and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _stop_ctld(self, grace: float = 5) -> None:
        if self._ctld is not None:
            _terminate(self._ctld, grace)
            self._ctld = None
        if self._ctld_out is not None:
            self._ctld_out.close()
            self._ctld_out = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------- inspection
    def log(self) -> str:
        """Everything slurmctld printed so far (stderr of ``slurmctld -D``)."""
        path = getattr(self, "_ctld_out_path", None)
        if path is None or not path.exists():
            return ""
        return path.read_text(errors="replace")

    @staticmethod
    def fatal_message(log: str) -> str | None:
        """The first ``fatal:`` line in *log*, without the ``slurmctld: `` prefix."""
        for line in log.splitlines():
            if "fatal:" in line:
                return line.removeprefix("slurmctld: ").strip()
        return None

    def log_lines(self, pattern: str) -> list[str]:
        """Lines of :meth:`log` matching the regular expression *pattern*."""
        rx = re.compile(pattern)
        return [line for line in self.log().splitlines() if rx.search(line)]

    def scontrol(self, *args: str, check: bool = True) -> str:
        """Run ``scontrol ARGS...`` against this instance and return stdout."""
        p = subprocess.run(
            [SCONTROL, *args], env=self.env, capture_output=True, text=True, timeout=60, check=False
        )
        if check and p.returncode != 0:
            raise RuntimeError(
                f"scontrol {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}"
            )
        return p.stdout

    def _records(self, *args: str) -> list[dict[str, str]]:
        out = self.scontrol("-o", *args)
        return [parse_kv_line(line) for line in out.splitlines() if "=" in line]

    def show_topology(self) -> list[dict]:
        """``scontrol show topology`` as dicts.

        Each dict has ``SwitchName`` (str), ``Level`` (int), ``LinkSpeed``
        (str) and ``Nodes``/``Switches`` as frozensets of expanded names
        (empty when absent), plus any other key scontrol printed (as str).
        """
        result = []
        for rec in self._records("show", "topology"):
            d: dict = dict(rec)
            d["Level"] = int(rec.get("Level", "0"))
            d["Nodes"] = expand(rec.get("Nodes"))
            d["Switches"] = expand(rec.get("Switches"))
            result.append(d)
        return result

    def show_nodes(self) -> list[dict[str, str]]:
        """``scontrol -o show nodes`` as one dict of raw strings per node."""
        return self._records("show", "nodes")

    def show_partitions(self) -> list[dict[str, str]]:
        """``scontrol -o show partitions`` as one dict of raw strings per partition."""
        return self._records("show", "partitions")


def _terminate(proc: subprocess.Popen, grace: float) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
