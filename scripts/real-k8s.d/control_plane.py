"""Start, stop and report a real Kubernetes control plane on loopback (tests only).

Owns the run directory (``~/.cache/trainscaler/real-k8s/run``): generated
certificates and keys (openssl), kubeconfigs, an audit policy, etcd's data,
one log and one pid file per process. The binaries come from ``build`` beside
this file (pinned release, cached); the nodes from ``trainscaler_sim.nodeagent``.

Processes, each on a free loopback port:

* etcd (``--unsafe-no-fsync``: a throwaway test store);
* kube-apiserver: client-certificate authentication, Node and RBAC
  authorization, an audit log of the ``trainscaler`` namespace's service
  accounts (what ``scripts/test-real-k8s`` counts), and the ServiceAccount
  admission plugin off (no kubelet mounts tokens here, and a pod created right
  after its namespace would otherwise race the ``default`` account's creation);
* kube-controller-manager with per-controller service-account credentials;
* kube-scheduler, packing GPUs (``scheduler_config``);
* the node agent: 4 nodes of 8 CPU, 32Gi and 4 ``nvidia.com/gpu`` (the
  contract suite's and the end-to-end test's cluster).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SHIPPED_SCHEDULER_CONFIG = REPO / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
CACHE = Path(os.environ.get("TRAINSCALER_CACHE", Path.home() / ".cache" / "trainscaler"))
RUN = CACHE / "real-k8s" / "run"
PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "nodeagent")
AUDITED_GROUP = "system:serviceaccounts:trainscaler"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certificates(pki: Path) -> None:
    """A CA, the apiserver's serving cert, client certs and the service-account key."""
    pki.mkdir(parents=True, exist_ok=True)
    openssl("genrsa", "-out", str(pki / "ca.key"), "2048")
    openssl(
        "req", "-x509", "-new", "-nodes", "-key", str(pki / "ca.key"), "-sha256", "-days", "3650",
        "-subj", "/CN=trainscaler-test-ca", "-out", str(pki / "ca.crt"),
    )  # fmt: skip
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    ext = pki / "serving.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,IP:10.96.0.1\nextendedKeyUsage=serverAuth\n"
    )
    sign(pki, "apiserver", "/CN=kube-apiserver", extfile=ext)
    client_ext = pki / "client.ext"
    client_ext.write_text("extendedKeyUsage=clientAuth\n")
    for name, subject in (
        ("admin", "/O=system:masters/CN=trainscaler-admin"),
        ("controller-manager", "/CN=system:kube-controller-manager"),
        ("scheduler", "/CN=system:kube-scheduler"),
        ("nodeagent", "/O=system:masters/CN=trainscaler-nodeagent"),
    ):
        sign(pki, name, subject, extfile=client_ext)


def sign(pki: Path, name: str, subject: str, *, extfile: Path) -> None:
    key, request, cert = pki / f"{name}.key", pki / f"{name}.csr", pki / f"{name}.crt"
    openssl("genrsa", "-out", str(key), "2048")
    openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(request))
    openssl(
        "x509", "-req", "-in", str(request), "-CA", str(pki / "ca.crt"), "-CAkey",
        str(pki / "ca.key"), "-CAcreateserial", "-out", str(cert), "-days", "3650", "-sha256",
        "-extfile", str(extfile),
    )  # fmt: skip


def write_kubeconfig(path: Path, *, server: str, pki: Path, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "real-k8s",
                "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki / f"{user}.crt"),
                    "client-key": str(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "real-k8s", "context": {"cluster": "real-k8s", "user": user}}],
        "current-context": "real-k8s",
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2))


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [AUDITED_GROUP]},
        {"level": "None"},
    ],
}


def scheduler_config(kubeconfig: Path) -> dict[str, Any]:
    """The shipped placement profile (deploy/scheduler/kube-scheduler-config.yaml), run for real.

    The real control plane runs the very profile the simulator models
    (MostAllocated, GPUs weighing most, spreading scores off), so a real
    kube-scheduler is what checks it. Here it is the only scheduler, so its
    profile also serves pods that name no scheduler; it needs no leader election.
    """
    config: dict[str, Any] = yaml.safe_load(SHIPPED_SCHEDULER_CONFIG.read_text())
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    config["leaderElection"] = {"leaderElect": False}
    for profile in config["profiles"]:
        profile["schedulerName"] = "default-scheduler"
    return config


def spawn(name: str, argv: list[str], *, env: dict[str, str] | None = None) -> int:
    log = open(RUN / f"{name}.log", "ab")  # noqa: SIM115 (handed to the child)
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    (RUN / f"{name}.pid").write_text(str(process.pid))
    return process.pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not reaped) is not alive.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def recorded_pid(name: str) -> int | None:
    try:
        return int((RUN / f"{name}.pid").read_text())
    except (OSError, ValueError):
        return None


def pid_of(name: str) -> int | None:
    """The recorded pid of ``name`` if that process still runs ``name``: a pid file
    left from an earlier boot may name some other process by now."""
    pid = recorded_pid(name)
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes() if pid is not None else b""
    except OSError:
        return None
    return pid if name.encode() in command else None


def wait_until(probe_name: str, probe: object, *, timeout: float, owner: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = recorded_pid(owner)  # just spawned by us
        if pid is None or not alive(pid):
            tail = (RUN / f"{owner}.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"real-k8s: {owner} exited while waiting for {probe_name}:\n{tail}")
        if callable(probe) and probe():
            return
        time.sleep(0.2)
    raise SystemExit(f"real-k8s: timed out after {timeout}s waiting for {probe_name}")


def https_ok(url: str, pki: Path) -> bool:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def build() -> Path:
    done = subprocess.run(
        ["bash", str(HERE / "build")], check=True, stdout=subprocess.PIPE, text=True
    )
    return Path(done.stdout.strip().splitlines()[-1])


def start(*, nodes: int) -> None:
    if running():
        print(f"real-k8s: already running; KUBECONFIG={RUN / 'admin.kubeconfig'}")
        return
    stop(quiet=True)
    began = time.monotonic()
    bindir = build()
    built = time.monotonic()
    for stale in RUN.glob("*") if RUN.exists() else []:
        if stale.is_dir():
            subprocess.run(["rm", "-rf", str(stale)], check=True)
        else:
            stale.unlink()
    RUN.mkdir(parents=True, exist_ok=True)
    pki = RUN / "pki"
    make_certificates(pki)
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    server = f"https://127.0.0.1:{api_port}"
    for user in ("admin", "controller-manager", "scheduler", "nodeagent"):
        write_kubeconfig(RUN / f"{user}.kubeconfig", server=server, pki=pki, user=user)
    (RUN / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
    (RUN / "ports.json").write_text(json.dumps({"etcd": etcd_port, "apiserver": api_port}))

    spawn(
        "etcd",
        [
            str(bindir / "etcd"),
            "--name=default",
            f"--data-dir={RUN / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
    )
    wait_until(
        "etcd",
        lambda: http_ok(f"http://127.0.0.1:{etcd_port}/health"),
        timeout=60,
        owner="etcd",
    )
    spawn(
        "kube-apiserver",
        [
            str(bindir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # The kubernetes Service cannot point at a loopback address: no endpoints.
            "--endpoint-reconciler-type=none",
            f"--secure-port={api_port}",
            f"--cert-dir={RUN / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            "--disable-admission-plugins=ServiceAccount",
            f"--audit-policy-file={RUN / 'audit-policy.json'}",
            f"--audit-log-path={RUN / 'audit.log'}",
            "--audit-log-mode=blocking",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
        ],
    )
    wait_until(
        "kube-apiserver /readyz",
        lambda: https_ok(f"{server}/readyz", pki),
        timeout=120,
        owner="kube-apiserver",
    )
    spawn(
        "kube-controller-manager",
        [
            str(bindir / "kube-controller-manager"),
            f"--kubeconfig={RUN / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={RUN / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={RUN / 'controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=true",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--leader-elect=false",
            "--v=1",
        ],
    )
    (RUN / "scheduler-config.json").write_text(
        json.dumps(scheduler_config(RUN / "scheduler.kubeconfig"))
    )
    spawn(
        "kube-scheduler",
        [
            str(bindir / "kube-scheduler"),
            f"--config={RUN / 'scheduler-config.json'}",
            f"--authentication-kubeconfig={RUN / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={RUN / 'scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--v=1",
        ],
    )
    python = REPO / ".venv" / "bin" / "python"
    spawn(
        "nodeagent",
        [
            str(python if python.exists() else Path(sys.executable)),
            "-m",
            "trainscaler_sim.nodeagent",
            f"--kubeconfig={RUN / 'nodeagent.kubeconfig'}",
            f"--nodes={nodes}",
        ],
        env={"PYTHONPATH": str(REPO)},
    )
    wait_until(
        "the default service account and Ready nodes",
        lambda: cluster_ready(server, pki, nodes=nodes),
        timeout=120,
        owner="nodeagent",
    )
    took = time.monotonic() - began
    print(
        f"real-k8s: up in {took:.1f}s (build check {built - began:.1f}s); "
        f"KUBECONFIG={RUN / 'admin.kubeconfig'}"
    )


def get_json(url: str, pki: Path) -> dict[str, object] | None:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            document: dict[str, object] = json.loads(response.read())
            return document
    except OSError:
        return None


def cluster_ready(server: str, pki: Path, *, nodes: int) -> bool:
    """Nodes registered and Ready, and the controllers at work (default's service account)."""
    listed = get_json(f"{server}/api/v1/nodes", pki)
    if not listed:
        return False
    ready = 0
    items: Any = listed.get("items") or []
    for node in items:
        conditions = node.get("status", {}).get("conditions") or []
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            ready += 1
    account = get_json(f"{server}/api/v1/namespaces/default/serviceaccounts/default", pki)
    return ready >= nodes and account is not None


def running() -> bool:
    return all((pid := pid_of(name)) is not None and alive(pid) for name in PROCESSES)


def stop(*, quiet: bool = False) -> None:
    for name in reversed(PROCESSES):
        pid = pid_of(name)
        if pid is None:
            continue
        if alive(pid):
            # Each child leads its own session (start_new_session): end just that group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)
        (RUN / f"{name}.pid").unlink(missing_ok=True)
        if not quiet:
            print(f"real-k8s: stopped {name}")


def status() -> int:
    states = {}
    for name in PROCESSES:
        pid = pid_of(name)
        states[name] = f"running (pid {pid})" if pid is not None and alive(pid) else "stopped"
    for name, state in states.items():
        print(f"{name}: {state}")
    if running():
        print(f"KUBECONFIG={RUN / 'admin.kubeconfig'}")
        return 0
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(description="A real Kubernetes control plane on loopback.")
    parser.add_argument("command", choices=("start", "stop", "status", "kubeconfig", "build"))
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()
    if args.command == "start":
        start(nodes=args.nodes)
    elif args.command == "stop":
        stop()
    elif args.command == "status":
        sys.exit(status())
    elif args.command == "kubeconfig":
        print(RUN / "admin.kubeconfig")
    else:
        print(build())


if __name__ == "__main__":
    main()
