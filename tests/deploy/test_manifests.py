"""The YAML under deploy/: yamllint on all of it; kubernetes-validate (strict, oldest and newest
bundled schema) on every Kubernetes manifest; our own required-field checks for the custom
resources it has no schema for (KServe ServingRuntime and InferenceService, PodMonitor,
PrometheusRule); the references between the manifests; docker-compose's own validation of
compose.yaml; promtool on the Prometheus config and alerts (with unit tests); and the Grafana
provisioning."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from conftest import DEPLOY, REPO, run, split_flag, tool

YAML_FILES = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml")) + sorted((DEPLOY / "kserve").glob("*.yaml"))
K8S_VERSIONS = ["1.28.0", "1.37.0"]  # oldest and newest schemas kubernetes-validate ships
CUSTOM_KINDS = {
    ("serving.kserve.io/v1alpha1", "ServingRuntime"),
    ("serving.kserve.io/v1beta1", "InferenceService"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}


def load(path: Path) -> dict:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(docs) == 1, f"{path}: one resource per file"
    return docs[0]


def resources() -> dict[str, dict]:
    """{kind: resource} over deploy/k8s and deploy/kserve (ConfigMaps by name)."""
    out = {}
    for path in MANIFESTS:
        doc = load(path)
        key = doc["metadata"]["name"] if doc["kind"] == "ConfigMap" else doc["kind"]
        out[key] = doc
    return out


def test_yaml_files_found():
    names = {p.relative_to(DEPLOY).as_posix() for p in YAML_FILES}
    for expected in ("compose.yaml", "prometheus/prometheus.yml", "prometheus/alerts.yml",
                     "k8s/deployment.yaml", "kserve/servingruntime.yaml",
                     "grafana/provisioning/datasources/prometheus.yaml"):
        assert expected in names


def test_yamllint():
    out = run([tool("yamllint"), "--strict", "-f", "parsable", "-c", str(DEPLOY / ".yamllint.yaml"),
               *map(str, YAML_FILES)])
    assert out.returncode == 0, out.stdout + out.stderr


def test_yamllint_catches_problems(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\na: 2\nb:   [1,2]  \n")
    out = run([tool("yamllint"), "--strict", "-c", str(DEPLOY / ".yamllint.yaml"), str(bad)])
    assert out.returncode != 0 and "duplication of key" in out.stdout


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_kubernetes_validate(version):
    out = run([tool("kubernetes-validate"), "--strict", "-k", version, *map(str, MANIFESTS)])
    assert out.returncode == 0, out.stdout + out.stderr
    # Every resource without a bundled schema is one that test_custom_resources checks.
    for line in out.stdout.splitlines():
        if "Couldn't find schema" in line:
            assert any(f"kind {k} with api version {v}" in line for v, k in CUSTOM_KINDS), line
        else:
            assert "passed" in line, line


def test_kubernetes_validate_catches_problems(tmp_path):
    bad = tmp_path / "bad.yaml"
    doc = load(DEPLOY / "k8s" / "service.yaml")
    doc["spec"]["ports"][0]["prot"] = 8000
    bad.write_text(yaml.safe_dump(doc))
    out = run([tool("kubernetes-validate"), "--strict", str(bad)])
    assert out.returncode != 0


# ---- our own checks of the custom resources (required fields as their CRDs declare them) ----

def require(doc: dict, dotted: str):
    node = doc
    for part in dotted.split("."):
        assert isinstance(node, dict) and part in node, f"{doc['kind']}: missing {dotted}"
        node = node[part]
    assert node not in (None, "", [], {}), f"{doc['kind']}: empty {dotted}"
    return node


def test_servingruntime_required_fields():
    rt = resources()["ServingRuntime"]
    assert rt["apiVersion"] == "serving.kserve.io/v1alpha1"
    require(rt, "metadata.name")
    containers = require(rt, "spec.containers")
    for c in containers:
        require(c | {"kind": "container"}, "name")
        require(c | {"kind": "container"}, "image")
    # KServe injects its storage mount and ports into the container with this name.
    assert [c["name"] for c in containers] == ["kserve-container"]
    for fmt in require(rt, "spec.supportedModelFormats"):
        assert fmt.get("name"), "supportedModelFormats[].name is required"
    assert set(require(rt, "spec.protocolVersions")) <= {"v1", "v2", "grpc-v1", "grpc-v2"}
    assert {"v2", "grpc-v2"} <= set(rt["spec"]["protocolVersions"])
    args = dict(split_flag(a) for a in containers[0]["args"])
    assert args["model_repository"] == "/mnt/models"  # where KServe's storage initializer writes
    assert args["http_port"] == "8080" and args["grpc_port"] == "9000"  # KServe's v2 ports
    annotations = rt["spec"]["annotations"]
    assert annotations["prometheus.kserve.io/port"] == args["metrics_port"]


def test_inferenceservice_required_fields():
    res = resources()
    isvc, rt = res["InferenceService"], res["ServingRuntime"]
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    require(isvc, "metadata.name")
    require(isvc, "spec.predictor")
    fmt = require(isvc, "spec.predictor.model.modelFormat.name")
    require(isvc, "spec.predictor.model.storageUri")
    assert require(isvc, "spec.predictor.model.runtime") == rt["metadata"]["name"]
    assert fmt in [f["name"] for f in rt["spec"]["supportedModelFormats"]]
    assert isvc["spec"]["predictor"]["model"]["protocolVersion"] in rt["spec"]["protocolVersions"]
    exit_timeout = int(dict(split_flag(a) for a in rt["spec"]["containers"][0]["args"])
                       ["exit_timeout_secs"])
    assert isvc["spec"]["predictor"]["terminationGracePeriodSeconds"] > exit_timeout


def test_podmonitor():
    res = resources()
    pm, deployment = res["PodMonitor"], res["Deployment"]
    selector = require(pm, "spec.selector.matchLabels")
    endpoints = require(pm, "spec.podMetricsEndpoints")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    ports = {p["name"]: p["containerPort"] for c in deployment["spec"]["template"]["spec"]
             ["containers"] for p in c["ports"]}
    assert [e["port"] for e in endpoints] == ["metrics"] and endpoints[0]["path"] == "/metrics"
    assert ports["metrics"] == 8002
    # The alerts select job="kilnd", the compose job name: the PodMonitor gives pods that job.
    assert labels[pm["spec"]["jobLabel"]] == "kilnd"


def test_prometheusrule_is_the_alerts_file():
    rule = resources()["PrometheusRule"]
    groups = require(rule, "spec.groups")
    for group in groups:
        assert group.get("name"), "groups[].name is required"
        for r in group["rules"]:
            assert r.get("expr"), "rules[].expr is required"
    assert rule["spec"] == load(DEPLOY / "prometheus" / "alerts.yml"), \
        "deploy/k8s/prometheusrule.yaml differs from deploy/prometheus/alerts.yml"


# ---- references between the Kubernetes manifests ----

def kilnd_container(deployment: dict) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_deployment():
    res = resources()
    deployment = res["Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    c = kilnd_container(deployment)
    args = dict(split_flag(a) for a in c["args"])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": int(args["http_port"]), "grpc": int(args["grpc_port"]),
                     "metrics": int(args["metrics_port"])}
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    for kind in ("requests", "limits"):
        assert c["resources"][kind]["memory"]
    assert c["resources"]["requests"]["cpu"]
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert spec["terminationGracePeriodSeconds"] > int(args["exit_timeout_secs"]) + int(pre_stop[1])
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert deployment["spec"]["selector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()


def test_deployment_trains_into_a_writable_repository():
    """Training is on: --data-dir on a volume, and the repository kilnd publishes into is a
    writable emptyDir that an init container fills from the ConfigMap."""
    spec = resources()["Deployment"]["spec"]["template"]["spec"]
    c = kilnd_container(resources()["Deployment"])
    args = dict(split_flag(a) for a in c["args"])
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["data"]["mountPath"] == args["data_dir"] and "emptyDir" in volumes["data"]
    assert mounts["models"]["mountPath"] == args["model_repository"]
    assert not mounts["models"].get("readOnly") and "emptyDir" in volumes["models"]
    assert args["dataset_roots"] == "/usr/share/datasets"  # Fashion-MNIST is in the image
    (init,) = spec["initContainers"]
    init_mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert "configMap" in volumes["models-configmap"]
    assert init_mounts == {"models-configmap": "/configmap", "models": "/models"}
    assert init["command"] == ["/bin/sh", "-c", "cp -RL /configmap/[!.]* /models/"]


def test_service_targets_the_deployment():
    res = resources()
    service, deployment = res["Service"], res["Deployment"]
    assert service["spec"]["selector"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()
    names = {p["name"] for p in kilnd_container(deployment)["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == names


def test_configmap_is_the_bundled_repository():
    """Mounted with its items, the ConfigMap is models/ byte for byte; test_entrypoint_flags
    starts kilnd on exactly that tree."""
    res = resources()
    cm, deployment = res["kilnd-models"], res["Deployment"]
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == "kilnd-models"
    items = {i["key"]: i["path"] for i in volume["configMap"]["items"]}
    files = {p.relative_to(REPO / "models").as_posix(): p.read_bytes()
             for p in (REPO / "models").rglob("*") if p.is_file()}
    assert sorted(items.values()) == sorted(files), "regenerate: deploy/k8s/gen_configmap.py"
    data, binary = cm.get("data", {}), cm.get("binaryData", {})
    assert set(items) == set(data) | set(binary) and not set(data) & set(binary)
    for key, path in items.items():
        got = data[key].encode() if key in data else base64.b64decode(binary[key], validate=True)
        assert got == files[path], f"{key} differs from models/{path}: run deploy/k8s/gen_configmap.py"


def test_hpa_uses_the_adapter_rule():
    res = resources()
    hpa, adapter = res["HorizontalPodAutoscaler"], res["prometheus-adapter"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": res["Deployment"]["metadata"]["name"]}
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    rules = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
    (rule,) = [r for r in rules if r["name"]["as"] == metric["pods"]["metric"]["name"]]
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"},
                                              "pod": {"resource": "pod"}}
    for template in ("<<.LabelMatchers>>", "<<.GroupBy>>"):
        assert template in rule["metricsQuery"]


# ---- compose, Prometheus, Grafana ----

def test_compose_config():
    out = run(["docker-compose", "-f", str(DEPLOY / "compose.yaml"), "config", "-q"], cwd=DEPLOY)
    assert out.returncode == 0, out.stdout + out.stderr
    compose = load(DEPLOY / "compose.yaml")
    services = compose["services"]
    assert set(services) == {"kilnd", "prometheus", "grafana"}
    assert (DEPLOY / services["kilnd"]["build"]["context"] /
            services["kilnd"]["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), volume
    grace = services["kilnd"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > 30


def test_compose_config_catches_problems(tmp_path):
    bad = tmp_path / "compose.yaml"
    bad.write_text("services:\n  kilnd:\n    image: kiln/kilnd:0.1.0\n    portz: ['8000:8000']\n")
    out = run(["docker-compose", "-f", str(bad), "config", "-q"], cwd=tmp_path)
    assert out.returncode != 0


def test_promtool_check_config():
    out = run(["promtool", "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")])
    assert out.returncode == 0, out.stdout + out.stderr
    config = load(DEPLOY / "prometheus" / "prometheus.yml")
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "kilnd"
    assert job["static_configs"][0]["targets"] == ["kilnd:8002"]
    assert config["rule_files"] == ["alerts.yml"]
    prometheus = load(DEPLOY / "compose.yaml")["services"]["prometheus"]
    assert "./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in prometheus["volumes"]


def test_promtool_check_rules():
    out = run(["promtool", "check", "rules", str(DEPLOY / "prometheus" / "alerts.yml")])
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_alert_unit_tests():
    """tests/deploy/alerts_test.yml: every alert fires on a sick kilnd, none on a healthy one."""
    out = run(["promtool", "test", "rules", "alerts_test.yml"], cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stdout + out.stderr
    tested = {t["alertname"] for group in load(Path(__file__).parent / "alerts_test.yml")["tests"]
              for t in group["alert_rule_test"] if t["exp_alerts"]}
    alerts = {r["alert"] for g in load(DEPLOY / "prometheus" / "alerts.yml")["groups"]
              for r in g["rules"]}
    assert tested == alerts, f"alerts without a firing test: {alerts - tested}"


def test_promtool_catches_problems(tmp_path):
    bad = tmp_path / "prometheus.yml"
    bad.write_text("scrape_configs:\n  - job_name: x\n    scrape_interval: fast\n")
    assert run(["promtool", "check", "config", str(bad)]).returncode != 0


def test_grafana_provisioning():
    compose = load(DEPLOY / "compose.yaml")
    grafana = compose["services"]["grafana"]
    datasource = load(DEPLOY / "grafana/provisioning/datasources/prometheus.yaml")["datasources"][0]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    provider = load(DEPLOY / "grafana/provisioning/dashboards/kiln.yaml")["providers"][0]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"] if v.startswith("./")}
    dashboard_mount = next(t for t, s in mounted.items() if s == "./grafana/kiln.json")
    assert str(Path(dashboard_mount).parent) == provider["options"]["path"]
    dashboard = json.loads((DEPLOY / "grafana" / "kiln.json").read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", [])}
    assert uids == {datasource["uid"]}


def test_dashboard_layout_and_panels():
    """Grafana's own rules a broken file would trip, and the panels issue #9 asks for."""
    dashboard = json.loads((DEPLOY / "grafana" / "kiln.json").read_text())
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        taken = {(g["x"] + dx, g["y"] + dy) for dx in range(g["w"]) for dy in range(g["h"])}
        assert not taken & cells, f"panel '{p['title']}' overlaps another"
        cells |= taken
        if p["type"] == "row":
            continue
        assert p["targets"] and all(t["expr"].strip() for t in p["targets"]), p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        if p["type"] == "heatmap":
            assert all(t.get("format") == "heatmap" and t["legendFormat"] == "{{le}}"
                       for t in p["targets"]), p["title"]
            assert all("_bucket" in t["expr"] for t in p["targets"]), p["title"]
    titles = {p["title"] for p in panels}
    for wanted in ("Request rate by model", "Failures by model", "Latency p50 / p99", "Queue time",
                   "Compute time", "Kernel time (heatmap)", "Kernel time by kernel",
                   "JIT cache hit rate", "Compile time", "Device memory", "Training loss",
                   "Training throughput"):
        assert wanted in titles
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    used = {name for p in panels for t in p.get("targets", [])
            for name in variables if f"${name}" in t["expr"]}
    assert used == variables, f"unused dashboard variables: {variables - used}"


def test_secure_compose_override_and_prometheus_config(tmp_path):
    """compose.secure.yaml merges with compose.yaml into a valid file whose kilnd has keys and TLS
    and no --allow-unauthenticated; its Prometheus config passes promtool."""
    out = run(["docker-compose", "-f", str(DEPLOY / "compose.yaml"), "-f", str(DEPLOY / "compose.secure.yaml"),
               "config"], cwd=DEPLOY)
    assert out.returncode == 0, out.stdout + out.stderr
    merged = yaml.safe_load(out.stdout)
    command = merged["services"]["kilnd"]["command"]
    for flag in ("--api-keys-file=/etc/kiln/secure/keys.txt", "--grpc-use-ssl=true", "--http-use-ssl=true"):
        assert flag in command
    assert not any(a.startswith("--allow-unauthenticated") for a in command)
    config = (DEPLOY / "prometheus" / "prometheus.secure.yml").read_text()
    (tmp_path / "alerts.yml").write_text((DEPLOY / "prometheus" / "alerts.yml").read_text())
    (tmp_path / "metrics.key").write_text("k")
    local = tmp_path / "prometheus.yml"
    local.write_text(config.replace("/etc/prometheus/metrics.key", str(tmp_path / "metrics.key")))
    out = run(["promtool", "check", "config", str(local)])
    assert out.returncode == 0, out.stdout + out.stderr
