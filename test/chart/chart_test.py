#!/usr/bin/python3
"""charts/topodra rendered, linted and refused by real helm (registered in CTest as chart_helm).

usage: chart_test.py TOPODRA_BINARY CHART_DIR HELM_BINARY

For every value set of variants.json: `helm lint --strict` passes (a warning fails it) and
`helm template` renders documents that parse as YAML without duplicate keys, of the expected
kinds; the DaemonSet's arguments are real flags of `topodra run --help` (and every flag has a
value); DaemonSet shape, RBAC, admission policy, DeviceClasses, NOTES (`helm install
--dry-run=client`, which needs no cluster), the CRD (`--include-crds`) and the examples.
Values that must be refused make helm fail with a message naming the value (values.schema.json
and the chart's own checks), and the schema's choices and ranges are those of `topodra run
--help`; a Kubernetes version below the chart's floor is refused, the floor is the oldest
version serving every API the chart renders there, and from the floor on every version gets
only APIs it serves (DeviceClasses v1beta1 before 1.34, v1 from 1.34). Every rendering passes
--kube-version (1.36.0 unless the floor test's own): helm's default differs between helm builds.
The examples' Pods reference claims, templates and requests that exist. The one check helm cannot
make, that every value of values.yaml is used by a template and every .Values path a template
reads exists, reads the templates' actions. Needs Debian's python3-yaml.
"""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from concurrent.futures import ThreadPoolExecutor

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
TOPODRA, CHART, HELM = sys.argv[1], sys.argv[2], sys.argv[3]
RELEASE, NAMESPACE = "topodra", "kube-system"

# helm's default Kubernetes version (.Capabilities.KubeVersion without --kube-version) is baked
# into each helm build (v1.20.0 in 4.0.0 builds, v1.35.0 in 4.1.4), and the templates choose
# apiVersions by it: every helm call that renders passes this one, except the floor test's own.
KUBE = "1.36.0"

# The oldest Kubernetes that serves each kind the chart renders (at that apiVersion, by default)
# and supports it as the chart uses it. The chart's floor (Chart.yaml kubeVersion) must be the
# highest of these among what the chart renders at the floor.
NEEDS = {
    ("v1", "ServiceAccount"): (1, 0),
    ("v1", "ConfigMap"): (1, 0),
    ("apps/v1", "DaemonSet"): (1, 9),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): (1, 8),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): (1, 8),
    # apiextensions.k8s.io/v1 is 1.16, but the Reservation CRD declares selectableFields
    # (CustomResourceFieldSelectors: alpha 1.30, beta and on 1.31, GA 1.32); an older API
    # server drops them and the daemon's field-selected list of its node's Reservations fails.
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): (1, 31),
    # Served from 1.30; the policy denies every write without the node-name extra of pod-bound
    # tokens (authentication.kubernetes.io/node-name), which 1.30 puts there by default
    # (ServiceAccountTokenPodNodeInfo: beta and on in 1.30, GA in 1.32).
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (1, 30),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (1, 30),
    # DRA: v1beta1 from 1.32 (off by default; 1.33 adds v1beta2), v1 from 1.34 (GA). The
    # template renders v1beta1 below 1.34.
    ("resource.k8s.io/v1beta1", "DeviceClass"): (1, 32),
    ("resource.k8s.io/v1", "DeviceClass"): (1, 34),
}
KINDS = set(NEEDS) - {("apiextensions.k8s.io/v1", "CustomResourceDefinition")}


def load_variants():
    with open(os.path.join(HERE, "variants.json")) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


VARIANTS = load_variants()


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one
    silently; the API server's decoder refuses it)."""


def _mapping_without_duplicates(loader, node):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                    key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                              _mapping_without_duplicates)

_TMP = tempfile.TemporaryDirectory(prefix="topodra-chart-")
# helm writes its cache, config and data directories; keep them (and any kubeconfig lookup) in
# the test's own directory.
_ENV = dict(os.environ,
            HELM_CACHE_HOME=os.path.join(_TMP.name, "cache"),
            HELM_CONFIG_HOME=os.path.join(_TMP.name, "config"),
            HELM_DATA_HOME=os.path.join(_TMP.name, "data"),
            KUBECONFIG=os.path.join(_TMP.name, "no-kubeconfig"),
            HOME=_TMP.name)


def helm(*args):
    return subprocess.run([HELM, *args], env=_ENV, capture_output=True, text=True, timeout=60)


def parallel(fn, items):
    """fn over items, a few helm processes at a time (each is mostly start-up), in order."""
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        return list(pool.map(fn, items))


def set_args(sets):
    out = []
    for s in sets:
        out += ["--set", s]
    return out


def parse_manifest(text, what):
    """helm's output as [{"source": template, "object": {...}}], every document a mapping."""
    docs = []
    for part in re.split(r"^---[ \t]*$", text, flags=re.M):
        m = re.search(r"^# Source: (\S+)", part, re.M)
        source = m.group(1) if m else "?"
        try:
            obj = yaml.load(part, Loader=_StrictLoader)
        except yaml.YAMLError as e:
            raise AssertionError(f"{what}: {source} is not valid YAML: {e}\n{part}") from None
        if obj is None:
            continue
        if not isinstance(obj, dict):
            raise AssertionError(f"{what}: {source} is not a YAML mapping:\n{part}")
        docs.append({"source": source, "object": obj})
    return docs


def template(sets, *extra, what=None):
    kube = [] if "--kube-version" in extra else ["--kube-version", KUBE]
    p = helm("template", RELEASE, CHART, "--namespace", NAMESPACE, *kube, *set_args(sets), *extra)
    if p.returncode != 0:
        raise AssertionError(f"helm template {what or sets} failed:\n{p.stderr}")
    return parse_manifest(p.stdout, what or str(sets))


def coalesce(dst, src):
    """helm's merge of user values over the chart's: maps merge, a null removes the key."""
    for k, v in src.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            coalesce(dst[k], v)
        else:
            dst[k] = v
    return dst


def dry_run_install(sets, what):
    """`helm install --dry-run=client`: no cluster, but NOTES rendered and helm's own parse of
    the --set values (its typing: 9477 an int, true a bool). `helm install` has no
    --kube-version (helm's default decides): only NOTES and values are read from it, which do
    not depend on the version; the manifest comes from template()."""
    p = helm("install", RELEASE, CHART, "--namespace", NAMESPACE, "--dry-run=client", "-o", "json",
             *set_args(sets))
    if p.returncode != 0:
        raise AssertionError(f"helm install --dry-run=client {what} failed:\n{p.stderr}")
    release = json.loads(p.stdout)
    values = coalesce(copy.deepcopy(release["chart"]["values"]), release.get("config") or {})
    return release["info"].get("notes", ""), values


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


def template_value_refs():
    """The .Values paths the templates read, from their actions ({{ ... }}, not comments).
    A bare .Values (a whole-map use such as `toYaml .Values`) would make every value "used";
    those are returned separately so the test can refuse them."""
    refs, bare = set(), []
    tdir = os.path.join(CHART, "templates")
    for name in sorted(os.listdir(tdir)):
        with open(os.path.join(tdir, name)) as f:
            text = f.read()
        for action in re.findall(r"\{\{(.*?)\}\}", text, re.S):
            body = action.strip("- \t\n")
            if body.startswith("/*"):
                continue
            for m in re.finditer(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)*)", body):
                if m.group(1):
                    refs.add(m.group(1)[1:])
                else:
                    bare.append(f"{name}: {{{{{action}}}}}")
    return refs, bare


def kinds_of(docs):
    return [(d["object"].get("apiVersion"), d["object"].get("kind")) for d in docs]


def version_tuple(v):
    return tuple(int(x) for x in re.match(r"v?(\d+)\.(\d+)", v).groups())


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        def render(item):
            name, sets = item
            notes, values = dry_run_install(sets, name)
            return name, {"documents": template(sets, what=name), "notes": notes, "values": values}
        cls.renders = dict(parallel(render, VARIANTS.items()))
        with open(os.path.join(CHART, "values.yaml")) as f:
            cls.values = yaml.safe_load(f)
        p = helm("show", "chart", CHART)
        assert p.returncode == 0, p.stderr
        cls.chart = yaml.safe_load(p.stdout)
        cls.floor = re.fullmatch(r">=\s*(\d+\.\d+\.\d+)-0", cls.chart["kubeVersion"])
        cls.flags = help_flags()

    def test_lint_strict_every_variant(self):
        lints = parallel(lambda sets: helm("lint", "--strict", CHART, "--namespace", NAMESPACE,
                                           "--kube-version", KUBE, *set_args(sets)),
                         VARIANTS.values())
        for name, p in zip(VARIANTS, lints):
            out = p.stdout + p.stderr
            self.assertEqual(p.returncode, 0, f"helm lint --strict, variant {name}:\n{out}")
            self.assertNotRegex(out, r"\[(WARNING|ERROR)\]", f"variant {name}")

    def test_chart_yaml_matches_project_version(self):
        with open(os.path.join(CHART, "..", "..", "CMakeLists.txt")) as f:
            version = re.search(r"project\(topodra VERSION ([0-9.]+)", f.read()).group(1)
        self.assertEqual(self.chart["apiVersion"], "v2")
        self.assertEqual(self.chart["appVersion"], version)

    def test_documents_have_expected_kinds(self):
        for name, r in self.renders.items():
            for (k, d) in zip(kinds_of(r["documents"]), r["documents"]):
                self.assertIn(k, KINDS, f"{name}: unexpected {k} from {d['source']}")
                self.assertTrue(d["object"].get("metadata", {}).get("name"),
                                f"{name}: {d['source']} has no name")
        default = sorted(k for _, k in set(kinds_of(self.renders["default"]["documents"])))
        self.assertEqual(default, sorted(["ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                          "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                                          "DeviceClass", "DaemonSet"]))
        self.assertEqual([k for _, k in kinds_of(self.renders["default"]["documents"])].count("DeviceClass"), 4)
        self.assertIn("ConfigMap", [k for _, k in kinds_of(self.renders["testing"]["documents"])])
        self.assertEqual(["DaemonSet"], [k for _, k in kinds_of(self.renders["synthetic"]["documents"])])

    def test_notes(self):
        app = self.chart["appVersion"]
        for name, r in self.renders.items():
            notes, vals = r["notes"], r["values"]
            self.assertIn(f"topodra {app} runs on every matching node as DaemonSet "
                          f"{NAMESPACE}/{RELEASE}.", notes, name)
            enforce = [a for a in self.args_of(r) if a.startswith("--enforce=")]
            self.assertIn(f"CPU pinning: {enforce[0]}", notes, name)
            self.assertEqual("Device plugin:" in notes, vals["devicePlugin"]["mode"] != "none", name)
            self.assertIn(f"spec.driver={vals['publish']['cpuDriverName']}", notes, name)
            self.assertEqual("DeviceClasses" in notes, vals["deviceClasses"]["create"], name)

    def test_every_referenced_value_exists_and_every_value_is_used(self):
        refs, bare = template_value_refs()
        self.assertEqual(bare, [], "templates use .Values as a whole: cannot tell which values are used")
        self.assertTrue(refs)
        for ref in sorted(refs):
            self.assertTrue(lookup(self.values, ref), f"templates use .Values.{ref}, not in values.yaml")
        for leaf in sorted(leaf_paths(self.values)):
            used = any(leaf == r or leaf.startswith(r + ".") for r in refs)
            self.assertTrue(used, f"values.yaml: {leaf} is used by no template")

    # (helm arguments, what the error must say). Schema refusals name the value's path; the
    # chart's own checks (templates/_helpers.tpl topodra.validate, required) name the values.
    REFUSED = [
        (["--set", "publish.cpuDeviceMode=pinned"], "at '/publish/cpuDeviceMode'"),
        (["--set", "publish.groupBy=l3"], "at '/publish/groupBy'"),
        (["--set", "cpuPinning.enforce=nri"], "at '/cpuPinning/enforce'"),
        (["--set", "devicePlugin.mode=cpu\\,gpu"], "at '/devicePlugin/mode'"),
        (["--set", "logging.format=xml"], "at '/logging/format'"),
        (["--set", "logging.verbosity=3"], "at '/logging/verbosity'"),
        (["--set", "logging.verbosity=-1"], "at '/logging/verbosity'"),
        (["--set-string", "logging.verbosity=1"], "at '/logging/verbosity'"),
        (["--set-string", "publish.topologyRefresh=30"], "at '/publish/topologyRefresh'"),
        (["--set", "publish.topologyRefresh=0"], "at '/publish/topologyRefresh'"),
        (["--set", "publish.topologyRefresh=86401"], "at '/publish/topologyRefresh'"),
        (["--set", "publish.reservedCpus=0-"], "at '/publish/reservedCpus'"),
        (["--set", "publish.unknownKey=1"], "additional properties 'unknownKey' not allowed"),
        (["--set", "publish.cpuDriverName=DRA_cpu"], "at '/publish/cpuDriverName'"),
        (["--set", "publish.gpuDriverName=" + "g" * 61 + ".io"], "at '/publish/gpuDriverName'"),
        (["--set", "cpuPinning.strictCpuReservation=yes"], "at '/cpuPinning/strictCpuReservation'"),
        (["--set", "health.port=0"], "at '/health/port'"),
        (["--set-string", "health.port=9478"], "at '/health/port'"),
        (["--set", "health.address=0.0.0.0"], "additional properties 'address' not allowed"),
        (["--set", "metrics.port=-1"], "at '/metrics/port'"),
        (["--set", "metrics.port=65536"], "at '/metrics/port'"),
        # A typo in a top-level key (hostNetwork) must not be ignored.
        (["--set", "hostnetwork=false"], "additional properties 'hostnetwork' not allowed"),
        (["--set-string", "hostNetwork=true"], "at '/hostNetwork'"),
        (["--set", "tolerations=null"], "missing property 'tolerations'"),
        (["--set", "image.pullPolicy=always"], "at '/image/pullPolicy'"),
        (["--set", "image.repository="], "at '/image/repository'"),
        (["--set", "kubelet.rootDir=var/lib/kubelet"], "at '/kubelet/rootDir'"),
        (["--set", "kubelet.deviceMetadataDir=run/topodra"], "at '/kubelet/deviceMetadataDir'"),
        (["--set", "kubelet.deviceMetadataDir=/"], "at '/kubelet/deviceMetadataDir'"),
        (["--set", "kubelet.deviceMetadataDir=/var/run/../lib"], "at '/kubelet/deviceMetadataDir'"),
        (["--set", "kubelet.deviceMetadataDir=/var/./run"], "at '/kubelet/deviceMetadataDir'"),
        (["--set", "devicePlugin.reclaimInterval=0"], "at '/devicePlugin/reclaimInterval'"),
        (["--set", "devicePlugin.reclaimInterval=3601"], "at '/devicePlugin/reclaimInterval'"),
        (["--set", "devicePlugin.gpuResource=kubernetes.io/gpu"], "at '/devicePlugin/gpuResource'"),
        (["--set", "devicePlugin.cpuResource=cpu"], "at '/devicePlugin/cpuResource'"),
        (["--set", "deviceClasses.cpuName=Dra.CPU"], "at '/deviceClasses/cpuName'"),
        (["--set", "topology.file=topo.xml"], "at '/topology/file'"),
        (["--set", "kubeconfig=kube/config"], "at '/kubeconfig'"),
        (["--set", "config.reserved-cpus.list=0"], "at '/config/reserved-cpus'"),
        (["--set", "updateStrategy.type=Recreate"], "at '/updateStrategy/type'"),
        (["--set", "updateStrategy.rollingupdate.maxUnavailable=2"],
         "additional properties 'rollingupdate' not allowed"),
        (["--set", "updateStrategy.rollingUpdate.maxUnavailable=ten"],
         "at '/updateStrategy/rollingUpdate/maxUnavailable'"),
        (["--set", "nodeSelector.gpu=true"], "at '/nodeSelector/gpu'"),
        (["--set", "health.port=9477"],
         "health.port and metrics.port are both 9477"),
        # kubelet.deviceMetadataDir mounted at a path the pod mounts already.
        (["--set", "kubelet.deviceMetadataDir=/var/lib/kubelet/plugins"],
         'kubelet.deviceMetadataDir "/var/lib/kubelet/plugins" is the kubelet\'s plugin directory'),
        (["--set", "kubelet.rootDir=/k/", "--set", "kubelet.deviceMetadataDir=/k/plugins"],
         'kubelet.deviceMetadataDir "/k/plugins" is the kubelet\'s plugin directory'),
        (["--set", "kubelet.deviceMetadataDir=/var/run/cdi"],
         'kubelet.deviceMetadataDir and kubelet.cdiDir are both "/var/run/cdi"'),
        (["--set", "kubelet.stateDir=/var/lib/topodra/", "--set",
          "kubelet.deviceMetadataDir=/var/lib/topodra"],
         'kubelet.deviceMetadataDir and kubelet.stateDir are both "/var/lib/topodra/"'),
        (["--set", "deviceClasses.reservedCpuName=dra.cpu"],
         'deviceClasses.cpuName and deviceClasses.reservedCpuName are both "dra.cpu"'),
        (["--set", "config.group-by=socket"],
         "config.group-by: the chart already passes --group-by"),
        (["--set", "serviceAccount.create=false"],
         "serviceAccount.name is required when serviceAccount.create is false"),
        # DeviceClass extendedResourceName: IsExtendedResourceName (the schema) ...
        (["--set", "deviceClasses.gpuExtendedResourceName=cpu"],
         "at '/deviceClasses/gpuExtendedResourceName'"),
        (["--set", "deviceClasses.cpuExtendedResourceName=kubernetes.io/cpu"],
         "at '/deviceClasses/cpuExtendedResourceName'"),
        (["--set", "deviceClasses.gpuExtendedResourceName=example.kubernetes.io/gpu"],
         "at '/deviceClasses/gpuExtendedResourceName'"),
        (["--set", "deviceClasses.gpuExtendedResourceName=requests.example.com/gpu"],
         "at '/deviceClasses/gpuExtendedResourceName'"),
        (["--set", "deviceClasses.gpuExtendedResourceName=example.com/" + "g" * 64],
         "at '/deviceClasses/gpuExtendedResourceName'"),
        (["--set", "deviceClasses.gpuExtendedResourceName=Example.com/gpu"],
         "at '/deviceClasses/gpuExtendedResourceName'"),
        (["--set", "deviceClasses.gpuExtendedResourceName=example.com/a/b"],
         "at '/deviceClasses/gpuExtendedResourceName'"),
        (["--set", "devicePlugin.extendedResourceCheck=yes"],
         "at '/devicePlugin/extendedResourceCheck'"),
        # ... and the chart's own checks.
        (["--set", "deviceClasses.gpuExtendedResourceName=" + "e" * 245 + "/gpu"],
         "deviceClasses.gpuExtendedResourceName \"" + "e" * 245 + "/gpu\": the domain has more "
         "than 244 characters"),
        (["--set", "deviceClasses.cpuExtendedResourceName=topodra.io/cpu"],
         'deviceClasses.cpuExtendedResourceName "topodra.io/cpu" needs publish.cpuDeviceMode '
         "individual: a grouped CPU device is a whole NUMA node"),
        (["--set", "publish.cpuDeviceMode=individual",
          "--set", "deviceClasses.cpuExtendedResourceName=topodra.io/gpu"],
         "deviceClasses.cpuExtendedResourceName and deviceClasses.gpuExtendedResourceName are "
         'both "topodra.io/gpu"'),
        (["--set", "devicePlugin.mode=gpu"],
         'devicePlugin.gpuResource "topodra.io/gpu" is also a DeviceClass\'s extendedResourceName'),
        (["--set", "devicePlugin.mode=cpu", "--set", "publish.cpuDeviceMode=individual",
          "--set", "deviceClasses.cpuExtendedResourceName=topodra.io/cpu"],
         'devicePlugin.cpuResource "topodra.io/cpu" is also a DeviceClass\'s extendedResourceName'),
    ]

    def test_refused_values(self):
        answers = parallel(lambda args: helm("template", RELEASE, CHART, "--namespace", NAMESPACE,
                                             "--kube-version", KUBE, *args),
                           [args for args, _ in self.REFUSED])
        for (args, want), p in zip(self.REFUSED, answers):
            with self.subTest(args=args):
                self.assertNotEqual(p.returncode, 0, f"helm template {args} was accepted")
                self.assertIn(want, p.stderr, f"helm template {args}")

    # Near the refused ones, but fine: the schema must not be stricter than Kubernetes.
    ACCEPTED = [
        ["devicePlugin.gpuResource=nvidia.com/gpu", "devicePlugin.mode=gpu"],
        ["updateStrategy.rollingUpdate.maxUnavailable=10%"],
        ["deviceClasses.create=false", "deviceClasses.gpuName=dra.cpu"],
        ["publish.gpuDriverName=" + "g" * 60 + ".io"],
        ["updateStrategy.type=OnDelete"],
        ["health.port=9477", "metrics.port=9478"],
        ["devicePlugin.mode=cpu", "devicePlugin.reclaimInterval=3600"],
        ["deviceClasses.gpuExtendedResourceName=" + "e" * 244 + "/gpu"],
        ["deviceClasses.gpuExtendedResourceName=kubernetes.io.example.com/GPU_a.b-c"],
        ["deviceClasses.gpuExtendedResourceName=example.com/" + "g" * 63],
        ["deviceClasses.gpuExtendedResourceName=", "devicePlugin.mode=gpu"],
        # Without the chart's classes nothing maps the name.
        ["deviceClasses.create=false", "devicePlugin.mode=gpu"],
        ["devicePlugin.mode=gpu", "devicePlugin.gpuResource=example.com/gpu"],
    ]

    def test_accepted_values(self):
        for sets, docs in zip(self.ACCEPTED, parallel(template, self.ACCEPTED)):
            with self.subTest(sets=sets):
                ds = [d["object"] for d in docs if d["object"]["kind"] == "DaemonSet"][0]
                strategy = ds["spec"]["updateStrategy"]
                # The API documents rollingUpdate as present only with type RollingUpdate.
                self.assertEqual("rollingUpdate" in strategy, strategy["type"] == "RollingUpdate",
                                 f"{sets}: updateStrategy {strategy}")

    # Flags whose values the daemon restricts (`topodra run --help`: choices, ranges) and the
    # chart value of each: the schema must refuse what the daemon would refuse at start (a pod
    # in a crash loop) and accept what it takes.
    FLAG_VALUES = {
        "--cpu-device-mode": "publish.cpuDeviceMode", "--group-by": "publish.groupBy",
        "--gpus": "publish.gpus", "--slice-mixins": "publish.sliceMixins",
        "--list-attributes": "publish.listAttributes",
        "--node-allocatable-mapping": "publish.nodeAllocatableMapping",
        "--topology-refresh": "publish.topologyRefresh", "--device-plugin": "devicePlugin.mode",
        "--device-plugin-reclaim-interval": "devicePlugin.reclaimInterval",
        "--enforce": "cpuPinning.enforce", "--numa-memory": "cpuPinning.numaMemory",
        "--reservations": None,
        "--reservation-taints": "reservations.taints", "--log-format": "logging.format",
        "--dra-health": None,
        "--extended-resource-check": "devicePlugin.extendedResourceCheck",
        "--device-metadata": None,  # kubelet.deviceMetadata, a boolean: on/off
        "--topology-cache": None,  # topology.cache, a boolean: on/off
    }

    def test_schema_matches_daemon_flags(self):
        p = subprocess.run([TOPODRA, "run", "--help"], capture_output=True, text=True)
        restricted = {}
        for m in re.finditer(r"^\s+(--[\w-]+) (\S.*)$", p.stdout, re.M):
            if re.search(r":\{|(INT|FLOAT) in \[", m.group(2)):
                restricted[m.group(1)] = m.group(2)
        self.assertEqual(sorted(restricted), sorted(self.FLAG_VALUES),
                         "flags of `topodra run --help` with choices or ranges")
        with open(os.path.join(CHART, "values.schema.json")) as f:
            schema = json.load(f)
        for flag, path in self.FLAG_VALUES.items():
            if path is None:
                # A boolean value (reservations.enabled, deviceHealth.enabled,
                # kubelet.deviceMetadata) renders on/off.
                continue
            node = schema
            for part in path.split("."):
                node = node["properties"][part]
            spec = restricted[flag]
            choices = re.search(r":\{([^}]*)\}", spec)
            if choices:
                # "gpu,cpu" is one choice of --device-plugin: compare the words.
                want = set(choices.group(1).split(","))
                have = {w for v in node["enum"] for w in v.split(",")}
                self.assertEqual(have, want, f"{path} (enum) against {flag} {spec}")
                continue
            kind, lo, hi = re.search(r"(INT|FLOAT) in \[([-\d.]+) - ([-\d.]+)\]", spec).groups()
            self.assertEqual(node["type"], "integer" if kind == "INT" else "number", f"{path} against {flag} {spec}")
            self.assertEqual((node.get("minimum"), node.get("maximum")), (float(lo), float(hi)),
                             f"{path} (minimum, maximum) against {flag} {spec}")

    def test_kube_version_floor(self):
        self.assertIsNotNone(self.floor, f"kubeVersion {self.chart['kubeVersion']!r}: want \">=X.Y.Z-0\"")
        floor = version_tuple(self.floor.group(1))
        below = f"{floor[0]}.{floor[1] - 1}.99"
        p = helm("template", RELEASE, CHART, "--kube-version", below)
        self.assertNotEqual(p.returncode, 0, f"--kube-version {below} was accepted")
        self.assertIn(f"incompatible with Kubernetes v{below}", p.stderr)
        self.assertIn(self.chart["kubeVersion"], p.stderr)
        # At every version from the floor on, every variant (and the CRD) renders only kinds
        # that version serves; at the floor something needs the floor itself (else the floor
        # refuses clusters that work). DeviceClasses follow the version: v1beta1 before DRA GA.
        # Vendor builds carry a pre-release suffix; "-0" in the constraint admits them.
        versions = [f"{floor[0]}.{floor[1]}.0", f"{floor[0]}.{floor[1]}.1-gke.100", "1.33.5",
                    "1.34.0", "1.34.1-eks-113cf36", KUBE]
        device_class = {"1.32": "resource.k8s.io/v1beta1", "1.33": "resource.k8s.io/v1beta1",
                        "1.34": "resource.k8s.io/v1", "1.36": "resource.k8s.io/v1"}
        jobs = [(v, name, sets) for v in versions for name, sets in VARIANTS.items()]
        jobs += [(v, "--include-crds", ["--include-crds"]) for v in versions]

        def render(job):
            v, name, sets = job
            what = f"--kube-version {v}, {name}"
            if name == "--include-crds":
                return template([], "--kube-version", v, "--include-crds", what=what)
            return template(sets, "--kube-version", v, what=what)
        at = {}
        for (v, name, _), docs in zip(jobs, parallel(render, jobs)):
            kinds = kinds_of(docs)
            unknown = sorted(set(k for k in kinds if k not in NEEDS))
            self.assertEqual(unknown, [], f"--kube-version {v}, {name}: rendered kinds without a "
                             "known oldest Kubernetes (NEEDS)")
            for k in kinds:
                self.assertLessEqual(NEEDS[k], version_tuple(v),
                                     f"--kube-version {v}, {name}: {k} needs {NEEDS[k]}")
            at.setdefault(v, set()).update(kinds)
            minor = ".".join(v.split(".")[:2])
            classes = {a for a, k in kinds if k == "DeviceClass"}
            if classes and minor in device_class:
                self.assertEqual(classes, {device_class[minor]},
                                 f"--kube-version {v}, {name}: DeviceClass apiVersion")
        need = max(NEEDS[k] for k in at[versions[0]])
        self.assertEqual(floor, need, f"kubeVersion {self.chart['kubeVersion']}: at the floor the "
                         f"rendered kinds need {need}: "
                         f"{sorted(k for k in at[versions[0]] if NEEDS[k] == need)}")
        for v in versions:
            self.assertIn("DeviceClass", {k for _, k in at[v]}, f"--kube-version {v}")
        for ok in versions:
            p = helm("lint", "--strict", CHART, "--kube-version", ok)
            self.assertEqual(p.returncode, 0, f"helm lint --kube-version {ok}:\n{p.stdout}{p.stderr}")

    def args_of(self, r):
        c = daemonset(r)["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(c["args"][0], "run")
        return c["args"][1:]

    def test_args_are_real_flags(self):
        used = set()
        for name, r in self.renders.items():
            for a in self.args_of(r):
                self.assertTrue(a.startswith("-"), f"{name}: positional argument {a!r}")
                flag = a.split("=", 1)[0]
                if flag == "-vv":
                    flag = "-v"
                used.add(flag)
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
            # The device metadata files: where the daemon writes them is the host path the claims'
            # CDI specs name, so the same path on both sides; none of its own when empty (the
            # kubelet's plugin directory, mounted above).
            meta = vals["kubelet"]["deviceMetadataDir"]
            meta_args = [a for a in c["args"] if a.startswith("--device-metadata-dir")]
            if meta:
                self.assertEqual(host.get(meta), meta, f"{name}: {meta} not mounted at its host path")
                self.assertFalse(mounts[meta].get("readOnly", False), name)
                self.assertEqual(meta_args, ["--device-metadata-dir=" + meta], name)
            else:
                self.assertEqual(meta_args, [], name)
                self.assertNotIn("device-metadata", vols, name)
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
            if vals["config"]:
                cm = [d["object"] for d in r["documents"] if d["object"]["kind"] == "ConfigMap"][0]
                self.assertEqual(yaml.safe_load(cm["data"]["config.yaml"]), vals["config"], name)
                self.assertIn("--config=/etc/topodra/config.yaml", c["args"], name)

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
        off = self.renders["reservations-off"]
        role = [d["object"] for d in off["documents"] if d["object"]["kind"] == "ClusterRole"][0]
        self.assertNotIn("topodra.io", {g for rule in role["rules"] for g in rule["apiGroups"]})
        self.assertIn("--reservations=off", self.args_of(off))
        # The DeviceClass check (--extended-resource-check) lists and watches DeviceClasses, only
        # where a device plugin runs and the check is on.
        for name, r in self.renders.items():
            vals = r["values"]["devicePlugin"]
            role = [d["object"] for d in r["documents"] if d["object"]["kind"] == "ClusterRole"]
            if not role:
                continue
            rules = {(g, res): sorted(rule["verbs"]) for rule in role[0]["rules"]
                     for g in rule["apiGroups"] for res in rule["resources"]}
            check = vals["mode"] != "none" and vals["extendedResourceCheck"] != "off"
            self.assertEqual(rules.get(("resource.k8s.io", "deviceclasses")),
                             ["list", "watch"] if check else None, name)
            args = [a for a in self.args_of(r) if a.startswith("--extended-resource-check")]
            self.assertEqual(args, [f"--extended-resource-check={vals['extendedResourceCheck']}"]
                             if vals["mode"] != "none" else [], name)
        docs = template(["devicePlugin.mode=gpu", "deviceClasses.gpuExtendedResourceName=",
                         "devicePlugin.extendedResourceCheck=off"], what="check off")
        role = [d["object"] for d in docs if d["object"]["kind"] == "ClusterRole"][0]
        self.assertNotIn("deviceclasses", {res for rule in role["rules"] for res in rule["resources"]})

    def test_device_health_flag(self):
        self.assertIn("--dra-health=on", self.args_of(self.renders["default"]))
        self.assertIn("--dra-health=off", self.args_of(self.renders["device-health-off"]))

    def test_admission_policy(self):
        docs = {d["object"]["kind"]: d["object"] for d in self.renders["default"]["documents"]}
        vap, binding = docs["ValidatingAdmissionPolicy"], docs["ValidatingAdmissionPolicyBinding"]
        self.assertEqual(binding["spec"]["policyName"], vap["metadata"]["name"])
        self.assertEqual(binding["spec"]["validationActions"], ["Deny"])
        cond = vap["spec"]["matchConditions"][0]["expression"]
        self.assertIn(f'"system:serviceaccount:{NAMESPACE}:{RELEASE}"', cond)
        text = json.dumps(vap)
        self.assertIn("authentication.kubernetes.io/node-name", text)
        rule = vap["spec"]["matchConstraints"]["resourceRules"][0]
        self.assertEqual(rule["resources"], ["resourceslices"])
        self.assertEqual(sorted(rule["operations"]), ["CREATE", "DELETE", "UPDATE"])
        resv = vap["spec"]["matchConstraints"]["resourceRules"][1]
        self.assertEqual((resv["apiGroups"], resv["resources"], resv["operations"]),
                         (["topodra.io"], ["reservations/status"], ["UPDATE"]))

    def test_device_classes_select_drivers(self):
        r = self.renders["cpu-driver-name"]
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

    def test_device_classes_extended_resource_names(self):
        def mapped(docs):
            return {d["object"]["metadata"]["name"]: d["object"]["spec"].get("extendedResourceName")
                    for d in docs if d["object"]["kind"] == "DeviceClass"}
        self.assertEqual(mapped(self.renders["default"]["documents"]), {
            "dra.cpu": None, "gpu.topodra.io": "topodra.io/gpu",
            "reserved.dra.cpu": None, "reserved.gpu.topodra.io": None})
        self.assertEqual(mapped(self.renders["extended-resources"]["documents"]), {
            "dra.cpu": "example.com/cpu", "gpu.topodra.io": "example.com/gpu",
            "reserved.dra.cpu": None, "reserved.gpu.topodra.io": None})
        self.assertIn("resources.limits example.com/gpu, example.com/cpu",
                      self.renders["extended-resources"]["notes"])
        self.assertEqual(set(mapped(self.renders["device-plugin"]["documents"]).values()), {None})
        self.assertNotIn("resources.limits", self.renders["device-plugin"]["notes"])
        # Servers before 1.34 (v1beta1 DeviceClasses) have no such field.
        for v in ["1.32.0", "1.33.5"]:
            docs = template(["publish.cpuDeviceMode=individual",
                             "deviceClasses.cpuExtendedResourceName=example.com/cpu"],
                            "--kube-version", v, what=f"--kube-version {v}")
            self.assertEqual(set(mapped(docs).values()), {None}, v)
        docs = template([], "--kube-version", "1.34.0", what="--kube-version 1.34.0")
        self.assertEqual(mapped(docs)["gpu.topodra.io"], "topodra.io/gpu")

    def test_reservation_crd(self):
        # As helm installs it: from crds/, with --include-crds in `helm template`.
        docs = template([], "--include-crds", what="--include-crds")
        crds = [d for d in docs if d["object"]["kind"] == "CustomResourceDefinition"]
        self.assertEqual([d["source"] for d in crds], ["topodra/crds/reservations.topodra.io.yaml"])
        crd = crds[0]["object"]
        self.assertEqual(crd["apiVersion"], "apiextensions.k8s.io/v1")
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
                docs = [d["object"] for d in parse_manifest(fh.read(), f)]
            kinds = {d["kind"] for d in docs}
            self.assertIn("Pod", kinds, f)
            for d in docs:
                if d["kind"] in ("ResourceClaim", "ResourceClaimTemplate"):
                    self.assertEqual(d["apiVersion"], "resource.k8s.io/v1", f)
                    spec = d["spec"] if d["kind"] == "ResourceClaim" else d["spec"]["spec"]
                    for req in spec["devices"]["requests"]:
                        self.assertEqual(len({"exactly", "firstAvailable"} & set(req)), 1, f)
                if d["kind"] == "Pod":
                    # Devices through claims, or as an extended resource a chart DeviceClass
                    # maps (the scheduler writes the claim).
                    extended = {r for c in d["spec"]["containers"] + d["spec"].get("initContainers", [])
                                for r in c.get("resources", {}).get("limits", {}) if "/" in r}
                    mapped = {self.values["deviceClasses"]["gpuExtendedResourceName"],
                              self.values["deviceClasses"]["cpuExtendedResourceName"]} - {""}
                    self.assertTrue(d["spec"].get("resourceClaims") or extended, f)
                    self.assertLessEqual(extended, mapped, f"{f}: extended resources no chart "
                                         "DeviceClass maps by default")
                    if d["spec"].get("resourceClaims"):
                        self.check_pod_claims(f, d, docs)

    def check_pod_claims(self, f, pod, docs):
        """The references an API server would only check at scheduling (the fake stores Pods
        as sent): containers' claims name pod claims, pod claims name a ResourceClaim or
        ResourceClaimTemplate of the same file and namespace, a claim's request one of its
        requests."""
        ns = pod["metadata"].get("namespace")
        where = f"{f}: Pod {pod['metadata']['name']}"
        by_kind = {(d["kind"], d["metadata"]["name"]): d for d in docs
                   if d["metadata"].get("namespace") == ns}
        targets = {}
        for pc in pod["spec"]["resourceClaims"]:
            refs = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if pc.get(k)]
            self.assertEqual(len(refs), 1, f"{where}: resourceClaims {pc['name']!r} must name "
                             "exactly one of resourceClaimName, resourceClaimTemplateName")
            kind = "ResourceClaim" if refs[0] == "resourceClaimName" else "ResourceClaimTemplate"
            target = by_kind.get((kind, pc[refs[0]]))
            self.assertIsNotNone(target, f"{where}: resourceClaims {pc['name']!r}: no {kind} "
                                 f"{pc[refs[0]]!r} in namespace {ns or '(default)'} of {f}")
            spec = target["spec"] if kind == "ResourceClaim" else target["spec"]["spec"]
            targets[pc["name"]] = {r["name"] for r in spec["devices"]["requests"]}
        containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        for c in containers:
            for claim in c.get("resources", {}).get("claims", []):
                self.assertIn(claim["name"], targets, f"{where}: container {c['name']} uses claim "
                              f"{claim['name']!r}, not in spec.resourceClaims {sorted(targets)}")
                if claim.get("request"):
                    self.assertIn(claim["request"], targets[claim["name"]],
                                  f"{where}: container {c['name']}: claim {claim['name']!r} "
                                  f"has no request {claim['request']!r}")


def daemonset(r):
    ds = [d["object"] for d in r["documents"] if d["object"]["kind"] == "DaemonSet"]
    assert len(ds) == 1, kinds_of(r["documents"])
    return ds[0]


if __name__ == "__main__":
    try:
        unittest.main(argv=[sys.argv[0], "-v"])
    finally:
        _TMP.cleanup()
