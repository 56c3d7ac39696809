"""The kubernetes layer, pure half: ``kubectl get ... -o json`` documents -> an observation.

The collector (railyard.drift.collect.collect_kubernetes) runs ``kubectl get nodes -o
json`` and one ``kubectl get <kinds> -A -o json`` for the kinds the plan has
(:func:`kinds_of`) on the first control-plane node that answers, with the admin
kubeconfig the k8s_control_plane role writes, and :data:`ETCD_PROBE` there; these
functions turn the answers into a :class:`KubernetesObservation` for compare.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from railyard.drift.observed import (
    DnsObservation,
    EtcdMember,
    EtcdObservation,
    KubernetesObservation,
    NodeVersions,
)


def kinds_of(docs: Iterable[Mapping[str, Any]]) -> list[str]:
    """``kind.group`` names for ``kubectl get`` (``namespace``, ``clusterqueue.kueue.x-k8s.io``)."""
    return sorted({f"{d['kind'].lower()}.{str(d['apiVersion']).rpartition('/')[0]}".rstrip(".") for d in docs})


def labels_from_nodes(doc: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """``kubectl get nodes -o json`` -> {node: labels}."""
    out: dict[str, dict[str, str]] = {}
    for item in doc.get("items") or []:
        meta = item.get("metadata") or {}
        out[str(meta.get("name", ""))] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return out


def status_from_nodes(doc: Mapping[str, Any], field: str) -> dict[str, dict[str, str]]:
    """``kubectl get nodes -o json`` -> {node: .status.<field>} (capacity, allocatable)."""
    out: dict[str, dict[str, str]] = {}
    for item in doc.get("items") or []:
        name = str((item.get("metadata") or {}).get("name", ""))
        out[name] = {str(k): str(v) for k, v in ((item.get("status") or {}).get(field) or {}).items()}
    return out


_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}


def quantity(value: str) -> Decimal | None:
    """A Kubernetes resource quantity (``2``, ``1000Mi``, ``24683664Ki``, ``500m``) as a
    number, so ``1Gi`` and ``1024Mi`` compare equal; None when it is not one."""
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix) and text[: -len(suffix)]:
            text, scale = text[: -len(suffix)], Decimal(_SUFFIXES[suffix])
            break
    else:
        scale = Decimal(1)
    try:
        number = Decimal(text) * scale
    except InvalidOperation:
        return None
    return number if number.is_finite() else None  # "NaN" and "Infinity" are no quantities


def objects_from_lists(docs: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """``kubectl get <kind> -A -o json`` documents (kind ``List``) -> their items."""
    items: list[dict[str, Any]] = []
    for doc in docs:
        items += [dict(i) for i in doc.get("items") or []]
    return tuple(items)


def versions_from_nodes(doc: Mapping[str, Any]) -> dict[str, NodeVersions]:
    """``kubectl get nodes -o json`` -> {node: kubelet and runtime versions} (``""`` where
    the Node does not say; kubeProxyVersion is deprecated and not read)."""
    out: dict[str, NodeVersions] = {}
    for item in doc.get("items") or []:
        name = str((item.get("metadata") or {}).get("name", ""))
        info = (item.get("status") or {}).get("nodeInfo")
        info = info if isinstance(info, Mapping) else {}
        out[name] = NodeVersions(str(info.get("kubeletVersion") or ""), str(info.get("containerRuntimeVersion") or ""))
    return out


def runtimes_from_nodes(doc: Mapping[str, Any]) -> dict[str, str]:
    """{node: containerRuntimeVersion} of the Nodes that report one: what
    railyard.drift.applied records when ``railyard up`` finishes."""
    return {n: v.runtime for n, v in versions_from_nodes(doc).items() if n and v.runtime}


def observation(nodes: Mapping[str, Any], lists: Iterable[Mapping[str, Any]],
                etcd: EtcdObservation | None = None, dns: DnsObservation | None = None) -> KubernetesObservation:
    return KubernetesObservation(deployed=True, labels=labels_from_nodes(nodes), capacity=status_from_nodes(nodes, "capacity"),
                                 allocatable=status_from_nodes(nodes, "allocatable"), objects=objects_from_lists(lists),
                                 versions=versions_from_nodes(nodes), etcd=etcd, dns=dns)


def dns_from_deployment(text: str) -> DnsObservation:
    """``kubectl -n kube-system get deployment coredns --ignore-not-found -o json``: nothing
    printed is a Deployment that is not there. Raises ValueError on anything else."""
    if not text.strip():
        return DnsObservation(found=False)
    doc = json.loads(text)
    if not isinstance(doc, Mapping) or doc.get("kind") != "Deployment":
        raise ValueError(f"not a Deployment: {text.strip()[:200]!r}")
    spec, status = doc.get("spec") or {}, doc.get("status") or {}
    return DnsObservation(found=True, desired=int(spec.get("replicas", 1)), available=int(status.get("availableReplicas") or 0))


# --------------------------------------------------------------------------- etcd

# Runs on a control-plane node with python3 (there for Ansible), so no etcdctl is needed:
# Debian ships etcdctl in etcd-client, which the role does not install, and the JSON
# gateway etcd serves on its client URL (/v3/cluster/member/list, the call etcdctl's
# `member list` makes over gRPC; /health per member) is the same on 3.4, 3.5 and 3.6.
# Only the stdlib: a Debian 13 node has python3 and nothing more.
#
# argv: the client URL to ask, then the etcd CA, the client certificate and its key
# (railyard.drift.collect names the files roles/k8s_control_plane writes). etcd asks
# for a client certificate signed by its CA (client-cert-auth), and its own certificate
# is signed by that CA, not the cluster's: one TLS context checks the server against
# the CA and presents the client certificate, for the member list and for each member's
# /health on its advertised client URLs. The files are read on the first https call
# only, so a plain-HTTP etcd (the test apiserver's) needs none of them.
#
# Prints one JSON object: {"endpoint", "list": the member list answer, "health":
# {member ID: that member's /health answer or {"error"}}}, or {"endpoint", "error"} when
# etcd does not answer; an error is one line that says what failed (a file that cannot
# be read, the TLS handshake and which side refused it, a connection refused), with
# "tls": true when it failed on the probe's TLS files or the handshake, not on etcd
# not listening.
ETCD_PROBE = r"""
import json, os, ssl, sys, urllib.error, urllib.request
ep, ca, cert, key = (sys.argv[1:] + ["", "", ""])[:4]
ep = ep.rstrip("/")
class Failed(Exception):
    pass
openers = {}
def tls():
    for what, path in (("etcd CA", ca), ("client certificate", cert), ("client key", key)):
        if not path:
            raise Failed("no %s given to the probe" % what)
        if not os.access(path, os.R_OK):
            raise Failed("cannot read the %s %s (%s)" % (what, path, "missing" if not os.path.exists(path)
                                                           else "permission denied"))
    try:
        ctx = ssl.create_default_context(cafile=ca)
    except (ssl.SSLError, ValueError) as e:
        raise Failed("the etcd CA %s is no PEM certificate: %s" % (ca, e))
    # python3.13 (Debian 13's) checks certificates strictly (RFC 5280: key identifiers,
    # critical basic constraints); ask for it everywhere, so older ones judge alike
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    try:
        ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError) as e:
        raise Failed("the client certificate %s and key %s do not load: %s" % (cert, key, e))
    return urllib.request.HTTPSHandler(context=ctx)
def opener(url):
    scheme = "https" if url.startswith("https:") else "http"
    if scheme not in openers:
        handlers = [urllib.request.ProxyHandler({})] + ([tls()] if scheme == "https" else [])
        openers[scheme] = urllib.request.build_opener(*handlers).open
    return openers[scheme]
def call(url, body=None, timeout=5.0):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with opener(url)(req, timeout=timeout) as r:
            return json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return {"error": "HTTP %d %s" % (e.code, text.strip()[:200])}
def cause(e):
    e = getattr(e, "reason", None) if isinstance(e, urllib.error.URLError) else e
    return e if e is not None else "no reason given"
def closed(e, url):
    # TLS 1.3: the client's handshake is done before etcd checks its certificate, so a
    # refusal may come as the alert, or, when etcd closes first, as an EOF or a reset
    return url.startswith("https:") and (isinstance(e, (ssl.SSLEOFError, ConnectionResetError, BrokenPipeError))
                                         or type(e).__name__ == "RemoteDisconnected")
def why(e, url):
    # -> (one line that says what failed, whether it failed on TLS)
    e = cause(e)
    if isinstance(e, Failed):
        return str(e), True
    if isinstance(e, ssl.SSLCertVerificationError):
        return "TLS: the server's certificate does not verify against the etcd CA %s (%s)" % (
            ca, e.verify_message or e.reason), True
    if closed(e, url):
        return ("TLS: etcd closed the connection without an answer (%s): does it refuse the client certificate %s?"
                % (e or type(e).__name__, cert)), True
    if isinstance(e, ssl.SSLError):
        text = str(e.reason or e).lower().replace("_", " ")
        if any(w in text for w in ("certificate required", "bad certificate", "unknown ca", "certificate unknown")):
            return "TLS: etcd refused the client certificate %s (%s)" % (cert, e.reason or e), True
        return "TLS: %s" % (e.reason or e), True
    return str(e), False
out = {"endpoint": ep}
try:
    out["list"] = call(ep + "/v3/cluster/member/list", {})
except Exception as e:
    out["error"], tls_side = why(e, ep)
    if tls_side:
        out["tls"] = True
else:
    health = {}
    for m in out["list"].get("members") or []:
        urls = m.get("clientURLs") or []
        if urls:
            try:
                health[str(m.get("ID"))] = call(urls[0].rstrip("/") + "/health", timeout=3.0)
            except Exception as e:
                health[str(m.get("ID"))] = {"error": why(e, urls[0])[0]}
    out["health"] = health
print(json.dumps(out))
"""


def etcd_probe_argv(endpoint: str, ca: str, cert: str, key: str) -> list[str]:
    """:data:`ETCD_PROBE` asking *endpoint*, with the etcd CA and the client certificate
    and key to use for https URLs (paths on the node the probe runs on)."""
    return ["python3", "-c", ETCD_PROBE, endpoint, ca, cert, key]


def _member(raw: Mapping[str, Any], health: Mapping[str, Any]) -> EtcdMember:
    mid = str(raw.get("ID", ""))
    urls = tuple(str(u) for u in raw.get("clientURLs") or [])
    said = health.get(mid)
    healthy: bool | None = None
    detail = ""
    if urls:
        if not isinstance(said, Mapping):
            healthy, detail = False, "its /health was not asked"
        elif "error" in said:
            healthy, detail = False, f"its /health does not answer ({said['error']})"
        else:
            healthy = str(said.get("health", "")).lower() == "true"
            reason = f": {said['reason']}" if said.get("reason") else ""  # etcd 3.5+ says why
            detail = "" if healthy else f"its /health says health={said.get('health', 'nothing')}{reason}"
    return EtcdMember(mid, str(raw.get("name") or ""), tuple(str(u) for u in raw.get("peerURLs") or []), urls,
                      bool(raw.get("isLearner")), healthy, detail)


def etcd_from_probe(host: str, stdout: str) -> EtcdObservation:
    """:data:`ETCD_PROBE`'s output -> an observation; never raises: output that is not the
    probe's is ``unreadable``, named with what came back."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        return EtcdObservation(host, unreadable=f"the etcd probe printed no JSON: {stdout.strip()[:200]!r}")
    if not isinstance(doc, Mapping):
        return EtcdObservation(host, unreadable=f"the etcd probe printed {type(doc).__name__}, not an object")
    endpoint = str(doc.get("endpoint") or "")
    if "error" in doc:
        return EtcdObservation(host, endpoint, failure=str(doc["error"]) or "no answer", tls=doc.get("tls") is True)
    listed = doc.get("list")
    health = doc.get("health") if isinstance(doc.get("health"), Mapping) else {}
    if not isinstance(listed, Mapping):
        return EtcdObservation(host, endpoint, unreadable="the etcd probe printed no member list")
    if "error" in listed or "members" not in listed:
        # etcd answered, but not with members: an error document (no leader, another API)
        what = listed.get("error") or listed.get("message") or json.dumps(dict(listed))[:200]
        return EtcdObservation(host, endpoint, failure=f"the member list call failed: {what}")
    members = listed.get("members")
    if not isinstance(members, list) or not all(isinstance(m, Mapping) for m in members):
        return EtcdObservation(host, endpoint, unreadable=f"members is not a list of members: {members!r:.200}")
    return EtcdObservation(host, endpoint, tuple(_member(m, health) for m in members))
