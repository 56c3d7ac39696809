"""Field types for every spec string that reaches a rendered file.

Each type says what its text may hold, so no value can carry a newline, a comment, a
second option or a shell substitution into slurm.conf, exports, a mount unit, enroot.conf
or a Kubernetes object. A refusal names the rule that was broken, quotes the value as
given and says how to write it.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator

# Limits on what a hostlist may expand to, checked before anything is expanded: the
# largest GPU clusters have tens of thousands of nodes.
MAX_HOSTS = 100_000  # in one hostlist, and nodes in the whole spec
MAX_NAMED = 1_000_000  # names in all the hostlists of a spec together, before expanding them
MAX_DIGITS = 9  # of a number in a hostlist range or a pattern width

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def _show(value: str) -> str:
    """The value as given, quoted, shortened if long."""
    return repr(value if len(value) <= 80 else value[:77] + "...")


def _bad_char(value: str, allowed: str) -> str | None:
    if re.fullmatch(f"(?:{allowed})*", value):  # the common case: one match, not one per character
        return None
    for ch in value:
        if not re.match(allowed, ch):
            return repr(ch) if ch.isprintable() and ch != " " else f"{ch!r} ({'a space' if ch == ' ' else 'a control character'})"
    return None


# ---------------------------------------------------------------- names


def label_problem(value: str, what: str = "a name", limit: int = 63) -> str | None:
    """RFC 1123 / DNS-1123 label: what hostnames and Kubernetes names are made of."""
    if len(value) <= limit and _LABEL.fullmatch(value):
        return None  # the common case, without the search for what is wrong
    if not value:
        return f"{what} cannot be empty"
    if len(value) > limit:
        return (f"{_show(value)} is {len(value)} characters; {what} may have at most {limit} "
                "(the DNS label limit of RFC 1123); shorten it")
    if value != value.lower() and value.lower() == value.lower().strip() and _LABEL.fullmatch(value.lower()):
        return f"{_show(value)} has upper-case letters; {what} is lower case: write {value.lower()!r}"
    bad = _bad_char(value, r"[a-z0-9-]")
    if bad:
        return f"{_show(value)} holds {bad}; {what} holds only lower-case letters, digits and '-'"
    if value[0] == "-" or value[-1] == "-":
        return f"{_show(value)} starts or ends with '-'; {what} starts and ends with a letter or digit"
    return None


def hostname_problem(value: str) -> str | None:
    """RFC 1123, and a letter first as railyard always asked (Slurm hostlists and group
    names read a leading number badly)."""
    problem = label_problem(value, "a hostname")
    if problem is None and not value[0].isalpha():
        problem = f"{_show(value)} starts with a digit; a hostname here starts with a letter"
    return problem


def _check(problem: str | None, value: Any) -> Any:
    if problem:
        raise ValueError(problem)
    return value


def _k8s_name(value: str) -> str:
    """A Kubernetes object name or namespace (DNS-1123 label): also Slurm and group names."""
    problem = label_problem(value, "a name")
    if problem is None and not value[0].isalpha():
        problem = f"{_show(value)} starts with a digit; a name here starts with a letter"
    return _check(problem, value)


Name = Annotated[str, AfterValidator(_k8s_name)]


def _hostname(value: str) -> str:
    return _check(hostname_problem(value), value)


def _node_name(value: str) -> str:
    """One node, where one is expected: a hostlist here would silently take its first name."""
    if any(c in value for c in ",[]"):
        try:
            count = hostlist_size(value)
        except ValueError:
            count = 0
        many = f"names {count} nodes" if count > 1 else "is a list"
        raise ValueError(f"{_show(value)} {many}, but this field takes exactly one node; write one name, "
                         "e.g. 'nfs1'")
    return _hostname(value)


Hostname = Annotated[str, AfterValidator(_hostname)]
NodeName = Annotated[str, AfterValidator(_node_name)]


def dns_problem(value: str, what: str = "a DNS name", need_dot: bool = True) -> str | None:
    if len(value) > 253:
        return f"{_show(value)} is {len(value)} characters; {what} may have at most 253"
    labels = value.split(".")
    if need_dot and len(labels) < 2:
        return f"{_show(value)} has no dot; {what} is like 'cluster.example.com'"
    for label in labels:
        problem = label_problem(label, "each part between dots")
        if problem:
            return f"{_show(value)} is not {what}: {problem}"
    return None


def _domain(value: str) -> str:
    problem = dns_problem(value, "a domain")
    if problem is None and not value.rsplit(".", 1)[-1].isalpha():
        problem = f"{_show(value)} ends in {value.rsplit('.', 1)[-1]!r}; a domain ends in letters (e.g. '.example.com')"
    return _check(problem, value)


def _host(value: str) -> str:
    """A host outside the spec's nodes (a database server): a name or a dotted name."""
    return _check(dns_problem(value, "a host name", need_dot=False), value)


Domain = Annotated[str, AfterValidator(_domain)]
DnsName = Annotated[str, AfterValidator(_host)]


# ---------------------------------------------------------------- hostlists and patterns

_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?:/(\d+))?)?$")
_ITEM_RX = r"(?:[A-Za-z0-9._-]+|\[[0-9,/-]+\])+"
_HOSTLIST = re.compile(rf"^{_ITEM_RX}(?:,{_ITEM_RX})*$")
_ITEM = re.compile(_ITEM_RX)
_BRACKETS = re.compile(r"\[([^\]]*)\]")


@functools.lru_cache(maxsize=1 << 16)
def hostlist_size(text: str) -> int:
    """How many names a hostlist (``gpu[001-032],login1``) names, without expanding it.
    Raises ValueError on anything beyond names, commas and numeric [ranges].

    Cached: a spec's hostlists are counted when each field is checked and again for the
    spec's limits (Cluster._bounded), and every group's GPU devices are often one text."""
    if not text.strip():
        raise ValueError("an empty hostlist; write e.g. 'gpu[001-032],login1'")
    bad = _bad_char(text, r"[ -~]")
    if bad:
        raise ValueError(f"{bad} cannot be in a hostlist; it holds names, commas and [ranges]")
    if _HOSTLIST.fullmatch(text):  # well formed: count the ranges; else find what is wrong below
        total = 0
        for item in _ITEM.findall(text):
            count = 1
            for inner in _BRACKETS.findall(item):
                count *= _ranges(inner)
            total += count
            if total > MAX_HOSTS:
                raise ValueError(f"it names more than {MAX_HOSTS} hosts, the limit of one hostlist")
        return total
    total = 0
    depth = 0
    item: list[str] = []
    items: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError("brackets inside brackets; write ranges as gpu[001-004]")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("a ']' without its '['")
        if ch == "," and depth == 0:
            items.append("".join(item))
            item = []
        else:
            item.append(ch)
    if depth:
        raise ValueError("a '[' without its ']'")
    items.append("".join(item))
    for it in items:
        it = it.strip()
        if not it:
            raise ValueError("an empty name between commas")
        count = 1
        for part in re.split(r"(\[[^\]]*\])", it):
            if not part:
                continue
            if part.startswith("["):
                count *= _ranges(part[1:-1])
            else:
                bad = _bad_char(part, r"[A-Za-z0-9._-]")
                if bad:
                    raise ValueError(f"{bad} cannot be in a host name; a hostlist holds names, commas and [ranges]")
        total += count
        if total > MAX_HOSTS:
            raise ValueError(f"it names more than {MAX_HOSTS} hosts, the limit of one hostlist")
    return total


def _ranges(text: str) -> int:
    count = 0
    for r in text.split(","):
        m = _RANGE.fullmatch(r.strip())
        if not m or any(g and len(g) > MAX_DIGITS for g in m.groups()):
            raise ValueError(f"[{text}] is not a range list; write e.g. [001-032] or [1,3,5-8] "
                             f"(numbers of up to {MAX_DIGITS} digits)")
        lo, hi, step = m.group(1), m.group(2), m.group(3)
        if hi is None:
            count += 1
            continue
        if int(hi) < int(lo):
            raise ValueError(f"range {lo}-{hi} runs backwards; write {hi}-{lo}")
        if step is not None and int(step) < 1:
            raise ValueError(f"range step /{step} must be 1 or more")
        count += (int(hi) - int(lo)) // int(step or 1) + 1
        if count > MAX_HOSTS:
            raise ValueError(f"[{text}] names more than {MAX_HOSTS} hosts, the limit of one hostlist")
    return count


def _hostlist(value: str) -> str:
    try:
        hostlist_size(value)
    except ValueError as exc:
        raise ValueError(f"{_show(value)} is not a valid hostlist: {exc}") from None
    return value


Hostlist = Annotated[str, AfterValidator(_hostlist)]

_PATTERN = re.compile(r"^([a-z0-9-]*)\{index(?::(0[1-9]|[1-9]?)d?)?\}([a-z0-9-]*)$")


def _pattern(value: str) -> str:
    m = _PATTERN.fullmatch(value)
    if m is None or not (m.group(1) or m.group(3)):
        raise ValueError(
            f"pattern {_show(value)} is not a name with one {{index}} field; write e.g. 'gpu{{index:03}}' "
            "(lower-case letters, digits, '-', and {index}, {index:0N} or {index:0Nd} with N from 1 to 9)"
        )
    if m.group(2) and not m.group(2).startswith("0"):
        raise ValueError(f"pattern {_show(value)} pads with spaces; a hostname cannot hold them: write "
                         f"{{index:0{m.group(2)}}} to pad with zeros")
    return value


Pattern = Annotated[str, AfterValidator(_pattern)]


# ---------------------------------------------------------------- networks


def _network(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return ipaddress.IPv4Network(value)
        except ValueError as exc:
            if "host bits set" in str(exc):
                net = ipaddress.IPv4Network(value, strict=False)
                raise ValueError(f"{_show(value)} has host bits set: the address part goes past the "
                                 f"/{net.prefixlen} prefix; the network is {str(net)!r}") from None
            raise ValueError(f"{_show(value)} is not an IPv4 network; write it as address/prefix, "
                             "e.g. '10.77.0.0/24'") from None
    return value


_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"  # 0-255, no leading zero: as ipaddress reads it
_DOTTED = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}")


def _address(value: Any) -> Any:
    if isinstance(value, str):
        m = _DOTTED.fullmatch(value)
        if m is not None:  # the usual form, without ipaddress's parser: a large spec pins 70,000
            a, b, c, d = map(int, m.groups())
            return ipaddress.IPv4Address(a << 24 | b << 16 | c << 8 | d)
        try:
            return ipaddress.IPv4Address(value)
        except ValueError:
            raise ValueError(f"{_show(value)} is not an IPv4 address; write e.g. '10.77.0.5'") from None
    return value


IPv4Net = Annotated[ipaddress.IPv4Network, BeforeValidator(_network)]
IPv4Addr = Annotated[ipaddress.IPv4Address, BeforeValidator(_address)]


# ---------------------------------------------------------------- paths

_PATH_CHAR = r"[A-Za-z0-9._+-]"
# Never a mount point or an export: the root, and the trees the system runs from.
SYSTEM_TREES = ("/proc", "/sys", "/dev", "/etc", "/usr", "/boot", "/bin", "/sbin", "/lib",
                "/lib32", "/lib64", "/run")
SYSTEM_PATHS = ("/", "/var")


def normal_path(value: str, tokens: tuple[str, ...] = ()) -> str:
    """An absolute path without '.' or '..' parts and with single slashes: '//shared/' is
    '/shared'. Only letters, digits and '._+-' in names, and the ``tokens`` given."""
    if not value.startswith("/"):
        raise ValueError(f"{_show(value)} is not an absolute path; write it from the root, e.g. '/{value.lstrip('./')}'")
    parts = value.split("/")
    if ".." in parts or "." in parts:
        raise ValueError(f"{_show(value)} has a '.' or '..' part; write the path it means without them")
    check = value
    for token in tokens:
        check = check.replace(token, "x")
    bad = _bad_char(check.replace("/", ""), _PATH_CHAR)
    if bad:
        raise ValueError(f"{_show(value)} holds {bad}; a path here holds letters, digits and '._+-/'"
                         + (f" (and {', '.join(tokens)})" if tokens else ""))
    return "/" + "/".join(p for p in parts if p)


def _abs_path(value: str) -> str:
    return normal_path(value)


def _mount_path(value: str) -> str:
    path = normal_path(value)
    if path in SYSTEM_PATHS or any(path == t or path.startswith(t + "/") for t in SYSTEM_TREES):
        raise ValueError(
            f"{_show(value)} is {'the system path ' + repr(path) if path != value else 'a system path'}"
            f"; never mount or export /, /var or anything under {', '.join(SYSTEM_TREES)}: use a path of "
            "its own, e.g. '/shared' or '/export/home'"
        )
    return path


AbsPath = Annotated[str, AfterValidator(_abs_path)]
MountPath = Annotated[str, AfterValidator(_mount_path)]

# enroot.conf is read by a shell: these substitutions, and no others, may appear.
ENROOT_TOKENS = ("$(id -u)", "$(id -g)", "${UID}", "${USER}", "$UID", "$USER")


def _enroot_path(value: str) -> str:
    return normal_path(value, ENROOT_TOKENS)


EnrootPath = Annotated[str, AfterValidator(_enroot_path)]


def _device_list(value: str) -> str:
    """gres.conf File=: /dev/nvidia0, /dev/nvidia[0-7], or a comma list of those."""
    try:
        hostlist_size(value.replace("/", "x"))
    except ValueError as exc:
        raise ValueError(f"{_show(value)} is not a device list ({exc}); write e.g. '/dev/nvidia[0-7]'") from None
    for item in re.split(r",(?![^\[]*\])", value):
        if not re.fullmatch(r"^/dev/[A-Za-z0-9_/-]+(\[[0-9,-]+\])?$", item.strip()):
            raise ValueError(f"{_show(value)}: {item!r} is not a device under /dev; write e.g. '/dev/nvidia[0-7]'")
    return value


DeviceList = Annotated[str, AfterValidator(_device_list)]


def device_count(value: str) -> int:
    return hostlist_size(value.replace("/", "x"))


# ---------------------------------------------------------------- options

# exports(5): every option the kernel server and nfs-ganesha's mapping understand.
EXPORT_FLAGS = frozenset({
    "rw", "ro", "sync", "async", "secure", "insecure", "wdelay", "no_wdelay", "hide", "nohide",
    "crossmnt", "subtree_check", "no_subtree_check", "insecure_locks", "secure_locks",
    "no_auth_nlm", "auth_nlm", "root_squash", "no_root_squash", "all_squash", "no_all_squash",
    "mp", "pnfs", "no_pnfs", "security_label", "no_acl", "acl",
})
EXPORT_VALUES = {
    "anonuid": r"\d{1,10}",
    "anongid": r"\d{1,10}",
    "fsid": r"(root|\d{1,10}|[0-9a-fA-F-]{1,36})",
    "sec": r"(sys|krb5|krb5i|krb5p)(:(sys|krb5|krb5i|krb5p))*",
    "mountpoint": r"/[A-Za-z0-9._/+-]*",
    "mp": r"/[A-Za-z0-9._/+-]*",
    "refer": r"/[A-Za-z0-9._/+-]*@[A-Za-z0-9.-]+",
}


def _export_option(value: str) -> str:
    name, eq, arg = value.partition("=")
    if not eq and value in EXPORT_FLAGS:
        return value
    if eq and name in EXPORT_VALUES and re.fullmatch(EXPORT_VALUES[name], arg):
        return value
    raise ValueError(
        f"{_show(value)} is not an NFS export option railyard knows; use one of "
        f"{', '.join(sorted(EXPORT_FLAGS))}, or {', '.join(k + '=...' for k in sorted(EXPORT_VALUES))} "
        "(see exports(5)), one option per list item"
    )


_MOUNT_OPTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}(=[A-Za-z0-9_.:/+@-]{1,255})?$")


def _mount_option(value: str) -> str:
    if not _MOUNT_OPTION.fullmatch(value):
        bad = _bad_char(value, r"[A-Za-z0-9_.:/+@=-]")
        why = f"holds {bad}" if bad else "is not of the form name or name=value"
        raise ValueError(f"mount option {_show(value)} {why}; write one option per list item as name or "
                         "name=value (letters, digits and '_.:/+@-'), e.g. 'vers=4.2'")
    return value


ExportOption = Annotated[str, AfterValidator(_export_option)]
MountOption = Annotated[str, AfterValidator(_mount_option)]


def _words(value: str) -> str:
    """Command-line options for a tool (mksquashfs): words of safe characters, single spaces."""
    if not re.fullmatch(r"^[A-Za-z0-9_.=-]+( [A-Za-z0-9_.=-]+)*$", value):
        bad = _bad_char(value, r"[A-Za-z0-9_.= -]")
        raise ValueError(f"{_show(value)} {'holds ' + bad if bad else 'has extra spaces'}; write options as "
                         "words of letters, digits and '_.=-' separated by one space, e.g. '-comp lzo -noD'")
    return value


Words = Annotated[str, AfterValidator(_words)]


def _plain(pattern: str, example: str, what: str) -> Any:
    rx = re.compile(pattern)

    def check(value: str) -> str:
        if not rx.fullmatch(value):
            raise ValueError(f"{_show(value)} is not {what}; write e.g. {example!r}")
        return value

    return AfterValidator(check)


UserName = Annotated[str, _plain(r"^[a-z_][a-z0-9_-]{0,31}$", "root", "a user name (lower case, up to 32)")]
GroupName = Annotated[str, _plain(r"^[a-z_][a-z0-9_-]{0,31}$", "hpcadmin", "a group name (lower case, up to 32)")]
# Slurm account and QOS names: sacctmgr folds them to lower case, so only lower case here.
SlurmAccountName = Annotated[str, _plain(
    r"^[a-z][a-z0-9_-]{0,63}$", "ml-research",
    "a Slurm account or QOS name (lower case letters, digits, '_' and '-', a letter first, up to 64)")]
# A one-line description that goes into an API object (a PriorityClass's): plain words.
Description = Annotated[str, _plain(
    r"^[A-Za-z0-9][A-Za-z0-9 .,;:()_/+-]{0,199}$", "Long training runs; may preempt batch",
    "a description: one line of up to 200 letters, digits, spaces and '.,;:()_/+-', a letter or digit first")]
BmcUser = Annotated[str, _plain(r"^[A-Za-z0-9._@-]{1,64}$", "admin", "a BMC user name (letters, digits, '._@-')")]
SystemId = Annotated[str, _plain(r"^[A-Za-z0-9._-]{1,64}$", "System.Embedded.1", "a Redfish system id")]
AptName = Annotated[str, _plain(r"^[a-z0-9][a-z0-9+.-]{1,99}$", "enroot", "a Debian package name")]
Version3 = Annotated[str, _plain(r"^\d{1,4}\.\d{1,4}\.\d{1,4}$", "0.24.0", "a version x.y.z")]
NicName = Annotated[str, _plain(r"^[A-Za-z0-9_.-]{1,64}$", "mlx5_0", "an RDMA device name")]
GpuType = Annotated[str, _plain(
    r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$", "h100",
    "a GPU type: up to 32 lower-case letters, digits and '-' (it names a Slurm GRES type and a Kueue "
    "ResourceFlavor)")]


# ---------------------------------------------------------------- URLs


def url_problem(value: str, placeholders: tuple[str, ...] = ()) -> str | None:
    check = value
    for p in placeholders:
        check = check.replace(p, "node")
    bad = _bad_char(check, r"[A-Za-z0-9._~:/?&=+%!$*'(),;@\[\]-]")
    if bad:
        extra = f" (besides {', '.join(placeholders)})" if placeholders else ""
        return f"{_show(value)} holds {bad}{extra}, which a URL cannot; write e.g. 'https://host.example.com/path'"
    try:
        parts = urlsplit(check)
    except ValueError as exc:
        return f"{_show(value)} is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{_show(value)} is not an http(s) URL with a host; write e.g. 'https://host.example.com/path'"
    if "@" in parts.netloc:
        return ("the URL holds credentials (user:password@host); they would be written in plain text "
                "into the inventory: remove them and give a secret reference where the spec asks for "
                "a password (env:VAR, file:/path or pulumi:key)")
    return None


def _url(value: str) -> str:
    return _check(url_problem(value), value)


def _bmc_url(value: str) -> str:
    if re.search(r"\{(?!name\})|(?<!\{name)\}", value):
        raise ValueError(f"{_show(value)} has a '{{' or '}}' other than {{name}}; {{name}} is the only "
                         "field, replaced by the node name")
    return _check(url_problem(value, ("{name}",)), value)


def _release_url(value: str) -> str:
    """A base URL that paths are appended to: no query or fragment, no trailing '/'."""
    _check(url_problem(value), value)
    if "?" in value or "#" in value:
        raise ValueError(f"{_show(value)} has a query or fragment ('?' or '#'); give the base URL that "
                         "v<version>/bin/linux/amd64/<binary> is appended to, e.g. 'https://mirror.example.com/k8s/release'")
    return value.rstrip("/")


Url = Annotated[str, AfterValidator(_url)]
ReleaseUrl = Annotated[str, AfterValidator(_release_url)]
BmcUrl = Annotated[str, AfterValidator(_bmc_url)]


# ---------------------------------------------------------------- Slurm times

SLURM_TIME = re.compile(r"^(INFINITE|UNLIMITED|\d+|\d+:\d{2}(:\d{2})?|\d+-\d+(:\d{2}(:\d{2})?)?)$")


def slurm_minutes(value: str) -> float:
    """A Slurm time in minutes (INFINITE: infinity). The forms of sbatch --time."""
    if value in ("INFINITE", "UNLIMITED"):
        return float("inf")
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = int(d)
        parts = [int(x) for x in value.split(":")]  # d-h, d-h:m, d-h:m:s
        h, m, s = (parts + [0, 0])[:3]
        return days * 1440 + h * 60 + m + s / 60
    parts = [int(x) for x in value.split(":")]
    if len(parts) == 1:
        return parts[0]  # minutes
    if len(parts) == 2:
        return parts[0] + parts[1] / 60  # m:s
    return parts[0] * 60 + parts[1] + parts[2] / 60  # h:m:s


# ---------------------------------------------------------------- Slurm counts


def _whole(unit: str, upper: int, example: str, unlimited: bool = False) -> Any:
    """A count of ``unit`` from 0 to ``upper`` that Slurm reads as a number; with ``unlimited``
    also the word UNLIMITED. YAML's true/false and 1.5 are refused, not read as 1 or cut."""
    words = " or UNLIMITED" if unlimited else ""

    def check(value: Any) -> Any:
        if unlimited and isinstance(value, str) and value.upper() in ("UNLIMITED", "INFINITE"):
            return "UNLIMITED"
        if isinstance(value, bool) or not isinstance(value, int):
            shown = ("true/false" if isinstance(value, bool) else _show(value) if isinstance(value, str)
                     else _show(repr(value)).strip("'"))
            # ValueError, not TypeError: pydantic reports only ValueError as a spec problem
            raise ValueError(f"{shown} is not a whole number of {unit}; write a number from 0 to "  # noqa: TRY004
                             f"{upper}{words} (e.g. {example}), without quotes or a unit")
        if not 0 <= value <= upper:
            raise ValueError(f"{value} {unit} is out of range; Slurm takes 0 to {upper}{words}")
        return value

    return BeforeValidator(check)


# GraceTime (partition): Slurm reads 32 bits, 4294967295 meaning unlimited.
GraceSeconds = Annotated[int, _whole("seconds", 4_294_967_294, "30")]
# OverTimeLimit: "May not exceed 65533 minutes" (slurm.conf.5); UNLIMITED is allowed.
OverTimeMinutes = Annotated[int | str, _whole("minutes", 65533, "1", unlimited=True)]
