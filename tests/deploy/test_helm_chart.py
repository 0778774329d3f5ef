"""The Helm chart (deploy/helm/specdec), rendered by the real Helm engine (Helm v4's Go SDK via
the `helm-python-sdk` package: no helm binary, no cluster) for the default values and each
documented variant. Every rendered object is validated against the Kubernetes JSON schemas of
`kubernetes-validate` (strict: unknown fields fail) for the chart's oldest supported version and
a current one, and the fields that matter are checked against the services' own code: env names
are settings fields (derived from the dataclasses), the configuration parses with the services'
own settings parser, ports are the servers' defaults, probes ask the standard health service.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (dev extra) renders the chart")
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (dev extra)")

from drafter_svc.discovery import discovery_from_target  # noqa: E402
from drafter_svc.k8s_discovery import KubernetesDiscovery  # noqa: E402
from drafter_svc.settings import DrafterSettings  # noqa: E402
from gateway_svc.settings import GatewaySettings  # noqa: E402
from specdec import cli, model_files, settings  # noqa: E402
from specdec.grpc_server import LIVENESS_SERVICE  # noqa: E402
from specdec.metrics import DrafterMetrics  # noqa: E402
from verifier_svc.settings import VerifierSettings  # noqa: E402

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "specdec"
RELEASE, NAMESPACE = "sd", "ml"
KUBE_VERSIONS = ("1.30.0", "1.35.0")  # the chart's kubeVersion floor, and a current release
SERVICES = {"drafter": (DrafterSettings, "SPECDEC_DRAFTER_", "specdec.v1.Drafter"),
            "verifier": (VerifierSettings, "SPECDEC_VERIFIER_", "specdec.v1.Verifier")}
# Environment the pods set that is not a settings field, and who reads it.
OTHER_ENV = {"SPECDEC_CACHE_DIR": inspect.getsource(model_files.cache_root), "HF_HOME": "transformers' cache"}

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "tls": {"tls": {"enabled": True, "mutualDrafter": True}},
    "auth": {"auth": {"enabled": True, "secretName": "tokens", "secretKey": "drafter-token"}},
    "autoscaling-off": {"drafter": {"autoscaling": {"enabled": False}, "replicas": 3}},
    "servicemonitor": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}},
    "dns-discovery-model-volume": {
        "drafter": {"verifierDiscovery": "dns", "autoscaling": {"targetOpenSessionsPerPod": 8}},
        "verifier": {"gpus": 2, "model": {"source": "/models/smollm2", "volume": {"persistentVolumeClaim": {"claimName": "models"}}},
                     "nodeSelector": {"gpu": "h100"}, "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}],
                     "extraSettings": {"torch_threads": 8}},
    },
    "gateway": {"gateway": {"enabled": True, "autoscaling": {"enabled": True}, "servedModelName": "smol"},
                "drafter": {"verifierDiscovery": "dns"}, "metrics": {"serviceMonitor": {"enabled": True}}},
    "gateway-tls-auth": {"gateway": {"enabled": True, "image": {"repository": "example.org/gw", "tag": "1"}},
                         "tls": {"enabled": True, "mutualDrafter": True}, "auth": {"enabled": True}},
}


@functools.cache
def render(variant: str) -> tuple[dict[str, Any], ...]:
    chart = helm.Chart.load(CHART)
    chart.validate_schema(VARIANTS[variant])
    manifests = chart.render(VARIANTS[variant], name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith(".txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return tuple(objects)


def find(variant: str, kind: str, component: str | None = None) -> list[dict[str, Any]]:
    return [o for o in render(variant) if o["kind"] == kind and
            (component is None or o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component)]


def one(variant: str, kind: str, component: str) -> dict[str, Any]:
    found = find(variant, kind, component)
    assert len(found) == 1, (kind, component, [o["metadata"]["name"] for o in found])
    return found[0]


def container(variant: str, component: str) -> dict[str, Any]:
    return one(variant, "Deployment", component)["spec"]["template"]["spec"]["containers"][0]


def pod_env(variant: str, component: str) -> dict[str, str]:
    """The container's environment: its ConfigMap (envFrom) plus its own env entries."""
    c = container(variant, component)
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        name = source["configMapRef"]["name"]
        env.update(next(o for o in find(variant, "ConfigMap") if o["metadata"]["name"] == name)["data"])
    env.update({e["name"]: e["value"] for e in c.get("env", [])})
    return env


def parsed_settings(variant: str, component: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The settings the service would run with, parsed by its own parser from the pod's env."""
    cls, prefix, _ = SERVICES[component]
    for field in dataclasses.fields(cls):
        monkeypatch.delenv(prefix + field.name.upper(), raising=False)
    for name, value in pod_env(variant, component).items():
        monkeypatch.setenv(name, value)
    return settings.parse(cls, prefix, [])


def test_chart_lints_clean() -> None:
    report = helm.lint(CHART, strict=True, namespace=NAMESPACE)
    assert not report["errors"] and not [m for m in report["messages"] if m["severity"] >= 2], report


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rendered_object_is_valid_kubernetes(variant: str) -> None:
    objects = render(variant)
    assert objects
    for obj in objects:
        if obj["apiVersion"] == "monitoring.coreos.com/v1":  # a CRD: kubernetes-validate has no schema
            _validate_object_meta(obj)
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(f"{obj['kind']} {obj['metadata']['name']} (k8s {version}): {error.message} at {list(error.path)}")


def _validate_object_meta(obj: dict[str, Any]) -> None:
    """For a custom resource: its metadata against the real (strict) ObjectMeta schema."""
    import jsonschema
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    folder = f"kubernetes-json-schema/v{KUBE_VERSIONS[-1]}-local-strict"
    schema = schema_contents(f"{folder}/objectmeta-meta-v1.json", KUBE_VERSIONS[-1])
    definitions = schema_contents(f"{folder}/_definitions.json", KUBE_VERSIONS[-1])
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    jsonschema.Draft202012Validator(schema, registry=registry).validate(obj["metadata"])
    assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}


def test_values_schema_rejects_mistakes() -> None:
    chart = helm.Chart.load(CHART)
    chart.validate_schema({})
    for bad in ({"verifier": {"gpus": -1}}, {"drafter": {"verifierDiscovery": "zookeeper"}},
                {"drafter": {"replica": 3}}, {"verifier": {"port": 70000}}, {"tls": {"enabled": "yes"}},
                {"gateway": {"enabled": "yes"}}, {"gateway": {"port": 0}}, {"gateway": {"requestTimeoutSeconds": -1}}):
        with pytest.raises(helm.HelmError):
            chart.validate_schema(bad)


def test_every_value_has_a_comment() -> None:
    """Each key of values.yaml has a comment right above it, except inside Kubernetes'
    own structures (resources, tolerations, security context), which are documented upstream."""
    free_form = ("resources", "tolerations", "containerSecurityContext", "capabilities")
    stack: list[tuple[int, str]] = []
    previous = ""
    missing = []
    for line in (CHART / "values.yaml").read_text().splitlines():
        match = re.match(r"^(\s*)(- )?([\w.-]+):", line)
        if match and not match.group(2):
            indent = len(match.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            inside_free_form = any(key in free_form for _, key in stack)
            if not inside_free_form and not previous.lstrip().startswith("#"):
                missing.append(line.strip())
            stack.append((indent, match.group(3)))
        if line.strip():
            previous = line
    # section headers (drafter:, image:, ...) are documented by the comments of their keys
    headers = {"drafter:", "verifier:", "gateway:", "image:", "service:", "autoscaling:", "pdb:", "model:", "tls:",
               "metrics:", "serviceMonitor:", "serviceAccount:", "helmTest:"}
    assert [m for m in missing if m not in headers] == []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("component", sorted(SERVICES))
def test_env_names_are_the_settings_the_service_reads(variant: str, component: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cls, prefix, _ = SERVICES[component]
    fields = {prefix + f.name.upper() for f in dataclasses.fields(cls)}
    env = pod_env(variant, component)
    unknown = {name for name in env if name not in fields and name not in OTHER_ENV}
    assert not unknown, f"the {component} reads no such setting: {sorted(unknown)}"
    assert "SPECDEC_CACHE_DIR" in OTHER_ENV["SPECDEC_CACHE_DIR"]  # model_files really reads it
    config = parsed_settings(variant, component, monkeypatch)  # the service's own parser accepts every value
    c = container(variant, component)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert config.host == "0.0.0.0"
    assert ports["grpc"] == config.port and ports["health"] == config.health_port
    assert ports.get("metrics", 0) == config.metrics_port


@pytest.mark.parametrize("component", sorted(SERVICES))
def test_ports_are_the_servers_defaults(component: str) -> None:
    cls, _, _ = SERVICES[component]
    service = one("default", "Service", component)
    grpc_port = next(p for p in service["spec"]["ports"] if p["name"] == "grpc")
    assert grpc_port["port"] == cls().port and grpc_port["targetPort"] == "grpc"
    assert {p["name"]: p["containerPort"] for p in container("default", component)["ports"]}["grpc"] == cls().port
    selector = service["spec"]["selector"]
    pod_labels = one("default", "Deployment", component)["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("component", sorted(SERVICES))
def test_probes_ask_the_standard_health_service_and_grace_outlasts_the_drain(
    variant: str, component: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, service_name = SERVICES[component]
    config = parsed_settings(variant, component, monkeypatch)
    c = container(variant, component)
    assert c["readinessProbe"]["grpc"] == {"port": config.health_port, "service": service_name}
    assert c["livenessProbe"]["grpc"] == {"port": config.health_port, "service": LIVENESS_SERVICE}
    pod = one(variant, "Deployment", component)["spec"]["template"]["spec"]
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pre_stop + config.grace_seconds > config.grace_seconds


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_verifier_requests_gpus_and_waits_long_for_the_model(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = VARIANTS[variant].get("verifier", {}).get("gpus", 1)
    c = container(variant, "verifier")
    assert c["resources"]["requests"]["nvidia.com/gpu"] == gpus == c["resources"]["limits"]["nvidia.com/gpu"]
    assert parsed_settings(variant, "verifier", monkeypatch).device == "cuda"
    startup = c["startupProbe"]
    assert startup["grpc"] == {"port": c["readinessProbe"]["grpc"]["port"], "service": "specdec.v1.Verifier"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # minutes to load a model
    pod = one(variant, "Deployment", "verifier")["spec"]["template"]["spec"]
    want = VARIANTS[variant].get("verifier", {})
    assert pod.get("nodeSelector", {}) == want.get("nodeSelector", {})
    assert pod["tolerations"] == want.get("tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])


def test_a_cpu_verifier_requests_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    chart = helm.Chart.load(CHART)
    manifests = chart.render({"verifier": {"gpus": 0, "tolerations": []}}, name=RELEASE, namespace=NAMESPACE)
    deployment = yaml.safe_load(manifests["specdec/templates/verifier-deployment.yaml"])
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in json.dumps(resources)
    config_map = yaml.safe_load(manifests["specdec/templates/verifier-configmap.yaml"])
    assert config_map["data"]["SPECDEC_VERIFIER_DEVICE"] == "cpu"


def test_model_volume_is_mounted_where_the_model_source_points(monkeypatch: pytest.MonkeyPatch) -> None:
    variant = "dns-discovery-model-volume"
    config = parsed_settings(variant, "verifier", monkeypatch)
    c = container(variant, "verifier")
    mount = next(m for m in c["volumeMounts"] if m["name"] == "model")
    assert config.model.startswith(mount["mountPath"] + "/") and mount["readOnly"]
    assert config.torch_threads == 8  # extraSettings reach the service
    volumes = {v["name"]: v for v in one(variant, "Deployment", "verifier")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["model"]["persistentVolumeClaim"] == {"claimName": "models"}
    assert pod_env(variant, "verifier")["SPECDEC_CACHE_DIR"] in {m["mountPath"] for m in c["volumeMounts"]}


def test_verifier_service_is_headless_and_drafters_watch_it(monkeypatch: pytest.MonkeyPatch) -> None:
    verifier_service = one("default", "Service", "verifier")
    assert verifier_service["spec"]["clusterIP"] == "None"
    assert not verifier_service["spec"]["publishNotReadyAddresses"]  # unready verifiers leave the slices
    target = discovery_from_target(parsed_settings("default", "drafter", monkeypatch).verifier)
    assert isinstance(target, KubernetesDiscovery)
    assert (target.namespace, target.service) == (NAMESPACE, verifier_service["metadata"]["name"])
    assert target.port in {p["name"] for p in verifier_service["spec"]["ports"]}
    # the drafters' ServiceAccount may list and watch EndpointSlices, nothing more
    role = one("default", "Role", "drafter")
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}]
    binding = one("default", "RoleBinding", "drafter")
    pod = one("default", "Deployment", "drafter")["spec"]["template"]["spec"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert one("default", "ServiceAccount", "drafter")["metadata"]["name"] == pod["serviceAccountName"]


def test_dns_discovery_needs_no_rbac(monkeypatch: pytest.MonkeyPatch) -> None:
    variant = "dns-discovery-model-volume"
    assert not find(variant, "Role") and not find(variant, "RoleBinding")
    target = discovery_from_target(parsed_settings(variant, "drafter", monkeypatch).verifier)
    verifier_service = one(variant, "Service", "verifier")
    assert target.host == f"{verifier_service['metadata']['name']}.{NAMESPACE}.svc.cluster.local"  # type: ignore[attr-defined]
    assert target.port == verifier_service["spec"]["ports"][0]["port"]  # type: ignore[attr-defined]


def test_autoscaling_and_disruption_budgets() -> None:
    hpa = one("default", "HorizontalPodAutoscaler", "drafter")
    deployment = one("default", "Deployment", "drafter")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"]}
    assert "replicas" not in deployment["spec"]  # the HPA owns the count
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    assert not find("autoscaling-off", "HorizontalPodAutoscaler")
    assert one("autoscaling-off", "Deployment", "drafter")["spec"]["replicas"] == 3
    custom = one("dns-discovery-model-volume", "HorizontalPodAutoscaler", "drafter")["spec"]["metrics"][1]["pods"]
    assert custom["metric"]["name"] == DrafterMetrics().open_sessions._name  # the gauge the drafter exports
    assert custom["target"] == {"type": "AverageValue", "averageValue": "8"}
    for component in SERVICES:
        pdb = one("default", "PodDisruptionBudget", component)
        labels = one("default", "Deployment", component)["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert pdb["spec"]["maxUnavailable"] == 1


def test_tls_variant_mounts_the_secret_and_points_every_setting_at_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not any("TLS" in name for component in SERVICES for name in pod_env("default", component))
    for component in SERVICES:
        c = container("tls", component)
        mount = next(m for m in c["volumeMounts"] if m["name"] == "tls")
        volumes = one("tls", "Deployment", component)["spec"]["template"]["spec"]["volumes"]
        assert next(v for v in volumes if v["name"] == "tls")["secret"] == {"secretName": "specdec-tls"}
        config = parsed_settings("tls", component, monkeypatch)
        files = {getattr(config, f.name) for f in dataclasses.fields(config) if f.name.endswith("_file") and "tls" in f.name}
        assert files == {f"{mount['mountPath']}/{name}" for name in ("tls.crt", "tls.key", "ca.crt")}
    drafter = parsed_settings("tls", "drafter", monkeypatch)
    assert drafter.verifier_tls_server_name == f"{one('tls', 'Service', 'verifier')['metadata']['name']}.{NAMESPACE}.svc"
    assert parsed_settings("tls", "verifier", monkeypatch).tls_client_ca_file  # only drafters reach verifiers


def test_auth_variant_mounts_the_token_secret_as_the_file_the_drafter_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "SPECDEC_DRAFTER_AUTH_TOKEN_FILE" not in pod_env("default", "drafter")
    mount = next(m for m in container("auth", "drafter")["volumeMounts"] if m["name"] == "auth")
    volumes = one("auth", "Deployment", "drafter")["spec"]["template"]["spec"]["volumes"]
    secret = next(v for v in volumes if v["name"] == "auth")["secret"]
    assert secret == {"secretName": "tokens", "items": [{"key": "drafter-token", "path": "token"}]}
    assert parsed_settings("auth", "drafter", monkeypatch).auth_token_file == f"{mount['mountPath']}/token"
    assert not any("AUTH" in name for name in pod_env("auth", "verifier"))  # only clients of the drafter


@pytest.mark.parametrize("variant", ["default", "tls", "auth"])
def test_helm_test_hook_runs_one_generate_against_the_drafter_service(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [o for o in find(variant, "Pod") if o["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    assert len(pods) == 1
    command = pods[0]["spec"]["containers"][0]["command"]
    assert command[:2] == ["specdec", "generate"]
    captured = []
    monkeypatch.setattr(cli, "_generate", lambda args: captured.append(args) or 0)
    assert cli.main(command[1:]) == 0  # the real CLI accepts exactly these arguments
    args = captured[0]
    service = one(variant, "Service", "drafter")
    assert args.address == f"{service['metadata']['name']}.{NAMESPACE}.svc:{service['spec']['ports'][0]['port']}"
    assert args.prompt and args.max_new_tokens == 8
    assert bool(args.tls_ca_file) == (variant == "tls") and bool(args.tls_cert_file) == (variant == "tls")
    assert bool(args.token_file) == (variant == "auth")
    if variant == "auth":  # the test pod mounts the token where it reads it
        pod = pods[0]["spec"]
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "auth")
        assert args.token_file == f"{mount['mountPath']}/token" and any(v["name"] == "auth" for v in pod["volumes"])


def test_service_monitor_scrapes_both_services_metrics_ports() -> None:
    assert not find("default", "ServiceMonitor")
    monitor = find("servicemonitor", "ServiceMonitor")[0]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    [endpoint] = monitor["spec"]["endpoints"]
    selected = []
    for service in find("servicemonitor", "Service"):
        labels = service["metadata"]["labels"]
        if all(labels.get(e["key"]) in e["values"] for e in monitor["spec"]["selector"]["matchExpressions"]):
            selected.append(service["metadata"]["labels"]["app.kubernetes.io/component"])
            assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert sorted(selected) == ["drafter", "verifier"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def gateway_settings(variant: str, monkeypatch: pytest.MonkeyPatch) -> GatewaySettings:
    """The gateway's settings, parsed by its own parser from its pod's environment."""
    for field in dataclasses.fields(GatewaySettings):
        monkeypatch.delenv("SPECDEC_GATEWAY_" + field.name.upper(), raising=False)
    env = pod_env(variant, "gateway")
    unknown = {name for name in env if name.removeprefix("SPECDEC_GATEWAY_").lower() not in
               {f.name for f in dataclasses.fields(GatewaySettings)}}
    assert not unknown, f"the gateway reads no such setting: {sorted(unknown)}"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return settings.parse(GatewaySettings, "SPECDEC_GATEWAY_", [])


def test_gateway_is_off_by_default() -> None:
    for variant in ("default", "tls", "auth"):
        assert not [o for o in render(variant) if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "gateway"]


@pytest.mark.parametrize("variant", ["gateway", "gateway-tls-auth"])
def test_gateway_serves_its_settings_and_follows_every_drafter_pod(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    config = gateway_settings(variant, monkeypatch)
    c = container(variant, "gateway")
    assert c["command"] == ["specdec", "serve", "openai"]
    with pytest.raises(SystemExit) as done:
        cli.main(["serve", "openai", "--help"])  # the real CLI knows the command
    assert done.value.code == 0
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert config.host == "0.0.0.0" and ports["http"] == config.port == GatewaySettings().port
    assert ports["metrics"] == config.metrics_port
    service = one(variant, "Service", "gateway")
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {"http": "http", "metrics": "metrics"}
    assert service["spec"]["selector"].items() <= one(variant, "Deployment", "gateway")["spec"]["template"]["metadata"]["labels"].items()
    target = discovery_from_target(config.drafter)
    drafter_service = one(variant, "Service", "drafter")
    assert isinstance(target, KubernetesDiscovery)
    assert (target.namespace, target.service) == (NAMESPACE, drafter_service["metadata"]["name"])
    assert target.port in {p["name"] for p in drafter_service["spec"]["ports"]}
    # the pod's ServiceAccount may watch EndpointSlices (even with dns discovery for the drafters)
    pod = one(variant, "Deployment", "gateway")["spec"]["template"]["spec"]
    binding = one(variant, "RoleBinding", "drafter")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    assert one(variant, "ServiceAccount", "drafter")["automountServiceAccountToken"] is True
    assert one(variant, "Role", "drafter")["rules"][0]["resources"] == ["endpointslices"]
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pre_stop + config.grace_seconds
    assert c["readinessProbe"]["httpGet"]["path"] == "/health" and c["livenessProbe"]["tcpSocket"]["port"] == "http"


def test_gateway_image_autoscaling_and_scrape() -> None:
    assert container("gateway", "gateway")["image"] == container("gateway", "drafter")["image"]  # the drafter image by default
    assert container("gateway-tls-auth", "gateway")["image"] == "example.org/gw:1"
    hpa = one("gateway", "HorizontalPodAutoscaler", "gateway")
    deployment = one("gateway", "Deployment", "gateway")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"] and "replicas" not in deployment["spec"]
    assert not find("gateway-tls-auth", "HorizontalPodAutoscaler", "gateway")
    assert one("gateway-tls-auth", "Deployment", "gateway")["spec"]["replicas"] == 2
    monitor = find("gateway", "ServiceMonitor")[0]
    assert "gateway" in monitor["spec"]["selector"]["matchExpressions"][1]["values"]


def test_gateway_tls_and_auth_point_at_the_mounted_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not any("TLS" in name or "AUTH" in name for name in pod_env("gateway", "gateway"))
    config = gateway_settings("gateway-tls-auth", monkeypatch)
    c = container("gateway-tls-auth", "gateway")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    tls_files = {config.tls_cert_file, config.tls_key_file, config.drafter_tls_ca_file, config.drafter_tls_cert_file, config.drafter_tls_key_file}
    assert tls_files == {f"{mounts['tls']}/{name}" for name in ("tls.crt", "tls.key", "ca.crt")}
    assert config.drafter_tls_server_name == f"{one('gateway-tls-auth', 'Service', 'drafter')['metadata']['name']}.{NAMESPACE}.svc"
    assert config.auth_token_file == f"{mounts['auth']}/token"
    volumes = {v["name"]: v for v in one("gateway-tls-auth", "Deployment", "gateway")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["auth"]["secret"]["secretName"] == "specdec-auth" and volumes["tls"]["secret"] == {"secretName": "specdec-tls"}
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
