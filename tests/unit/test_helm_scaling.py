"""The chart's server groups and autoscalers: per model a Deployment and a headless Service that the gateway
resolves; KEDA ScaledObjects or autoscaling/v2 HPAs (with the Prometheus adapter's rules) on metrics the servers
export; a preStop drain and a grace period that covers the longest stream. Built-in objects pass Kubernetes'
schemas strictly; a ScaledObject (a CRD those schemas lack) passes the JSON schema below, written from KEDA 2.x's
ScaledObject specification (keda.sh/v1alpha1), whose HPA `behavior` is Kubernetes' own schema."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import helm_python
import jsonschema
import kubernetes_validate
import promql_parser
import pytest
import yaml
from referencing import Registry, Resource

from protocol.metrics import ADMISSION_LIMIT_METRIC, LIVE_METRIC
from tools.render_chart import CHART, manifests

KUBERNETES = "1.30.0"
NAMESPACE = "tts"
MODELS = [{"name": "qwen3", "preset": "qwen3-tts-1.7b", "gpus": 2, "minReplicas": 1, "maxReplicas": 8},
          {"name": "mine", "checkpoint": "/models/mine", "gpus": 1, "minReplicas": 2, "maxReplicas": 4,
           "extraArgs": ["--max-slots", "64"]}]
REPO = Path(__file__).resolve().parents[2]
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{KUBERNETES}-local-strict"


def values(kind: str | None = None, **autoscaling) -> dict:
    """Both groups, with autoscaling by `kind` (None: off)."""
    scaling = {"enabled": kind is not None, **({"kind": kind} if kind else {}), **autoscaling}
    return {"models": copy.deepcopy(MODELS), "autoscaling": scaling, "serviceMonitor": {"enabled": True}}


def render(vals: dict) -> list[dict]:
    return manifests(vals, name="vl", namespace=NAMESPACE)


def of_kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def container(workload) -> dict:
    [c] = workload["spec"]["template"]["spec"]["containers"]
    return c


def scaled_object_schema() -> dict:
    """KEDA's ScaledObject, the fields this chart writes (unknown ones fail, as the strict Kubernetes schemas do)."""
    integer = {"type": "integer", "minimum": 0}
    trigger = {"type": "object", "additionalProperties": False, "required": ["type", "metadata"],
               "properties": {"type": {"type": "string"}, "name": {"type": "string"},
                              "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                              "useCachedMetrics": {"type": "boolean"},
                              "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                              "authenticationRef": {"type": "object", "required": ["name"]}}}
    spec = {"type": "object", "additionalProperties": False, "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {"type": "object", "additionalProperties": False, "required": ["name"],
                                   "properties": {k: {"type": "string"} for k in
                                                  ("apiVersion", "kind", "name", "envSourceContainerName")}},
                "pollingInterval": integer, "cooldownPeriod": integer, "initialCooldownPeriod": integer,
                "idleReplicaCount": integer, "minReplicaCount": integer, "maxReplicaCount": integer,
                "advanced": {"type": "object", "additionalProperties": False, "properties": {
                    "restoreToOriginalReplicaCount": {"type": "boolean"},
                    "horizontalPodAutoscalerConfig": {"type": "object", "additionalProperties": False, "properties": {
                        "name": {"type": "string"},
                        "behavior": _schema("horizontalpodautoscalerbehavior-autoscaling-v2")}}}},
                "triggers": {"type": "array", "minItems": 1, "items": trigger}}}
    return {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {"apiVersion": {"const": "keda.sh/v1alpha1"}, "kind": {"const": "ScaledObject"},
                           "metadata": {"type": "object", "required": ["name"]}, "spec": spec}}


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.json").read_text())


def validate_scaled_object(obj: dict) -> None:
    """Against the schema above; its `behavior` refers into Kubernetes' definitions."""
    registry = Resource.from_contents(_schema("_definitions")) @ Registry()
    jsonschema.Draft202012Validator(scaled_object_schema(), registry=registry).validate(obj)


PROMETHEUS_TRIGGER = {"type": "object", "required": ["serverAddress", "query", "threshold"],
                      "properties": {"threshold": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}}}


@pytest.mark.parametrize("kind", [None, "keda", "hpa"])
def test_lint_is_clean_in_strict_mode(kind):
    report = helm_python.lint(CHART, values(kind), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("vals", [values(), values("keda"), values("hpa"), values("hpa", signal="busy"),
                                  {"autoscaling": {"enabled": True, "kind": "hpa"}}],
                         ids=["groups", "keda", "hpa", "hpa-busy", "static-gateway-hpa"])
def test_every_builtin_object_passes_the_kubernetes_schema_strictly(vals):
    objects = render(vals)
    for obj in objects:
        if obj["kind"] not in ("ScaledObject", "ServiceMonitor"):
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def test_each_scaled_object_passes_kedas_schema_and_the_schema_rejects_a_broken_one():
    scaled = list(of_kind(render(values("keda")), "ScaledObject").values())
    assert len(scaled) == 3  # two groups and the gateway
    for obj in scaled:
        validate_scaled_object(obj)
        [trigger] = obj["spec"]["triggers"]
        assert trigger["type"] == "prometheus"
        jsonschema.validate(trigger["metadata"], PROMETHEUS_TRIGGER)
    for breaks in (lambda s: s["spec"]["triggers"][0].pop("type"),
                   lambda s: s["spec"]["scaleTargetRef"].pop("name"),
                   lambda s: s["spec"]["triggers"][0].update(metricType="Average"),
                   lambda s: s["spec"].update(minReplicas=1),  # the HPA's word, not KEDA's
                   lambda s: s["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
                   .update(stabilisationWindowSeconds=60)):
        broken = copy.deepcopy(scaled[0])
        breaks(broken)
        with pytest.raises(jsonschema.ValidationError):
            validate_scaled_object(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"serverAddress": "http://p", "query": "up"}, PROMETHEUS_TRIGGER)


def test_each_group_is_a_deployment_of_one_gpu_pods_serving_its_model_and_no_static_set():
    objects = render(values())
    assert "StatefulSet" not in {o["kind"] for o in objects}
    deployments = of_kind(objects, "Deployment")
    qwen3, mine = deployments["vl-voxlane-qwen3"], deployments["vl-voxlane-mine"]
    assert (qwen3["spec"]["replicas"], mine["spec"]["replicas"]) == (2, 1)  # `gpus` while nothing scales them
    assert "--model=qwen3-tts-1.7b" in container(qwen3)["command"]
    assert "--model=/models/mine" in container(mine)["command"]
    assert container(mine)["command"][-2:] == ["--max-slots", "64"]
    for deployment in (qwen3, mine):
        assert container(deployment)["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_the_gateway_resolves_each_groups_headless_service_of_ready_pods():
    objects = render(values())
    services, deployments = of_kind(objects, "Service"), of_kind(objects, "Deployment")
    command = container(deployments["vl-voxlane-gateway"])["command"]
    assert not any(a.startswith(("--triton=", "--triton-metrics=", "--model-name")) for a in command)
    dns = [a.removeprefix("--triton-dns=") for a in command if a.startswith("--triton-dns=")]
    assert dns == [f"vl-voxlane-{m['name']}-pods.{NAMESPACE}.svc:8001" for m in MODELS]
    assert "--metrics-port=8002" in command
    for address, model in zip(dns, MODELS):
        service = services[address.split(".")[0]]
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is False
        [selected] = [d for d in deployments.values()
                      if service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert selected["metadata"]["name"] == f"vl-voxlane-{model['name']}"  # its own group's pods, no other's
        assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["grpc"] == int(address.rsplit(":", 1)[1])
    init = deployments["vl-voxlane-gateway"]["spec"]["template"]["spec"]["initContainers"][0]["command"][-1]
    assert all(f"http://vl-voxlane-{m['name']}.{NAMESPACE}.svc:8000/v2/health/ready" in init for m in MODELS)


def test_the_service_monitor_scrapes_every_groups_servers():
    objects = render(values())
    selector = of_kind(objects, "ServiceMonitor")["vl-voxlane"]["spec"]["selector"]["matchLabels"]
    scraped = {n for n, s in of_kind(objects, "Service").items() if selector.items() <= s["metadata"]["labels"].items()}
    assert scraped == {"vl-voxlane-qwen3-pods", "vl-voxlane-mine-pods", "vl-voxlane-gateway"}


def test_a_leaving_pod_drains_within_a_grace_period_that_covers_its_longest_stream():
    vals = values("keda")
    vals["drain"] = {"maxAudioSeconds": 120, "leaveSeconds": 10, "stopSeconds": 20}
    deployments = of_kind(render(vals), "Deployment")
    for name, port, metric in (("vl-voxlane-qwen3", 8002, LIVE_METRIC),
                               ("vl-voxlane-gateway", 9000, "voxlane_gateway_live_streams")):
        pod = deployments[name]["spec"]["template"]["spec"]
        hook = container(deployments[name])["lifecycle"]["preStop"]["exec"]["command"]
        assert hook[1:] == ["drain", f"--metrics-url=http://127.0.0.1:{port}/metrics", f"--metric={metric}",
                            "--leave-s=10", "--timeout-s=120"]
        assert pod["terminationGracePeriodSeconds"] == 10 + 120 + 20
        assert port in [p["containerPort"] for p in container(deployments[name])["ports"]]
    assert "--max-audio-seconds=120" in container(deployments["vl-voxlane-qwen3"])["command"]  # no longer stream
    gateway_source = (REPO / "server" / "gateway" / "stats.py").read_text()
    assert "voxlane_gateway_live_streams" in gateway_source


def test_autoscaled_deployments_leave_their_replicas_to_the_scaler():
    deployments = of_kind(render(values("hpa")), "Deployment")
    assert all("replicas" not in d["spec"] for d in deployments.values())


@pytest.mark.parametrize("kind", ["keda", "hpa"])
def test_each_group_and_the_gateway_is_scaled_within_its_bounds(kind):
    objects = render(values(kind))
    deployments = of_kind(objects, "Deployment")
    scalers = of_kind(objects, "ScaledObject" if kind == "keda" else "HorizontalPodAutoscaler")
    assert set(scalers) == set(deployments)
    bounds = {f"vl-voxlane-{m['name']}": (m["minReplicas"], m["maxReplicas"]) for m in MODELS}
    bounds["vl-voxlane-gateway"] = (2, 10)
    low, high = ("minReplicaCount", "maxReplicaCount") if kind == "keda" else ("minReplicas", "maxReplicas")
    for name, scaler in scalers.items():
        assert scaler["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        assert (scaler["spec"][low], scaler["spec"][high]) == bounds[name]


def selectors(query: str) -> dict[str, dict[str, str]]:
    """metric -> its label matchers, for every selector in a PromQL query (which must parse)."""
    promql_parser.parse(query)
    return {m.group(1): dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            for m in re.finditer(r"([a-zA-Z_:][\w:]*)\{([^}]*)\}", query)}


@pytest.mark.parametrize("signal, metrics, target", [
    ("streams", {LIVE_METRIC, ADMISSION_LIMIT_METRIC}, "0.75"), ("busy", {"voxlane_lm_idle_seconds_total"}, "0.6")])
def test_keda_reads_the_groups_own_servers_signal_against_its_target(signal, metrics, target):
    objects = render(values("keda", signal=signal))
    services = of_kind(objects, "Service")
    scaled = of_kind(objects, "ScaledObject")
    for model in MODELS:
        [trigger] = scaled[f"vl-voxlane-{model['name']}"]["spec"]["triggers"]
        assert trigger["metricType"] == "AverageValue" and trigger["metadata"]["threshold"] == target
        found = selectors(trigger["metadata"]["query"])
        assert set(found) == metrics
        for matchers in found.values():  # the labels the ServiceMonitor gives each series: its Service, namespace
            assert matchers == {"namespace": NAMESPACE, "service": f"vl-voxlane-{model['name']}-pods"}
            assert matchers["service"] in services
    [gateway] = scaled["vl-voxlane-gateway"]["spec"]["triggers"]
    assert selectors(gateway["metadata"]["query"]) == {
        "voxlane_gateway_live_streams": {"namespace": NAMESPACE, "service": "vl-voxlane-gateway"}}
    assert gateway["metadata"]["threshold"] == "1000"


def test_the_servers_export_what_the_scalers_divide():
    metrics_doc = (REPO / "backend_python" / "stub_common" / "metrics.py").read_text()
    for name in (LIVE_METRIC, ADMISSION_LIMIT_METRIC, "voxlane_lm_idle_seconds_total"):
        assert f"`{name}`" in metrics_doc


@pytest.mark.parametrize("signal, metric", [("streams", "voxlane_stream_share"), ("busy", "voxlane_lm_busy_share")])
def test_each_hpa_metric_is_served_by_a_prometheus_adapter_rule_that_parses(signal, metric):
    objects = render(values("hpa", signal=signal))
    hpas = of_kind(objects, "HorizontalPodAutoscaler")
    [config] = of_kind(objects, "ConfigMap").values()
    rules = {r["name"]["as"]: r for r in yaml.safe_load(config["data"]["rules.yaml"])["rules"]}
    wanted = {"vl-voxlane-qwen3": (metric, "0.75" if signal == "streams" else "0.6"),
              "vl-voxlane-mine": (metric, "0.75" if signal == "streams" else "0.6"),
              "vl-voxlane-gateway": ("voxlane_gateway_open_streams", "1000")}
    for name, hpa in hpas.items():
        [source] = hpa["spec"]["metrics"]
        assert source["type"] == "Pods"
        assert (source["pods"]["metric"]["name"], source["pods"]["target"]["averageValue"]) == wanted[name]
        assert source["pods"]["target"]["type"] == "AverageValue"
        rule = rules[source["pods"]["metric"]["name"]]
        series = promql_parser.parse(rule["seriesQuery"]).name
        assert re.fullmatch(rule["name"]["matches"], series)
        query = (rule["metricsQuery"].replace("<<.Series>>", series)
                 .replace("<<.LabelMatchers>>", f'namespace="{NAMESPACE}",pod="p-0"').replace("<<.GroupBy>>", "pod"))
        promql_parser.parse(query)
        assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}


def test_without_groups_the_static_set_keeps_its_fixed_pods_and_no_drain():
    objects = manifests({"triton": {"gpus": 2}})
    [triton] = of_kind(objects, "StatefulSet").values()
    assert triton["spec"]["replicas"] == 2 and "lifecycle" not in container(triton)
    assert triton["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60
    assert not any(a.startswith("--max-audio-seconds") for a in container(triton)["command"])
    assert not {"ScaledObject", "HorizontalPodAutoscaler", "ConfigMap"} & {o["kind"] for o in objects}


@pytest.mark.parametrize("change, message", [
    (lambda v: v["models"][0].update(name="Qwen_3"), "DNS label"),
    (lambda v: v["models"][0].update(checkpoint="/models/x"), "not both"),
    (lambda v: v["models"][1].pop("checkpoint"), "a preset or a checkpoint"),
    (lambda v: v["models"][0].update(minReplicas=0), "minReplicas"),
    (lambda v: v["autoscaling"].update(signal="gpu"), "streams or busy"),
    (lambda v: v["autoscaling"].update(kind="vpa"), "keda or hpa")])
def test_values_that_cannot_work_fail_the_render(change, message):
    vals = values("keda")
    change(vals)
    with pytest.raises(Exception, match=message):
        render(vals)
