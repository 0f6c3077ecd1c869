#!/usr/bin/python3
"""Render test of charts/topodra without a helm binary (registered in CTest as chart_render).

usage: chart_test.py TOPODRA_BINARY CHART_DIR

Renders the chart with render.go (Go text/template + sprig, like helm) for several value sets
and checks: every document parses as YAML (render.go) and has the expected kind/apiVersion;
every .Values path the templates reference exists in values.yaml and every value is used;
values.yaml (and each variant) validates against values.schema.json, and broken values do not;
every DaemonSet argument is a real flag of `topodra run --help`, and every flag has a value;
the examples are valid resource.k8s.io/v1 YAML. Needs Debian's python3-yaml, python3-jsonschema,
golang-go, golang-github-masterminds-sprig-dev, golang-gopkg-yaml.v3-dev.
"""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
TOPODRA, CHART = sys.argv[1], sys.argv[2]
# Added by another change in flight; tolerated ONLY while `topodra run --help` lacks it.
PENDING_FLAGS = {"--metrics-address"}

VARIANTS = {
    "default": [],
    "device-plugin": ["devicePlugin.mode=gpu,cpu"],
    "device-plugin-socket": ["devicePlugin.mode=cpu",
                             "devicePlugin.podResourcesSocket=/var/lib/kubelet/pr/kubelet.sock"],
    "enforce-none": ["cpuPinning.enforce=none"],
    "individual": ["publish.cpuDeviceMode=individual", "publish.reservedCpus=0-1",
                   "cpuPinning.strictCpuReservation=true",
                   "publish.gpus=none", "logging.verbosity=2", "logging.format=json"],
    "testing": ["topology.file=/etc/topo.xml", "kubeconfig=/etc/kube/config",
                "logging.verbosity=1", "config.group-by=socket", "hostNetwork=false",
                "privileged=true", "health.port=19478", "metrics.port=19477"],
    "synthetic": ["topology.synthetic=pack:2 core:4 pu:2", "serviceAccount.create=false",
                  "serviceAccount.name=existing", "rbac.create=false",
                  "admissionPolicy.create=false", "deviceClasses.create=false"],
}

KINDS = {
    ("v1", "ServiceAccount"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("resource.k8s.io/v1", "DeviceClass"), ("apps/v1", "DaemonSet"), ("v1", "ConfigMap"),
}


def render(sets):
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode", GOFLAGS="")
    env.setdefault("GOCACHE", os.path.join(tempfile.gettempdir(), "topodra-chart-gocache"))
    cmd = ["go", "run", os.path.join(HERE, "render.go"), "-chart", CHART]
    for s in sets:
        cmd += ["-set", s]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"render {sets} failed:\n{p.stderr}")
    return json.loads(p.stdout)


def help_flags():
    p = subprocess.run([TOPODRA, "run", "--help"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    flags = set()
    for m in re.finditer(r"^\s+((?:-\w,)?--?[\w-]+)", p.stdout, re.M):
        flags.update(m.group(1).split(","))
    return flags


def leaf_paths(values, prefix=""):
    out = set()
    for k, v in values.items():
        path = prefix + k
        if isinstance(v, dict) and v:
            out |= leaf_paths(v, path + ".")
        else:
            out.add(path)
    return out


def lookup(values, path):
    cur = values
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return False
        cur = cur[part]
    return True


def daemonset(r):
    ds = [d["object"] for d in r["documents"] if d["object"]["kind"] == "DaemonSet"]
    assert len(ds) == 1, [d["object"]["kind"] for d in r["documents"]]
    return ds[0]


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.renders = {name: render(sets) for name, sets in VARIANTS.items()}
        with open(os.path.join(CHART, "values.yaml")) as f:
            cls.values = yaml.safe_load(f)
        with open(os.path.join(CHART, "values.schema.json")) as f:
            cls.schema = json.load(f)
        cls.flags = help_flags()

    def test_chart_yaml_matches_project_version(self):
        with open(os.path.join(CHART, "..", "..", "CMakeLists.txt")) as f:
            version = re.search(r"project\(topodra VERSION ([0-9.]+)", f.read()).group(1)
        chart = self.renders["default"]["chart"]
        self.assertEqual(chart["apiVersion"], "v2")
        self.assertEqual(chart["appVersion"], version)

    def test_documents_have_expected_kinds(self):
        for name, r in self.renders.items():
            kinds = [(d["object"].get("apiVersion"), d["object"].get("kind")) for d in r["documents"]]
            for k in kinds:
                self.assertIn(k, KINDS, f"{name}: unexpected {k}")
            for d in r["documents"]:
                self.assertTrue(d["object"].get("metadata", {}).get("name"), f"{name}: {d['source']} has no name")
        default = sorted(k for _, k in {(d["object"]["apiVersion"], d["object"]["kind"]) for d in self.renders["default"]["documents"]})
        self.assertEqual(default, sorted(["ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                          "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                                          "DeviceClass", "DaemonSet"]))
        self.assertEqual(len([d for d in self.renders["default"]["documents"] if d["object"]["kind"] == "DeviceClass"]), 4)
        self.assertIn("ConfigMap", [d["object"]["kind"] for d in self.renders["testing"]["documents"]])
        self.assertEqual(["DaemonSet"], [d["object"]["kind"] for d in self.renders["synthetic"]["documents"]])
        self.assertIn("topodra", self.renders["default"]["notes"])

    def test_every_referenced_value_exists_and_every_value_is_used(self):
        refs = self.renders["default"]["valueRefs"]
        for ref in refs:
            self.assertTrue(lookup(self.values, ref), f"templates use .Values.{ref}, not in values.yaml")
        for leaf in leaf_paths(self.values):
            used = any(leaf == r or leaf.startswith(r + ".") for r in refs)
            self.assertTrue(used, f"values.yaml: {leaf} is used by no template")

    def test_values_validate_against_schema(self):
        jsonschema.Draft7Validator.check_schema(self.schema)
        jsonschema.validate(self.values, self.schema)
        for name, r in self.renders.items():
            jsonschema.validate(r["values"], self.schema)

    def test_schema_rejects_bad_values(self):
        bad = [("publish", "cpuDeviceMode", "pinned"), ("publish", "groupBy", "l3"),
               ("cpuPinning", "enforce", "nri"), ("devicePlugin", "mode", "cpu,gpu"),
               ("logging", "format", "xml"), ("publish", "topologyRefresh", "30"),
               ("publish", "reservedCpus", "0-"),
               ("cpuPinning", "strictCpuReservation", "yes"), ("publish", "unknownKey", 1),
               ("health", "port", 0), ("health", "port", "9478"), ("health", "address", "0.0.0.0")]
        for group, key, value in bad:
            v = copy.deepcopy(self.values)
            v[group][key] = value
            with self.assertRaises(jsonschema.ValidationError, msg=f"{group}.{key}={value!r}"):
                jsonschema.validate(v, self.schema)

    def args_of(self, r):
        c = daemonset(r)["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(c["args"][0], "run")
        return c["args"][1:]

    def test_args_are_real_flags(self):
        missing_pending = PENDING_FLAGS - self.flags
        if missing_pending:
            print(f"\nNOTE: tolerating pending flag(s) not yet in `topodra run --help`: {sorted(missing_pending)}",
                  file=sys.stderr)
        used = set()
        for name, r in self.renders.items():
            for a in self.args_of(r):
                self.assertTrue(a.startswith("-"), f"{name}: positional argument {a!r}")
                flag = a.split("=", 1)[0]
                if flag == "-vv":
                    flag = "-v"
                used.add(flag)
                if flag in missing_pending:
                    continue
                self.assertIn(flag, self.flags, f"{name}: {a!r} is not a flag of `topodra run`")
        # Every flag of the daemon is reachable from values.yaml.
        for f in self.flags - {"-h", "--help"}:
            self.assertIn(f, used, f"flag {f} of `topodra run` has no value in the chart")

    def test_daemonset_shape(self):
        for name, r in self.renders.items():
            vals = r["values"]
            spec = daemonset(r)["spec"]["template"]["spec"]
            c = spec["containers"][0]
            self.assertIn("--node-name=$(NODE_NAME)", c["args"])
            env = {e["name"]: e for e in c["env"]}
            self.assertEqual(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
            self.assertEqual(spec["priorityClassName"], "system-node-critical")
            self.assertEqual(spec["hostNetwork"], vals["hostNetwork"])
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            vols = {v["name"]: v for v in spec["volumes"]}
            host = {m["mountPath"]: vols[m["name"]].get("hostPath", {}).get("path") for m in c["volumeMounts"]}
            root = vals["kubelet"]["rootDir"]
            for p in [root + "/plugins", root + "/plugins_registry", vals["kubelet"]["cdiDir"],
                      vals["kubelet"]["stateDir"]]:
                self.assertEqual(host.get(p), p, f"{name}: {p} not mounted at its host path")
            self.assertTrue(mounts["/sys"].get("readOnly"), name)
            simulated = bool(vals["topology"]["file"] or vals["topology"]["synthetic"])
            cgroup = vals["cpuPinning"]["enforce"] == "cgroup" and not simulated
            # The daemon refuses to pin a simulated machine on the host's cgroups (exit 2).
            self.assertIn("--enforce=" + ("cgroup" if cgroup else "none"), c["args"], name)
            for p in [vals["cpuPinning"]["hookDir"], vals["cpuPinning"]["cgroupRoot"]]:
                if cgroup:
                    self.assertEqual(host.get(p), p, f"{name}: {p}")
                    self.assertFalse(mounts[p].get("readOnly", False))
                else:
                    self.assertNotIn(p, mounts, f"{name}: {p} mounted without enforce=cgroup")
            self.assertEqual("--strict-cpu-reservation" in c["args"],
                             cgroup and vals["cpuPinning"]["strictCpuReservation"], name)
            dp = vals["devicePlugin"]["mode"] != "none"
            self.assertEqual(root + "/device-plugins" in mounts, dp, name)
            sock = vals["devicePlugin"]["podResourcesSocket"] or root + "/pod-resources/kubelet.sock"
            self.assertEqual(os.path.dirname(sock) in mounts, dp, name)
            # The kubelet probes the health listener, never the metrics port the network reaches:
            # on the host network at the node's 127.0.0.1 (where the kubelet's probe connects
            # from), else at the pod's address.
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            self.assertEqual(ports, {"metrics": vals["metrics"]["port"], "health": vals["health"]["port"]}, name)
            for probe, path in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
                get = c[probe]["httpGet"]
                self.assertEqual(get["path"], path)
                self.assertEqual(get["port"], "health", name)
                if vals["hostNetwork"]:
                    self.assertEqual(get.get("host"), "127.0.0.1", f"{name}: {probe}")
                else:
                    self.assertNotIn("host", get, f"{name}: {probe}")
            self.assertIn(f"--metrics-address=:{vals['metrics']['port']}", c["args"])
            health = [a for a in c["args"] if a.startswith("--health-address=")]
            want = ("127.0.0.1" if vals["hostNetwork"] else "") + f":{vals['health']['port']}"
            self.assertEqual(health, ["--health-address=" + want], name)
            sc = c["securityContext"]
            self.assertEqual(sc["privileged"], vals["privileged"])
            self.assertTrue(sc["readOnlyRootFilesystem"])
            if not vals["privileged"]:
                self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
                self.assertFalse(sc["allowPrivilegeEscalation"])
            self.assertEqual(spec["tolerations"], vals["tolerations"])
            self.assertEqual(c["resources"], vals["resources"])

    def test_rbac_verbs(self):
        role = [d["object"] for d in self.renders["default"]["documents"] if d["object"]["kind"] == "ClusterRole"][0]
        rules = {(g, res): sorted(rule["verbs"]) for rule in role["rules"]
                 for g in rule["apiGroups"] for res in rule["resources"]}
        self.assertEqual(rules, {
            ("resource.k8s.io", "resourceslices"): sorted(["list", "watch", "create", "update", "delete"]),
            ("resource.k8s.io", "resourceclaims"): ["get"],
            ("", "nodes"): ["get"],
            ("topodra.io", "reservations"): ["get", "list", "watch"],
            ("topodra.io", "reservations/status"): ["update"],
        })
        off = render(["reservations.enabled=false"])
        role = [d["object"] for d in off["documents"] if d["object"]["kind"] == "ClusterRole"][0]
        self.assertNotIn("topodra.io", {g for rule in role["rules"] for g in rule["apiGroups"]})
        self.assertIn("--reservations=off", self.args_of(off))

    def test_admission_policy(self):
        docs = {d["object"]["kind"]: d["object"] for d in self.renders["default"]["documents"]}
        vap, binding = docs["ValidatingAdmissionPolicy"], docs["ValidatingAdmissionPolicyBinding"]
        self.assertEqual(binding["spec"]["policyName"], vap["metadata"]["name"])
        self.assertEqual(binding["spec"]["validationActions"], ["Deny"])
        cond = vap["spec"]["matchConditions"][0]["expression"]
        self.assertIn('"system:serviceaccount:kube-system:topodra"', cond)
        text = json.dumps(vap)
        self.assertIn("authentication.kubernetes.io/node-name", text)
        rule = vap["spec"]["matchConstraints"]["resourceRules"][0]
        self.assertEqual(rule["resources"], ["resourceslices"])
        self.assertEqual(sorted(rule["operations"]), ["CREATE", "DELETE", "UPDATE"])
        resv = vap["spec"]["matchConstraints"]["resourceRules"][1]
        self.assertEqual((resv["apiGroups"], resv["resources"], resv["operations"]),
                         (["topodra.io"], ["reservations/status"], ["UPDATE"]))

    def test_device_classes_select_drivers(self):
        r = render(["publish.cpuDriverName=cpu.example.com"])
        classes = {d["object"]["metadata"]["name"]: [sel["cel"]["expression"]
                                                     for sel in d["object"]["spec"]["selectors"]]
                   for d in r["documents"] if d["object"]["kind"] == "DeviceClass"}
        plain = '!("reservation" in device.attributes["topodra.io"])'
        reserved = '"reservation" in device.attributes["topodra.io"]'
        self.assertEqual(classes, {
            "dra.cpu": ['device.driver == "cpu.example.com"', plain],
            "gpu.topodra.io": ['device.driver == "gpu.topodra.io"', plain],
            "reserved.dra.cpu": ['device.driver == "cpu.example.com"', reserved],
            "reserved.gpu.topodra.io": ['device.driver == "gpu.topodra.io"', reserved],
        })

    def test_reservation_crd(self):
        crddir = os.path.join(CHART, "crds")
        with open(os.path.join(crddir, "reservations.topodra.io.yaml")) as fh:
            crd = yaml.safe_load(fh)
        self.assertEqual(crd["apiVersion"], "apiextensions.k8s.io/v1")
        self.assertEqual(crd["kind"], "CustomResourceDefinition")
        self.assertEqual(crd["metadata"]["name"], "reservations.topodra.io")
        self.assertEqual(crd["spec"]["scope"], "Cluster")
        version = crd["spec"]["versions"][0]
        self.assertEqual(version["name"], "v1alpha1")
        self.assertEqual(version["subresources"], {"status": {}})
        self.assertEqual(version["selectableFields"], [{"jsonPath": ".spec.nodeName"}])
        # The attribute value and taint value carry the name: at most 63 characters.
        self.assertEqual(version["schema"]["openAPIV3Schema"]["properties"]["metadata"]
                         ["properties"]["name"]["maxLength"], 63)

    def test_examples(self):
        exdir = os.path.join(CHART, "examples")
        files = sorted(f for f in os.listdir(exdir) if f.endswith(".yaml"))
        self.assertGreaterEqual(len(files), 3)
        for f in files:
            with open(os.path.join(exdir, f)) as fh:
                docs = [d for d in yaml.safe_load_all(fh) if d]
            kinds = {d["kind"] for d in docs}
            self.assertIn("Pod", kinds, f)
            for d in docs:
                if d["kind"] in ("ResourceClaim", "ResourceClaimTemplate"):
                    self.assertEqual(d["apiVersion"], "resource.k8s.io/v1", f)
                    spec = d["spec"] if d["kind"] == "ResourceClaim" else d["spec"]["spec"]
                    for req in spec["devices"]["requests"]:
                        self.assertEqual(len({"exactly", "firstAvailable"} & set(req)), 1, f)
                if d["kind"] == "Pod":
                    self.assertTrue(d["spec"].get("resourceClaims"), f)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
