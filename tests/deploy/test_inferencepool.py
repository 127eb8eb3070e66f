"""deploy/kubernetes/overlays/inferencepool renders (``kubectl kustomize``) into an InferencePool of the
Gateway API Inference Extension v1 that the API server would accept (its vendored v1 CRD: schema,
strict fields, CEL rules), over the engine pods, each with a gateway beside its engine; and an endpoint
picker told metric names that such a gateway serves, one series each, as the picker needs. checkov runs
apart: deploy/checkov.sh (docs/deploy.md)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from agentgate.agents import prometheus
from agentgate.engine.config import EngineConfig
from agentgate.gateway.config.settings import Settings
from tests.deploy.test_kubernetes import KUBE, env_of, one, render, selects
from tests.support.crd import crd_schema, validation_errors
from tests.support.inprocess import InProcessGateway

CRD = KUBE / "crds" / "inference.networking.k8s.io_inferencepools.yaml"


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render("inferencepool")


def epp_flags(docs: list[dict[str, Any]]) -> dict[str, str]:
    [container] = one(docs, "Deployment", "agentgate-epp")["spec"]["template"]["spec"]["containers"]
    return dict(arg.removeprefix("--").split("=", 1) for arg in container["args"])


def test_the_pool_is_a_valid_v1_inferencepool_and_invalid_ones_are_refused(docs):
    schema = crd_schema(CRD, "v1")
    pool = one(docs, "InferencePool", "agentgate")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1" and pool["metadata"]["namespace"] == "agentgate"
    assert validation_errors(pool, schema) == []
    # The validator refuses what the API server would: a schema error, an unknown field, a CEL rule.
    wrong = copy.deepcopy(pool)
    wrong["spec"]["targetPorts"][0]["number"] = 70000
    wrong["spec"]["endpointPickerRef"]["failureMode"] = "Sometimes"
    wrong["spec"]["selectors"] = {}
    assert len(validation_errors(wrong, schema)) == 3, validation_errors(wrong, schema)
    no_port = copy.deepcopy(pool)
    del no_port["spec"]["endpointPickerRef"]["port"], no_port["spec"]["endpointPickerRef"]["kind"]  # kind: Service
    assert validation_errors(no_port, schema) == [
        "/spec/endpointPickerRef: port is required when kind is 'Service' or unspecified (defaults to 'Service')"
    ]


def test_the_pool_routes_to_each_engine_pods_own_gateway(docs):
    pool = one(docs, "InferencePool", "agentgate")["spec"]
    sts = one(docs, "StatefulSet", "agentgate-engine")
    pod = sts["spec"]["template"]
    assert selects(pool["selector"]["matchLabels"], pod["metadata"]["labels"])
    for other in ("Deployment/agentgate-gateway", "StatefulSet/agentgate-redis", "Deployment/agentgate-epp"):
        kind, name = other.split("/")
        assert not selects(
            pool["selector"]["matchLabels"], one(docs, kind, name)["spec"]["template"]["metadata"]["labels"]
        )
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    gateway, engine = containers["gateway"], containers["engine"]
    assert gateway["image"] == engine["image"] == "localhost/agentgate:cpu"
    [target] = pool["targetPorts"]
    assert target["number"] == next(p["containerPort"] for p in gateway["ports"] if p["name"] == "http")
    env = env_of(gateway)
    assert int(env["AGENTGATE_PORT"]["value"]) == target["number"] and env["AGENTGATE_HOST"]["value"] == "0.0.0.0"
    # Only this pod's engine, over loopback: the picker chose the pod, so its engine serves the request.
    engine_port = next(p["containerPort"] for p in engine["ports"] if p["name"] == "zmq")
    assert env["AGENTGATE_ENGINE"]["value"] == f"tcp://127.0.0.1:{engine_port}"
    # /metrics open to the picker (which sends no key); requests and operator routes keep their keys.
    assert env["AGENTGATE_ALLOW_UNAUTHENTICATED_OPS"]["value"] == "true"
    for name in ("AGENTGATE_API_KEY", "AGENTGATE_ADMIN_KEY", "AGENTGATE_KEY_DIGEST_SECRET", "AGENTGATE_REDIS_URL"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "agentgate-secrets", name
    # The gateway holds the gateways' CurveZMQ keys, the engine the engines': neither the other's secret.
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for container, secret, other in (
        (gateway, "gateway.key_secret", "engine.key_secret"),
        (engine, "engine.key_secret", "gateway.key_secret"),
    ):
        [mount] = [
            m
            for m in container["volumeMounts"]
            if m["mountPath"] == env_of(container)["AGENTGATE_ENGINE_CURVE_DIR"]["value"]
        ]
        keys = {item["key"] for item in volumes[mount["name"]]["secret"]["items"]}
        assert secret in keys and other not in keys, container["name"]
    for c in pod["spec"]["containers"]:
        assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(c), c["name"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["securityContext"]["capabilities"][
            "drop"
        ] == ["ALL"]
    drain = float(env["AGENTGATE_DRAIN_SECONDS"]["value"]) + int(gateway["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["spec"]["terminationGracePeriodSeconds"] > drain
    # Anyone may reach :8000 of the engine pods (the proxy, the picker); ZMQ stays the gateways'.
    policy = one(docs, "NetworkPolicy", "agentgate-engine-http")
    assert selects(policy["spec"]["podSelector"]["matchLabels"], pod["metadata"]["labels"])
    assert policy["spec"]["ingress"] == [{"ports": [{"port": target["number"]}]}]


def test_the_picker_is_the_pools_and_runs_unprivileged(docs):
    pool = one(docs, "InferencePool", "agentgate")
    ref = pool["spec"]["endpointPickerRef"]
    service = one(docs, "Service", ref["name"])
    deployment = one(docs, "Deployment", "agentgate-epp")
    pod = deployment["spec"]["template"]
    assert selects(service["spec"]["selector"], pod["metadata"]["labels"])
    [port] = service["spec"]["ports"]
    assert port["port"] == ref["port"]["number"] and port["appProtocol"] == "http2"
    flags = epp_flags(docs)
    assert flags["pool-name"] == pool["metadata"]["name"] and flags["pool-namespace"] == pool["metadata"]["namespace"]
    assert int(flags["grpc-port"]) == port["targetPort"]
    assert (
        flags["model-server-metrics-path"] == "/metrics" and "model-server-metrics-port" not in flags
    )  # the targetPort
    [container] = pod["spec"]["containers"]
    assert container["image"].startswith("registry.k8s.io/gateway-api-inference-extension/epp:v1.0.0")
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    # It reads the pool's pods and the pool itself, under its own ServiceAccount.
    role = one(docs, "Role", "agentgate-epp")
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert {("", "pods"), ("inference.networking.k8s.io", "inferencepools")} <= granted
    binding = one(docs, "RoleBinding", "agentgate-epp")
    assert binding["subjects"][0]["name"] == pod["spec"]["serviceAccountName"] == "agentgate-epp"


@pytest.fixture(scope="module")
def engine_pod_metrics() -> Iterator[str]:
    """/metrics of a gateway with one engine, as each pool pod's gateway has."""
    engine = EngineConfig(runner="null", null_step_seconds=0.01, max_num_seqs=2, max_model_len=256, num_kv_blocks=32)
    with InProcessGateway(Settings(), engine) as gw:
        r = gw.client.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2})
        assert r.status_code == 200, r.text
        yield gw.client.get("/metrics").text


def test_the_picker_reads_gauges_each_pod_serves_once(docs, engine_pod_metrics):
    """The EPP takes a pod's value from the series its flag names (the latest, with no labels given):
    each must be a gauge the pod's gateway serves, with one series: its one engine's."""
    flags = epp_flags(docs)
    samples = prometheus.parse(engine_pod_metrics)
    for flag in ("total-queued-requests-metric", "kv-cache-usage-percentage-metric"):
        name = flags[flag]
        assert f"# TYPE {name} gauge" in engine_pod_metrics, flag
        series = [key for key in samples if prometheus.split(key)[0] == name]
        assert len(series) == 1, (flag, series)
    kv = prometheus.value(samples, flags["kv-cache-usage-percentage-metric"])
    assert 0 <= kv <= 1  # a fraction, as the picker's kv-cache-utilization-scorer expects
    assert flags["lora-info-metric"] == "" and "vllm:lora_requests_info" not in engine_pod_metrics
    config = flags["config-text"]
    for scorer in ("queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"):
        assert f"pluginRef: {scorer}" in config, scorer
