#!/usr/bin/python3
"""The node daemon image, run as the chart's DaemonSet runs it (README "Container image").

`make image` builds the Dockerfile's image with podman (scripts/build-image.sh). This test takes
that image and the DaemonSet that the real helm renders from charts/topodra, turns the pod spec
into `podman run` flags the way the kubelet would run the pod (user, read-only root filesystem,
dropped capabilities, no-new-privileges, memory limit, host network, hostPath and emptyDir
volumes, the service-account token, $(NODE_NAME) in the arguments), and points the daemon at
this test's own host directories, a fake API server over TLS with a bearer token (the daemon's
in-cluster configuration, as in a cluster) and the kubelet simulator. Then, on the host side:
  - it registers its DRA plugin with the kubelet (start -> registered time is printed);
  - it publishes its ResourceSlices;
  - /healthz and /readyz answer on the health port, /metrics on the metrics port;
  - it installs the CPU pinning hook into the host's hook directory;
  - a claim prepared through the kubelet's socket gets its CDI spec in the host's CDI directory,
    and unprepare removes it;
  - SIGTERM (podman stop, the chart's terminationGracePeriodSeconds) stops it with exit code 0
    within the grace period, and its sockets are gone.
A pod-spec field the translation does not know fails the test, so a chart change cannot slip
past it unnoticed. "real_host": it runs a container with the host's podman and runc (private
storage under build/image, host network, host cgroups for the container); everything it creates
is removed at the end, also on SIGTERM/SIGINT.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import yaml

NODE = "image-node"
CPU_DRIVER = "dra.cpu"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Small VMs refuse podman's default limits (1M open files): the same as scripts/build-image.sh.
ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=1000:1000"]


class Failure(Exception):
    pass


def log(msg):
    print("image-test: " + msg, flush=True)


def cgroup_mounts():
    with open("/proc/mounts") as f:
        return sorted({line.split()[1] for line in f if line.split()[2] in ("cgroup", "cgroup2")})


def podman_cgroups(container_id):
    """The host cgroups podman (cgroupfs manager) made for one container, in every hierarchy:
    podman 4.3 with runc on a cgroup v1 host leaves them behind, empty, after `podman rm`."""
    found = []
    for m in cgroup_mounts():
        for parent in ("libpod_parent", "machine.slice"):
            for name in ("libpod-" + container_id, "libpod-" + container_id + ".scope"):
                d = os.path.join(m, parent, name)
                if os.path.isdir(d):
                    found.append(d)
    return found


def remove_cgroup_tree(d):
    """rmdir depth first (cgroup directories can only be removed empty, never unlinked)."""
    for root, dirs, _files in os.walk(d, topdown=False):
        for sub in dirs:
            try:
                os.rmdir(os.path.join(root, sub))
            except OSError:
                pass
    try:
        os.rmdir(d)
    except OSError:
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, check=True, timeout=120, **kw):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise Failure("%s: exit %d\n%s%s" % (" ".join(cmd), res.returncode, res.stdout[-2000:],
                                             res.stderr[-2000:]))
    return res


# ---- the pod spec, as the kubelet would run it ----------------------------------------------
KNOWN_POD = {"serviceAccountName", "automountServiceAccountToken", "priorityClassName",
             "hostNetwork", "dnsPolicy", "tolerations", "terminationGracePeriodSeconds",
             "containers", "volumes", "nodeSelector", "affinity", "imagePullSecrets"}
KNOWN_CONTAINER = {"name", "image", "imagePullPolicy", "command", "args", "env", "ports",
                   "livenessProbe", "readinessProbe", "resources", "securityContext",
                   "volumeMounts"}
KNOWN_SECURITY = {"runAsUser", "runAsGroup", "privileged", "allowPrivilegeEscalation",
                  "readOnlyRootFilesystem", "capabilities", "seccompProfile"}


def expand(text, env):
    """Kubernetes' $(VAR) expansion in command and args; $$ escapes, unknown names stay."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, text)


def memory_bytes(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|K|M|G)?", str(q))
    if not m:
        raise Failure("memory quantity %r: not understood by this test" % q)
    scale = {None: 1, "K": 1000, "M": 1000**2, "G": 1000**3, "Ki": 1024, "Mi": 1024**2,
             "Gi": 1024**3}[m.group(2)]
    return int(m.group(1)) * scale


def podman_run_args(ds, sa_dir, api_port):
    """The pod spec of DaemonSet `ds` as `podman run` arguments (after `run`), plus the grace
    period and the health/metrics ports. Host paths of hostPath volumes must already exist, or be
    created here for type DirectoryOrCreate, as the kubelet does."""
    pod = ds["spec"]["template"]["spec"]
    unknown = set(pod) - KNOWN_POD
    if unknown:
        raise Failure("pod spec fields this test does not translate: %s" % sorted(unknown))
    if len(pod["containers"]) != 1:
        raise Failure("want one container, the chart renders %d" % len(pod["containers"]))
    c = pod["containers"][0]
    unknown = set(c) - KNOWN_CONTAINER
    if unknown:
        raise Failure("container fields this test does not translate: %s" % sorted(unknown))
    args = ["--pull", "never"] + ULIMITS
    if pod.get("hostNetwork"):
        args += ["--network", "host"]
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            env[e["name"]] = NODE
        else:
            raise Failure("env %s: this test translates only values and spec.nodeName" % e)
    if pod.get("automountServiceAccountToken", True):
        # What the kubelet gives every pod with a token: the projected volume and the service's
        # address (with hostNetwork the API server's address as the pod reaches it).
        env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
        env["KUBERNETES_SERVICE_PORT"] = str(api_port)
        args += ["-v", "%s:%s:ro" % (sa_dir, SA_DIR)]
    for k, v in env.items():
        args += ["-e", "%s=%s" % (k, v)]

    sc = c.get("securityContext", {})
    unknown = set(sc) - KNOWN_SECURITY
    if unknown:
        raise Failure("securityContext fields this test does not translate: %s" % sorted(unknown))
    if "runAsUser" in sc:
        args += ["--user", "%d:%d" % (sc["runAsUser"], sc.get("runAsGroup", 0))]
    if sc.get("privileged"):
        args += ["--privileged"]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if sc.get("readOnlyRootFilesystem"):
        # The kubelet mounts no tmpfs of its own on /tmp, /run, /var/tmp: only the volumes.
        args += ["--read-only", "--read-only-tmpfs=false"]
    for cap in sc.get("capabilities", {}).get("drop", []):
        args += ["--cap-drop", cap]
    for cap in sc.get("capabilities", {}).get("add", []):
        args += ["--cap-add", cap]
    seccomp = sc.get("seccompProfile", {}).get("type", "RuntimeDefault")
    if seccomp != "RuntimeDefault":
        raise Failure("seccompProfile %r: this test runs podman's default profile only" % seccomp)
    limits = c.get("resources", {}).get("limits", {})
    if "memory" in limits:
        args += ["--memory", str(memory_bytes(limits["memory"]))]
    if "cpu" in limits:
        raise Failure("a CPU limit: this test does not translate it")

    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = volumes.get(m["name"])
        if v is None:
            raise Failure("volumeMount %s names no volume" % m)
        ro = ":ro" if m.get("readOnly") else ""
        if "hostPath" in v:
            path, kind = v["hostPath"]["path"], v["hostPath"].get("type", "")
            if kind == "DirectoryOrCreate":
                os.makedirs(path, mode=0o755, exist_ok=True)
            elif kind == "Directory" and not os.path.isdir(path):
                raise Failure("hostPath %s (type Directory) does not exist on the host" % path)
            elif kind not in ("", "Directory", "DirectoryOrCreate"):
                raise Failure("hostPath type %r: not translated" % kind)
            args += ["-v", "%s:%s%s" % (path, m["mountPath"], ro)]
        elif "emptyDir" in v:
            opts = ["rw"] if not ro else ["ro"]
            if "sizeLimit" in v["emptyDir"]:
                opts.append("size=%d" % memory_bytes(v["emptyDir"]["sizeLimit"]))
            if v["emptyDir"].get("medium") != "Memory":
                raise Failure("emptyDir %s on disk: not translated" % v["name"])
            args += ["--tmpfs", "%s:%s" % (m["mountPath"], ",".join(opts))]
        else:
            raise Failure("volume %s: only hostPath and emptyDir are translated" % v)

    command = [expand(a, env) for a in c.get("command", [])]
    cargs = [expand(a, env) for a in c.get("args", [])]
    if command:
        args += ["--entrypoint", command[0]]
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    return args, c["image"], command[1:] + cargs, pod.get("terminationGracePeriodSeconds", 30), \
        ports


# ---- the host side ----------------------------------------------------------------------------
def make_pki(d):
    conf = os.path.join(d, "openssl.cnf")
    with open(conf, "w") as f:
        f.write("[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = x\n"
                "[v3_ca]\nbasicConstraints = critical,CA:TRUE\n"
                "keyUsage = critical,keyCertSign,cRLSign\n")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("basicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n"
                "subjectAltName = IP:127.0.0.1\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    p = lambda n: os.path.join(d, n)  # noqa: E731
    run(["openssl", "req", "-x509", "-config", conf, "-extensions", "v3_ca"] + ec +
        ["-keyout", p("ca.key"), "-out", p("ca.crt"), "-days", "2", "-subj", "/CN=image-test-ca"])
    run(["openssl", "req", "-new", "-config", conf] + ec +
        ["-keyout", p("server.key"), "-out", p("server.csr"), "-subj", "/CN=127.0.0.1"])
    run(["openssl", "x509", "-req", "-in", p("server.csr"), "-CA", p("ca.crt"), "-CAkey",
         p("ca.key"), "-CAcreateserial", "-out", p("server.crt"), "-days", "2", "-extfile",
         p("server.ext")])


class Api:
    def __init__(self, port, token, ca):
        self.base = "https://127.0.0.1:%d" % port
        self.token = token
        self.ctx = ssl.create_default_context(cafile=ca)

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Content-Type": "application/json", "Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:
            return json.loads(resp.read())


def http_get(url, timeout=2):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, urllib.error.URLError) as e:
        return None, str(e)


def wait_for(what, fn, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ok, last = fn()
        if ok:
            return last
        time.sleep(interval)
    raise Failure("%s: not within %g s (last: %s)" % (what, timeout, last))


class Test:
    def __init__(self, args):
        self.args = args
        self.podman = [args.podman]
        self.container = "topodra-image-test-" + uuid.uuid4().hex[:8]
        self.container_id = None
        # Which parents podman's cgroups go under existed before: those it made for this test
        # alone are removed again at the end.
        self.parents_before = {os.path.join(m, p) for m in cgroup_mounts()
                               for p in ("libpod_parent", "libpod_parent/conmon")
                               if os.path.isdir(os.path.join(m, p))}
        self.procs = []
        self.checks = 0
        os.makedirs(args.work_root, exist_ok=True)
        # Not under /tmp: the pod's /tmp is a tmpfs of its own, and the directories the chart
        # mounts at their host paths must not sit below it.
        self.work = os.path.abspath(tempfile.mkdtemp(prefix="image-test.", dir=args.work_root))

    def check(self, cond, what):
        if not cond:
            raise Failure(what)
        self.checks += 1

    def path(self, *p):
        return os.path.join(self.work, *p)

    def start_apiserver(self):
        pki = self.path("pki")
        os.makedirs(pki)
        make_pki(pki)
        token = uuid.uuid4().hex
        port_file = self.path("api-port")
        server = os.path.join(self.args.source, "test", "integration", "fake_apiserver.py")
        crd = os.path.join(self.args.source, "charts", "topodra", "crds",
                           "reservations.topodra.io.yaml")
        self.api_log = self.path("apiserver.log")
        p = subprocess.Popen(
            [sys.executable, server, "--port", "0", "--port-file", port_file, "--tls-cert",
             os.path.join(pki, "server.crt"), "--tls-key", os.path.join(pki, "server.key"),
             "--token", token, "--node", NODE + "=uid-" + NODE, "--crd", crd],
            stdout=subprocess.DEVNULL, stderr=open(self.api_log, "w"))
        self.procs.append(p)

        def port():
            if p.poll() is not None:
                raise Failure("fake API server exited %d: %s" % (p.returncode,
                                                                 open(self.api_log).read()[-2000:]))
            if os.path.exists(port_file):
                return True, int(open(port_file).read().strip())
            return False, None
        api_port = wait_for("fake API server port", port, 20)
        sa = self.path("serviceaccount")
        os.makedirs(sa)
        with open(os.path.join(sa, "token"), "w") as f:
            f.write(token)
        with open(os.path.join(sa, "namespace"), "w") as f:
            f.write("topodra-system\n")
        shutil.copy(os.path.join(pki, "ca.crt"), os.path.join(sa, "ca.crt"))
        self.api = Api(api_port, token, os.path.join(pki, "ca.crt"))
        return api_port, sa

    def render(self, metrics_port, health_port):
        host = {"kubelet": self.path("kubelet"), "cdi": self.path("cdi"),
                "state": self.path("state"), "hook": self.path("hook"),
                "cgroup": self.path("cgroup"), "metadata": self.path("device-metadata")}
        # What the host has before the DaemonSet starts: the kubelet's registry directory (type
        # Directory in the chart) and a cgroup v2 root with the cpuset controller.
        os.makedirs(os.path.join(host["kubelet"], "plugins_registry"))
        os.makedirs(host["cgroup"])
        with open(os.path.join(host["cgroup"], "cgroup.controllers"), "w") as f:
            f.write("cpuset cpu io memory pids\n")
        values = ["kubelet.rootDir=" + host["kubelet"], "kubelet.cdiDir=" + host["cdi"],
                  "kubelet.stateDir=" + host["state"], "cpuPinning.hookDir=" + host["hook"],
                  "kubelet.deviceMetadataDir=" + host["metadata"],
                  "cpuPinning.cgroupRoot=" + host["cgroup"], "metrics.port=%d" % metrics_port,
                  "health.port=%d" % health_port, "image.tag=" + self.args.image.split(":")[1]]
        cmd = [self.args.helm, "template", "topodra", os.path.join(self.args.source, "charts",
                                                                   "topodra"),
               "--namespace", "topodra-system", "--kube-version", "1.35.0",
               "--show-only", "templates/daemonset.yaml"]
        for v in values:
            cmd += ["--set", v]
        ds = yaml.safe_load(run(cmd).stdout)
        self.check(ds["kind"] == "DaemonSet", "helm rendered %s, not a DaemonSet" % ds["kind"])
        return ds, host

    def kubelet_sim(self, *argv, timeout=20):
        res = run([self.args.kubelet_sim, "--root-dir", self.path("kubelet"), "--timeout",
                   "%ds" % timeout] + list(argv), check=False, timeout=timeout + 10)
        if res.returncode != 0:
            raise Failure("kubelet_sim %s: exit %d: %s\n--- daemon log:\n%s" % (
                " ".join(argv), res.returncode, res.stderr.strip(), self.daemon_log()))
        return res.stdout

    def daemon_log(self):
        res = run(self.podman + ["logs", self.container], check=False, timeout=30)
        return (res.stdout + res.stderr)[-6000:]

    def claim(self, name, device, cpus):
        base = "/apis/resource.k8s.io/v1/namespaces/image/resourceclaims"
        created = self.api.call("POST", base, {
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {
                "deviceClassName": CPU_DRIVER}}]}}})
        created["status"] = {
            "allocation": {"devices": {"results": [{
                "request": "cpus", "driver": CPU_DRIVER, "pool": NODE, "device": device,
                "consumedCapacity": {"dra.cpu/cpu": cpus}}], "config": []}},
            "reservedFor": [{"resource": "pods", "name": "pod-" + name,
                             "uid": str(uuid.uuid4())}]}
        self.api.call("PUT", base + "/" + name + "/status", created)
        return "image/%s/%s" % (name, created["metadata"]["uid"])

    def scenario(self):
        api_port, sa = self.start_apiserver()
        metrics_port, health_port = free_port(), free_port()
        ds, host = self.render(metrics_port, health_port)
        run_args, image, argv, grace, ports = podman_run_args(ds, sa, api_port)
        self.check(image == self.args.image, "the chart runs image %r, make image built %r" % (
            image, self.args.image))
        self.check(ports.get("health") == health_port and ports.get("metrics") == metrics_port,
                   "the chart's container ports %s are not the values given" % ports)
        log("podman run " + " ".join(run_args + [image] + argv))

        t0 = time.monotonic()
        self.container_id = run(self.podman + ["run", "-d", "--name", self.container] +
                                run_args + [image] + argv, timeout=60).stdout.strip()
        t_run = time.monotonic()
        self.kubelet_sim("wait", CPU_DRIVER)
        t_reg = time.monotonic()
        log("start -> registered: %.0f ms (podman run returned after %.0f ms)" % (
            (t_reg - t0) * 1000, (t_run - t0) * 1000))
        print("figure: image start -> registered %.0f ms" % ((t_reg - t0) * 1000))

        # Slices: the whole pool of this node, published by the daemon in the container.
        def slices():
            items = self.api.call("GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector="
                                  "spec.nodeName=" + NODE)["items"]
            devs = [d["name"] for s in items for d in s["spec"].get("devices", [])]
            return bool(devs), devs
        devices = wait_for("ResourceSlices of " + NODE, slices, 20)
        log("published devices: %s" % devices)
        self.check("cpudevnuma000" in devices, "no cpudevnuma000 among %s" % devices)

        # Probes: the kubelet's, from the node's network namespace.
        for path in ("/healthz", "/readyz"):
            wait_for("GET %s on the health port" % path, lambda: (lambda r: (r[0] == 200, r))(
                http_get("http://127.0.0.1:%d%s" % (health_port, path))), 20)
        status, text = http_get("http://127.0.0.1:%d/metrics" % metrics_port)
        self.check(status == 200 and "topodra_" in text,
                   "GET /metrics: %s %s" % (status, text[:300]))

        # The hook: installed on the host, the same bytes as the image's.
        hook = os.path.join(host["hook"], "topodra-cpuset-hook")
        wait_for("the hook at " + hook, lambda: (os.access(hook, os.X_OK), hook), 20)
        inside = run(self.podman + ["exec", self.container, "sha256sum",
                                    "/usr/bin/topodra-cpuset-hook"]).stdout.split()[0]
        with open(hook, "rb") as f:
            outside = hashlib.sha256(f.read()).hexdigest()
        self.check(inside == outside, "the host's hook %s differs from the image's" % hook)

        # A claim, prepared through the kubelet's socket: the CDI spec lands on the host.
        ref = self.claim("one-cpu", "cpudevnuma000", "1")
        uid = ref.split("/")[2]
        answer = json.loads(self.kubelet_sim("prepare", CPU_DRIVER, ref))[uid]
        self.check(not answer["error"], "prepare %s: %s" % (ref, answer["error"]))
        ids = [i for d in answer["devices"] for i in d["cdiDeviceIds"]]
        # The claim's device, then its device metadata's (--device-metadata=on, the chart's).
        meta_id = "%s/metadata=%s_cpus" % (CPU_DRIVER, uid)
        self.check(len(ids) == 2 and ids[1] == meta_id,
                   "want the device's CDI id and then %s, got %s" % (meta_id, ids))
        meta_spec = "%s_metadata_%s_cpus.json" % (CPU_DRIVER, uid)
        specs = [f for f in os.listdir(host["cdi"]) if uid in f and f != meta_spec]
        self.check(len(specs) == 1 and os.path.exists(os.path.join(host["cdi"], meta_spec)),
                   "want the CDI spec of claim %s and %s in %s, have %s" % (
                       uid, meta_spec, host["cdi"], os.listdir(host["cdi"])))
        with open(os.path.join(host["cdi"], meta_spec)) as f:
            mount = json.load(f)["devices"][0]["containerEdits"]["mounts"][0]
        # Written by the daemon in its container at the path the host sees (same-path mounts),
        # in the chart's device metadata directory.
        self.check(os.path.isfile(mount["hostPath"]),
                   "the device metadata file %s is not on the host" % mount["hostPath"])
        self.check(mount["hostPath"].startswith(host["metadata"] + "/"),
                   "the device metadata file %s is not under %s" % (mount["hostPath"],
                                                                     host["metadata"]))
        with open(os.path.join(host["cdi"], specs[0])) as f:
            spec = json.load(f)
        names = [spec["kind"] + "=" + d["name"] for d in spec["devices"]]
        self.check(ids[0] in names, "CDI id %s not in the spec's devices %s" % (ids[0], names))
        hooks = [h["path"] for d in spec["devices"]
                 for h in d.get("containerEdits", {}).get("hooks", [])] + [
                 h["path"] for h in spec.get("containerEdits", {}).get("hooks", [])]
        self.check(hook in hooks, "the spec runs hooks %s, not the host's %s" % (hooks, hook))
        log("claim %s prepared: %s, spec %s" % (uid, ids[0], specs[0]))
        answer = json.loads(self.kubelet_sim("unprepare", CPU_DRIVER, ref))[uid]
        self.check(not answer["error"], "unprepare %s: %s" % (ref, answer["error"]))
        left = [f for f in os.listdir(host["cdi"]) if uid in f]
        self.check(not left, "unprepare left CDI specs %s" % left)

        # SIGTERM, as the kubelet stops the pod: exit 0 within the grace period, sockets gone.
        t_stop = time.monotonic()
        run(self.podman + ["stop", "-t", str(grace), self.container], timeout=grace + 30)
        stopped = time.monotonic() - t_stop
        state = json.loads(run(self.podman + ["inspect", self.container]).stdout)[0]["State"]
        self.check(state["ExitCode"] == 0 and stopped < grace,
                   "SIGTERM: exit code %s after %.1f s (grace %d s):\n%s" % (
                       state["ExitCode"], stopped, grace, self.daemon_log()))
        log("SIGTERM -> exited 0 in %.0f ms" % (stopped * 1000))
        leftover = []
        for d in ("plugins_registry", "plugins"):
            for root, _dirs, files in os.walk(os.path.join(host["kubelet"], d)):
                leftover += [os.path.join(root, f) for f in files if f.endswith(".sock")]
        self.check(not leftover, "sockets left after SIGTERM: %s" % leftover)
        with open(self.path("daemon.log"), "w") as f:
            f.write(self.daemon_log())
        errors = [line for line in self.daemon_log().splitlines()
                  if re.search(r"\b(error|critical)\b", line, re.I)]
        self.check(not errors, "the daemon logged errors:\n" + "\n".join(errors))

    def cleanup(self):
        """Returns what could not be removed from the host (empty when all is gone)."""
        run(self.podman + ["rm", "-f", "-t", "0", self.container], check=False, timeout=60)
        left = []
        if self.container_id:
            for d in podman_cgroups(self.container_id):
                remove_cgroup_tree(d)
            left += podman_cgroups(self.container_id)
        for m in cgroup_mounts():
            for p in ("libpod_parent/conmon", "libpod_parent"):
                d = os.path.join(m, p)
                if os.path.isdir(d) and d not in self.parents_before:
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass  # another container's podman uses it now
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if os.environ.get("TOPODRA_KEEP_WORK"):
            log("kept " + self.work)
            return left
        shutil.rmtree(self.work, ignore_errors=True)
        return left


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--podman", required=True, help="build/image/podman (make image's storage)")
    p.add_argument("--image", required=True, help="the image make image builds, e.g. topodra:0.1.0")
    p.add_argument("--helm", required=True)
    p.add_argument("--kubelet-sim", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--work-root", required=True, help="a directory for the test's host paths")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("image-test: must run as root (rootful podman, the chart's uid 0)", file=sys.stderr)
        return 1
    if not os.access(args.podman, os.X_OK):
        print("image-test: %s is missing: run `make image` first" % args.podman, file=sys.stderr)
        return 1
    if run([args.podman, "image", "exists", args.image], check=False).returncode != 0:
        print("image-test: image %s is not built: run `make image` first" % args.image,
              file=sys.stderr)
        return 1
    test = Test(args)

    def on_signal(signum, _frame):
        raise Failure("stopped by signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rc = 0
    try:
        test.scenario()
    except (Failure, subprocess.TimeoutExpired, urllib.error.URLError, OSError) as e:
        print("image-test: FAIL: %s" % e, file=sys.stderr)
        rc = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        left = test.cleanup()
    if left:
        print("image-test: FAIL: left on the host: %s" % left, file=sys.stderr)
        rc = 1
    if rc == 0:
        log("PASS: %d checks, nothing left on the host" % test.checks)
    return rc


if __name__ == "__main__":
    sys.exit(main())
