"""Checks of deploy/ that a schema cannot make. Run by .ci/check-deploy in its venv.

    python check_deploy.py ROOT k8s VERSION...         every manifest, strict schemas
    python check_deploy.py ROOT rendered FILE VERSION...  `kubectl kustomize` output
    python check_deploy.py ROOT refs                    names that must match up
    python check_deploy.py ROOT compose                 compose.yaml beyond its schema
    python check_deploy.py ROOT dockerfile              stages, users

Prints one line per finding and exits 1 if there is any.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

K8S_DIR = Path("deploy/kubernetes")
KUSTOMIZATION = "kustomization.yaml"
# In deploy/kubernetes but deliberately not in kustomization.yaml (see its comment).
NOT_IN_KUSTOMIZATION = {"secret.example.yaml", "workers-statefulset.yaml"}
WORKER_PORT = 50051
# What a worker must never be given (README: no provider keys, no database URL).
WORKER_FORBIDDEN_ENV = re.compile(r"(_API_KEY|^DATABASE_URL|^CHORUS_API_TOKEN|^OTEL_.*)$")
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}

problems: list[str] = []


def problem(where: str, message: str) -> None:
    problems.append(f"{where}: {message}")


def load_docs(path: Path) -> list[dict]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as e:
        problem(str(path), f"not valid YAML: {e}")
        return []
    for d in docs:
        if not isinstance(d, dict):
            problem(str(path), "a document is not a mapping")
    return [d for d in docs if isinstance(d, dict)]


def manifest_files() -> list[Path]:
    files = sorted(p for p in K8S_DIR.iterdir() if p.suffix in (".yaml", ".yml"))
    return [p for p in files if p.name != KUSTOMIZATION]


def ident(doc: dict) -> str:
    return f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"


# --- Kubernetes schemas ------------------------------------------------------------


def validate_objects(where: str, docs: list[dict], versions: list[str]) -> int:
    """Strict schema validation; a kind/apiVersion without a schema is an error (the
    kubernetes-validate CLI only warns about that and exits 0)."""
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError

    checked = 0
    for doc in docs:
        for field in ("apiVersion", "kind"):
            if not isinstance(doc.get(field), str):
                problem(where, f"{ident(doc)} has no {field}")
        if not (doc.get("metadata") or {}).get("name"):
            problem(where, f"{ident(doc)} has no metadata.name")
        if not isinstance(doc.get("apiVersion"), str) or not isinstance(doc.get("kind"), str):
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
                checked += 1
            except SchemaNotFoundError as e:
                problem(where, f"{ident(doc)}: {e.message}")
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path) or "(top)"
                problem(where, f"{ident(doc)} against Kubernetes {version}: {path}: {e.message}")
    return checked


def cmd_k8s(versions: list[str]) -> None:
    files = manifest_files()
    checked = 0
    for path in files:
        checked += validate_objects(str(path), load_docs(path), versions)
    print(f"  {len(files)} manifest files, {checked} object validations "
          f"(strict, Kubernetes {', '.join(versions)})")


def cmd_rendered(rendered: str, versions: list[str]) -> None:
    docs = load_docs(Path(rendered))
    checked = validate_objects("kubectl kustomize output", docs, versions)
    for doc in docs:
        if doc.get("kind") not in CLUSTER_SCOPED and (doc.get("metadata") or {}).get("namespace") is None:
            problem("kubectl kustomize output", f"{ident(doc)} has no namespace")
    print(f"  {len(docs)} rendered objects, {checked} object validations "
          f"(strict, Kubernetes {', '.join(versions)})")


# --- References between manifests --------------------------------------------------


def labels_match(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def pod_spec(doc: dict) -> dict | None:
    if doc.get("kind") in WORKLOAD_KINDS:
        return ((doc.get("spec") or {}).get("template") or {}).get("spec")
    return None


def pod_labels(doc: dict) -> dict:
    return (((doc.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def check_toml(where: str, text: str) -> None:
    try:
        settings = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        problem(where, f"chorus.toml is not valid TOML: {e}")
        return
    if (settings.get("workers") or {}).get("launcher") != "remote":
        problem(where, 'chorus.toml: [workers] launcher must be "remote" (dial-in workers)')
    # Chorus rejects unknown keys; compare with the structs it deserialises into.
    source = Path("control-plane/src/config.rs")
    text_rs = source.read_text() if source.exists() else ""

    def fields(struct: str) -> set[str] | None:
        m = re.search(r"pub struct " + struct + r" \{(.*?)\n\}", text_rs, re.S)
        return set(re.findall(r"^\s*pub (\w+):", m.group(1), re.M)) if m else None

    top, workers = fields("FileSettings"), fields("FileWorkers")
    if top is None or workers is None:
        print(f"  note: FileSettings/FileWorkers not found in {source}; chorus.toml keys not compared")
        return
    for key in settings:
        if key not in top:
            problem(where, f"chorus.toml: unknown key {key!r} (Chorus refuses unknown keys)")
    for key in settings.get("workers") or {}:
        if key not in workers:
            problem(where, f"chorus.toml: unknown key workers.{key} (Chorus refuses unknown keys)")


def cmd_refs() -> None:
    objects: list[tuple[str, dict]] = []
    for path in manifest_files():
        objects += [(path.name, d) for d in load_docs(path)]
    by_kind: dict[str, dict[str, dict]] = {}
    for _, d in objects:
        by_kind.setdefault(d.get("kind", "?"), {})[(d.get("metadata") or {}).get("name")] = d

    # Kustomization: lists every manifest but the deliberate exceptions, and exists.
    kust = yaml.safe_load((K8S_DIR / KUSTOMIZATION).read_text()) or {}
    listed = set(kust.get("resources") or [])
    present = {p.name for p in manifest_files()}
    for name in sorted(listed - present):
        problem(KUSTOMIZATION, f"lists {name}, which does not exist")
    for name in sorted(present - listed - NOT_IN_KUSTOMIZATION):
        problem(KUSTOMIZATION, f"does not list {name} (add it, or to NOT_IN_KUSTOMIZATION with a reason)")
    for name in sorted(listed & NOT_IN_KUSTOMIZATION):
        problem(KUSTOMIZATION, f"lists {name}, which is meant to stay out of it")

    # One namespace everywhere.
    namespaces = list(by_kind.get("Namespace", {}))
    if len(namespaces) != 1:
        problem("namespace.yaml", f"expected exactly one Namespace, found {namespaces}")
    ns = namespaces[0] if namespaces else None
    if kust.get("namespace") != ns:
        problem(KUSTOMIZATION, f"namespace {kust.get('namespace')!r} is not the Namespace {ns!r}")
    for file, d in objects:
        if d.get("kind") not in CLUSTER_SCOPED and (d.get("metadata") or {}).get("namespace") != ns:
            problem(file, f"{ident(d)} is not in namespace {ns!r}")

    secrets = {n: {**(s.get("data") or {}), **(s.get("stringData") or {})}
               for n, s in by_kind.get("Secret", {}).items()}
    configmaps = {n: (c.get("data") or {}) for n, c in by_kind.get("ConfigMap", {}).items()}
    pvcs = set(by_kind.get("PersistentVolumeClaim", {}))
    pods = [(f, d) for f, d in objects if pod_spec(d) is not None]

    for name, data in configmaps.items():
        if "chorus.toml" in data:
            check_toml(f"ConfigMap/{name}", data["chorus.toml"])

    services: dict[str, set[int]] = {}
    for file, svc in objects:
        if svc.get("kind") != "Service":
            continue
        spec = svc.get("spec") or {}
        name = svc["metadata"]["name"]
        services[name] = {p.get("port") for p in spec.get("ports") or []}
        selected = [d for _, d in pods if labels_match(spec.get("selector"), pod_labels(d))]
        if not selected:
            problem(file, f"Service/{name} selects no pod")
        for port in spec.get("ports") or []:
            target = port.get("targetPort", port.get("port"))
            for d in selected:
                named = {p.get("name") for c in pod_spec(d)["containers"] for p in c.get("ports") or []}
                numbers = {p.get("containerPort") for c in pod_spec(d)["containers"] for p in c.get("ports") or []}
                if target not in named and target not in numbers:
                    problem(file, f"Service/{name} port {target!r} is no container port of {ident(d)}")

    join_keys = set()
    for file, d in pods:
        where = f"{file} {ident(d)}"
        spec = pod_spec(d)
        labels = pod_labels(d)
        if not labels_match(((d.get("spec") or {}).get("selector") or {}).get("matchLabels"), labels):
            problem(where, "selector.matchLabels does not match the pod template's labels")
        psc = spec.get("securityContext") or {}
        if psc.get("runAsNonRoot") is not True:
            problem(where, "pod securityContext.runAsNonRoot is not true")
        if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            problem(where, "pod seccompProfile is not RuntimeDefault (restricted Pod Security)")
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(key):
                problem(where, f"{key} is set")
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        templates = {(t.get("metadata") or {}).get("name")
                     for t in (d.get("spec") or {}).get("volumeClaimTemplates") or []}
        for v in volumes.values():
            if "hostPath" in v:
                problem(where, f"volume {v['name']} is a hostPath")
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and claim not in pvcs:
                problem(where, f"volume {v['name']} claims {claim}, which no manifest defines")
            cm = v.get("configMap")
            if cm:
                if cm.get("name") not in configmaps:
                    problem(where, f"volume {v['name']} uses ConfigMap {cm.get('name')}, which no manifest defines")
                for item in cm.get("items") or []:
                    if item.get("key") not in configmaps.get(cm.get("name"), {}):
                        problem(where, f"volume {v['name']} wants key {item.get('key')} of ConfigMap {cm.get('name')}")
        for c in spec.get("containers") or []:
            cwhere = f"{where} container {c.get('name')}"
            csc = c.get("securityContext") or {}
            if csc.get("allowPrivilegeEscalation") is not False:
                problem(cwhere, "allowPrivilegeEscalation is not false")
            if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
                problem(cwhere, "capabilities.drop lacks ALL")
            if csc.get("privileged"):
                problem(cwhere, "is privileged")
            if not (c.get("resources") or {}).get("requests"):
                problem(cwhere, "has no resource requests")
            for m in c.get("volumeMounts") or []:
                if m.get("name") not in volumes and m.get("name") not in templates:
                    problem(cwhere, f"mounts {m.get('name')}, which is no volume")
            port_names = {p.get("name") for p in c.get("ports") or []}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
                if isinstance(port, str) and port not in port_names:
                    problem(cwhere, f"{probe} uses port {port!r}, which the container does not name")
            env = c.get("env") or []
            for e in env:
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    if ref.get("name") not in secrets:
                        problem(cwhere, f"env {e['name']} uses Secret {ref.get('name')}, which secret.example.yaml does not define")
                    elif ref.get("key") not in secrets[ref["name"]]:
                        problem(cwhere, f"env {e['name']} uses key {ref.get('key')}, missing from secret.example.yaml")
                    if e["name"] == "CHORUS_JOIN_TOKEN":
                        join_keys.add((ref.get("name"), ref.get("key")))
                cref = (e.get("valueFrom") or {}).get("configMapKeyRef")
                if cref and cref.get("key") not in configmaps.get(cref.get("name"), {}) and not cref.get("optional"):
                    problem(cwhere, f"env {e['name']} uses a ConfigMap key no manifest defines")
            component = labels.get("app.kubernetes.io/component")
            if component == "worker":
                names = {e["name"] for e in env}
                for name in sorted(n for n in names if WORKER_FORBIDDEN_ENV.search(n)):
                    problem(cwhere, f"a worker must not get {name}")
                if c.get("envFrom"):
                    problem(cwhere, "a worker must not take envFrom (it would get every key)")
                if "CHORUS_JOIN_TOKEN" not in names:
                    problem(cwhere, "a worker needs CHORUS_JOIN_TOKEN")
                args = c.get("args") or []
                url = args[args.index("--control-plane") + 1] if "--control-plane" in args[:-1] else None
                m = re.fullmatch(r"http://([a-z0-9-]+):(\d+)", url or "")
                if not m:
                    problem(cwhere, f"--control-plane {url!r} is not http://<service>:<port>")
                elif int(m.group(2)) != WORKER_PORT or WORKER_PORT not in services.get(m.group(1), set()):
                    problem(cwhere, f"--control-plane {url} is no Service port {WORKER_PORT} defined here")
    if len(join_keys) > 1:
        problem("manifests", f"the control plane and workers read CHORUS_JOIN_TOKEN from different keys: {sorted(join_keys)}")

    # NetworkPolicies select real pods and name ports those pods have.
    for file, np in objects:
        if np.get("kind") != "NetworkPolicy":
            continue
        spec = np.get("spec") or {}
        where = f"{file} {ident(np)}"
        selected = [d for _, d in pods if labels_match((spec.get("podSelector") or {}).get("matchLabels"), pod_labels(d))]
        if not selected:
            problem(where, "podSelector selects no pod")
        for rule in spec.get("ingress") or []:
            for peer in rule.get("from") or []:
                sel = (peer.get("podSelector") or {}).get("matchLabels")
                if sel is not None and not any(labels_match(sel, pod_labels(d)) for _, d in pods):
                    problem(where, f"from podSelector {sel} selects no pod")
            for port in rule.get("ports") or []:
                for d in selected:
                    numbers = {p.get("containerPort") for c in pod_spec(d)["containers"] for p in c.get("ports") or []}
                    if port.get("port") not in numbers:
                        problem(where, f"port {port.get('port')} is no container port of {ident(d)}")
    # Only workers may reach the worker port.
    for file, np in objects:
        spec = np.get("spec") or {}
        if np.get("kind") != "NetworkPolicy":
            continue
        for rule in spec.get("ingress") or []:
            if any(p.get("port") == WORKER_PORT for p in rule.get("ports") or []):
                peers = rule.get("from") or []
                if not peers or any((p.get("podSelector") or {}).get("matchLabels", {}).get("app.kubernetes.io/component") != "worker" for p in peers):
                    problem(f"{file} {ident(np)}", f"port {WORKER_PORT} is open to more than worker pods")
    print(f"  {len(objects)} objects: kustomization, namespace, Secret/ConfigMap/PVC names and keys, "
          "selectors, ports, probes, pod security, worker environment")


# --- compose.yaml ------------------------------------------------------------------


def dockerfile_stages(path: Path) -> tuple[dict[str, list], list]:
    import dockerfile

    stages: dict[str, list] = {}
    current: list | None = None
    commands = dockerfile.parse_file(str(path))
    for c in commands:
        if c.cmd.upper() == "FROM":
            current = []
            value = list(c.value)
            if len(value) == 3 and value[1].upper() == "AS":
                stages[value[2]] = current
        elif current is not None:
            current.append(c)
    return stages, list(commands)


def cmd_compose() -> None:
    path = Path("deploy/compose.yaml")
    doc = yaml.safe_load(path.read_text())
    services = doc.get("services") or {}
    declared = {kind: set(doc.get(kind) or {}) for kind in ("volumes", "networks", "configs")}
    for name, svc in services.items():
        where = f"compose.yaml service {name}"
        build = svc.get("build")
        if isinstance(build, dict):
            context = (path.parent / build.get("context", ".")).resolve()
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            if not dockerfile.exists():
                problem(where, f"build.dockerfile {dockerfile} does not exist")
            elif build.get("target"):
                stages, _ = dockerfile_stages(dockerfile)
                if build["target"] not in stages:
                    problem(where, f"build.target {build['target']} is no stage of {dockerfile.name}")
        for dep in svc.get("depends_on") or {}:
            if dep not in services:
                problem(where, f"depends_on {dep}, which is no service")
        for v in svc.get("volumes") or []:
            source = v.split(":")[0] if isinstance(v, str) else v.get("source")
            if source and not source.startswith((".", "/", "~")) and source not in declared["volumes"]:
                problem(where, f"volume {source} is not declared under volumes:")
        nets = svc.get("networks") or []
        for n in nets:
            if n not in declared["networks"]:
                problem(where, f"network {n} is not declared under networks:")
        for c in svc.get("configs") or []:
            source = c if isinstance(c, str) else c.get("source")
            if source not in declared["configs"]:
                problem(where, f"config {source} is not declared under configs:")
        for p in svc.get("ports") or []:
            text = str(p if not isinstance(p, dict) else f"{p.get('host_ip', '')}:{p.get('published')}:{p.get('target')}")
            if str(WORKER_PORT) in text:
                problem(where, f"publishes {WORKER_PORT}: the worker link is plaintext here and stays internal")
            if not text.startswith("127.0.0.1:"):
                problem(where, f"port {text} is not bound to 127.0.0.1")
        env = svc.get("environment") or {}
        names = set(env) if isinstance(env, dict) else {e.split("=")[0] for e in env}
        if name == "worker":
            for n in sorted(n for n in names if WORKER_FORBIDDEN_ENV.search(n)):
                problem(where, f"a worker must not get {n}")
            if svc.get("env_file"):
                problem(where, "a worker must not take an env_file (it would get every key)")
            if "CHORUS_JOIN_TOKEN" not in names:
                problem(where, "a worker needs CHORUS_JOIN_TOKEN")
    networks = doc.get("networks") or {}
    for name in ("postgres",):
        for n in (services.get(name) or {}).get("networks") or []:
            if not (networks.get(n) or {}).get("internal"):
                problem(f"compose.yaml service {name}", f"is on network {n}, which is not internal")
    for name, cfg in (doc.get("configs") or {}).items():
        if name == "chorus-toml":
            check_toml(f"compose.yaml config {name}", cfg.get("content", ""))
    print(f"  {len(services)} services: build targets, references, published ports, worker environment, chorus.toml")


# --- Dockerfile --------------------------------------------------------------------


def cmd_dockerfile() -> None:
    path = Path("deploy/Dockerfile")
    stages, commands = dockerfile_stages(path)
    for target, binary in (("control-plane", "chorus"), ("worker", "chorus-worker")):
        if target not in stages:
            problem(str(path), f"no stage {target!r}")
            continue
        users = [c.value[0] for c in stages[target] if c.cmd.upper() == "USER"]
        if not users or users[-1].split(":")[0] != "10001":
            problem(str(path), f"stage {target} does not end as USER 10001")
        entry = [c for c in stages[target] if c.cmd.upper() == "ENTRYPOINT"]
        if not entry or not entry[-1].value[-1].endswith("/" + binary):
            problem(str(path), f"stage {target}'s ENTRYPOINT does not run {binary}")
    args = {c.value[0].split("=")[0]: c.value[0].partition("=")[2] for c in commands if c.cmd.upper() == "ARG"}
    for value in ("true", "false"):
        if f"worker-cli-{value}" not in stages:
            problem(str(path), f"WITH_CLI_BACKENDS={value} names no stage worker-cli-{value}")
    if args.get("WITH_CLI_BACKENDS") != "false":
        problem(str(path), "WITH_CLI_BACKENDS must default to false")
    print(f"  {len(stages)} stages: targets control-plane and worker, USER 10001, entrypoints, build args")


def main() -> int:
    root, what, *rest = sys.argv[1:]
    import os

    os.chdir(root)
    if what == "k8s":
        cmd_k8s(rest)
    elif what == "rendered":
        cmd_rendered(rest[0], rest[1:])
    elif what == "refs":
        cmd_refs()
    elif what == "compose":
        cmd_compose()
    elif what == "dockerfile":
        cmd_dockerfile()
    else:
        raise SystemExit(f"unknown check {what!r}")
    for p in problems:
        print(f"  FAIL {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
