#!/usr/bin/python3
"""Every object topodra produces, validated against the upstream Kubernetes 1.36 schemas.

usage: schema_test.py selftest|slices|daemon|chart|examples   (environment: see CMakeLists.txt)

validate.mjs runs kubernetes-models@5.1.0's generated validators and lists the fields those
schemas do not have; this script gathers the objects and applies the rules:
  - a flat ResourceSlice, every chart object and every example: no errors, no unknown field;
  - a ResourceSlice in mixin form (KEP-5234, not in the 1.36 schema): no errors, no unknown
    field but those the mixin form adds, and spec.mixins exactly as KEP-5234 shapes it (its
    three lists, and only name/attributes/capacity in a device mixin, name/counters in a
    counter-set or counter-consumption mixin), the mixins' values checked as the Device and
    CounterSet parts of the 1.36 schema. Both field lists come from the fake API server's model
    of KEP-5234 (fake_apiserver.resourceslice_schema), not from a copy here;
  - a Reservation: the CRD's own openAPIV3Schema (ajv) and its structural field list, and the
    fake API server's CRD validation, imported (its CEL subset of the x-kubernetes-validations
    rules, x-kubernetes-list-type set/map): as a create, and a Reservation the daemon writes back
    as an update of the stored one (the transition rules: nodeName, cpus, gpus immutable).
Every object checked has a unique name (results are matched by name; a clash stops the test).
Parts:
  selftest  deliberately bad objects (unknown field in a flat slice, wrong type, missing
            required field, an extra unknown field in mixin form, a Device-only field in a
            device mixin, Reservations breaking the CRD's schema, CEL rules and list types)
            must fail, and their unbroken originals must pass;
  slices    every machine x CPU device mode x reservation case of test/testing/slice_cases.h,
            flat and in mixin form: `topodra slices` where the CLI can express the case (and
            equal to what slice_cases_dump builds), slice_cases_dump's output where it cannot
            (Reservations); and the golden slices of test/fixtures/slices;
  daemon    a whole node (topodra run, nvidiaDGX2, a Reservation) against the fake API server,
            once refusing and once keeping mixins: the slices as the publisher sent them and
            the Reservation with the status the daemon wrote, read back from the server;
  chart     `helm template --include-crds --kube-version 1.36.0` of every variant of
            test/chart/variants.json;
  examples  charts/topodra/examples/*.yaml, and the CRDs of charts/topodra/crds/.
"""
import concurrent.futures
import glob
import http.client
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import yaml

ENV = os.environ
SOURCE = ENV["TOPODRA_SOURCE_DIR"]
HERE = os.path.dirname(os.path.abspath(__file__))
CHART = os.path.join(SOURCE, "charts", "topodra")

# Our model of the API server (test/integration/fake_apiserver.py) is the one place that knows
# KEP-5234's mixin fields and evaluates a CRD's x-kubernetes-validations rules: this test reads
# both from it instead of keeping a second copy.
sys.path.insert(0, os.path.join(SOURCE, "test", "integration"))
import fake_apiserver as fake  # noqa: E402


def schema_fields(node, path, out):
    """Every field path of one of the fake's ResourceSlice schemas, in shape() form."""
    if isinstance(node, fake.Obj):
        for k, sub in node.fields.items():
            p = f"{path}.{k}" if path else k
            out.add(p)
            schema_fields(sub, p, out)
    elif isinstance(node, fake.ListOf):
        schema_fields(node.item, path + "[]", out)
    elif isinstance(node, fake.MapOf):
        schema_fields(node.value, path + "{}", out)
    return out


def mixin_model():
    """(the outermost fields the mixin form adds to a ResourceSlice, the schema of spec.mixins),
    both from the fake's model of KEP-5234 (resourceslice_schema with and without mixins), which
    follows the KEP's proposed API: spec.mixins.{device, deviceCounterConsumption, counterSet}
    and includes in devices[], devices[].consumesCounters[] and sharedCounters[]."""
    with_mixins = fake.resourceslice_schema(True, True)
    added = (schema_fields(with_mixins, "", set())
             - schema_fields(fake.resourceslice_schema(False, True), "", set()))
    outermost = {p for p in added
                 if not any(p != q and (p.startswith(q + ".") or p.startswith(q + "["))
                            for q in added)}
    return outermost, with_mixins.fields["spec"].fields["mixins"]


# The only fields of the mixin form the 1.36 schema does not know, and what spec.mixins holds.
MIXIN_FIELDS, MIXIN_SCHEMA = mixin_model()
CHART_KINDS = {"DaemonSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
               "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DeviceClass",
               "ConfigMap", "CustomResourceDefinition"}


def validate(items):
    """items: [{"name", "object", "crd"?}] -> {name: {"errors", "unknown", "kind"}}."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(items, f)
        path = f.name
    try:
        r = subprocess.run([ENV["TOPODRA_NODE"], os.path.join(HERE, "validate.mjs"), path],
                           capture_output=True, text=True, check=False,
                           env=dict(ENV, NODE_NO_WARNINGS="1"))
    finally:
        os.unlink(path)
    if r.returncode != 0:
        sys.exit(f"validate.mjs failed ({r.returncode}): {r.stderr}")
    results = json.loads(r.stdout)
    if [x["name"] for x in results] != [x["name"] for x in items]:
        sys.exit(f"validate.mjs answered {len(results)} results for {len(items)} objects, "
                 "not one per object in order")
    return {x["name"]: x for x in results}


def unique_names(names):
    """Results are looked up by name: two objects of one name would share one result."""
    seen, dups = set(), set()
    for n in names:
        (dups if n in seen else seen).add(n)
    if dups:
        sys.exit(f"two objects to check share a name: {sorted(dups)[:5]}")


def shape(path):
    """spec.devices[12].includes -> spec.devices[].includes: the rule names fields, not indices."""
    return re.sub(r"\[\d+\]", "[]", path)


def flat_problems(result):
    return result["errors"] + [f"unknown field {u}" for u in result["unknown"]]


def mixin_problems(result, obj):
    problems = list(result["errors"])
    problems += [f"unknown field {u} (only {sorted(MIXIN_FIELDS)} may be)"
                 for u in result["unknown"] if shape(u) not in MIXIN_FIELDS]
    has_includes = any(shape(u) == "spec.devices[].includes" for u in result["unknown"])
    if has_includes and "mixins" not in obj.get("spec", {}):
        problems.append("devices include mixins but spec.mixins is missing")
    return problems


def mixin_probes(obj):
    """The mixins of a slice as parts of flat slices, so the 1.36 schema checks their values
    (attributes, capacities, counters): device mixins as devices (DeviceMixin's fields are
    Device's name, attributes and capacity), counter-set and counter-consumption mixins as
    sharedCounters (both are a name and counters). Which keys a mixin may have at all is
    mixin_shape_problems' check: the 1.36 Device would let taints through.
    -> [(what, probe, [(probe path, mixin path)])]"""
    mixins = obj.get("spec", {}).get("mixins")
    if not isinstance(mixins, dict):
        return []
    out = []
    for key, target in (("device", "devices"), ("counterSet", "sharedCounters"),
                        ("deviceCounterConsumption", "sharedCounters")):
        if not isinstance(mixins.get(key), list) or not mixins[key]:
            continue
        probe = json.loads(json.dumps(obj))
        probe["spec"].pop("mixins")
        probe["spec"].pop("devices", None)
        probe["spec"].pop("sharedCounters", None)
        probe["spec"][target] = mixins[key]
        out.append((f"mixins.{key} as {target}", probe,
                    [(f"spec.{target}", f"spec.mixins.{key}"),
                     (f"/spec/{target}/", f"/spec/mixins/{key}/")]))
    return out


def fake_shape_problems(value, node, path):
    """Keys not in the fake's schema, and values of the wrong JSON kind for its structure."""
    out = []
    if isinstance(node, fake.Obj):
        if not isinstance(value, dict):
            return [f"{path} must be an object"]
        for k, v in value.items():
            if k not in node.fields:
                out.append(f"unknown field {path}.{k} ({shape(path)} may have only "
                           f"{sorted(node.fields)})")
            else:
                out += fake_shape_problems(v, node.fields[k], f"{path}.{k}")
    elif isinstance(node, fake.ListOf):
        if not isinstance(value, list):
            return [f"{path} must be an array"]
        for i, v in enumerate(value):
            out += fake_shape_problems(v, node.item, f"{path}[{i}]")
    elif isinstance(node, fake.MapOf):
        if not isinstance(value, dict):
            return [f"{path} must be an object"]
        for k, v in value.items():
            out += fake_shape_problems(v, node.value, f"{path}[{json.dumps(k)}]")
    return out


def mixin_shape_problems(obj):
    """spec.mixins against KEP-5234's shape: its lists, and exactly the keys of each mixin type."""
    if "mixins" not in obj.get("spec", {}):
        return []
    return fake_shape_problems(obj["spec"]["mixins"], MIXIN_SCHEMA, "spec.mixins")


def check(entries, crd_by_kind=None):
    """entries: [(name, object, "flat" | "mixins"[, old object])] -> ({name: [problem]},
    {name: result}); a custom resource with an old object is checked as an update of it."""
    crd_by_kind = crd_by_kind or {}
    items = [item_for(name, obj, crd_by_kind) for name, obj, *_ in entries]
    probes = {}
    for name, obj, rule, *_ in entries:
        for i, (what, probe, renames) in enumerate(mixin_probes(obj) if rule == "mixins" else []):
            probes.setdefault(name, []).append((f"{name}, probe {i}: {what}", renames))
            items.append({"name": probes[name][-1][0], "object": probe})
    unique_names(x["name"] for x in items)
    results = validate(items)
    items_by_name = {x["name"]: x for x in items}
    problems = {}
    for name, obj, rule, *old in entries:
        r = results[name]
        if rule == "flat":
            problems[name] = flat_problems(r)
        else:
            problems[name] = mixin_problems(r, obj) + mixin_shape_problems(obj)
        for probe_name, renames in probes.get(name, []):
            for p in flat_problems(results[probe_name]):
                for a, b in renames:
                    p = p.replace(a, b)
                problems[name].append(f"mixins: {p}")
        item = items_by_name[name]
        if "crd" in item:
            problems[name] += crd_rule_problems(obj, item["crd"], old[0] if old else None)
    return problems, results


def crd_rule_problems(obj, crd, old=None):
    """What the fake API server's CRD validation (structural schema incl. x-kubernetes-list-type
    set/map, and the x-kubernetes-validations CEL rules) says of a custom resource: as a create,
    or as an update of `old` (transition rules, such as immutability, only run on updates).
    Unknown fields are left to validate.mjs (the fake would prune them)."""
    where = f"{crd['metadata']['name']}"
    try:
        types = fake.make_crd_types(crd, where)
    except fake.CrdError as e:
        return [f"the fake API server cannot serve the CRD: {e}"]
    version = str(obj.get("apiVersion", "")).split("/")[-1]
    rt = next((t for t in types if version in t.versions), None)
    if rt is None:
        return []  # validate.mjs reports the unserved version
    try:
        decoded = rt.decode(json.loads(json.dumps(obj)))[0]
        if old is None:
            errs = rt.validate_create(decoded)
        else:
            errs = rt.validate_update(decoded, rt.decode(json.loads(json.dumps(old)))[0])
    except fake.DecodeError as e:
        return [f"CRD rules: not decodable: {e}"]
    return [f"CRD rules{'' if old is None else ' (as an update)'}: {e}" for e in errs]


def items_of(doc):
    """A List / ResourceSliceList or one object -> its objects."""
    if isinstance(doc, dict) and doc.get("kind", "").endswith("List") and "items" in doc:
        return doc["items"]
    return [doc]


def yaml_docs(text, where):
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        sys.exit(f"{where}: not YAML: {e}")


def report(failures, checked, what):
    # A defect in a builder fails hundreds of objects the same way: the first ones, then how
    # often each problem occurs.
    for f in failures[:40]:
        print(f"FAIL {f}")
    if len(failures) > 40:
        counts = {}
        for f in failures:
            problem = re.sub(r"\[\d+\]", "[]", f.rsplit("): ", 1)[-1])
            counts[problem] = counts.get(problem, 0) + 1
        print(f"... and {len(failures) - 40} more; by problem:")
        for problem, n in sorted(counts.items(), key=lambda x: -x[1])[:15]:
            print(f"  {n:6d}  {problem}")
    print(f"{checked} {what} checked, {len(failures)} failing")
    return 1 if failures else 0


def crds():
    out = {}
    for path in sorted(glob.glob(os.path.join(CHART, "crds", "*.yaml"))):
        for d in yaml_docs(open(path).read(), path):
            out[(d["spec"]["group"], d["spec"]["names"]["kind"])] = (path, d)
    return out


def item_for(name, obj, crd_by_kind):
    item = {"name": name, "object": obj}
    group = str(obj.get("apiVersion", "")).split("/")[0] if isinstance(obj, dict) else ""
    key = (group, obj.get("kind") if isinstance(obj, dict) else None)
    if key in crd_by_kind:
        item["crd"] = crd_by_kind[key][1]
    return item


# ---- slices --------------------------------------------------------------------------------

def run_topodra(args):
    r = subprocess.run([ENV["TOPODRA_BINARY"], *args], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        return None, f"topodra {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}"
    return json.loads(r.stdout), None


def slice_cases():
    r = subprocess.run([ENV["TOPODRA_SLICE_CASES_DUMP"], ENV["TOPODRA_TOPOLOGIES_DIR"]],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"slice_cases_dump failed: {r.stderr}")
    return json.loads(r.stdout)


def test_slices():
    cases = slice_cases()
    failures = []
    # What the CLI prints, for every case it can express, flat and in mixin form.
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for c in cases:
            if c["cli"]:
                jobs[(c["label"], "flat")] = pool.submit(run_topodra, c["cli"] + ["--flatten"])
                jobs[(c["label"], "mixins")] = pool.submit(run_topodra, c["cli"])
    entries = []
    cli_cases = 0
    for c in cases:
        for form in ("flat", "mixins"):
            doc, source = c[form], "slice_cases_dump"
            if (c["label"], form) in jobs:
                cli_doc, err = jobs[(c["label"], form)].result()
                if err:
                    failures.append(f"{c['label']}, {form}: {err}")
                    continue
                if cli_doc != doc:
                    failures.append(f"{c['label']}, {form}: `topodra slices` differs from the "
                                    "slice builder's output for the same options")
                doc, source = cli_doc, "topodra slices"
                cli_cases += 1
            for i, obj in enumerate(items_of(doc)):
                entries.append((f"{c['label']}, {form}, slice {i} ({source})", obj, form))
    # The golden slices of test/fixtures/slices (slice_builder_test), whichever form each is in.
    goldens = sorted(glob.glob(os.path.join(SOURCE, "test", "fixtures", "slices", "*.json")))
    for path in goldens:
        for i, obj in enumerate(items_of(json.load(open(path)))):
            form = "mixins" if "mixins" in obj.get("spec", {}) else "flat"
            entries.append((f"{os.path.basename(path)}, slice {i} (golden)", obj, form))
    problems, results = check(entries)
    mixin_slices = 0
    includes = 0
    for name, obj, form in entries:
        failures += [f"{name}: {p}" for p in problems[name]]
        if form == "mixins" and "mixins" in obj.get("spec", {}):
            mixin_slices += 1
            includes += sum(1 for u in results[name]["unknown"]
                            if shape(u) == "spec.devices[].includes")
    # The mixin form really was checked with mixins in it, and the reservation cases are there.
    if mixin_slices < 40 or includes == 0:
        failures.append(f"only {mixin_slices} slices in mixin form carry mixins ({includes} "
                        "devices include them): the mixin rule was not exercised")
    held = sum(1 for c in cases if c["cli"] is None)
    if held < 40:
        failures.append(f"only {held} Reservation cases: the case list lost them")
    print(f"{len(cases)} cases ({cli_cases} outputs of `topodra slices`, {held} Reservation "
          f"cases from slice_cases_dump), {len(goldens)} golden files; {mixin_slices} slices in "
          "mixin form with mixins")
    return report(failures, len(entries), "ResourceSlices")


# ---- what a daemon publishes ----------------------------------------------------------------

def http_json(port, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"},
                                 method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


class RecordingProxy:
    """Forwards HTTP to the fake API server and keeps every request body (JSON) it forwards:
    what the daemon sends, before the server prunes fields its schema does not have (a custom
    resource's status written without strict field validation loses them silently)."""

    def __init__(self, upstream_port):
        self.sent = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if body:
                    try:
                        proxy.sent.append((self.command, self.path, json.loads(body)))
                    except ValueError:
                        pass
                try:
                    self.relay(body)
                except (OSError, ValueError, http.client.HTTPException):
                    # A watch cut when the test stops the daemon or the server.
                    self.close_connection = True

            def relay(self, body):
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=600)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                chunked = resp.getheader("Transfer-Encoding", "").lower() == "chunked"
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while True:
                        data = resp.read1(65536)
                        if not data:
                            break
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    data = resp.read()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                self.wfile.flush()
                conn.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def daemon_run(root, mixins):
    """Runs a whole node against the fake API server (fake_apiserver.py, serving the Reservation
    CRD and keeping or refusing mixins) with a Reservation of 2 CPUs and a GPU on nvidiaDGX2, and
    returns what the server then holds: the ResourceSlices as the publisher sent them (owner
    reference, generation, reserved devices tainted) and the Reservation with the status the
    daemon wrote. None and a reason on failure."""
    os.makedirs(root)
    procs = []
    proxy = None
    try:
        fake = subprocess.Popen(
            ["/usr/bin/python3", os.path.join(SOURCE, "test", "integration", "fake_apiserver.py"),
             "--port", "0", "--port-file", f"{root}/port", "--mixins", mixins,
             "--crd", glob.glob(os.path.join(CHART, "crds", "*.yaml"))[0],
             "--node", "node-a=uid-node-a"],
            stdout=subprocess.DEVNULL, stderr=open(f"{root}/fake.log", "w"))
        procs.append(fake)
        deadline = time.monotonic() + 30
        while not os.path.exists(f"{root}/port") and time.monotonic() < deadline:
            time.sleep(0.05)
        port = open(f"{root}/port").read().strip()
        proxy = RecordingProxy(int(port))
        with open(f"{root}/kubeconfig", "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "http://127.0.0.1:{proxy.port}"}}}}]
users: [{{name: test, user: {{}}}}]
contexts: [{{name: test, context: {{cluster: fake, user: test}}}}]
current-context: test
""")
        example = next(d for d in yaml_docs(open(os.path.join(CHART, "examples",
                                                              "reservation.yaml")).read(), "")
                       if d["kind"] == "Reservation")
        example["spec"]["nodeName"] = "node-a"
        example["spec"]["cpus"] = {"count": 2}
        http_json(port, "/apis/topodra.io/v1alpha1/reservations", example)
        daemon = subprocess.Popen(
            [ENV["TOPODRA_BINARY"], "run", "--kubelet-root-dir", f"{root}/kubelet",
             "--cdi-dir", f"{root}/cdi", "--state-dir", f"{root}/state", "--enforce", "none",
             "--metrics-address", "none", "--health-address", "none",
             "--cgroup-root", f"{root}/cgroup", "--hook-dir", f"{root}/hook",
             "--host-root", f"{root}/host", "--reservations", "on",
             "--kubeconfig", f"{root}/kubeconfig", "--node-name", "node-a",
             "--topology-file", os.path.join(ENV["TOPODRA_TOPOLOGIES_DIR"], "nvidiaDGX2.xml")],
            stdout=subprocess.DEVNULL, stderr=open(f"{root}/daemon.log", "w"))
        procs.append(daemon)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            slices = http_json(port, "/apis/resource.k8s.io/v1/resourceslices")["items"]
            resv = http_json(port, "/apis/topodra.io/v1alpha1/reservations")["items"]
            tainted = {s["spec"]["driver"] for s in slices
                       if any(d.get("taints") for d in s["spec"].get("devices", []))}
            if (resv and resv[0].get("status", {}).get("phase") == "Available"
                    and tainted == {"dra.cpu", "gpu.topodra.io"}):
                daemon.terminate()
                daemon.wait(timeout=20)
                return slices, resv, proxy.sent, None
            if daemon.poll() is not None:
                break
            time.sleep(0.2)
        return None, None, None, ("the daemon did not publish both drivers' reserved devices tainted "
                            f"and mark the Reservation Available: {open(f'{root}/daemon.log').read()[-2000:]}")
    finally:
        if proxy:
            proxy.close()
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_daemon():
    failures, entries = [], []
    sent_kinds = set()
    crd_by_kind = crds()
    with tempfile.TemporaryDirectory(prefix="schema-daemon-") as tmp:
        for mixins, form in (("reject", "flat"), ("accept", "mixins")):
            slices, resv, sent, err = daemon_run(os.path.join(tmp, mixins), mixins)
            if err:
                failures.append(f"server that {mixins}s mixins: {err}")
                continue
            for s in slices:
                # A list's items carry no type meta (as from a real server): the list's.
                s = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **s}
                if not s["metadata"].get("ownerReferences"):
                    failures.append(f"{s['metadata']['name']}: no owner reference: not what the "
                                    "publisher sends")
                entries.append((f"server that {mixins}s mixins: {s['metadata']['name']}", s, form))
            stored = {}
            for r in resv:
                stored[r["metadata"]["name"]] = r
                entries.append((f"server that {mixins}s mixins: Reservation "
                                f"{r['metadata']['name']} with the daemon's status", r, "flat"))
            # Every body the daemon sent: slices (strict field validation, so the server would
            # refuse unknown fields) and Reservation status updates (not strict: the server
            # prunes what the CRD lacks without a word, so only the sent body shows it).
            for i, (method, path, body) in enumerate(sent):
                if not isinstance(body, dict) or "kind" not in body:
                    continue
                form = ("mixins" if body.get("kind") == "ResourceSlice" and
                        "mixins" in body.get("spec", {}) else "flat")
                entry = (f"server that {mixins}s mixins: sent #{i} {method} "
                         f"{path.split('?')[0]}", body, form)
                # A Reservation the daemon writes back is an update of the stored one: the
                # CRD's transition rules (nodeName, cpus and gpus immutable) apply.
                old = stored.get(body.get("metadata", {}).get("name"))
                if body["kind"] == "Reservation" and method in ("PUT", "PATCH") and old:
                    entry += (old,)
                entries.append(entry)
                sent_kinds.add(body["kind"])
    updates = sum(1 for e in entries if len(e) == 4)
    if updates == 0:
        failures.append("no Reservation the daemon wrote back was checked as an update: the "
                        "CRD's transition rules lost their input")
    for kind in ("ResourceSlice", "Reservation"):
        if kind not in sent_kinds:
            failures.append(f"the daemon sent no {kind}: the sent-body check lost its input")
    if not any("mixins" in obj["spec"] for _, obj, form, *_ in entries if form == "mixins"):
        failures.append("the daemon published no mixins to the server that accepts them")
    problems, _ = check(entries, crd_by_kind)
    for name, *_ in entries:
        failures += [f"{name}: {p}" for p in problems[name]]
    for name, *rest in entries:
        print(f"checked {name}{' (as an update of the stored object)' if len(rest) == 3 else ''}")
    return report(failures, len(entries), "objects a daemon wrote")


# ---- chart ---------------------------------------------------------------------------------

# The Kubernetes version the chart is rendered for: the templates choose apiVersions by it (the
# schemas are 1.36's), and without --kube-version helm's built-in default (different in each
# helm build) would decide.
KUBE_VERSION = "1.36.0"


def helm_template(sets):
    args = [ENV["TOPODRA_HELM"], "template", "topodra", CHART, "--include-crds",
            "--kube-version", KUBE_VERSION]
    for s in sets:
        # One --set per entry: a comma inside the value is the value's, not a separator.
        args += ["--set", re.sub(r"(?<!\\),", r"\\,", s)]
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    return r.stdout, (r.stderr.strip() if r.returncode != 0 else None)


def test_chart():
    variants = json.load(open(os.path.join(SOURCE, "test", "chart", "variants.json")))
    variants = {k: v for k, v in variants.items() if not k.startswith("_")}
    failures, items = [], []
    crd_by_kind = crds()
    kinds = set()
    for variant, sets in variants.items():
        text, err = helm_template(sets)
        if err:
            failures.append(f"variant {variant}: helm template failed: {err}")
            continue
        for i, obj in enumerate(yaml_docs(text, f"variant {variant}")):
            kind = obj.get("kind")
            name = f"variant {variant}: {kind} {obj.get('metadata', {}).get('name')} (doc {i})"
            if kind not in CHART_KINDS:
                failures.append(f"{name}: a kind this test does not expect from the chart")
            kinds.add(kind)
            items.append(item_for(name, obj, crd_by_kind))
    unique_names(x["name"] for x in items)
    for item, (name, r) in zip(items, validate(items).items()):
        failures += [f"{name}: {p}" for p in flat_problems(r)]
        if "crd" in item:
            failures += [f"{name}: {p}" for p in crd_rule_problems(item["object"], item["crd"])]
    for must in ("DaemonSet", "ClusterRole", "DeviceClass", "ValidatingAdmissionPolicy",
                 "ServiceAccount", "CustomResourceDefinition"):
        if must not in kinds:
            failures.append(f"no variant renders a {must}: the chart check lost it")
    print(f"{len(variants)} variants, kinds {sorted(kinds)}")
    return report(failures, len(items), "rendered objects")


# ---- examples and CRDs ---------------------------------------------------------------------

def test_examples():
    failures, items = [], []
    crd_by_kind = crds()
    for path, crd in crd_by_kind.values():
        items.append({"name": f"{os.path.basename(path)}: CustomResourceDefinition", "object": crd})
    kinds = set()
    for path in sorted(glob.glob(os.path.join(CHART, "examples", "*.yaml"))):
        for i, obj in enumerate(yaml_docs(open(path).read(), path)):
            kinds.add(obj.get("kind"))
            name = (f"{os.path.basename(path)}: {obj.get('kind')} "
                    f"{obj.get('metadata', {}).get('name')} (doc {i})")
            items.append(item_for(name, obj, crd_by_kind))
    unique_names(x["name"] for x in items)
    for item, (name, r) in zip(items, validate(items).items()):
        failures += [f"{name}: {p}" for p in flat_problems(r)]
        if "crd" in item:
            failures += [f"{name}: {p}" for p in crd_rule_problems(item["object"], item["crd"])]
    if "Reservation" not in kinds:
        failures.append("no example Reservation: the CRD check lost its input")
    print(f"example kinds {sorted(kinds)}")
    return report(failures, len(items), "examples and CRDs")


# ---- self-test -----------------------------------------------------------------------------

def test_selftest():
    """The rules must catch what they exist for; each broken object names what must be found."""
    failures = []
    # 4 sockets sharing one NUMA node: the socket devices share their NUMA attributes (a mixin).
    machine = ["--topology-file",
               os.path.join(ENV["TOPODRA_TOPOLOGIES_DIR"], "16em64t-4s2c2t.xml"),
               "--group-by", "socket", "--node-name", "self-test"]
    flat, err = run_topodra(["slices", "-o", "json", "--flatten", *machine])
    mixed, err2 = run_topodra(["slices", "-o", "json", *machine])
    if err or err2:
        sys.exit(err or err2)
    flat = items_of(flat)[0]
    mixed = next((s for s in items_of(mixed) if "mixins" in s["spec"]), None)
    if mixed is None:
        sys.exit("the self-test's machine no longer gives a slice with mixins")
    crd_by_kind = crds()
    reservation = next(d for d in yaml_docs(open(os.path.join(CHART, "examples",
                                                              "reservation.yaml")).read(), "")
                       if d["kind"] == "Reservation")
    daemonset = next(d for d in yaml_docs(helm_template([])[0], "chart")
                     if d.get("kind") == "DaemonSet")

    def broken(obj, edit):
        o = json.loads(json.dumps(obj))
        edit(o)
        return o

    def first_device(o):
        return o["spec"]["devices"][0]

    with_counter_mixins = broken(mixed, lambda o: o["spec"]["mixins"].update(
        counterSet=[{"name": "cs", "counters": {"c": {"value": "2"}}}],
        deviceCounterConsumption=[{"name": "dc", "counters": {"c": {"value": "1"}}}]))

    # (name, object, rule, text a problem must contain; None: must pass[, old object: checked
    # as an update of it])
    cases = [
        ("flat slice as built", flat, "flat", None),
        ("mixin slice as built", mixed, "mixins", None),
        ("Reservation example", reservation, "flat", None),
        ("DaemonSet as rendered", daemonset, "flat", None),
        ("flat slice with an unknown device field", broken(
            flat, lambda o: first_device(o).update(bogus=1)), "flat",
         "unknown field spec.devices[0].bogus"),
        ("flat slice with mixins (an unknown field to a flat server)", mixed, "flat",
         "unknown field spec.mixins"),
        ("flat slice with an unknown attribute value field", broken(
            flat, lambda o: next(iter(first_device(o)["attributes"].values())).update(quux="x")),
         "flat", ".quux"),
        ("flat slice with a string pool generation", broken(
            flat, lambda o: o["spec"]["pool"].update(generation="1")), "flat",
         "/spec/pool/generation must be integer"),
        ("flat slice without its driver", broken(
            flat, lambda o: o["spec"].pop("driver")), "flat",
         'must have required property "driver"'),
        ("flat slice with an int attribute that is a string", broken(
            flat, lambda o: first_device(o)["attributes"].update({"x.io/n": {"int": "2"}})),
         "flat", "must be integer"),
        ("mixin slice with an extra unknown field", broken(
            mixed, lambda o: first_device(o).update(includesAlso=["x"])), "mixins",
         "unknown field spec.devices[0].includesAlso"),
        ("mixin slice with an unknown spec field", broken(
            mixed, lambda o: o["spec"].update(sharedMixins=[])), "mixins",
         "unknown field spec.sharedMixins"),
        ("mixin slice with a wrong type", broken(
            mixed, lambda o: first_device(o).update(name=5)), "mixins",
         "/spec/devices/0/name must be string"),
        ("mixin slice with an unknown Mixins list", broken(
            mixed, lambda o: o["spec"]["mixins"].update(attributeSet=[])), "mixins",
         "unknown field spec.mixins.attributeSet"),
        ("mixin slice with a bool attribute that is a string in a mixin", broken(
            mixed, lambda o: o["spec"]["mixins"]["device"][0].setdefault("attributes", {}).update(
                {"x.io/b": {"bool": "yes"}})), "mixins", "must be boolean"),
        ("mixin slice with an unknown field in a device mixin", broken(
            mixed, lambda o: o["spec"]["mixins"]["device"][0].update(colour="red")), "mixins",
         "unknown field spec.mixins.device[0].colour"),
        # A Device's own fields are not a DeviceMixin's (name, attributes, capacity only).
        ("mixin slice with taints in a device mixin", broken(
            mixed, lambda o: o["spec"]["mixins"]["device"][0].update(
                taints=[{"key": "x.io/t", "effect": "NoSchedule"}])), "mixins",
         "unknown field spec.mixins.device[0].taints"),
        ("mixin slice with consumesCounters in a device mixin", broken(
            mixed, lambda o: o["spec"]["mixins"]["device"][0].update(
                consumesCounters=[{"counterSet": "cs", "counters": {}}])), "mixins",
         "unknown field spec.mixins.device[0].consumesCounters"),
        ("mixin slice with bindsToNode in a device mixin", broken(
            mixed, lambda o: o["spec"]["mixins"]["device"][0].update(bindsToNode=True)),
         "mixins", "unknown field spec.mixins.device[0].bindsToNode"),
        ("mixin slice with includes in a device mixin (mixins do not nest)", broken(
            mixed, lambda o: o["spec"]["mixins"]["device"][0].update(includes=["m"])),
         "mixins", "unknown field spec.mixins.device[0].includes"),
        ("mixin slice with counter-set and counter-consumption mixins", with_counter_mixins,
         "mixins", None),
        ("mixin slice with a consumption-only field in a counter-consumption mixin", broken(
            with_counter_mixins, lambda o: o["spec"]["mixins"]["deviceCounterConsumption"][0]
            .update(counterSet="cs")), "mixins",
         "unknown field spec.mixins.deviceCounterConsumption[0].counterSet"),
        ("mixin slice with a counter that is a boolean in a counter-set mixin", broken(
            with_counter_mixins, lambda o: o["spec"]["mixins"]["counterSet"][0]["counters"]
            .update(c={"value": True})), "mixins",
         "/spec/mixins/counterSet/0/counters/c/value"),
        ("mixin slice with a device mixin list that is an object", broken(
            mixed, lambda o: o["spec"]["mixins"].update(device={})), "mixins",
         "spec.mixins.device must be an array"),
        ("Reservation with an unknown spec field", broken(
            reservation, lambda o: o["spec"].update(cpuCount=2)), "flat",
         "unknown field spec.cpuCount"),
        ("Reservation with a string count", broken(
            reservation, lambda o: o["spec"]["cpus"].update(count="8")), "flat",
         "/spec/cpus/count must be integer"),
        ("Reservation without nodeName", broken(
            reservation, lambda o: o["spec"].pop("nodeName")), "flat",
         'must have required property "nodeName"'),
        ("Reservation with an unknown metadata field", broken(
            reservation, lambda o: o["metadata"].update(labelz={})), "flat",
         "unknown field metadata.labelz"),
        # The CRD's x-kubernetes-validations rules and list types, by the fake API server's code.
        ("Reservation with ttl and expires", broken(
            reservation, lambda o: o["spec"].update(expires="2030-01-01T00:00:00Z")), "flat",
         "ttl and expires are mutually exclusive"),
        ("Reservation holding nothing", broken(
            reservation, lambda o: (o["spec"].pop("cpus"), o["spec"].pop("gpus"))), "flat",
         "a reservation holds cpus, gpus or both"),
        ("Reservation with cpus of neither count nor cpuset", broken(
            reservation, lambda o: o["spec"].update(cpus={"numaNode": 1})), "flat",
         "cpus needs count or cpuset"),
        ("Reservation naming one GPU twice (list-type set)", broken(
            reservation, lambda o: o["spec"].update(gpus={"devices": ["gpu-0", "gpu-0"]})),
         "flat", "spec.gpus.devices[1]: Duplicate value"),
        ("Reservation written back unchanged", reservation, "flat", None, reservation),
        ("Reservation written back with another nodeName", broken(
            reservation, lambda o: o["spec"].update(nodeName="elsewhere")), "flat",
         "nodeName is immutable", reservation),
        ("Reservation written back with other cpus", broken(
            reservation, lambda o: o["spec"]["cpus"].update(count=9)), "flat",
         "cpus is immutable", reservation),
        ("DaemonSet with an unknown container field", broken(
            daemonset, lambda o: o["spec"]["template"]["spec"]["containers"][0].update(
                securityContexts={})), "flat",
         "unknown field spec.template.spec.containers[0].securityContexts"),
        ("DaemonSet without a selector", broken(
            daemonset, lambda o: o["spec"].pop("selector")), "flat",
         'must have required property "selector"'),
    ]
    found, _ = check([(name, obj, rule, *old) for name, obj, rule, _, *old in cases],
                     crd_by_kind)
    # What the mixin form may add was read from the fake's model: it must hold what we emit.
    for must in ("spec.mixins", "spec.devices[].includes"):
        if must not in MIXIN_FIELDS:
            failures.append(f"the fake's mixin model lost {must}: {sorted(MIXIN_FIELDS)}")
    print(f"mixin form adds {sorted(MIXIN_FIELDS)}; mixin lists "
          f"{ {k: sorted(v.item.fields) for k, v in MIXIN_SCHEMA.fields.items()} }")
    for name, obj, rule, want, *_ in cases:
        problems = found[name]
        if want is None and problems:
            failures.append(f"{name}: must pass, got {problems}")
        elif want is not None and not any(want in p for p in problems):
            failures.append(f"{name}: must fail with \"{want}\", got {problems or 'no problem'}")
        else:
            print(f"ok   {name}: {problems[0] if problems else 'passes'}")
    return report(failures, len(cases), "self-test objects")


if __name__ == "__main__":
    parts = {"selftest": test_selftest, "slices": test_slices, "daemon": test_daemon,
             "chart": test_chart, "examples": test_examples}
    if len(sys.argv) != 2 or sys.argv[1] not in parts:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(parts)}")
    sys.exit(parts[sys.argv[1]]())
