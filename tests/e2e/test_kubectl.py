"""kubectl itself against the loopback API server, as a new user would drive it.

Every command is the real ``kubectl`` binary (skipped only where it is not
installed) with a kubeconfig the server writes: ``explain`` (OpenAPI v3),
``apply`` without ``--validate=false`` (server-side field validation, schema
and CEL rejections), ``get`` with kube's columns (Tables), ``get -w``,
``scale`` and ``describe``. Every call and every wait has a timeout.
"""

from __future__ import annotations

import queue
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainscaler_sim.apiserver import LoopbackApiServer

REPO = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
NAMESPACE = "ml"
COMMAND_SECONDS = 60.0

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

DEPLOYMENT = f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: resnet-trainer
  namespace: {NAMESPACE}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: resnet}}
  template:
    metadata:
      labels: {{app: resnet}}
    spec:
      containers:
      - name: trainer
        image: registry.k8s.io/pause:3.9
"""


def elastic_job(name: str, *, min_replicas: int, max_replicas: int, extra: str = "") -> str:
    return f"""\
apiVersion: trainscaler.io/v1alpha1
kind: ElasticJob
metadata:
  name: {name}
  namespace: {NAMESPACE}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: resnet-trainer
  minReplicas: {min_replicas}
  maxReplicas: {max_replicas}
{extra}"""


class Kubectl:
    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self._kubeconfig = kubeconfig
        self._workdir = workdir

    def argv(self, *args: str) -> list[str]:
        assert KUBECTL is not None
        return [KUBECTL, f"--kubeconfig={self._kubeconfig}", *args]

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.argv(*args), capture_output=True, text=True, timeout=COMMAND_SECONDS, check=False
        )
        if check and done.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    def apply_text(
        self, name: str, text: str, *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        path = self._workdir / f"{name}.yaml"
        path.write_text(text)
        return self.run("apply", "-f", str(path), check=check)


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    workdir = tmp_path_factory.mktemp("kubectl")
    server = LoopbackApiServer(port=0)
    server.start()
    try:
        for index in range(2):
            server.add_node(f"node-{index}", cpu="8", memory="32Gi", gpus=4)
        kubeconfig = server.write_kubeconfig(workdir / "kubeconfig")
        tool = Kubectl(kubeconfig, workdir)
        tool.run("apply", "-f", str(REPO / "deploy" / "crd.yaml"))
        # Not `kubectl create namespace`: typed create commands send protobuf, which
        # the loopback server refuses (415); apply sends JSON.
        tool.apply_text(
            "namespace", f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"
        )
        yield tool
    finally:
        server.stop()


def header(output: str) -> list[str]:
    """The column names of ``kubectl get``'s first line (names may hold one space)."""
    return re.split(r"\s{2,}", output.splitlines()[0].strip())


def rows(output: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in output.splitlines()[1:] if line.strip()}


def test_explain_reads_the_crd_schema(kubectl):
    explained = kubectl.run("explain", "elasticjob.spec").stdout
    assert "GROUP:      trainscaler.io" in explained
    assert "KIND:       ElasticJob" in explained
    assert "maxReplicas\t<integer> -required-" in explained
    assert "scaleTargetRef\t<Object> -required-" in explained
    assert "Operator's manual override" in explained
    deeper = kubectl.run("explain", "ej.spec.scaleTargetRef.name").stdout
    assert "FIELD: name <string>" in deeper


def test_explain_built_in_kinds(kubectl):
    explained = kubectl.run("explain", "deployment.spec.replicas").stdout
    assert "KIND:       Deployment" in explained and "Number of desired pods" in explained
    pods = kubectl.run("explain", "pods.spec.containers").stdout
    assert "image\t<string>" in pods


def test_apply_validates_on_the_server(kubectl):
    created = kubectl.apply_text("deployment", DEPLOYMENT)
    assert "deployment.apps/resnet-trainer created" in created.stdout
    job = kubectl.apply_text("resnet", elastic_job("resnet", min_replicas=2, max_replicas=8))
    assert "elasticjob.trainscaler.io/resnet created" in job.stdout
    again = kubectl.apply_text("resnet", elastic_job("resnet", min_replicas=2, max_replicas=6))
    assert "elasticjob.trainscaler.io/resnet configured" in again.stdout

    inverted = kubectl.apply_text(
        "inverted", elastic_job("inverted", min_replicas=9, max_replicas=2), check=False
    )
    assert inverted.returncode != 0
    assert (
        'The ElasticJob "inverted" is invalid: spec: Invalid value: '
        "minReplicas must be less than or equal to maxReplicas"
    ) in inverted.stderr
    typo = kubectl.apply_text(
        "typo",
        elastic_job("typo", min_replicas=1, max_replicas=2, extra="  maxReplica: 3\n"),
        check=False,
    )
    assert typo.returncode != 0
    assert 'strict decoding error: unknown field "spec.maxReplica"' in typo.stderr
    bad_deployment = kubectl.apply_text(
        "bad-deployment",
        DEPLOYMENT.replace("  replicas: 2\n", "  replicas: 2\n  replica: 2\n"),
        check=False,
    )
    assert 'unknown field "spec.replica"' in bad_deployment.stderr
    listed = kubectl.run("get", "ej", "-n", NAMESPACE, "-o", "name").stdout.split()
    assert listed == ["elasticjob.trainscaler.io/resnet"]


def test_get_prints_kube_columns(kubectl):
    kubectl.apply_text(
        "resnet", elastic_job("resnet", min_replicas=2, max_replicas=8, extra="  policy: edl\n")
    )
    jobs = kubectl.run("get", "ej", "-n", NAMESPACE).stdout
    assert header(jobs) == ["NAME", "MIN", "MAX", "CURRENT", "DESIRED", "POLICY", "AGE"]
    row = rows(jobs)["resnet"]
    assert row[1:3] == ["2", "8"] and row[3] == "edl"  # CURRENT/DESIRED unset: blank cells
    kubectl.apply_text("deployment", DEPLOYMENT)
    deployments = kubectl.run("get", "deployments", "-n", NAMESPACE, "-o", "wide").stdout
    assert header(deployments) == [
        "NAME",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "AGE",
        "CONTAINERS",
        "IMAGES",
        "SELECTOR",
    ]
    pods = kubectl.run("get", "pods", "-n", NAMESPACE).stdout
    assert header(pods) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    nodes = kubectl.run("get", "nodes").stdout
    assert header(nodes) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert set(rows(nodes)) == {"node-0", "node-1"}
    node = rows(nodes)["node-0"]
    assert node[1:3] == ["Ready", "<none>"] and node[4] == "v1.33.0-loopback"


def _read_lines(stream, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def _wait_line(lines: queue.Queue[str], wanted, *, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail("kubectl get -w printed no matching line in time")
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        if wanted(line):
            return line


def test_scale_is_seen_by_get_watch(kubectl):
    kubectl.apply_text("deployment", DEPLOYMENT)
    watch = subprocess.Popen(
        kubectl.argv("get", "deployment", "resnet-trainer", "-n", NAMESPACE, "-w"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(watch.stdout, lines), daemon=True)
    reader.start()
    try:
        first = _wait_line(lines, lambda line: True, seconds=COMMAND_SECONDS)
        assert first.split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
        _wait_line(lines, lambda line: line.startswith("resnet-trainer"), seconds=COMMAND_SECONDS)
        scaled = kubectl.run(
            "scale", "deployment", "resnet-trainer", "-n", NAMESPACE, "--replicas=3"
        )
        assert "deployment.apps/resnet-trainer scaled" in scaled.stdout
        _wait_line(lines, lambda line: line.split()[1:2] == ["3/3"], seconds=COMMAND_SECONDS)
    finally:
        watch.terminate()
        watch.wait(timeout=COMMAND_SECONDS)
        kubectl.run("scale", "deployment", "resnet-trainer", "-n", NAMESPACE, "--replicas=2")


def test_describe_shows_spec_and_status(kubectl):
    kubectl.apply_text("resnet", elastic_job("resnet", min_replicas=2, max_replicas=8))
    described = kubectl.run("describe", "ej", "resnet", "-n", NAMESPACE).stdout
    assert "Name:         resnet" in described
    assert "Max Replicas:" in described and "Paused:" in described  # paused: server default
    deployment = kubectl.run("describe", "deployment", "resnet-trainer", "-n", NAMESPACE).stdout
    assert "Replicas:" in deployment and "Selector:               app=resnet" in deployment
