"""The Helm chart renders (Helm's own engine), passes `helm lint --strict` and Kubernetes' schemas, and its
objects fit together: one GPU per Triton pod, probes on Triton's health endpoints, the gateway naming every
Triton pod, the ServiceMonitor scraping ports that exist."""
from __future__ import annotations

import copy

import helm_python
import kubernetes_validate
import pytest

from tools.render_chart import CHART, manifests, parse_sets

KUBERNETES = "1.30.0"
VALUES = {"triton": {"gpus": 2}, "serviceMonitor": {"enabled": True}}
NAMESPACE = "tts"


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return manifests(VALUES, name="vl", namespace=NAMESPACE)


def _one(objects, kind, component=None):
    found = [o for o in objects if o["kind"] == kind
             and (component is None or o["metadata"]["labels"].get("app.kubernetes.io/component") == component)]
    assert len(found) == 1, f"{kind}/{component}: {len(found)}"
    return found[0]


def _services(objects):
    return [o for o in objects if o["kind"] == "Service"]


def test_lint_is_clean_in_strict_mode():
    report = helm_python.lint(CHART, VALUES, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []  # warnings and errors


def test_every_builtin_object_passes_the_kubernetes_schema_strictly(objects):
    builtin = [o for o in objects if o["kind"] != "ServiceMonitor"]
    assert {o["kind"] for o in builtin} == {"StatefulSet", "Deployment", "Service"}
    for obj in builtin:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def test_the_schema_check_rejects_a_wrong_field(objects):
    broken = copy.deepcopy(_one(objects, "StatefulSet"))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/v2/health/ready"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_one_triton_pod_per_gpu_with_probes_on_tritons_health_endpoints(objects):
    triton = _one(objects, "StatefulSet")
    assert triton["spec"]["replicas"] == 2
    pod = triton["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    command = container["command"]
    assert command[1] == "serve" and "--device=cuda" in command and "--partition=mps" in command
    assert f"--http-port={ports['http']}" in command and f"--grpc-port={ports['grpc']}" in command
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"


def test_without_mps_the_lanes_share_the_gpu_unpartitioned():
    triton = _one(manifests(parse_sets(["triton.mps=false"])), "StatefulSet")
    assert "--partition=none" in triton["spec"]["template"]["spec"]["containers"][0]["command"]


def test_registered_voices_live_on_a_shared_claim_when_one_is_named(objects):
    pod = _one(manifests(parse_sets(["triton.voicesClaim=voxlane-voices"])), "StatefulSet")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert "--data-dir=/var/lib/voxlane" in container["command"]
    assert {"name": "voices", "mountPath": "/var/lib/voxlane"} in container["volumeMounts"]
    assert {"name": "voices", "persistentVolumeClaim": {"claimName": "voxlane-voices"}} in pod["volumes"]
    default = _one(objects, "StatefulSet")["spec"]["template"]["spec"]
    assert not any(a.startswith("--data-dir") for a in default["containers"][0]["command"])
    assert "voices" not in [v["name"] for v in default["volumes"]]


def test_the_gateway_fronts_every_triton_pod_by_its_stable_name(objects):
    triton = _one(objects, "StatefulSet")
    gateway = _one(objects, "Deployment", "gateway")
    command = gateway["spec"]["template"]["spec"]["containers"][0]["command"]
    tritons = next(a for a in command if a.startswith("--triton=")).removeprefix("--triton=").split(",")
    headless = triton["spec"]["serviceName"]
    assert tritons == [f"{triton['metadata']['name']}-{i}.{headless}.{NAMESPACE}.svc:8001" for i in range(2)]
    metrics = next(a for a in command if a.startswith("--triton-metrics=")).split("=", 1)[1].split(",")
    assert metrics == [f"http://{t.rsplit(':', 1)[0]}:8002/metrics" for t in tritons]
    assert any(s["metadata"]["name"] == headless and s["spec"]["clusterIP"] == "None" for s in _services(objects))
    probe = gateway["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["httpGet"]["path"] == "/health"


def test_every_service_selects_pods_that_have_its_target_ports(objects):
    pods = [o["spec"]["template"] for o in objects if o["kind"] in ("StatefulSet", "Deployment")]
    for service in _services(objects):
        selector = service["spec"]["selector"]
        matched = [p for p in pods if selector.items() <= p["metadata"]["labels"].items()]
        assert len(matched) == 1, service["metadata"]["name"]
        names = {p["name"] for c in matched[0]["spec"]["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= names


def test_the_service_monitor_scrapes_each_triton_pod_and_gateway_once(objects):
    monitor = _one(objects, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = [s for s in _services(objects) if selector.items() <= s["metadata"]["labels"].items()]
    assert sorted(s["metadata"]["name"] for s in scraped) == ["vl-voxlane-gateway", "vl-voxlane-triton-pods"]
    port_names = {p["name"] for s in scraped for p in s["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= port_names
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]


def test_the_service_monitor_is_off_by_default():
    assert "ServiceMonitor" not in {o["kind"] for o in manifests()}


def test_triton_listens_for_the_gateway_pods_and_the_keys_come_from_a_secret():
    objects = manifests(parse_sets(["auth.existingSecret=voxlane-keys"]))
    triton = _one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    gateway = _one(objects, "Deployment", "gateway")["spec"]["template"]["spec"]["containers"][0]
    assert "--triton-host=0.0.0.0" in triton["command"]
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in gateway["env"]}
    assert {k: (v["name"], v["key"]) for k, v in secrets.items()} == {
        "VOXLANE_API_KEYS": ("voxlane-keys", "api-keys"), "VOXLANE_ADMIN_KEYS": ("voxlane-keys", "admin-keys")}
    assert [(e["name"], e["valueFrom"]["secretKeyRef"]["key"]) for e in triton["env"]] == \
        [("VOXLANE_ADMIN_KEYS", "admin-keys")]
    assert not any("key" in a for a in gateway["command"] + triton["command"])  # never on a command line
