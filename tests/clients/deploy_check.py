"""Checks the deploy files a user runs (docker-compose.yml, deploy/kubernetes/) without a
Docker engine or a cluster: parsed with a YAML parser, validated against the Compose
Specification's JSON Schema and the Kubernetes 1.37 OpenAPI schemas (strict: unknown
fields are errors), and checked for what the gateway needs (readiness on /readyz, Host
allow-list, metrics scraped, ≥ 2 replicas, secrets shared by every replica).

Prints one JSON object: the gateway configuration to load with the real config loader
(the ConfigMap's TOML and the Secret's TOOLGATE_* variables). Exits non-zero with the
problems listed otherwise.
"""

import json
import os
import pathlib
import sys
import tomllib

import jsonschema
import kubernetes_validate
import yaml

root = pathlib.Path(sys.argv[1])
problems = []


def check(ok, message):
    if not ok:
        problems.append(message)


# --- docker-compose.yml ------------------------------------------------------------
# docker-compose 1.x is installed for its schema file only (none of its dependencies).
import importlib.util  # noqa: E402

compose_dir = pathlib.Path(importlib.util.find_spec("compose").submodule_search_locations[0])
spec = json.loads((compose_dir / "config" / "compose_spec.json").read_text())
compose_doc = yaml.safe_load((root / "docker-compose.yml").read_text())
for error in jsonschema.Draft7Validator(spec).iter_errors(compose_doc):
    problems.append(f"docker-compose.yml: {'/'.join(map(str, error.path))}: {error.message}")
services = compose_doc.get("services", {})
for name in ["toolgate", "postgres", "otel-collector", "jaeger", "prometheus"]:
    check(name in services, f"docker-compose.yml: no {name} service")
gateway = services.get("toolgate", {})
env = gateway.get("environment", {})
check("/readyz" in " ".join(gateway.get("healthcheck", {}).get("test", [])),
      "docker-compose.yml: the gateway's healthcheck must ask /readyz")
check("toolgate" in json.loads(env.get("TOOLGATE_MCP__ALLOWED_HOSTS", "[]")),
      "docker-compose.yml: /mcp must accept the service name as Host")
check("0.0.0.0:8080" in gateway.get("command", []),
      "docker-compose.yml: the gateway must listen on all interfaces")
metrics_port = env.get("TOOLGATE_TELEMETRY__METRICS_LISTEN", "").rsplit(":", 1)[-1]
prometheus = yaml.safe_load((root / "deploy/compose/prometheus.yml").read_text())
targets = [t for job in prometheus["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
check(f"toolgate:{metrics_port}" in targets,
      f"prometheus.yml must scrape toolgate:{metrics_port}, not {targets}")
collector = yaml.safe_load((root / "deploy/compose/otel-collector.yaml").read_text())
check("otlp" in collector["receivers"] and collector["service"]["pipelines"]["traces"],
      "otel-collector.yaml: an OTLP receiver and a traces pipeline")
check(env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").startswith("http://otel-collector:"),
      "docker-compose.yml: OTLP must go to the collector")
for volume in [v for s in services.values() for v in s.get("volumes", []) if v.startswith("./")]:
    check((root / volume.split(":")[0]).exists(), f"docker-compose.yml mounts missing {volume}")

# --- deploy/kubernetes ---------------------------------------------------------------
kube = root / "deploy/kubernetes"
monitoring = kube / "monitoring"
# The Prometheus Operator's kinds, which only a cluster with its CRDs accepts: in
# monitoring/, never in the base, so that `kubectl apply -k deploy/kubernetes` works on
# any cluster.
OPERATOR_KINDS = ("ServiceMonitor", "PrometheusRule")
docs = {}
for path in sorted(kube.glob("*.yaml")) + sorted(monitoring.glob("*.yaml")):
    for doc in yaml.safe_load_all(path.read_text()):
        if doc is None:
            continue
        kind = doc["kind"]
        if kind == "Kustomization":
            docs[f"Kustomization {path.parent.name}"] = doc
            continue
        if kind in OPERATOR_KINDS:
            check(path.parent == monitoring, f"{path.name}: a {kind} belongs in monitoring/")
            docs[kind] = doc
            continue
        try:
            kubernetes_validate.validate(doc, "1.37.0", strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{path.name}: {kind}: {error}")
        docs.setdefault(kind, doc)
        if kind == "ConfigMap" and "grafana_dashboard" in doc["metadata"].get("labels", {}):
            docs["dashboard"] = doc
for folder in (kube, monitoring):
    kustomization = docs.get(f"Kustomization {folder.name}", {})
    check(kustomization.get("namespace") == "toolgate", f"{folder.name}/: namespace toolgate")
    listed = set(kustomization.get("resources", []))
    for path in folder.glob("*.yaml"):
        if path.name not in ("kustomization.yaml", "secret.example.yaml"):
            check(path.name in listed, f"{folder.name}/kustomization.yaml does not list {path.name}")
deployment = docs["Deployment"]
pod = deployment["spec"]["template"]["spec"]
container = pod["containers"][0]
check(deployment["spec"]["replicas"] >= 2, "the Deployment runs at least 2 replicas")
check(docs["HorizontalPodAutoscaler"]["spec"]["minReplicas"] >= 2, "HPA minReplicas ≥ 2")
check("PodDisruptionBudget" in docs and "NetworkPolicy" in docs, "a PDB and a NetworkPolicy")
check(container["readinessProbe"]["httpGet"]["path"] == "/readyz", "readiness on /readyz")
check(container["livenessProbe"]["httpGet"]["path"] == "/healthz", "liveness on /healthz")
check("requests" in container["resources"], "resource requests")
secret_refs = [e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e]
secret = docs["Secret"]
check(secret["metadata"]["name"] in secret_refs, "the pods read the Secret")
for key in ["DATABASE_URL", "TOOLGATE_TENANT_UPSTREAMS__KEY", "TOOLGATE_AUDIT__SIGNING_KEY"]:
    check(key in secret["stringData"], f"the Secret holds {key} (shared by every replica)")
configmap = docs["ConfigMap"]
toml_text = configmap["data"]["toolgate.toml"]
config = tomllib.loads(toml_text)
mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
volumes = {v["name"]: v for v in pod["volumes"]}
check(config.get("tools", {}).get("workspace_root") == mounts.get("workspace"),
      "the workspace root is the shared volume's mount")
check("persistentVolumeClaim" in volumes.get("workspace", {}), "the workspace is a claim")
check(docs["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"],
      "the workspace claim is ReadWriteMany (every replica sees the same files)")
check("key" not in config.get("tenant_upstreams", {}), "no key in the ConfigMap")
metrics_port = config["telemetry"]["metrics_listen"].rsplit(":", 1)[-1]
service_ports = {p["name"]: p for p in docs["Service"]["spec"]["ports"]}
monitor = docs["ServiceMonitor"]
check(monitor["apiVersion"] == "monitoring.coreos.com/v1", "ServiceMonitor apiVersion")
check(all(e["port"] in service_ports for e in monitor["spec"]["endpoints"]),
      "the ServiceMonitor scrapes a named Service port")
check(str(service_ports["metrics"]["port"]) == metrics_port, "the metrics port is served")
check(monitor["spec"]["selector"]["matchLabels"].items() <= docs["Service"]["metadata"]["labels"].items(),
      "the ServiceMonitor selects the Service")
# The alerting rules: the PrometheusRule carries deploy/alerts.yml's groups (which
# promtool checks and unit-tests, tests/e2e/monitoring.rs), and its rules select the job the
# ServiceMonitor's targets get (the Service's name), as Compose's scrape job is named.
rule = docs["PrometheusRule"]
check(rule["apiVersion"] == "monitoring.coreos.com/v1", "PrometheusRule apiVersion")
alerts = yaml.safe_load((root / "deploy/alerts.yml").read_text())
check(rule["spec"] == alerts, "the PrometheusRule's groups are deploy/alerts.yml's")
check(docs["Service"]["metadata"]["name"] == "toolgate", "the scrape job is named toolgate")
prometheus = yaml.safe_load((root / "deploy/compose/prometheus.yml").read_text())
check([j["job_name"] for j in prometheus["scrape_configs"]] == ["toolgate"]
      and prometheus.get("rule_files") == ["alerts.yml"],
      "Compose's Prometheus scrapes job toolgate and loads alerts.yml")
check("./deploy/alerts.yml:/etc/prometheus/alerts.yml:ro" in services["prometheus"]["volumes"],
      "Compose mounts deploy/alerts.yml beside prometheus.yml")
# The dashboard: one JSON (deploy/grafana/toolgate.json, whose queries
# tests/e2e/monitoring.rs checks), provisioned in Compose's Grafana and carried by a
# labelled ConfigMap for a Grafana that discovers dashboards so.
dashboard_text = (root / "deploy/grafana/toolgate.json").read_text()
dashboard = json.loads(dashboard_text)
check(docs.get("dashboard", {}).get("data", {}).get("toolgate.json") == dashboard_text,
      "the dashboard ConfigMap carries deploy/grafana/toolgate.json")
check(docs.get("dashboard", {}).get("metadata", {}).get("labels", {}).get("grafana_dashboard") == "1",
      "the dashboard ConfigMap is labelled grafana_dashboard: \"1\"")
targets = [t for p in dashboard["panels"] for t in p.get("targets", [])]
check(len(targets) > 10 and all(t.get("expr") for t in targets), "every dashboard query has an expr")
check(all(p.get("datasource", {}).get("uid") == "${datasource}" for p in dashboard["panels"] if p["type"] != "row"),
      "every panel uses the dashboard's data source variable")
grafana = services.get("grafana", {})
check("./deploy/grafana/toolgate.json:/var/lib/grafana/dashboards/toolgate.json:ro" in grafana.get("volumes", []),
      "Compose's Grafana loads the dashboard")
provisioned = yaml.safe_load((root / "deploy/grafana/provisioning/dashboards/toolgate.yml").read_text())
check(provisioned["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards",
      "Grafana's provider reads where the dashboard is mounted")
source = yaml.safe_load((root / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
check(source["datasources"][0]["url"] == "http://prometheus:9090" and "prometheus" in services,
      "Grafana's data source is Compose's Prometheus")
args = container["args"]
check(args[args.index("--config") + 1].startswith(mounts["config"]), "--config names the mounted file")
prune = docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
prune_container = prune["containers"][0]
check(prune_container["args"][:2] == ["audit", "prune"], "the CronJob prunes the audit log")
check(secret["metadata"]["name"] in [e["secretRef"]["name"] for e in prune_container.get("envFrom", [])],
      "the prune job reads the Secret (DATABASE_URL, the signing key)")
prune_labels = docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
check(not docs["Service"]["spec"]["selector"].items() <= prune_labels.items(),
      "the prune job's pods are not behind the Service")
grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
check(config["http"]["shutdown_grace_secs"] < grace, "the gateway's grace fits the pod's")

if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
print(json.dumps({"toml": toml_text, "env": secret["stringData"]}))
