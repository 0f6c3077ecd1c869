#!/usr/bin/python3
"""The real kubectl against the fake API server, as an operator uses it (issue 16 item 5).

A real `topodra run` (fixture topology, temporary kubelet/state/CDI directories, no pinning)
publishes its ResourceSlices and places a Reservation, then stops (its objects stay, so every
check sees one state); then `kubectl get` (table, wide, json,
yaml, name), `kubectl describe` and `kubectl apply -f charts/topodra/examples/...` run against
it and their output is checked against the objects in the API.

usage: kubectl_test.py KUBECTL TOPODRA SOURCE_DIR [unittest args]
Nothing outside a temporary directory is touched: KUBECONFIG and HOME point into it (kubectl's
discovery and OpenAPI caches too), and every kubectl call has --request-timeout.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import yaml

KUBECTL = TOPODRA = SOURCE = None  # set from argv in __main__
NODE = "worker-1"
TOPOLOGY = "32em64t-2n8c2t-pci-normalio.xml"  # 2 NUMA nodes, 32 CPUs
REQUEST_TIMEOUT = "10s"  # each kubectl request; a hang fails fast
CALL_TIMEOUT = 30  # each kubectl process


def wait_for(what, fn, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ds waiting for %s" % (timeout, what))
        time.sleep(0.1)


def read(path):
    with open(path) as f:
        return f.read()


def parse_table(text):
    """kubectl's human-readable table as [{COLUMN: cell}]: cells are cut at the header's column
    starts, so empty cells (kubectl prints nothing for a missing value) stay in place."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    names = [header[s:e].strip() for s, e in zip(starts, starts[1:] + [None])]
    rows = []
    for line in lines[1:]:
        cells = [line[s:e].strip() if s < len(line) else ""
                 for s, e in zip(starts, starts[1:] + [None])]
        rows.append(dict(zip(names, cells)))
    return rows


class KubectlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.started = time.monotonic()
        cls.dir = tempfile.mkdtemp(prefix="topodra-kubectl-")
        cls.procs = []
        try:
            cls.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def start(cls):
        port_file = os.path.join(cls.dir, "port")
        cls.server_log = os.path.join(cls.dir, "fake_apiserver.log")
        with open(cls.server_log, "w") as log:
            cls.procs.append(subprocess.Popen(
            ["/usr/bin/python3", os.path.join(SOURCE, "test", "integration", "fake_apiserver.py"),
             "--port", "0", "--port-file", port_file, "--node", NODE + "=uid-" + NODE,
             "--crd", os.path.join(SOURCE, "charts", "topodra", "crds",
                                   "reservations.topodra.io.yaml"),
             "--log", os.path.join(cls.dir, "requests.log")],
                stdout=subprocess.DEVNULL, stderr=log))
        port = wait_for("the fake API server's port file", lambda: os.path.exists(port_file)
                        and read(port_file).strip(), timeout=20)
        cls.url = "http://127.0.0.1:" + port
        cls.kubeconfig = os.path.join(cls.dir, "kubeconfig")
        with open(cls.kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                    "clusters: [{name: test, cluster: {server: '%s'}}]\n"
                    "users: [{name: test, user: {}}]\n"
                    "contexts: [{name: test, context: {cluster: test, user: test, "
                    "namespace: default}}]\n" % cls.url)
        # The Reservation exists before the daemon starts, as after `kubectl apply` by an
        # operator; the daemon places it and writes its status.
        cls.api("POST", "/apis/topodra.io/v1alpha1/reservations", {
            "apiVersion": "topodra.io/v1alpha1", "kind": "Reservation",
            "metadata": {"name": "batch-cpus"},
            "spec": {"nodeName": NODE, "cpus": {"count": 4, "numaNode": 1},
                     "owners": [{"namespace": "batch"}], "ttl": "1h"}})
        cls.api("POST", "/apis/topodra.io/v1alpha1/reservations", {
            "apiVersion": "topodra.io/v1alpha1", "kind": "Reservation",
            "metadata": {"name": "elsewhere"},
            "spec": {"nodeName": "worker-9", "gpus": {"count": 1},
                     "owners": [{"namespace": "batch"}]}})
        cls.daemon_log = os.path.join(cls.dir, "topodra.log")
        with open(cls.daemon_log, "w") as log:
            cls.procs.append(subprocess.Popen(
            [TOPODRA, "run", "--kubeconfig", cls.kubeconfig, "--node-name", NODE,
             "--topology-file", os.path.join(SOURCE, "test", "fixtures", "topologies", TOPOLOGY),
             "--kubelet-root-dir", os.path.join(cls.dir, "kubelet"),
             "--cdi-dir", os.path.join(cls.dir, "cdi"),
             "--state-dir", os.path.join(cls.dir, "state"),
             "--cgroup-root", os.path.join(cls.dir, "cgroup"),
             "--hook-dir", os.path.join(cls.dir, "hook"),
             "--enforce", "none", "--metrics-address", "none", "--health-address", "none"],
                stdout=subprocess.DEVNULL, stderr=log))
        cls.slices = wait_for("the daemon's ResourceSlices", lambda: cls.api(
            "GET", "/apis/resource.k8s.io/v1/resourceslices")["items"])
        cls.reservation = wait_for("the Reservation's status", lambda: (lambda r: r if (
            r.get("status") or {}).get("phase") == "Available" and r["status"].get("cpus")
            else None)(cls.api("GET", "/apis/topodra.io/v1alpha1/reservations/batch-cpus")))
        # The daemon stops (exit 0, its slices stay): what kubectl shows is then fixed, so the
        # checks compare with one state (placing the reservation republished the slices).
        daemon = cls.procs[-1]
        daemon.send_signal(signal.SIGTERM)
        if daemon.wait(20) != 0:
            raise AssertionError("topodra run exited %d:\n%s" % (daemon.returncode,
                                                                  read(cls.daemon_log)))
        cls.slices = cls.api("GET", "/apis/resource.k8s.io/v1/resourceslices")["items"]
        cls.setup_seconds = time.monotonic() - cls.started

    @classmethod
    def tearDownClass(cls):
        for p in reversed(cls.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        print("\nkubectl test: setup %.1fs, total %.1fs" % (
            getattr(cls, "setup_seconds", 0), time.monotonic() - cls.started), file=sys.stderr)
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def api(cls, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(cls.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def kubectl(self, *args, expect=0):
        """stdout of kubectl ARGS; fails with its stderr unless it exits with `expect`."""
        env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": self.kubeconfig, "HOME": self.dir,
               "LANG": "C.UTF-8"}
        cmd = [KUBECTL, "--request-timeout=" + REQUEST_TIMEOUT,
               "--cache-dir", os.path.join(self.dir, "cache")] + list(args)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                               timeout=CALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail("kubectl %s: no answer in %ds" % (" ".join(args), CALL_TIMEOUT))
        self.assertEqual(p.returncode, expect, "kubectl %s exited %d\nstdout:\n%s\nstderr:\n%s"
                         % (" ".join(args), p.returncode, p.stdout, p.stderr))
        if expect == 0:
            # A success says nothing on stderr: server warnings ("Warning: ..."), kubectl's own
            # ("warning: error calculating patch from openapi v3 spec ...") and client-go's log
            # lines (a failed discovery) would otherwise pass unseen.
            self.assertEqual(p.stderr, "", "kubectl %s succeeded but wrote to stderr (warnings?)"
                             % " ".join(args))
        return p.stdout if expect == 0 else p.stdout + p.stderr

    # --- get -----------------------------------------------------------------------------------

    def expected_slice_rows(self):
        return sorted((s["metadata"]["name"], s["spec"].get("nodeName", ""), s["spec"]["driver"],
                       s["spec"]["pool"]["name"]) for s in self.slices)

    def test_get_resourceslices_shows_the_real_printer_columns(self):
        self.assertGreaterEqual(len(self.slices), 1)
        for extra in ((), ("-o", "wide")):
            with self.subTest(args=extra):
                out = self.kubectl("get", "resourceslices", *extra)
                self.assertEqual(out.splitlines()[0].split(),
                                 ["NAME", "NODE", "DRIVER", "POOL", "AGE"], out)
                rows = parse_table(out)
                self.assertEqual(sorted((r["NAME"], r["NODE"], r["DRIVER"], r["POOL"])
                                        for r in rows), self.expected_slice_rows(), out)
                for r in rows:
                    self.assertRegex(r["AGE"], r"^[0-9]+(s|m[0-9]*s?)$", out)
        self.assertIn(NODE, {r[1] for r in self.expected_slice_rows()})
        self.assertIn("dra.cpu", {r[2] for r in self.expected_slice_rows()})

    def test_get_resourceslices_as_json_yaml_and_names(self):
        names = sorted(s["metadata"]["name"] for s in self.slices)
        as_json = json.loads(self.kubectl("get", "resourceslices", "-o", "json"))
        self.assertEqual(as_json["kind"], "List")
        self.assertEqual(sorted(i["metadata"]["name"] for i in as_json["items"]), names)
        by_name = {s["metadata"]["name"]: s for s in self.slices}
        for item in as_json["items"]:
            self.assertEqual(item["kind"], "ResourceSlice")
            self.assertEqual(item["apiVersion"], "resource.k8s.io/v1")
            self.assertEqual(item["spec"], by_name[item["metadata"]["name"]]["spec"])
        as_yaml = yaml.safe_load(self.kubectl("get", "resourceslices", "-o", "yaml"))
        self.assertEqual(sorted(i["metadata"]["name"] for i in as_yaml["items"]), names)
        self.assertEqual([i["spec"] for i in as_yaml["items"]],
                         [i["spec"] for i in as_json["items"]])
        self.assertEqual(self.kubectl("get", "resourceslices", "-o", "name").split(),
                         ["resourceslice.resource.k8s.io/" + n for n in names])
        one = json.loads(self.kubectl("get", "resourceslice", names[0], "-o", "json"))
        self.assertEqual(one["metadata"]["uid"], by_name[names[0]]["metadata"]["uid"])
        selected = self.kubectl("get", "resourceslices", "--field-selector",
                                "spec.nodeName=" + NODE, "-o", "name").split()
        self.assertEqual(len(selected), sum(1 for s in self.slices
                                            if s["spec"].get("nodeName") == NODE))

    def test_get_reservations_shows_the_crd_printer_columns(self):
        out = self.kubectl("get", "reservations")
        self.assertEqual(out.splitlines()[0].split(),
                         ["NAME", "NODE", "PHASE", "CPUS", "GPUS", "EXPIRES", "AGE"], out)
        rows = {r["NAME"]: r for r in parse_table(out)}
        # Every row is its object's columns (other tests apply more reservations).
        stored = self.api("GET", "/apis/topodra.io/v1alpha1/reservations")["items"]
        self.assertEqual(sorted(rows), sorted(r["metadata"]["name"] for r in stored), out)
        for r in stored:
            status = r.get("status") or {}
            self.assertEqual(
                [rows[r["metadata"]["name"]][c] for c in ("NODE", "PHASE", "CPUS", "GPUS",
                                                          "EXPIRES")],
                [r["spec"]["nodeName"], status.get("phase", ""), status.get("cpus", ""),
                 json.dumps(status["gpus"], separators=(",", ":")) if "gpus" in status else "",
                 status.get("expiresAt", "")], out)
        status = self.api("GET", "/apis/topodra.io/v1alpha1/reservations/batch-cpus")["status"]
        placed = rows["batch-cpus"]
        self.assertEqual((placed["NODE"], placed["PHASE"]), (NODE, "Available"), out)
        self.assertRegex(placed["CPUS"], r"^[0-9][-0-9,]*$")
        self.assertRegex(placed["EXPIRES"], r"^20[0-9-]+T[0-9:]+Z$")
        # A list cell is the list as JSON: no GPUs held here.
        self.assertEqual(placed["GPUS"], "[]", out)
        # Nobody placed the other one: only name, node and age.
        other = rows["elsewhere"]
        self.assertEqual((other["NODE"], other["PHASE"], other["CPUS"], other["GPUS"],
                          other["EXPIRES"]), ("worker-9", "", "", "", ""), out)
        self.assertRegex(other["AGE"], r"^[0-9]+(s|m[0-9]*s?)$", out)
        # The short name and -o wide (no priority>0 columns in this CRD) work alike. AGE is
        # left out: a second may tick between the two calls (it did, 3 runs in 8 under load).
        def without_age(row):
            return {k: v for k, v in row.items() if k != "AGE"}
        wide = parse_table(self.kubectl("get", "resv", "batch-cpus", "-o", "wide"))
        self.assertEqual([without_age(r) for r in wide], [without_age(placed)])
        self.assertRegex(wide[0]["AGE"], r"^[0-9]+(s|m[0-9]*s?)$")
        as_json = json.loads(self.kubectl("get", "reservation", "batch-cpus", "-o", "json"))
        self.assertEqual(as_json["status"], status)

    # --- describe --------------------------------------------------------------------------------

    def test_describe_resourceslice(self):
        s = sorted(self.slices, key=lambda s: s["metadata"]["name"])[0]
        out = self.kubectl("describe", "resourceslice", s["metadata"]["name"])
        self.assertRegex(out, r"(?m)^Name:\s+%s$" % re.escape(s["metadata"]["name"]))
        self.assertRegex(out, r"(?m)^Kind:\s+ResourceSlice$")
        self.assertRegex(out, r"(?m)^  Driver:\s+%s$" % re.escape(s["spec"]["driver"]))
        self.assertRegex(out, r"(?m)^  Node Name:\s+%s$" % NODE)
        self.assertRegex(out, r"(?m)^    Name:\s+%s$" % re.escape(s["spec"]["pool"]["name"]))
        for d in s["spec"]["devices"]:
            self.assertRegex(out, r"(?m)^    Name:\s+%s$" % re.escape(d["name"]))
        self.assertRegex(out, r"(?m)^Events:\s+<none>$")

    def test_describe_reservation(self):
        r = self.api("GET", "/apis/topodra.io/v1alpha1/reservations/batch-cpus")
        out = self.kubectl("describe", "reservation", "batch-cpus")
        for pattern in (r"^Name:\s+batch-cpus$", r"^Kind:\s+Reservation$",
                        r"^  Node Name:\s+%s$" % NODE, r"^  Cpus:$", r"^    Count:\s+4$",
                        r"^    Numa Node:\s+1$", r"^  Ttl:\s+1h$", r"^    Namespace:\s+batch$",
                        r"^  Phase:\s+Available$",
                        r"^  Cpus:\s+%s$" % re.escape(r["status"]["cpus"]),
                        r"^Events:\s+<none>$"):
            self.assertRegex(out, "(?m)" + pattern)
        # describe lists the object's events with a field selector; the fake answers that.
        log = read(os.path.join(self.dir, "requests.log"))
        self.assertRegex(log, r"GET /api/v1/events\?fieldSelector=[^ ]*involvedObject\.name"
                         r"%3Dbatch-cpus[^ ]* 200")

    # --- apply ---------------------------------------------------------------------------------

    def example(self, name):
        return os.path.join(SOURCE, "charts", "topodra", "examples", name)

    def stored(self, kind, name, namespace="default"):
        paths = {"ResourceClaim": "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s",
                 "ResourceClaimTemplate":
                     "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates/%s",
                 "Pod": "/api/v1/namespaces/%s/pods/%s"}
        if kind == "Reservation":
            return self.api("GET", "/apis/topodra.io/v1alpha1/reservations/" + name)
        return self.api("GET", paths[kind] % (namespace, name))

    def test_apply_the_examples(self):
        # Re-applying: built-in kinds get a strategic merge patch computed from kubectl's
        # compiled-in types; the claim lists are atomic there, so the server's defaults inside
        # them (allocationMode, count) make kubectl send the list again ("configured", as
        # against a real server), while a Pod or Reservation is "unchanged".
        again = {"ResourceClaim": "configured", "ResourceClaimTemplate": "configured",
                 "Pod": "unchanged", "Reservation": "unchanged"}
        for name in sorted(os.listdir(os.path.join(SOURCE, "charts", "topodra", "examples"))):
            path = self.example(name)
            with self.subTest(example=name):
                docs = [d for d in yaml.safe_load_all(read(path)) if d]
                self.assertTrue(docs)
                first = self.kubectl("apply", "-f", path).splitlines()
                second = self.kubectl("apply", "-f", path).splitlines()
                for i, doc in enumerate(docs):
                    kind, meta = doc["kind"], doc["metadata"]
                    group = doc["apiVersion"].rpartition("/")[0]
                    ref = kind.lower() + ("." + group if group else "") + "/" + meta["name"]
                    self.assertEqual(first[i], ref + " created", first)
                    self.assertEqual(second[i], "%s %s" % (ref, again[kind]), second)
                    obj = self.stored(kind, meta["name"], meta.get("namespace", "default"))
                    applied = json.loads(obj["metadata"]["annotations"][
                        "kubectl.kubernetes.io/last-applied-configuration"])
                    self.assertEqual(applied["spec"], doc["spec"])
                    for field, value in doc["spec"].items():
                        if kind in ("Pod", "Reservation"):  # nothing defaulted inside
                            self.assertEqual(obj["spec"][field], value, field)
                self.assertEqual(len(first), len(docs), first)

    def test_apply_a_change_and_a_refused_change(self):
        doc = {"apiVersion": "topodra.io/v1alpha1", "kind": "Reservation",
               "metadata": {"name": "changing"},
               "spec": {"nodeName": "worker-8", "cpus": {"count": 2},
                        "owners": [{"namespace": "a"}], "ttl": "1h"}}
        path = os.path.join(self.dir, "changing.yaml")

        def apply(expect=0):
            with open(path, "w") as f:
                yaml.safe_dump(doc, f)
            return self.kubectl("apply", "-f", path, expect=expect)

        self.assertEqual(apply().strip(), "reservation.topodra.io/changing created")
        doc["spec"]["ttl"] = "2h"
        self.assertEqual(apply().strip(), "reservation.topodra.io/changing configured")
        self.assertEqual(self.stored("Reservation", "changing")["spec"]["ttl"], "2h")
        # The server's validation reaches the operator: an immutable field (CEL rule) and an
        # unknown field (kubectl asks for fieldValidation=Strict).
        doc["spec"]["cpus"]["count"] = 3
        self.assertIn("cpus is immutable", apply(expect=1))
        doc["spec"]["cpus"]["count"] = 2
        doc["spec"]["colour"] = "blue"
        self.assertIn('unknown field "spec.colour"', apply(expect=1))
        self.assertNotIn("colour", self.stored("Reservation", "changing")["spec"])
        self.assertEqual(self.stored("Reservation", "changing")["spec"]["cpus"], {"count": 2})

    def test_apply_a_device_class_with_an_extended_resource_name(self):
        # The chart's GPU class (templates/deviceclasses.yaml with the default values).
        doc = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": "extended.gpu.topodra.io"},
               "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.topodra.io"'}}],
                        "extendedResourceName": "topodra.io/gpu"}}
        path = os.path.join(self.dir, "deviceclass.yaml")

        def apply(expect=0):
            with open(path, "w") as f:
                yaml.safe_dump(doc, f)
            return self.kubectl("apply", "-f", path, expect=expect)

        ref = "deviceclass.resource.k8s.io/extended.gpu.topodra.io"
        self.assertEqual(apply().strip(), ref + " created")
        self.assertEqual(self.kubectl("get", "deviceclass", "extended.gpu.topodra.io", "-o",
                                      "jsonpath={.spec.extendedResourceName}"), "topodra.io/gpu")
        doc["spec"]["extendedResourceName"] = "example.com/gpu"
        self.assertEqual(apply().strip(), ref + " configured")
        # `cpu` is the kubelet's own resource: the server's validation reaches the operator.
        doc["spec"]["extendedResourceName"] = "cpu"
        out = apply(expect=1)
        self.assertIn("spec.extendedResourceName", out)
        self.assertIn("must be a valid extended resource name", out)
        self.assertEqual(self.kubectl("get", "deviceclass", "extended.gpu.topodra.io", "-o",
                                      "jsonpath={.spec.extendedResourceName}"), "example.com/gpu")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    KUBECTL, TOPODRA, SOURCE = sys.argv[1:4]
    for tool in (KUBECTL, TOPODRA):
        if not os.access(tool, os.X_OK):
            sys.exit("kubectl_test: %s is not an executable (run scripts/install-deps.sh and "
                     "build the topodra target)" % tool)
    unittest.main(argv=[sys.argv[0]] + sys.argv[4:], verbosity=2)
