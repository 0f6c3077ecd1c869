"""What every test of the fake API server shares: the server as a child process on an ephemeral
port (fake_apiserver.py, the script the C++ harness runs too), an HTTP(S) client, a watch
reader, object builders (slices, claims, reservations, pods), a throwaway PKI for TLS, and the
ServerTestCase classes with one server per test class."""

import copy
import ctypes
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # test/integration
SERVER = os.path.join(HERE, "fake_apiserver.py")
PYTHON = "/usr/bin/python3"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
SLICES_BETA = "/apis/resource.k8s.io/v1beta2/resourceslices"
NODE_UID = "7a2c9b4e-0f6d-4e43-9a8e-2f3b8c1d5e60"


def _die_with_parent():
    """In the child: SIGKILL when the test process goes away, so no server outlives it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


class ServerProcess:
    """fake_apiserver.py as a child process on an ephemeral port."""

    def __init__(self, *args):
        self.dir = tempfile.mkdtemp(prefix="fake-apiserver-test-")
        port_file = os.path.join(self.dir, "port")
        self.proc = subprocess.Popen(
            [PYTHON, SERVER, "--port", "0", "--port-file", port_file] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 10
        while not os.path.exists(port_file):
            if self.proc.poll() is not None:
                raise RuntimeError("fake_apiserver exited: %s" % self.proc.stderr.read())
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("fake_apiserver did not listen within 10 s")
            time.sleep(0.02)
        with open(port_file) as f:
            self.port = int(f.read())
        self.stdout_line = self.proc.stdout.readline().strip()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Response:
    def __init__(self, code, headers, data):
        self.code = code
        self.headers = headers
        self.data = data
        try:
            self.json = json.loads(data) if data else None
        except ValueError:
            self.json = None

    def warnings(self):
        return [v for k, v in self.headers if k.lower() == "warning"]


class Client:
    def __init__(self, port, tls_context=None, token=None):
        self.port = port
        self.tls_context = tls_context
        self.token = token

    def connection(self, timeout=10):
        if self.tls_context:
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout,
                                               context=self.tls_context)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None,
                content_type="application/json"):
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if body is not None:
            if not isinstance(body, (bytes, str)):
                body = json.dumps(body)
            h["Content-Type"] = content_type
        h.update(headers or {})
        conn = self.connection()
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            return Response(resp.status, resp.getheaders(), resp.read())
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def put(self, path, body, **kw):
        return self.request("PUT", path, body, **kw)

    def delete(self, path, body=None, **kw):
        return self.request("DELETE", path, body, **kw)

    def watch(self, query):
        return Watch(self, SLICES + "?watch=true&" + query)


class Watch:
    """A watch stream; next() returns one event, or None at the end of the stream."""

    def __init__(self, client, path):
        self.conn = client.connection(timeout=15)
        headers = {"Authorization": "Bearer " + client.token} if client.token else {}
        self.conn.request("GET", path, headers=headers)
        self.resp = self.conn.getresponse()
        self.code = self.resp.status
        self.headers = dict(self.resp.getheaders())

    def next(self):
        line = self.resp.readline()
        return json.loads(line) if line else None

    def next_event(self):
        """The next event that is not a BOOKMARK."""
        while True:
            ev = self.next()
            if ev is None or ev["type"] != "BOOKMARK":
                return ev

    def close(self):
        self.conn.close()


def make_device(name, **fields):
    device = {"name": name, "attributes": {"numaNode": {"int": 0}},
              "capacity": {"cpus": {"value": "8"}}}
    device.update(fields)
    return device


def make_slice(name="slice-a", node="node-a", driver="cpu.topodra.io", pool=None, devices=None):
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices if devices is not None else [make_device("cpu-0")]},
    }


class ServerTestCase(unittest.TestCase):
    ARGS = ("--bookmark-interval", "0.2", "--node", "node-a=" + NODE_UID)

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess(*cls.ARGS)
        cls.client = Client(cls.server.port)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        c = self.client
        self.assertEqual(c.request("POST", "/__control/reset").code, 200)
        self.assertEqual(c.request("POST", "/__control/fail?count=0").code, 200)
        self.assertEqual(c.request("DELETE", "/__control/requests").code, 200)
        self.assertEqual(c.request("DELETE", "/__control/hang").code, 200)

    def create(self, obj, query="", expect=201):
        r = self.client.post(SLICES + ("?" + query if query else ""), obj)
        self.assertEqual(r.code, expect, r.data)
        return r.json

    def assertStatus(self, r, code, reason):
        self.assertEqual(r.code, code, r.data)
        self.assertEqual(r.headers and dict((k.lower(), v) for k, v in r.headers)
                         ["content-type"], "application/json")
        self.assertEqual(r.json["kind"], "Status")
        self.assertEqual(r.json["apiVersion"], "v1")
        self.assertEqual(r.json["status"], "Failure")
        self.assertEqual(r.json["code"], code)
        self.assertEqual(r.json["reason"], reason)
        self.assertIn("message", r.json)
        self.assertIn("details", r.json)

    def assertInvalid(self, r, field, message_part):
        self.assertStatus(r, 422, "Invalid")
        causes = r.json["details"]["causes"]
        matching = [c for c in causes if c["field"] == field and message_part in c["message"]]
        self.assertTrue(matching, "no cause %s containing %r in %s"
                        % (field, message_part, json.dumps(causes, indent=1)))
        self.assertIn(field, r.json["message"])


def _set(obj, path, value):
    target = obj
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value


def _del(obj, path):
    target = obj
    for p in path[:-1]:
        target = target[p]
    del target[path[-1]]


CLAIMS_V = "/apis/resource.k8s.io/%s/namespaces/%s/resourceclaims"
CLAIMS = CLAIMS_V % ("v1", "default")
ALL_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
POD_UID = "5c0a9f3e-8d2b-4c6a-9e1f-3b7d2a4c6e80"


def make_claim(name="claim-a", requests=None, config=None, constraints=None):
    devices = {"requests": requests if requests is not None else
               [{"name": "cpus", "exactly": {"deviceClassName": "cpu.topodra.io",
                                             "allocationMode": "ExactCount", "count": 1}}]}
    if config is not None:
        devices["config"] = config
    if constraints is not None:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name}, "spec": {"devices": devices}}


def make_allocation(request="cpus", device="cpu-0", **result_fields):
    result = {"request": request, "driver": "cpu.topodra.io", "pool": "node-a",
              "device": device}
    result.update(result_fields)
    return {"devices": {"results": [result],
                        "config": [{"source": "FromClaim", "requests": [],
                                    "opaque": {"driver": "cpu.topodra.io",
                                               "parameters": {"kind": "CpuConfig"}}}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}}


def opaque_config(parameters, requests=None):
    entry = {"opaque": {"driver": "cpu.topodra.io", "parameters": parameters}}
    if requests is not None:
        entry["requests"] = requests
    return entry


class ClaimTestCase(ServerTestCase):
    def create_claim(self, obj, path=CLAIMS, query="", expect=201):
        r = self.client.post(path + ("?" + query if query else ""), obj)
        self.assertEqual(r.code, expect, r.data)
        return r.json

    def put_status(self, claim, status, path=CLAIMS):
        body = copy.deepcopy(claim)
        body["status"] = status
        return self.client.put("%s/%s/status" % (path, claim["metadata"]["name"]), body)

    def allocate(self, claim, allocation=None, reserved_for=None):
        status = {"allocation": allocation or make_allocation()}
        if reserved_for is not None:
            status["reservedFor"] = reserved_for
        r = self.put_status(claim, status)
        self.assertEqual(r.code, 200, r.data)
        return r.json


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_pki(directory):
    """A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
             "-subj", "/CN=fake-apiserver-test-ca", cwd=directory)
    with open(os.path.join(directory, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    with open(os.path.join(directory, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for who in ("server", "client"):
        _openssl("req", *ec, "-keyout", who + ".key", "-out", who + ".csr",
                 "-subj", "/CN=" + ("127.0.0.1" if who == "server" else "topodra"),
                 cwd=directory)
        _openssl("x509", "-req", "-in", who + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", who + ".crt", "-days", "1", "-extfile",
                 who + ".ext", cwd=directory)


# --- CustomResourceDefinitions (--crd) and --device-taints ---------------------------------------

CRD_FILE = os.path.join(HERE, "..", "..", "charts", "topodra", "crds",
                        "reservations.topodra.io.yaml")
RESV = "/apis/topodra.io/v1alpha1/reservations"


def make_reservation(name="resv-a", node="n1", **spec):
    s = {"nodeName": node, "owners": [{"namespace": "default", "claimName": "claim-a"}],
         "cpus": {"count": 4}}
    s.update(spec)
    return {"apiVersion": "topodra.io/v1alpha1", "kind": "Reservation",
            "metadata": {"name": name}, "spec": s}


_CRD_CACHE = []


def load_crd_yaml():
    """A fresh copy of the reservation CRD as a dict."""
    if not _CRD_CACHE:
        import yaml
        with open(CRD_FILE) as f:
            _CRD_CACHE.append(yaml.safe_load(f))
    return copy.deepcopy(_CRD_CACHE[0])


class CrdTestCase(ServerTestCase):
    ARGS = ServerTestCase.ARGS + ("--crd", CRD_FILE)

    def create_resv(self, obj, query="", expect=201):
        r = self.client.post(RESV + ("?" + query if query else ""), obj)
        self.assertEqual(r.code, expect, r.data)
        return r.json

    def put(self, obj, path=None):
        return self.client.put(path or RESV + "/" + obj["metadata"]["name"], obj)

    def names(self, query):
        r = self.client.get(RESV + "?" + query)
        self.assertEqual(r.code, 200, r.data)
        return [i["metadata"]["name"] for i in r.json["items"]]


TABLE_ACCEPT = ("application/json;as=Table;v=v1;g=meta.k8s.io,"
                "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")
PODS = "/api/v1/namespaces/default/pods"
EVENTS = "/api/v1/namespaces/default/events"
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates"
AGE_RE = r"^[0-9]+s$"  # a few seconds old


def make_pod(name="pod-a"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "busybox:1.36",
                                     "command": ["sleep", "3600"]}]}}


def import_fake_apiserver():
    import sys
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import fake_apiserver
    return fake_apiserver
