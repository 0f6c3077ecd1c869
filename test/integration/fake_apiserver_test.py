#!/usr/bin/python3
"""Tests of fake_apiserver.py: every rule the fake enforces has a test that fails without it.

Run from this directory: /usr/bin/python3 -m unittest -v fake_apiserver_test
"""

import copy
import ctypes
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
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


class CrudTest(ServerTestCase):
    def test_create_sets_server_fields(self):
        before = int(self.client.get(SLICES).json["metadata"]["resourceVersion"])
        created = self.create(make_slice())
        self.assertEqual(created["kind"], "ResourceSlice")
        self.assertEqual(created["apiVersion"], "resource.k8s.io/v1")
        meta = created["metadata"]
        self.assertEqual(meta["name"], "slice-a")
        self.assertRegex(meta["uid"], r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-"
                                      r"[0-9a-f]{12}$")
        self.assertEqual(int(meta["resourceVersion"]), before + 1)
        self.assertIsInstance(meta["resourceVersion"], str)
        self.assertRegex(meta["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(meta["generation"], 1)
        self.assertEqual(created["spec"], make_slice()["spec"])

    def test_get_list_update_delete(self):
        created = self.create(make_slice())
        got = self.client.get(SLICES + "/slice-a")
        self.assertEqual(got.code, 200)
        self.assertEqual(got.json, created)

        lst = self.client.get(SLICES).json
        self.assertEqual(lst["kind"], "ResourceSliceList")
        self.assertEqual(lst["apiVersion"], "resource.k8s.io/v1")
        self.assertEqual(lst["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"])
        self.assertEqual([i["metadata"]["name"] for i in lst["items"]], ["slice-a"])
        self.assertNotIn("kind", lst["items"][0])  # built-in lists carry no per-item TypeMeta

        changed = copy.deepcopy(created)
        changed["spec"]["devices"].append(make_device("cpu-1"))
        r = self.client.put(SLICES + "/slice-a", changed)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(int(r.json["metadata"]["resourceVersion"]),
                         int(created["metadata"]["resourceVersion"]) + 1)
        self.assertEqual(r.json["metadata"]["generation"], 2)
        self.assertEqual(r.json["metadata"]["uid"], created["metadata"]["uid"])
        self.assertEqual(len(r.json["spec"]["devices"]), 2)

        labels_only = copy.deepcopy(r.json)
        labels_only["metadata"]["labels"] = {"team": "cpu"}
        r2 = self.client.put(SLICES + "/slice-a", labels_only)
        self.assertEqual(r2.code, 200, r2.data)
        self.assertEqual(r2.json["metadata"]["generation"], 2)  # no spec change, no bump

        d = self.client.delete(SLICES + "/slice-a")
        self.assertEqual(d.code, 200)
        self.assertEqual(d.json["kind"], "Status")
        self.assertEqual(d.json["status"], "Success")
        self.assertEqual(d.json["details"]["name"], "slice-a")
        self.assertEqual(d.json["details"]["uid"], created["metadata"]["uid"])
        r404 = self.client.get(SLICES + "/slice-a")
        self.assertStatus(r404, 404, "NotFound")
        self.assertEqual(r404.json["message"],
                         'resourceslices.resource.k8s.io "slice-a" not found')
        self.assertStatus(self.client.delete(SLICES + "/slice-a"), 404, "NotFound")

    def test_noop_update_does_not_bump_resource_version(self):
        created = self.create(make_slice())
        r = self.client.put(SLICES + "/slice-a", created)
        self.assertEqual(r.code, 200)
        self.assertEqual(r.json["metadata"]["resourceVersion"],
                         created["metadata"]["resourceVersion"])

    def test_create_conflicts_and_errors(self):
        self.create(make_slice())
        r = self.client.post(SLICES, make_slice())
        self.assertStatus(r, 409, "AlreadyExists")
        self.assertEqual(r.json["details"]["name"], "slice-a")
        with_rv = make_slice("slice-b")
        with_rv["metadata"]["resourceVersion"] = "5"
        r = self.client.post(SLICES, with_rv)
        self.assertEqual(r.code, 500)
        self.assertEqual(r.json["message"],
                         "resourceVersion should not be set on objects to be created")
        no_name = make_slice()
        del no_name["metadata"]["name"]
        self.assertInvalid(self.client.post(SLICES, no_name), "metadata.name",
                           "name or generateName is required")
        wrong_version = make_slice("slice-c")
        wrong_version["apiVersion"] = "resource.k8s.io/v1beta2"
        self.assertStatus(self.client.post(SLICES, wrong_version), 400, "BadRequest")

    def test_update_resource_version_rules(self):
        created = self.create(make_slice())
        stale = copy.deepcopy(created)
        current = copy.deepcopy(created)
        current["metadata"]["labels"] = {"a": "b"}
        self.assertEqual(self.client.put(SLICES + "/slice-a", current).code, 200)
        stale["metadata"]["labels"] = {"a": "c"}
        r = self.client.put(SLICES + "/slice-a", stale)
        self.assertStatus(r, 409, "Conflict")
        self.assertIn("the object has been modified", r.json["message"])

        missing = copy.deepcopy(created)
        del missing["metadata"]["resourceVersion"]
        self.assertStatus(self.client.put(SLICES + "/slice-a", missing), 409, "Conflict")

        absent = make_slice("slice-z")
        absent["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
        self.assertStatus(self.client.put(SLICES + "/slice-z", absent), 404, "NotFound")

        mismatch = self.client.get(SLICES + "/slice-a").json
        self.assertStatus(self.client.put(SLICES + "/other", mismatch), 400, "BadRequest")

    def test_update_immutable_fields(self):
        created = self.create(make_slice())
        for path, value in ((("spec", "driver"), "other.topodra.io"),
                            (("spec", "pool", "name"), "other-pool"),
                            (("spec", "nodeName"), "node-b")):
            with self.subTest(field=".".join(path)):
                obj = copy.deepcopy(created)
                target = obj
                for p in path[:-1]:
                    target = target[p]
                target[path[-1]] = value
                self.assertInvalid(self.client.put(SLICES + "/slice-a", obj), ".".join(path),
                                   "field is immutable")

    def test_delete_preconditions(self):
        created = self.create(make_slice())
        uid, rv = created["metadata"]["uid"], created["metadata"]["resourceVersion"]
        opts = {"kind": "DeleteOptions", "apiVersion": "v1",
                "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}
        r = self.client.delete(SLICES + "/slice-a", opts)
        self.assertStatus(r, 409, "Conflict")
        self.assertIn("Precondition failed: UID in precondition", r.json["message"])
        opts["preconditions"] = {"uid": uid, "resourceVersion": str(int(rv) - 1)}
        r = self.client.delete(SLICES + "/slice-a", opts)
        self.assertStatus(r, 409, "Conflict")
        self.assertIn("ResourceVersion in precondition", r.json["message"])
        self.assertEqual(self.client.get(SLICES + "/slice-a").code, 200)
        opts["preconditions"] = {"uid": uid, "resourceVersion": rv}
        self.assertEqual(self.client.delete(SLICES + "/slice-a", opts).code, 200)
        self.assertEqual(self.client.get(SLICES + "/slice-a").code, 404)

    def test_generate_name(self):
        obj = make_slice()
        del obj["metadata"]["name"]
        obj["metadata"]["generateName"] = "node-a-cpu.topodra.io-"
        names = set()
        for _ in range(3):
            created = self.create(obj)
            name = created["metadata"]["name"]
            self.assertRegex(name, r"^node-a-cpu\.topodra\.io-[bcdfghjklmnpqrstvwxz2456789]{5}$")
            self.assertEqual(created["metadata"]["generateName"], "node-a-cpu.topodra.io-")
            names.add(name)
        self.assertEqual(len(names), 3)
        self.assertEqual(len(self.client.get(SLICES).json["items"]), 3)

    def test_finalizers_delay_deletion(self):
        obj = make_slice()
        obj["metadata"]["finalizers"] = ["topodra.io/test"]
        self.create(obj)
        r = self.client.delete(SLICES + "/slice-a")
        self.assertEqual(r.code, 200)
        self.assertIn("deletionTimestamp", r.json["metadata"])
        still = self.client.get(SLICES + "/slice-a").json
        still["metadata"]["finalizers"] = []
        self.assertEqual(self.client.put(SLICES + "/slice-a", still).code, 200)
        self.assertEqual(self.client.get(SLICES + "/slice-a").code, 404)

    def test_patch(self):
        created = self.create(make_slice())
        r = self.client.request("PATCH", SLICES + "/slice-a",
                                {"metadata": {"labels": {"x": "y"}}},
                                content_type="application/merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["labels"], {"x": "y"})
        r = self.client.request("PATCH", SLICES + "/slice-a",
                                [{"op": "replace", "path": "/spec/pool/generation", "value": 2}],
                                content_type="application/json-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["spec"]["pool"]["generation"], 2)
        self.assertEqual(r.json["metadata"]["generation"], 2)
        stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
        self.assertStatus(self.client.request("PATCH", SLICES + "/slice-a", stale,
                                              content_type="application/merge-patch+json"),
                          409, "Conflict")
        self.assertInvalid(self.client.request("PATCH", SLICES + "/slice-a",
                                               {"spec": {"nodeName": "node-b"}},
                                               content_type="application/merge-patch+json"),
                           "spec.nodeName", "field is immutable")

    def test_delete_collection(self):
        self.create(make_slice("a", node="node-a"))
        self.create(make_slice("b", node="node-b"))
        r = self.client.delete(SLICES + "?fieldSelector=spec.nodeName%3Dnode-a")
        self.assertEqual(r.code, 200)
        self.assertEqual([i["metadata"]["name"] for i in r.json["items"]], ["a"])
        self.assertEqual([i["metadata"]["name"] for i in self.client.get(SLICES).json["items"]],
                         ["b"])

    def test_pagination(self):
        for i in range(5):
            self.create(make_slice("s%d" % i))
        first = self.client.get(SLICES + "?limit=2").json
        self.assertEqual([i["metadata"]["name"] for i in first["items"]], ["s0", "s1"])
        self.assertEqual(first["metadata"]["remainingItemCount"], 3)
        token = urllib.parse.quote(first["metadata"]["continue"])
        second = self.client.get(SLICES + "?limit=2&continue=" + token).json
        self.assertEqual([i["metadata"]["name"] for i in second["items"]], ["s2", "s3"])
        self.assertEqual(second["metadata"]["resourceVersion"],
                         first["metadata"]["resourceVersion"])
        self.client.request("POST", "/__control/reset")
        token = urllib.parse.quote(second["metadata"]["continue"])
        self.assertStatus(self.client.get(SLICES + "?limit=2&continue=" + token), 410,
                          "Expired")

    def test_nodes(self):
        r = self.client.get("/api/v1/nodes/node-a")
        self.assertEqual(r.code, 200)
        self.assertEqual(r.json["kind"], "Node")
        self.assertEqual(r.json["apiVersion"], "v1")
        self.assertEqual(r.json["metadata"]["uid"], NODE_UID)
        self.assertStatus(self.client.get("/api/v1/nodes/node-b"), 404, "NotFound")
        self.assertStatus(self.client.delete("/api/v1/nodes/node-a"), 405, "MethodNotAllowed")
        self.client.request("POST", "/__control/reset")  # configured nodes survive a reset
        self.assertEqual(self.client.get("/api/v1/nodes/node-a").json["metadata"]["uid"],
                         NODE_UID)


class SelectorTest(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.create(make_slice("a", node="node-a", driver="cpu.topodra.io"))
        self.create(make_slice("b", node="node-b", driver="cpu.topodra.io"))
        self.create(make_slice("c", node="node-a", driver="gpu.example.com", pool="pool-x"))
        labelled = make_slice("d", node="node-c")
        labelled["metadata"]["labels"] = {"tier": "gold", "zone": "z1"}
        self.create(labelled)

    def names(self, query):
        r = self.client.get(SLICES + "?" + query)
        self.assertEqual(r.code, 200, r.data)
        return [i["metadata"]["name"] for i in r.json["items"]]

    def fsel(self, selector):
        return self.names("fieldSelector=" + urllib.parse.quote(selector))

    def test_field_selectors(self):
        self.assertEqual(self.fsel("spec.nodeName=node-a"), ["a", "c"])
        self.assertEqual(self.fsel("spec.nodeName==node-a"), ["a", "c"])
        self.assertEqual(self.fsel("spec.nodeName!=node-a"), ["b", "d"])
        self.assertEqual(self.fsel("spec.driver=cpu.topodra.io"), ["a", "b", "d"])
        self.assertEqual(self.fsel("spec.driver=cpu.topodra.io,spec.nodeName=node-a"), ["a"])
        self.assertEqual(self.fsel("spec.pool.name=pool-x"), ["c"])
        self.assertEqual(self.fsel("metadata.name=b"), ["b"])
        self.assertEqual(self.fsel("spec.nodeName=node-z"), [])

    def test_unsupported_field_selector_is_400(self):
        r = self.client.get(SLICES + "?fieldSelector=spec.allNodes%3Dtrue")
        self.assertStatus(r, 400, "BadRequest")
        self.assertEqual(r.json["message"], "field label not supported: spec.allNodes")
        self.assertStatus(self.client.get(SLICES + "?fieldSelector=spec.nodeName"), 400,
                          "BadRequest")

    def test_label_selectors(self):
        self.assertEqual(self.names("labelSelector=tier%3Dgold"), ["d"])
        self.assertEqual(self.names("labelSelector=tier%21%3Dgold"), ["a", "b", "c"])
        self.assertEqual(self.names("labelSelector=tier%3Dgold,zone%3Dz2"), [])
        self.assertEqual(self.names("labelSelector=zone"), ["d"])
        self.assertEqual(self.names("labelSelector=zone%20in%20(z1,z2)"), ["d"])
        self.assertStatus(self.client.get(SLICES + "?labelSelector=%3D%3Dx"), 400,
                          "BadRequest")


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


class ValidationTest(ServerTestCase):
    def check(self, cases):
        for name, mutate, field, message in cases:
            with self.subTest(name):
                obj = make_slice()
                mutate(obj)
                self.assertInvalid(self.client.post(SLICES, obj), field, message)
        self.assertEqual(self.client.get(SLICES).json["items"], [])

    def test_metadata(self):
        self.check([
            ("name not a DNS subdomain", lambda o: _set(o, ("metadata", "name"), "Bad_Name"),
             "metadata.name", "RFC 1123 subdomain"),
            ("name too long", lambda o: _set(o, ("metadata", "name"), "a" * 254),
             "metadata.name", "must be no more than 253 characters"),
            ("label key", lambda o: _set(o, ("metadata", "labels"), {"-bad": "x"}),
             "metadata.labels", "name part must consist of"),
            ("label value", lambda o: _set(o, ("metadata", "labels"), {"ok": "not ok"}),
             "metadata.labels", "a valid label must be"),
            ("two controllers", lambda o: _set(o, ("metadata", "ownerReferences"), [
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u", "controller": True},
                {"apiVersion": "v1", "kind": "Node", "name": "m", "uid": "v",
                 "controller": True}]),
             "metadata.ownerReferences", "Only one reference can have Controller"),
        ])
        ok = make_slice("a" * 253)
        self.assertEqual(self.client.post(SLICES, ok).code, 201)

    def test_driver_and_pool(self):
        self.check([
            ("driver missing", lambda o: _set(o, ("spec", "driver"), ""), "spec.driver",
             "Required value"),
            ("driver too long", lambda o: _set(o, ("spec", "driver"), "a" * 60 + ".com"),
             "spec.driver", "Too long: may not be more than 63"),
            ("driver not a subdomain", lambda o: _set(o, ("spec", "driver"), "-cpu.io"),
             "spec.driver", "RFC 1123 subdomain"),
            ("driver underscore", lambda o: _set(o, ("spec", "driver"), "cpu_x.io"),
             "spec.driver", "RFC 1123 subdomain"),
            ("pool name empty", lambda o: _set(o, ("spec", "pool", "name"), ""),
             "spec.pool.name", "Required value"),
            ("pool name empty part", lambda o: _set(o, ("spec", "pool", "name"), "a//b"),
             "spec.pool.name", "RFC 1123 subdomain"),
            ("pool name too long", lambda o: _set(o, ("spec", "pool", "name"),
                                                  "/".join(["a" * 63] * 4) + "/aa"),
             "spec.pool.name", "Too long: may not be more than 253"),
            ("pool generation negative", lambda o: _set(o, ("spec", "pool", "generation"), -1),
             "spec.pool.generation", "must be greater than or equal to zero"),
            ("slice count zero", lambda o: _set(o, ("spec", "pool", "resourceSliceCount"), 0),
             "spec.pool.resourceSliceCount", "must be greater than zero"),
            ("slice count missing", lambda o: _del(o, ("spec", "pool", "resourceSliceCount")),
             "spec.pool.resourceSliceCount", "must be greater than zero"),
        ])
        upper = make_slice()
        upper["spec"]["driver"] = "CPU.Topodra.IO"
        r = self.client.post(SLICES, upper)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.warnings(), ['299 - "spec.driver: driver names should be lowercase; '
                                        '\\"CPU.Topodra.IO\\" contains uppercase characters"'])
        nested = make_slice("nested")
        nested["spec"]["pool"]["name"] = "node-a/numa.0"
        self.assertEqual(self.client.post(SLICES, nested).code, 201)

    def test_node_selection(self):
        one_term = {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]}
        self.check([
            ("none", lambda o: _del(o, ("spec", "nodeName")), "spec",
             "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` "
             "is required"),
            ("two", lambda o: _set(o, ("spec", "allNodes"), True), "spec",
             "multiple fields are set"),
            ("empty nodeName", lambda o: _set(o, ("spec", "nodeName"), ""), "spec.nodeName",
             "must be either unset or set to a non-empty string"),
            ("bad nodeName", lambda o: _set(o, ("spec", "nodeName"), "Node_A"),
             "spec.nodeName", "RFC 1123 subdomain"),
            ("allNodes false", lambda o: (_del(o, ("spec", "nodeName")),
                                          _set(o, ("spec", "allNodes"), False)),
             "spec.allNodes", "must be either unset or set to true"),
            ("two selector terms", lambda o: (_del(o, ("spec", "nodeName")),
                                              _set(o, ("spec", "nodeSelector"), {
                                                  "nodeSelectorTerms": one_term[
                                                      "nodeSelectorTerms"] * 2})),
             "spec.nodeSelector.nodeSelectorTerms", "must have exactly one node selector term"),
            ("device node without perDevice",
             lambda o: _set(o, ("spec", "devices", 0, "nodeName"), "node-a"),
             "spec.devices[0]", "can only be set if `perDeviceNodeSelection` is set to true"),
            ("perDevice without device node",
             lambda o: (_del(o, ("spec", "nodeName")),
                        _set(o, ("spec", "perDeviceNodeSelection"), True)),
             "spec.devices[0]", "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is "
                                "required when `perDeviceNodeSelection`"),
        ])
        for mutate in (lambda o: (_del(o, ("spec", "nodeName")),
                                  _set(o, ("spec", "nodeSelector"), one_term)),
                       lambda o: (_del(o, ("spec", "nodeName")),
                                  _set(o, ("spec", "allNodes"), True)),
                       lambda o: (_del(o, ("spec", "nodeName")),
                                  _set(o, ("spec", "perDeviceNodeSelection"), True),
                                  _set(o, ("spec", "devices", 0, "nodeName"), "node-a"))):
            obj = make_slice("ok")
            mutate(obj)
            self.assertEqual(self.client.post(SLICES, obj).code, 201)
            self.assertEqual(self.client.delete(SLICES + "/ok").code, 200)

    def test_device_count_limits(self):
        many = [make_device("d%d" % i) for i in range(129)]
        tainted = [make_device("d%d" % i) for i in range(65)]
        tainted[7]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
        counters = [make_device("d%d" % i) for i in range(65)]
        counters[3]["consumesCounters"] = [{"counterSet": "s", "counters": {"c": {"value": "1"}}}]
        self.check([
            ("129 devices", lambda o: _set(o, ("spec", "devices"), many), "spec.devices",
             "Too many: 129: must have at most 128 items"),
            ("65 devices with a taint", lambda o: _set(o, ("spec", "devices"), tainted),
             "spec.devices", "Too many: 65: must have at most 64 items"),
            ("65 devices with counters", lambda o: _set(o, ("spec", "devices"), counters),
             "spec.devices", "Too many: 65: must have at most 64 items"),
        ])
        self.assertEqual(self.client.post(SLICES, make_slice(devices=many[:128])).code, 201)
        self.assertEqual(self.client.post(SLICES, make_slice("t", devices=tainted[:64])).code,
                         201)

    def test_device_names_and_attributes(self):
        attrs33 = {"a%d" % i: {"int": i} for i in range(32)}
        attrs32 = {"a%d" % i: {"int": i} for i in range(31)}
        self.check([
            ("device name", lambda o: _set(o, ("spec", "devices", 0, "name"), "CPU0"),
             "spec.devices[0].name", "RFC 1123 label"),
            ("device name too long", lambda o: _set(o, ("spec", "devices", 0, "name"), "a" * 64),
             "spec.devices[0].name", "must be no more than 63 characters"),
            ("duplicate device", lambda o: _set(o, ("spec", "devices"),
                                                [make_device("x"), make_device("x")]),
             "spec.devices[1]", 'Duplicate value: "x"'),
            ("33 attributes+capacities", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                        attrs33),
             "spec.devices[0]", "the total number of attributes and capacities must not exceed "
                                "32"),
            ("attribute key", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                             {"9bad": {"int": 1}}),
             "spec.devices[0].attributes", "a valid C identifier"),
            ("attribute key empty", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                   {"": {"int": 1}}),
             "spec.devices[0].attributes", "Required value: name required"),
            ("attribute name empty", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                    {"x.io/": {"int": 1}}),
             "spec.devices[0].attributes", "Required value: the name must not be empty"),
            ("attribute domain", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                {"Bad_Domain/x": {"int": 1}}),
             "spec.devices[0].attributes", "RFC 1123 subdomain"),
            ("attribute key too long", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                      {"a" * 33: {"int": 1}}),
             "spec.devices[0].attributes", "Too long: may not be more than 32"),
            ("two values", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                          {"x": {"int": 1, "string": "s"}}),
             "spec.devices[0].attributes[x]", "exactly one value must be specified"),
            ("no value", lambda o: _set(o, ("spec", "devices", 0, "attributes"), {"x": {}}),
             "spec.devices[0].attributes[x]", "exactly one value must be specified"),
            ("string too long", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                               {"x": {"string": "s" * 65}}),
             "spec.devices[0].attributes[x].string", "Too long: may not be more than 64"),
            ("version not semver", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                  {"x": {"version": "1.02.3"}}),
             "spec.devices[0].attributes[x].version", "semver.org spec 2.0.0"),
            ("version too long", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                {"x": {"version": "1.0.0-" + "a" * 60}}),
             "spec.devices[0].attributes[x].version", "Too long"),
        ])
        good = make_slice(devices=[make_device("d", attributes=dict(
            attrs32, **{"dra.example.com/model": {"string": "s" * 64},
                        "ver": {"version": "1.2.3-rc.1+build.5"}}))])
        del good["spec"]["devices"][0]["attributes"]["a30"]
        good["spec"]["devices"][0]["capacity"] = {"cpus": {"value": "1"}}
        del good["spec"]["devices"][0]["attributes"]["a29"]
        self.assertEqual(self.client.post(SLICES, good).code, 201, "32 entries are allowed")

    def test_request_policy(self):
        def policy(pol, multi=True, value="16"):
            def mutate(o):
                dev = o["spec"]["devices"][0]
                dev["capacity"] = {"mem": {"value": value, "requestPolicy": pol}}
                if multi:
                    dev["allowMultipleAllocations"] = True
            return mutate
        rp = "spec.devices[0].capacity[mem].requestPolicy"
        self.check([
            ("without allowMultipleAllocations", policy({"default": "1"}, multi=False), rp,
             "allowMultipleAllocations must be true"),
            ("validValues without default", policy({"validValues": ["1"]}), rp + ".default",
             "required when validValues is defined"),
            ("more than 10 validValues", policy({"default": "1", "validValues":
                                                 [str(i) for i in range(1, 12)]}),
             rp + ".validValues", "Too many: 11: must have at most 10 items"),
            ("validValues not ascending", policy({"default": "1", "validValues": ["2", "1"]}),
             rp + ".validValues[1]", "values must be sorted in ascending order"),
            ("default not in validValues", policy({"default": "3", "validValues": ["1", "2"]}),
             rp + ".validValues", "default value is not valid according to the requestPolicy"),
            ("option above capacity", policy({"default": "1", "validValues": ["1", "32"]}),
             rp + ".validValues[1]", "option is larger than capacity value: 16"),
            ("both policies", policy({"default": "1", "validValues": ["1"],
                                      "validRange": {"min": "1"}}), rp,
             "exactly one policy can be specified"),
            ("range without default", policy({"validRange": {"min": "1"}}), rp + ".default",
             "required when validRange is defined"),
            ("range without min", policy({"default": "1", "validRange": {"max": "4"}}),
             rp + ".validRange.min", "required when validRange is defined"),
            ("default below min", policy({"default": "1", "validRange": {"min": "2"}}),
             rp + ".validRange.default", "default is less than min: 2"),
            ("max above capacity", policy({"default": "2", "validRange": {"min": "2",
                                                                          "max": "32"}}),
             rp + ".validRange.max", "max is larger than capacity value: 16"),
            ("default off step", policy({"default": "3", "validRange": {"min": "2",
                                                                        "step": "2"}}),
             rp + ".validRange.step", "value is not a multiple of a given step (2) from (2)"),
            ("step zero", policy({"default": "2", "validRange": {"min": "2", "step": "0"}}),
             rp + ".validRange.step", "must be greater than zero"),
            ("one step above capacity", policy({"default": "8", "validRange": {
                "min": "8", "step": "16"}}), rp + ".validRange.step",
             "one step 24 is larger than capacity value: 16"),
        ])
        for pol in ({"default": "4", "validValues": ["2", "4", "8"]},
                    {"default": "4Gi", "validRange": {"min": "2Gi", "max": "16Gi",
                                                      "step": "2Gi"}}):
            obj = make_slice("ok")
            policy(pol, value="16Gi")(obj)
            r = self.client.post(SLICES, obj)
            self.assertEqual(r.code, 201, r.data)
            self.assertEqual(self.client.delete(SLICES + "/ok").code, 200)

    def test_taints_counters_binding(self):
        taints17 = [{"key": "k%d" % i, "effect": "NoSchedule"} for i in range(17)]
        self.check([
            ("17 taints", lambda o: _set(o, ("spec", "devices", 0, "taints"), taints17),
             "spec.devices[0].taints", "Too many: 17: must have at most 16 items"),
            ("taint effect", lambda o: _set(o, ("spec", "devices", 0, "taints"),
                                            [{"key": "k", "effect": "PreferNoSchedule"}]),
             "spec.devices[0].taints[0].effect",
             'Unsupported value: "PreferNoSchedule": supported values: "NoExecute", '
             '"NoSchedule", "None"'),
            ("taint without effect", lambda o: _set(o, ("spec", "devices", 0, "taints"),
                                                    [{"key": "k"}]),
             "spec.devices[0].taints[0].effect", "Required value"),
            ("taint key", lambda o: _set(o, ("spec", "devices", 0, "taints"),
                                         [{"key": "bad key", "effect": "None"}]),
             "spec.devices[0].taints[0].key", "name part must consist of"),
            ("three consumesCounters", lambda o: _set(
                o, ("spec", "devices", 0, "consumesCounters"),
                [{"counterSet": "s%d" % i, "counters": {"c": {"value": "1"}}} for i in range(3)]),
             "spec.devices[0].consumesCounters", "Too many: 3: must have at most 2 items"),
            ("devices and sharedCounters", lambda o: _set(
                o, ("spec", "sharedCounters"), [{"name": "s", "counters": {"c": {"value": "1"}}}]),
             "spec", "only one of `sharedCounters` or `devices` is allowed"),
            ("nine counter sets", lambda o: (_del(o, ("spec", "devices")), _set(
                o, ("spec", "sharedCounters"),
                [{"name": "s%d" % i, "counters": {"c": {"value": "1"}}} for i in range(9)])),
             "spec.sharedCounters", "Too many: 9: must have at most 8 items"),
            ("33 counters", lambda o: (_del(o, ("spec", "devices")), _set(
                o, ("spec", "sharedCounters"),
                [{"name": "s", "counters": {"c%d" % i: {"value": "1"} for i in range(33)}}])),
             "spec.sharedCounters[0].counters", "Too many: 33: must have at most 32 items"),
            ("binding without failure conditions", lambda o: _set(
                o, ("spec", "devices", 0, "bindingConditions"), ["ready"]),
             "spec.devices[0].bindingFailureConditions",
             "bindingFailureConditions are required to use bindingConditions"),
        ])
        obj = make_slice()
        obj["spec"]["devices"][0]["taints"] = [{"key": "topodra.io/maintenance",
                                                "value": "yes", "effect": "NoExecute"}]
        created = self.create(obj)
        taint = created["spec"]["devices"][0]["taints"][0]
        self.assertRegex(taint["timeAdded"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

    def test_list_attributes_are_dropped(self):
        obj = make_slice()
        obj["spec"]["devices"][0]["attributes"] = {"cores": {"ints": [0, 1]},
                                                   "model": {"string": "x", "strings": ["y"]}}
        self.assertInvalid(self.client.post(SLICES, obj), "spec.devices[0].attributes[cores]",
                           "exactly one value must be specified")
        del obj["spec"]["devices"][0]["attributes"]["cores"]
        created = self.create(obj)
        self.assertEqual(created["spec"]["devices"][0]["attributes"], {"model": {"string": "x"}})

    def test_decode_errors_are_400(self):
        cases = [
            ("string for int", lambda o: _set(o, ("spec", "pool", "generation"), "1")),
            ("float for int", lambda o: _set(o, ("spec", "pool", "generation"), 1.5)),
            ("int out of range", lambda o: _set(o, ("spec", "pool", "generation"), 1 << 63)),
            ("number for string", lambda o: _set(o, ("spec", "driver"), 5)),
            ("object for list", lambda o: _set(o, ("spec", "devices"), {})),
            ("bad quantity", lambda o: _set(o, ("spec", "devices", 0, "capacity"),
                                            {"c": {"value": "12 Gi"}})),
            ("bad time", lambda o: _set(o, ("spec", "devices", 0, "taints"),
                                        [{"key": "k", "effect": "None", "timeAdded": "now"}])),
        ]
        for name, mutate in cases:
            with self.subTest(name):
                obj = make_slice()
                mutate(obj)
                r = self.client.post(SLICES, obj)
                self.assertStatus(r, 400, "BadRequest")
                self.assertIn('ResourceSlice in version "v1" cannot be handled as a '
                              'ResourceSlice', r.json["message"])


class QuantityTest(ServerTestCase):
    def test_quantity_grammar_and_canonical_form(self):
        canonical = {"64": "64", "500m": "500m", "16Gi": "16Gi", "1e3": "1e3", "1.5": "1500m",
                     "1024Mi": "1Gi", "1536Mi": "1536Mi", "0.5Ki": "512", "1000": "1k",
                     "1500": "1500", "+7": "7", ".5": "500m", "2.": "2", "1E6": "1e6",
                     "100n": "100n", "0": "0", "0.0000000001": "1n", "10u": "10u", "1k": "1k",
                     "2048": "2048", "1Ki": "1Ki", "3M": "3M", "1e-3": "1e-3", "-5": "-5",
                     "1.5Ki": "1536", "1025Ki": "1025Ki", "-2Gi": "-2Gi", "0.1Ki": "102400m"}
        capacity = {"q%d" % i: {"value": text} for i, text in enumerate(canonical)}
        obj = make_slice(devices=[make_device("d", attributes={}, capacity=capacity)])
        created = self.create(obj)
        got = created["spec"]["devices"][0]["capacity"]
        for i, (text, want) in enumerate(canonical.items()):
            self.assertEqual(got["q%d" % i]["value"], want, text)
        for bad in ("", "Gi", "1.2.3", "1Qi", "1e", "12 Gi", "0x10", "1KI", "e3", "1.5.5Gi",
                    "--1"):
            with self.subTest(bad):
                obj = make_slice("bad", devices=[make_device("d", capacity={
                    "c": {"value": bad}})])
                self.assertStatus(self.client.post(SLICES, obj), 400, "BadRequest")

    def test_json_number_quantity(self):
        obj = make_slice(devices=[make_device("d", capacity={"c": {"value": 2048}})])
        self.assertEqual(self.create(obj)["spec"]["devices"][0]["capacity"]["c"]["value"], "2048")


class FieldValidationTest(ServerTestCase):
    def slice_with_mixins(self, name="slice-a"):
        obj = make_slice(name)
        obj["spec"]["mixins"] = {"device": [{"name": "m", "attributes": {"x": {"int": 1}}}]}
        obj["spec"]["devices"][0]["includes"] = ["m"]
        return obj

    def test_strict_rejects_unknown_fields(self):
        r = self.client.post(SLICES + "?fieldValidation=Strict", self.slice_with_mixins())
        self.assertStatus(r, 400, "BadRequest")
        # In document order, as the real decoder reports them.
        self.assertEqual(r.json["message"], 'strict decoding error: unknown field '
                                            '"spec.devices[0].includes", unknown field '
                                            '"spec.mixins"')
        self.assertEqual([c["field"] for c in r.json["details"]["causes"]],
                         [".spec.devices[0].includes", ".spec.mixins"])
        self.assertEqual(self.client.get(SLICES).json["items"], [])

    def test_warn_drops_unknown_fields_with_warning(self):
        for query in ("", "?fieldValidation=Warn"):
            with self.subTest(query or "default"):
                r = self.client.post(SLICES + query, self.slice_with_mixins())
                self.assertEqual(r.code, 201, r.data)
                self.assertEqual(r.warnings(), ['299 - "unknown field '
                                                '\\"spec.devices[0].includes\\""',
                                                '299 - "unknown field \\"spec.mixins\\""'])
                self.assertNotIn("mixins", r.json["spec"])
                self.assertNotIn("includes", r.json["spec"]["devices"][0])
                stored = self.client.get(SLICES + "/slice-a").json
                self.assertNotIn("mixins", stored["spec"])
                self.assertEqual(self.client.delete(SLICES + "/slice-a").code, 200)

    def test_ignore_drops_silently(self):
        r = self.client.post(SLICES + "?fieldValidation=Ignore", self.slice_with_mixins())
        self.assertEqual(r.code, 201)
        self.assertEqual(r.warnings(), [])
        self.assertNotIn("mixins", r.json["spec"])

    def test_unknown_metadata_and_duplicate_fields(self):
        body = json.dumps(make_slice())[:-1] + ', "status": {}}'
        r = self.client.post(SLICES + "?fieldValidation=Strict", body)
        self.assertStatus(r, 400, "BadRequest")
        self.assertIn('unknown field "status"', r.json["message"])
        obj = make_slice()
        obj["metadata"]["clusterName"] = "x"
        r = self.client.post(SLICES + "?fieldValidation=Strict", obj)
        self.assertIn('unknown field "metadata.clusterName"', r.json["message"])
        dup = json.dumps(make_slice()).replace('"name": "slice-a"',
                                               '"name": "x", "name": "slice-a"')
        r = self.client.post(SLICES + "?fieldValidation=Strict", dup)
        self.assertStatus(r, 400, "BadRequest")
        self.assertIn('duplicate field "metadata.name"', r.json["message"])
        self.assertStatus(self.client.post(SLICES + "?fieldValidation=Loose", make_slice()), 400,
                          "BadRequest")


class MixinsAcceptTest(ServerTestCase):
    ARGS = ("--mixins", "accept", "--list-attributes", "accept")

    def with_mixins(self, device_mixins, includes, name="slice-a"):
        obj = make_slice(name)
        obj["spec"]["mixins"] = {"device": device_mixins}
        obj["spec"]["devices"][0]["includes"] = includes
        return obj

    def test_mixins_are_stored(self):
        obj = self.with_mixins([{"name": "common", "attributes": {"vendor": {"string": "x"}}}],
                               ["common"])
        r = self.client.post(SLICES + "?fieldValidation=Strict", obj)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.json["spec"]["mixins"]["device"][0]["name"], "common")
        self.assertEqual(r.json["spec"]["devices"][0]["includes"], ["common"])

    def test_mixin_rules(self):
        mixins = [{"name": "m%d" % i, "attributes": {"k%d" % i: {"int": i}}} for i in range(9)]
        wide = [{"name": "w", "attributes": {"w%d" % i: {"int": i} for i in range(31)}}]
        cases = [
            ("include of a missing mixin", self.with_mixins(mixins[:1], ["nope"]),
             "spec.devices[0].includes[0]", 'Not found: "nope"'),
            ("nine includes", self.with_mixins(mixins, ["m%d" % i for i in range(9)]),
             "spec.devices[0].includes", "Too many: 9: must have at most 8 items"),
            ("flattened device above 32", self.with_mixins(wide, ["w"]), "spec.devices[0]",
             "including its mixins must not exceed 32"),
            ("mixin name", self.with_mixins([{"name": "Bad"}], []), "spec.mixins.device[0].name",
             "RFC 1123 label"),
            ("duplicate mixin", self.with_mixins([{"name": "a"}, {"name": "a"}], []),
             "spec.mixins.device[1].name", 'Duplicate value: "a"'),
            ("129 mixins", self.with_mixins([{"name": "m%d" % i} for i in range(129)], []),
             "spec.mixins.device", "Too many: 129: must have at most 128 items"),
        ]
        big = make_slice("big", devices=[make_device("d%d" % i, attributes={
            "a%d" % j: {"int": j} for j in range(31)}) for i in range(128)])
        big["spec"]["mixins"] = {"device": [{"name": "m%d" % i, "attributes": {
            "a%d" % j: {"int": j} for j in range(32)}} for i in range(10)]}
        cases.append(("more than 4096 per slice", big, "spec",
                      "in devices and mixins must not exceed 4096"))
        for name, obj, field, message in cases:
            with self.subTest(name):
                self.assertInvalid(self.client.post(SLICES, obj), field, message)
        ok = self.with_mixins(wide, ["w"])
        del ok["spec"]["devices"][0]["capacity"]
        self.assertEqual(self.client.post(SLICES, ok).code, 201, "exactly 32 flattened")

    def test_list_attributes_accepted(self):
        obj = make_slice()
        obj["spec"]["devices"][0]["attributes"] = {"cores": {"ints": [0, 1]}}
        self.assertEqual(self.create(obj)["spec"]["devices"][0]["attributes"],
                         {"cores": {"ints": [0, 1]}})
        listy = make_slice("many", devices=[make_device("d%d" % i) for i in range(65)])
        listy["spec"]["devices"][0]["attributes"] = {"cores": {"ints": [0]}}
        self.assertInvalid(self.client.post(SLICES, listy), "spec.devices",
                           "must have at most 64 items")
        values = make_slice("values")
        values["spec"]["devices"][0]["attributes"] = {"cores": {"ints": list(range(49))}}
        self.assertInvalid(self.client.post(SLICES, values), "spec.devices[0]",
                           "the total number of attribute values must not exceed 48")


class DryRunTest(ServerTestCase):
    def test_dry_run_stores_nothing_and_sends_no_events(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=" + rv0)
        r = self.client.post(SLICES + "?dryRun=All", make_slice("dry"))
        self.assertEqual(r.code, 201)
        self.assertEqual(r.json["metadata"]["name"], "dry")
        self.assertNotIn("resourceVersion", r.json["metadata"])
        self.assertEqual(self.client.get(SLICES + "/dry").code, 404)

        real = self.create(make_slice("real"))
        changed = copy.deepcopy(real)
        changed["metadata"]["labels"] = {"dry": "run"}
        self.assertEqual(self.client.put(SLICES + "/real?dryRun=All", changed).code, 200)
        self.assertNotIn("labels", self.client.get(SLICES + "/real").json["metadata"])
        self.assertEqual(self.client.delete(SLICES + "/real?dryRun=All").code, 200)
        self.assertEqual(self.client.delete(SLICES + "/real",
                                            {"dryRun": ["All"]}).code, 200)
        self.assertEqual(self.client.get(SLICES + "/real").code, 200)
        self.assertStatus(self.client.post(SLICES + "?dryRun=Some", make_slice("x")), 400,
                          "BadRequest")
        self.assertEqual(self.client.delete(SLICES + "/real").code, 200)

        first = watch.next_event()
        self.assertEqual((first["type"], first["object"]["metadata"]["name"]), ("ADDED", "real"))
        second = watch.next_event()
        self.assertEqual((second["type"], second["object"]["metadata"]["name"]),
                         ("DELETED", "real"))
        self.assertEqual(int(second["object"]["metadata"]["resourceVersion"]),
                         int(real["metadata"]["resourceVersion"]) + 1)
        watch.close()
        dry = [e for e in self.client.get("/__control/requests").json if "dryRun" in e["query"]]
        self.assertEqual([(e["method"], e["code"]) for e in dry],
                         [("POST", 201), ("PUT", 200), ("DELETE", 200), ("POST", 400)])


class WatchTest(ServerTestCase):
    def test_events_in_order(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=" + rv0)
        self.assertEqual(watch.code, 200)
        self.assertEqual(watch.headers.get("Transfer-Encoding"), "chunked")
        created = self.create(make_slice())
        updated = copy.deepcopy(created)
        updated["spec"]["pool"]["generation"] = 2
        updated = self.client.put(SLICES + "/slice-a", updated).json
        self.assertEqual(self.client.delete(SLICES + "/slice-a").code, 200)

        events = [watch.next_event() for _ in range(3)]
        self.assertEqual([e["type"] for e in events], ["ADDED", "MODIFIED", "DELETED"])
        self.assertEqual(events[0]["object"], created)
        self.assertEqual(events[1]["object"], updated)
        deleted = events[2]["object"]
        self.assertEqual(deleted["spec"], updated["spec"])
        self.assertEqual(int(deleted["metadata"]["resourceVersion"]),
                         int(updated["metadata"]["resourceVersion"]) + 1)
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        self.assertEqual(rvs, sorted(rvs))
        watch.close()

    def test_watch_without_resource_version_starts_with_added(self):
        self.create(make_slice("a"))
        self.create(make_slice("b"))
        watch = self.client.watch("")
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"])
                          for e in (watch.next_event(), watch.next_event())],
                         [("ADDED", "a"), ("ADDED", "b")])
        self.create(make_slice("c"))
        ev = watch.next_event()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "c"))
        watch.close()

    def test_bookmarks(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=%s&allowWatchBookmarks=true" % rv0)
        ev = watch.next()
        self.assertEqual(ev["type"], "BOOKMARK")
        self.assertEqual(ev["object"], {"kind": "ResourceSlice",
                                        "apiVersion": "resource.k8s.io/v1",
                                        "metadata": {"resourceVersion": rv0}})
        created = self.create(make_slice("other", node="node-b"))
        watch.close()
        watch = self.client.watch("resourceVersion=%s&allowWatchBookmarks=true&fieldSelector="
                                  "spec.nodeName%%3Dnode-a" % rv0)
        ev = watch.next()
        self.assertEqual(ev["type"], "BOOKMARK")  # the filtered-out event still advances the RV
        self.assertEqual(ev["object"]["metadata"]["resourceVersion"],
                         created["metadata"]["resourceVersion"])
        watch.close()
        no_bookmarks = self.client.watch("resourceVersion=%s&timeoutSeconds=1" % rv0)
        self.assertEqual(no_bookmarks.next()["type"], "ADDED")
        self.assertIsNone(no_bookmarks.next())  # timeoutSeconds ends the stream, no bookmarks
        no_bookmarks.close()

    def test_selector_filtering(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=%s&fieldSelector=%s" % (
            rv0, urllib.parse.quote("spec.driver=cpu.topodra.io,spec.nodeName=node-a")))
        self.create(make_slice("b", node="node-b"))
        self.create(make_slice("g", driver="gpu.example.com"))
        mine = self.create(make_slice("a"))
        moved = copy.deepcopy(mine)
        moved["metadata"]["labels"] = {"x": "y"}
        self.client.put(SLICES + "/a", moved)
        self.client.delete(SLICES + "/b")
        self.client.delete(SLICES + "/a")
        got = [(e["type"], e["object"]["metadata"]["name"])
               for e in (watch.next_event(), watch.next_event(), watch.next_event())]
        self.assertEqual(got, [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")])
        watch.close()
        bad = self.client.watch("fieldSelector=spec.foo%3Dbar")
        self.assertEqual(bad.code, 400)
        bad.close()

    def test_label_change_moves_object_out_of_selector(self):
        obj = make_slice()
        obj["metadata"]["labels"] = {"tier": "gold"}
        created = self.create(obj)
        watch = self.client.watch("resourceVersion=%s&labelSelector=tier%%3Dgold"
                                  % created["metadata"]["resourceVersion"])
        created["metadata"]["labels"] = {"tier": "silver"}
        self.assertEqual(self.client.put(SLICES + "/slice-a", created).code, 200)
        ev = watch.next_event()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["labels"]),
                         ("DELETED", {"tier": "silver"}))
        watch.close()

    def test_410_after_reset(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=" + rv0)
        self.create(make_slice())
        self.assertEqual(watch.next_event()["type"], "ADDED")
        self.assertEqual(self.client.request("POST", "/__control/reset").code, 200)
        ev = watch.next_event()
        self.assertEqual(ev["type"], "ERROR")
        self.assertEqual(ev["object"]["kind"], "Status")
        self.assertEqual(ev["object"]["code"], 410)
        self.assertEqual(ev["object"]["reason"], "Expired")
        self.assertIsNone(watch.next())
        watch.close()
        again = self.client.watch("resourceVersion=" + rv0)
        self.assertEqual(again.code, 200)
        ev = again.next()
        self.assertEqual((ev["type"], ev["object"]["code"]), ("ERROR", 410))
        again.close()
        self.assertEqual(self.client.get(SLICES).json["items"], [])

    def test_close_watches(self):
        watch = self.client.watch("allowWatchBookmarks=true")
        self.assertEqual(watch.next()["type"], "BOOKMARK")
        state = self.client.get("/__control/state").json
        self.assertEqual(state["openWatches"], 1)
        r = self.client.request("POST", "/__control/close-watches")
        self.assertEqual(r.json, {"closed": 1})
        for _ in range(5):  # bookmarks come every 0.2 s; the stream must end well before
            ev = watch.next()
            if ev is None:
                break
            self.assertEqual(ev["type"], "BOOKMARK")
        else:
            self.fail("the watch stream did not end after /__control/close-watches")
        watch.close()

    def test_future_resource_version(self):
        rv = int(self.client.get(SLICES).json["metadata"]["resourceVersion"])
        r = self.client.get(SLICES + "?watch=1&resourceVersion=%d" % (rv + 100))
        self.assertStatus(r, 504, "Timeout")
        self.assertStatus(self.client.get(SLICES + "?watch=1&resourceVersion=abc"), 400,
                          "BadRequest")

    def test_many_concurrent_watches(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watches = [self.client.watch("resourceVersion=" + rv0) for _ in range(40)]
        self.create(make_slice())
        for w in watches:
            self.assertEqual(w.next_event()["type"], "ADDED")
            w.close()


class HistoryWindowTest(ServerTestCase):
    ARGS = ("--watch-history", "5")

    def test_resource_version_older_than_window(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        for i in range(5):
            self.create(make_slice("s%d" % i))
        watch = self.client.watch("resourceVersion=" + rv0)  # exactly at the window: fine
        self.assertEqual(watch.next_event()["object"]["metadata"]["name"], "s0")
        watch.close()
        self.create(make_slice("s5"))
        watch = self.client.watch("resourceVersion=" + rv0)
        ev = watch.next()
        self.assertEqual(ev["type"], "ERROR")
        self.assertEqual(ev["object"]["code"], 410)
        self.assertEqual(ev["object"]["reason"], "Expired")
        self.assertIn("too old resource version: %s" % rv0, ev["object"]["message"])
        watch.close()


class WipeAndRestartTest(ServerTestCase):
    """What a node's publisher meets when its slices go (issue 14): the kubelet's node-wide wipe
    (a DELETE of the collection by spec.nodeName), writes to objects deleted meanwhile, and an API
    server that comes back empty."""

    NODE_A = "?fieldSelector=" + urllib.parse.quote("spec.nodeName=node-a")

    def test_update_of_a_deleted_object_is_404(self):
        created = self.create(make_slice())
        self.assertEqual(self.client.delete(SLICES + "/slice-a").code, 200)
        # ResourceSlices cannot be created by a PUT (AllowCreateOnUpdate is false), with or
        # without the old resourceVersion.
        r = self.client.put(SLICES + "/slice-a", created)
        self.assertStatus(r, 404, "NotFound")
        self.assertEqual(r.json["message"], 'resourceslices.resource.k8s.io "slice-a" not found')
        self.assertEqual(r.json["details"], {"name": "slice-a", "group": "resource.k8s.io",
                                             "kind": "resourceslices"})
        del created["metadata"]["resourceVersion"]
        self.assertStatus(self.client.put(SLICES + "/slice-a", created), 404, "NotFound")
        self.assertEqual(self.client.get(SLICES).json["items"], [])

    def test_kubelet_wipe_deletes_every_slice_of_the_node(self):
        mine = [self.create(make_slice("node-a-%s-%d" % (driver, i), driver=driver))
                for driver in ("cpu.topodra.io", "gpu.topodra.io") for i in range(3)]
        other = self.create(make_slice("node-b-cpu", node="node-b"))
        rv0 = other["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=%s&fieldSelector=%s" % (
            rv0, urllib.parse.quote("spec.driver=cpu.topodra.io,spec.nodeName=node-a")))
        r = self.client.delete(SLICES + self.NODE_A, {"kind": "DeleteOptions",
                                                      "apiVersion": "v1"})
        self.assertEqual(r.code, 200, r.data)
        # The answer is the list as it was before the deletions, in name order.
        self.assertEqual(r.json["kind"], "ResourceSliceList")
        self.assertEqual(r.json["metadata"]["resourceVersion"], rv0)
        untyped = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in mine]
        self.assertEqual(r.json["items"], sorted(untyped, key=lambda o: o["metadata"]["name"]))
        self.assertEqual([i["metadata"]["name"] for i in self.client.get(SLICES).json["items"]],
                         ["node-b-cpu"])
        # One DELETED event per object, each with a resourceVersion of its own after the old one.
        events = [watch.next_event() for _ in range(3)]
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in events],
                         [("DELETED", "node-a-cpu.topodra.io-%d" % i) for i in range(3)])
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        self.assertEqual(rvs, sorted(set(rvs)))
        self.assertGreater(rvs[0], int(rv0))
        for e, before in zip(events, mine):
            self.assertEqual(e["object"]["metadata"]["uid"], before["metadata"]["uid"])
            self.assertEqual(e["object"]["spec"], before["spec"])
        self.assertEqual(self.client.get(SLICES).json["metadata"]["resourceVersion"],
                         str(rvs[-1] + 3))  # the three GPU slices came after
        watch.close()
        # Gone for good: updates are 404, creates start afresh.
        self.assertStatus(self.client.put(SLICES + "/" + mine[0]["metadata"]["name"], mine[0]),
                          404, "NotFound")
        again = self.create(make_slice(mine[0]["metadata"]["name"]))
        self.assertNotEqual(again["metadata"]["uid"], mine[0]["metadata"]["uid"])
        # Nothing left to delete: an empty list, no error.
        self.client.delete(SLICES + "/" + again["metadata"]["name"])
        r = self.client.delete(SLICES + self.NODE_A)
        self.assertEqual((r.code, r.json["items"]), (200, []))

    def test_wipe_with_finalizers_and_dry_run(self):
        held = make_slice("held")
        held["metadata"]["finalizers"] = ["topodra.io/test"]
        held = self.create(held)
        self.create(make_slice("plain"))
        r = self.client.delete(SLICES + self.NODE_A + "&dryRun=All")
        self.assertEqual([i["metadata"]["name"] for i in r.json["items"]], ["held", "plain"])
        self.assertEqual(len(self.client.get(SLICES).json["items"]), 2)
        watch = self.client.watch("resourceVersion=" + held["metadata"]["resourceVersion"])
        self.assertEqual(watch.next_event()["object"]["metadata"]["name"], "plain")  # its ADDED
        r = self.client.delete(SLICES + self.NODE_A)
        self.assertEqual([i["metadata"]["name"] for i in r.json["items"]], ["held", "plain"])
        # As a single DELETE: the object with a finalizer stays, marked for deletion.
        ev = watch.next_event()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("MODIFIED", "held"))
        self.assertIn("deletionTimestamp", ev["object"]["metadata"])
        ev = watch.next_event()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("DELETED", "plain"))
        watch.close()
        left = self.client.get(SLICES).json["items"]
        self.assertEqual([i["metadata"]["name"] for i in left], ["held"])
        self.assertIn("deletionTimestamp", left[0]["metadata"])

    def test_restarted_server_is_empty_and_expires_old_watches(self):
        """A restarted server with an empty store is what an etcd restored with
        `etcdutl snapshot restore --bump-revision --mark-compacted` looks like (etcd-io/etcd#16028,
        the procedure for Kubernetes): resourceVersions never go back, and watches from before
        get 410 Expired. Open watches end with the process, as with a real API server restart."""
        self.create(make_slice())
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=" + rv0)
        restarted = ServerProcess(*self.ARGS)  # a new process: nothing of the old one is kept
        try:
            self.server.stop()
            self.assertIsNone(watch.next())  # the old process took its watches with it
            watch.close()
            c = Client(restarted.port)
            lst = c.get(SLICES).json
            self.assertEqual(lst["items"], [])
            self.assertGreater(int(lst["metadata"]["resourceVersion"]), int(rv0))
            again = c.watch("resourceVersion=" + rv0)
            ev = again.next()
            self.assertEqual((ev["type"], ev["object"]["code"], ev["object"]["reason"]),
                             ("ERROR", 410, "Expired"))
            again.close()
            self.assertStatus(c.put(SLICES + "/slice-a", make_slice()), 404, "NotFound")
        finally:
            type(self).server = restarted
            type(self).client = Client(restarted.port)

    def test_restored_without_bumped_revision_resource_versions_go_back(self):
        """Without --bump-revision a restore starts resourceVersions over; a watch from a
        resourceVersion the server has not reached is 504 ResourceVersionTooLarge (what the real
        server answers once it has waited for it in vain)."""
        low = ServerProcess("--initial-resource-version", "1")
        try:
            c = Client(low.port)
            rv = int(c.get(SLICES).json["metadata"]["resourceVersion"])
            self.assertEqual(rv, 1)
            r = c.get(SLICES + "?watch=true&resourceVersion=%d" % (rv + 1000))
            self.assertStatus(r, 504, "Timeout")
            self.assertEqual(r.json["details"]["causes"][0]["reason"], "ResourceVersionTooLarge")
        finally:
            low.stop()


class FailureInjectionTest(ServerTestCase):
    def test_fail_next_requests(self):
        r = self.client.request("POST", "/__control/fail?count=2&code=503")
        self.assertEqual(r.code, 200)
        for _ in range(2):
            r = self.client.get(SLICES)
            self.assertStatus(r, 503, "ServiceUnavailable")
            self.assertEqual(dict(r.headers).get("Retry-After"), "1")
        self.assertEqual(self.client.get(SLICES).code, 200)
        self.client.request("POST", "/__control/fail?count=1&code=500&method=POST")
        self.assertEqual(self.client.get(SLICES).code, 200)
        self.assertStatus(self.client.post(SLICES, make_slice()), 500, "InternalError")
        self.assertEqual(self.client.post(SLICES, make_slice()).code, 201)
        log = self.client.get("/__control/requests").json
        self.assertEqual([(e["method"], e["code"]) for e in log],
                         [("GET", 503), ("GET", 503), ("GET", 200), ("GET", 200), ("POST", 500),
                          ("POST", 201)])
        self.assertEqual(log[0]["path"], SLICES)


class VersionsTest(ServerTestCase):
    def test_v1beta2_renders_its_api_version(self):
        created = self.create(make_slice())
        r = self.client.get(SLICES_BETA + "/slice-a")
        self.assertEqual(r.code, 200)
        self.assertEqual(r.json["apiVersion"], "resource.k8s.io/v1beta2")
        self.assertEqual(r.json["spec"], created["spec"])
        beta = make_slice("beta")
        beta["apiVersion"] = "resource.k8s.io/v1beta2"
        r = self.client.post(SLICES_BETA, beta)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.json["apiVersion"], "resource.k8s.io/v1beta2")
        self.assertEqual(self.client.get(SLICES + "/beta").json["apiVersion"],
                         "resource.k8s.io/v1")
        lst = self.client.get(SLICES_BETA).json
        self.assertEqual(lst["apiVersion"], "resource.k8s.io/v1beta2")
        self.assertEqual(len(lst["items"]), 2)

    def test_discovery(self):
        group = self.client.get("/apis/resource.k8s.io").json
        self.assertEqual(group["kind"], "APIGroup")
        self.assertEqual([v["version"] for v in group["versions"]], ["v1", "v1beta2"])
        self.assertEqual(group["preferredVersion"]["version"], "v1")
        resources = self.client.get("/apis/resource.k8s.io/v1").json
        self.assertEqual(resources["kind"], "APIResourceList")
        self.assertIn("resourceslices", [r["name"] for r in resources["resources"]])
        self.assertStatus(self.client.get("/apis/resource.k8s.io/v1beta1/resourceslices"), 404,
                          "NotFound")


class OnlyV1Test(ServerTestCase):
    ARGS = ("--versions", "v1")

    def test_unserved_version_is_404(self):
        self.assertStatus(self.client.get(SLICES_BETA), 404, "NotFound")
        self.assertStatus(self.client.get("/apis/resource.k8s.io/v1beta2"), 404, "NotFound")
        group = self.client.get("/apis/resource.k8s.io").json
        self.assertEqual([v["version"] for v in group["versions"]], ["v1"])
        self.assertEqual(self.client.get(SLICES).code, 200)


class UnconditionalUpdateTest(ServerTestCase):
    ARGS = ("--unconditional-update", "allow")

    def test_put_without_resource_version(self):
        created = self.create(make_slice())
        del created["metadata"]["resourceVersion"]
        created["metadata"]["labels"] = {"a": "b"}
        r = self.client.put(SLICES + "/slice-a", created)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["labels"], {"a": "b"})
        created["metadata"]["resourceVersion"] = "1"  # a stale one still conflicts
        self.assertStatus(self.client.put(SLICES + "/slice-a", created), 409, "Conflict")


class RobustnessTest(ServerTestCase):
    def test_bad_input(self):
        self.assertStatus(self.client.post(SLICES, "{not json"), 400, "BadRequest")
        self.assertStatus(self.client.post(SLICES, "[1, 2]"), 400, "BadRequest")
        self.assertStatus(self.client.post(SLICES, b"\xff\xfe"), 400, "BadRequest")
        self.assertStatus(self.client.post(SLICES, '{"a": NaN}'), 400, "BadRequest")
        self.assertStatus(self.client.post(SLICES, "[" * 100000), 400, "BadRequest")
        self.assertStatus(self.client.get("/apis/resource.k8s.io/v1/nothings"), 404, "NotFound")
        self.assertStatus(self.client.get("/nowhere"), 404, "NotFound")
        self.assertStatus(self.client.put(SLICES, make_slice()), 405, "MethodNotAllowed")
        self.assertStatus(self.client.post(SLICES, make_slice(), content_type="text/plain"),
                          415, "UnsupportedMediaType")
        self.assertEqual(self.client.get("/healthz").data, b"ok")

    def test_body_too_large(self):
        big = make_slice()
        big["metadata"]["annotations"] = {"x": "y" * (3 * 1024 * 1024)}
        r = self.client.post(SLICES, big)
        self.assertStatus(r, 413, "RequestEntityTooLarge")
        self.assertEqual(self.client.get(SLICES).code, 200)

    def test_concurrent_writers(self):
        errors = []

        def writer(i):
            try:
                for j in range(10):
                    r = self.client.post(SLICES, make_slice("s-%d-%d" % (i, j)))
                    if r.code != 201:
                        errors.append(r.data)
            except Exception as e:  # surfaces in the assertion below
                errors.append(repr(e))
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        items = self.client.get(SLICES).json["items"]
        self.assertEqual(len(items), 80)
        self.assertEqual(len({i["metadata"]["resourceVersion"] for i in items}), 80)

    def test_keep_alive_connection(self):
        conn = self.client.connection()
        for _ in range(3):
            conn.request("GET", SLICES)
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            resp.read()
        conn.request("POST", SLICES, body="{bad", headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        self.assertEqual(resp.status, 400)
        resp.read()
        conn.request("GET", SLICES)
        self.assertEqual(conn.getresponse().status, 200)
        conn.close()


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


class HangTest(ClaimTestCase):
    """/__control/hang: an API server that does not answer some requests (issue 15 item 11)."""

    def hang(self, query):
        r = self.client.request("POST", "/__control/hang?" + query)
        self.assertEqual(r.code, 200, r.data)

    def rules(self):
        return self.client.get("/__control/hang").json

    def wait_until(self, predicate, what):
        deadline = time.monotonic() + 10
        while not predicate():
            if time.monotonic() > deadline:
                self.fail("not within 10 s: %s; rules %s" % (what, self.rules()))
            time.sleep(0.02)

    def test_holds_matching_requests_until_released_and_serves_the_others(self):
        self.create_claim(make_claim("stuck-a"))
        self.create_claim(make_claim("good-a"))
        self.hang("path=/resourceclaims/stuck-&method=GET")
        answers = []
        held = threading.Thread(target=lambda: answers.append(self.client.get(CLAIMS + "/stuck-a")))
        held.start()
        self.wait_until(lambda: self.rules()[0]["waiting"] == 1, "the GET is held")
        # Other requests, and other verbs on the held path, are served meanwhile.
        self.assertEqual(self.client.get(CLAIMS + "/good-a").code, 200)
        self.assertEqual(self.client.put(CLAIMS + "/stuck-a", self.client.get(
            CLAIMS + "/good-a").json).code, 400)  # name mismatch: answered, not held
        self.assertEqual(answers, [])
        self.assertEqual(self.rules(), [{"method": "GET", "path": "/resourceclaims/stuck-",
                                         "seconds": 3600.0, "count": -1, "matched": 1,
                                         "waiting": 1}])
        r = self.client.request("DELETE", "/__control/hang")
        self.assertEqual(r.json, {"released": 1})
        held.join(10)
        self.assertFalse(held.is_alive())
        self.assertEqual(answers[0].code, 200)
        self.assertEqual(answers[0].json["metadata"]["name"], "stuck-a")
        self.assertEqual(self.rules(), [])
        # Served and logged like any request once released.
        log = [(e["method"], e["path"], e["code"]) for e in
               self.client.get("/__control/requests").json]
        self.assertIn(("GET", CLAIMS + "/stuck-a", 200), log)

    def test_a_client_that_gives_up_frees_the_held_request(self):
        self.create_claim(make_claim("stuck-a"))
        self.hang("path=/resourceclaims/stuck-a")
        conn = self.client.connection(timeout=0.3)
        conn.request("GET", CLAIMS + "/stuck-a", headers={"Accept": "application/json"})
        with self.assertRaises(OSError):  # socket.timeout
            conn.getresponse()
        self.assertEqual(self.rules()[0]["waiting"], 1)
        conn.close()
        self.wait_until(lambda: self.rules()[0]["waiting"] == 0, "the held request is dropped")
        self.assertEqual(self.rules()[0]["matched"], 1)

    def test_seconds_and_count_bound_the_hold(self):
        self.create_claim(make_claim("slow-a"))
        self.hang("path=/resourceclaims/slow-a&seconds=0.2&count=2")
        for _ in range(3):
            r = self.client.get(CLAIMS + "/slow-a")
            self.assertEqual(r.code, 200)
        self.assertEqual(self.rules()[0]["matched"], 2)
        self.assertEqual(self.rules()[0]["count"], 0)

    def test_bad_usage(self):
        for query in ("", "path=", "path=x&seconds=-1", "path=x&seconds=3601", "path=x&count=-2",
                      "path=x&seconds=soon"):
            r = self.client.request("POST", "/__control/hang?" + query)
            self.assertStatus(r, 400, "BadRequest")
            self.assertIn("usage: POST /__control/hang?path=SUBSTRING", r.json["message"])
        self.assertEqual(self.rules(), [])


class ClaimCrudTest(ClaimTestCase):
    def test_create_sets_server_fields_defaults_and_drops_status(self):
        obj = make_claim()
        obj["spec"]["devices"]["requests"].append(
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com",
                                         "tolerations": [{"key": "k", "value": "v"}]}})
        obj["status"] = {"allocation": make_allocation()}
        created = self.create_claim(obj)
        self.assertEqual(created["kind"], "ResourceClaim")
        self.assertEqual(created["apiVersion"], "resource.k8s.io/v1")
        meta = created["metadata"]
        self.assertEqual((meta["name"], meta["namespace"], meta["generation"]),
                         ("claim-a", "default", 1))
        self.assertRegex(meta["uid"], r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-")
        self.assertRegex(meta["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertIsInstance(meta["resourceVersion"], str)
        self.assertEqual(created["status"], {})
        gpus = created["spec"]["devices"]["requests"][1]["exactly"]
        self.assertEqual((gpus["allocationMode"], gpus["count"]), ("ExactCount", 1))
        self.assertEqual(gpus["tolerations"][0]["operator"], "Equal")
        self.assertEqual(self.client.get(CLAIMS + "/claim-a").json, created)
        # A claim without requests is valid; its spec renders as the real server does.
        empty = self.create_claim({"metadata": {"name": "empty"}})
        self.assertEqual(empty["spec"], {"devices": {}})
        self.assertStatus(self.client.post(CLAIMS, make_claim()), 409, "AlreadyExists")

    def test_spec_is_immutable_and_update_keeps_status(self):
        created = self.allocate(self.create_claim(make_claim()))
        changed = copy.deepcopy(created)
        changed["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
        r = self.client.put(CLAIMS + "/claim-a", changed)
        self.assertInvalid(r, "spec", "field is immutable")
        # Labels may change; a status in the body of a main-resource update is ignored.
        labelled = copy.deepcopy(created)
        labelled["metadata"]["labels"] = {"app": "x"}
        labelled["status"] = {}
        r = self.client.put(CLAIMS + "/claim-a", labelled)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["labels"], {"app": "x"})
        self.assertEqual(r.json["metadata"]["generation"], 1)
        self.assertEqual(r.json["status"], created["status"])
        patch = self.client.request("PATCH", CLAIMS + "/claim-a",
                                    {"spec": {"devices": {"requests": []}}},
                                    content_type="application/merge-patch+json")
        self.assertInvalid(patch, "spec", "field is immutable")

    def test_status_allocation_then_change_rejected(self):
        claim = self.create_claim(make_claim())
        # Spec and label changes in a /status body are ignored.
        body = copy.deepcopy(claim)
        body["spec"]["devices"]["requests"] = []
        body["metadata"]["labels"] = {"ignored": "yes"}
        body["status"] = {"allocation": make_allocation(),
                          "reservedFor": [{"resource": "pods", "name": "pod-a",
                                           "uid": POD_UID}]}
        r = self.client.put(CLAIMS + "/claim-a/status", body)
        self.assertEqual(r.code, 200, r.data)
        allocated = r.json
        self.assertEqual(allocated["spec"], claim["spec"])
        self.assertNotIn("labels", allocated["metadata"])
        self.assertEqual(allocated["metadata"]["generation"], 1)
        self.assertEqual(allocated["status"]["allocation"], make_allocation())
        self.assertGreater(int(allocated["metadata"]["resourceVersion"]),
                           int(claim["metadata"]["resourceVersion"]))
        self.assertEqual(self.client.get(CLAIMS + "/claim-a/status").json, allocated)

        other = make_allocation(device="cpu-1")
        r = self.put_status(allocated, {"allocation": other,
                                        "reservedFor": allocated["status"]["reservedFor"]})
        self.assertInvalid(r, "status.allocation", "field is immutable")
        # Deallocation needs reservedFor to be empty.
        r = self.put_status(allocated, {"reservedFor": allocated["status"]["reservedFor"]})
        self.assertInvalid(r, "status.reservedFor", "may not be specified when `allocated` is "
                                                    "not set")
        r = self.put_status(allocated, {})
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["status"], {})
        # Once cleared, a new allocation may be set.
        self.allocate(r.json, other)

    def test_status_patch_and_device_status(self):
        claim = self.allocate(self.create_claim(make_claim()))
        device_status = {"driver": "cpu.topodra.io", "pool": "node-a", "device": "cpu-0",
                         "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
                                         "message": "",
                                         "lastTransitionTime": "2025-01-02T03:04:05Z"}],
                         "data": {"cpus": "0-3"},
                         "networkData": {"interfaceName": "eth1", "ips": ["10.0.0.2/24"]}}
        r = self.client.request("PATCH", CLAIMS + "/claim-a/status",
                                {"status": {"devices": [device_status]},
                                 "spec": {"devices": {"requests": []}}},
                                content_type="application/merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["status"]["devices"], [device_status])
        self.assertEqual(r.json["spec"], claim["spec"])
        self.assertEqual(r.json["status"]["allocation"], claim["status"]["allocation"])
        # An entry that matches no allocation result.
        stray = dict(device_status, device="cpu-9")
        r = self.put_status(r.json, dict(r.json["status"], devices=[stray]))
        self.assertInvalid(r, "status.devices[0]", "must be an allocated device in the claim")

    def test_stale_resource_version_on_status_is_409(self):
        claim = self.create_claim(make_claim())
        self.allocate(claim)
        r = self.put_status(claim, {"allocation": make_allocation()})  # claim's old RV
        self.assertStatus(r, 409, "Conflict")
        self.assertIn("the object has been modified", r.json["message"])
        stale = self.client.request("PATCH", CLAIMS + "/claim-a/status",
                                    {"metadata": {"resourceVersion":
                                                  claim["metadata"]["resourceVersion"]},
                                     "status": {"reservedFor": []}},
                                    content_type="application/merge-patch+json")
        self.assertStatus(stale, 409, "Conflict")
        self.assertStatus(self.put_status(dict(claim, metadata=dict(
            claim["metadata"], name="nothing")), {}), 404, "NotFound")

    def test_delete_and_delete_collection(self):
        self.create_claim(make_claim("a"))
        self.create_claim(make_claim("b"))
        self.create_claim(make_claim("c"), path=CLAIMS_V % ("v1", "other"))
        r = self.client.delete(CLAIMS + "/a")
        self.assertEqual(r.code, 200, r.data)
        self.assertStatus(self.client.get(CLAIMS + "/a"), 404, "NotFound")
        r = self.client.delete(CLAIMS)
        self.assertEqual([i["metadata"]["name"] for i in r.json["items"]], ["b"])
        self.assertStatus(self.client.delete(ALL_CLAIMS), 405, "MethodNotAllowed")
        self.assertEqual([i["metadata"]["name"] for i in self.client.get(ALL_CLAIMS)
                          .json["items"]], ["c"])

    def test_v1beta2_serves_the_same_claims(self):
        created = self.create_claim(make_claim())
        r = self.client.get(CLAIMS_V % ("v1beta2", "default") + "/claim-a")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["apiVersion"], "resource.k8s.io/v1beta2")
        self.assertEqual(r.json["spec"], created["spec"])


class ClaimPathsTest(ClaimTestCase):
    def test_namespaced_paths_and_404s(self):
        self.create_claim(make_claim("a"))
        self.create_claim(make_claim("a"), path=CLAIMS_V % ("v1", "team-b"))
        self.create_claim(make_claim("b"), path=CLAIMS_V % ("v1", "team-b"))
        team_b = self.client.get(CLAIMS_V % ("v1", "team-b")).json
        self.assertEqual(team_b["kind"], "ResourceClaimList")
        self.assertEqual([i["metadata"]["name"] for i in team_b["items"]], ["a", "b"])
        everywhere = self.client.get(ALL_CLAIMS).json["items"]
        self.assertEqual([(i["metadata"]["namespace"], i["metadata"]["name"])
                          for i in everywhere], [("default", "a"), ("team-b", "a"),
                                                 ("team-b", "b")])
        r = self.client.get(ALL_CLAIMS + "?fieldSelector=metadata.namespace%3Dteam-b,"
                                         "metadata.name%3Db")
        self.assertEqual([i["metadata"]["name"] for i in r.json["items"]], ["b"])
        self.assertStatus(self.client.get(ALL_CLAIMS + "?fieldSelector=spec.driver%3Dx"), 400,
                          "BadRequest")

        missing = self.client.get(CLAIMS_V % ("v1", "team-c") + "/a")
        self.assertStatus(missing, 404, "NotFound")
        self.assertEqual(missing.json["message"],
                         'resourceclaims.resource.k8s.io "a" not found')
        self.assertStatus(self.client.get(CLAIMS + "/b"), 404, "NotFound")
        self.assertStatus(self.client.get(CLAIMS + "/b/status"), 404, "NotFound")
        self.assertStatus(self.client.get(ALL_CLAIMS + "/a"), 404, "NotFound")
        self.assertStatus(self.client.get(CLAIMS + "/a/binding"), 404, "NotFound")
        self.assertStatus(self.client.get(CLAIMS_V % ("v1", "Not_A_Label")), 404, "NotFound")
        self.assertStatus(self.client.post(CLAIMS_V % ("v1", "UPPER"), make_claim()), 404,
                          "NotFound")
        self.assertStatus(self.client.get("/apis/resource.k8s.io/v1/namespaces/default/"
                                          "resourceslices"), 404, "NotFound")
        self.assertStatus(self.client.get(SLICES + "/x/status"), 404, "NotFound")
        self.assertStatus(self.client.post(ALL_CLAIMS, make_claim()), 405, "MethodNotAllowed")
        self.assertStatus(self.client.delete(CLAIMS + "/a/status"), 405, "MethodNotAllowed")
        wrong_ns = make_claim("c")
        wrong_ns["metadata"]["namespace"] = "team-b"
        self.assertStatus(self.client.post(CLAIMS, wrong_ns), 400, "BadRequest")

    def test_discovery_lists_claims_status_and_classes(self):
        resources = {r["name"]: r for r in
                     self.client.get("/apis/resource.k8s.io/v1").json["resources"]}
        self.assertTrue(resources["resourceclaims"]["namespaced"])
        self.assertEqual(resources["resourceclaims"]["kind"], "ResourceClaim")
        self.assertEqual(resources["resourceclaims/status"]["verbs"], ["get", "patch", "update"])
        self.assertFalse(resources["deviceclasses"]["namespaced"])
        self.assertNotIn("patch", resources["deviceclasses"]["verbs"])

    def test_watch_of_claims(self):
        rv0 = self.client.get(ALL_CLAIMS).json["metadata"]["resourceVersion"]
        ns_watch = Watch(self.client, CLAIMS + "?watch=true&resourceVersion=" + rv0)
        all_watch = Watch(self.client, ALL_CLAIMS + "?watch=1&resourceVersion=" + rv0)
        self.assertEqual(ns_watch.code, 200)
        self.create_claim(make_claim("elsewhere"), path=CLAIMS_V % ("v1", "other"))
        created = self.create_claim(make_claim())
        allocated = self.allocate(created)
        self.assertEqual(self.client.delete(CLAIMS + "/claim-a").code, 200)
        events = [ns_watch.next_event() for _ in range(3)]
        self.assertEqual([e["type"] for e in events], ["ADDED", "MODIFIED", "DELETED"])
        self.assertEqual(events[0]["object"], created)
        self.assertEqual(events[1]["object"], allocated)
        self.assertEqual(events[1]["object"]["kind"], "ResourceClaim")
        names = [(e["type"], e["object"]["metadata"]["namespace"])
                 for e in (all_watch.next_event() for _ in range(4))]
        self.assertEqual(names, [("ADDED", "other"), ("ADDED", "default"),
                                 ("MODIFIED", "default"), ("DELETED", "default")])
        ns_watch.close()
        all_watch.close()
        # Slices and claims share one resourceVersion sequence.
        slice_rv = int(self.create(make_slice())["metadata"]["resourceVersion"])
        self.assertGreater(slice_rv, int(allocated["metadata"]["resourceVersion"]))


class ClaimValidationTest(ClaimTestCase):
    def test_opaque_parameters_must_be_small_objects(self):
        for parameters in (["a"], "text", 3):
            with self.subTest(parameters=parameters):
                r = self.client.post(CLAIMS, make_claim(config=[opaque_config(parameters)]))
                self.assertInvalid(r, "spec.devices.config[0].opaque.parameters",
                                   "must be valid JSON object")
        big = {"apiVersion": "cpu.topodra.io/v1", "kind": "CpuConfig", "blob": "x" * 10240}
        r = self.client.post(CLAIMS, make_claim(config=[opaque_config(big)]))
        self.assertInvalid(r, "spec.devices.config[0].opaque.parameters",
                           "may not be more than 10240 bytes")
        missing = make_claim(config=[{"opaque": {"driver": "cpu.topodra.io"}}])
        self.assertInvalid(self.client.post(CLAIMS, missing),
                           "spec.devices.config[0].opaque.parameters", "Required value")
        self.assertInvalid(self.client.post(CLAIMS, make_claim(config=[{"requests": []}])),
                           "spec.devices.config[0]", "Required value")
        bad_driver = make_claim(config=[{"opaque": {"driver": "Not A Driver",
                                                    "parameters": {}}}])
        self.assertInvalid(self.client.post(CLAIMS, bad_driver),
                           "spec.devices.config[0].opaque.driver", "RFC 1123 subdomain")
        # Just under the limit is fine; config requests must name a request of the claim.
        fits = {"blob": "x" * (10240 - len('{"blob":""}'))}
        self.create_claim(make_claim(config=[opaque_config(fits, ["cpus"])]))
        r = self.client.post(CLAIMS, make_claim("b", config=[opaque_config({}, ["gpus"])]))
        self.assertInvalid(r, "spec.devices.config[0].requests[0]",
                           "must be the name of a request in the claim")

    def test_request_rules(self):
        def exact(name, **fields):
            body = {"deviceClassName": "cpu.topodra.io"}
            body.update(fields)
            return {"name": name, "exactly": body}
        cases = [
            ([exact("r-%d" % i) for i in range(33)], "spec.devices.requests",
             "must have at most 32 items"),
            ([exact("a"), exact("a")], "spec.devices.requests[1].name", "Duplicate value"),
            ([exact("Bad_Name")], "spec.devices.requests[0].name", "RFC 1123 label"),
            ([{"name": "a"}], "spec.devices.requests[0]", "exactly one of `exactly` or "
                                                          "`firstAvailable` is required"),
            ([{"name": "a", "exactly": {"deviceClassName": "c"},
               "firstAvailable": [{"name": "s", "deviceClassName": "c"}]}],
             "spec.devices.requests[0]", "multiple fields are set"),
            ([exact("a", deviceClassName="")], "spec.devices.requests[0].exactly."
                                               "deviceClassName", "Required value"),
            ([exact("a", allocationMode="Some")], "spec.devices.requests[0].exactly."
                                                  "allocationMode", "Unsupported value"),
            ([exact("a", count=-1)], "spec.devices.requests[0].exactly.count",
             "must be greater than zero"),
            ([exact("a", allocationMode="All", count=2)],
             "spec.devices.requests[0].exactly.count", "must not be specified"),
            ([exact("a", selectors=[{"cel": {"expression": ""}}])],
             "spec.devices.requests[0].exactly.selectors[0].cel.expression", "Required value"),
            ([{"name": "a", "firstAvailable": [{"name": "s%d" % i, "deviceClassName": "c"}
                                               for i in range(9)]}],
             "spec.devices.requests[0].firstAvailable", "must have at most 8 items"),
            ([{"name": "a", "firstAvailable": [{"name": "s", "deviceClassName": "c"},
                                               {"name": "s", "deviceClassName": "c"}]}],
             "spec.devices.requests[0].firstAvailable[1].name", "Duplicate value"),
        ]
        for requests, field, message in cases:
            with self.subTest(field=field, message=message):
                r = self.client.post(CLAIMS, make_claim(requests=requests))
                self.assertInvalid(r, field, message)
        too_many = make_claim(constraints=[{"matchAttribute": "cpu.topodra.io/numa"}] * 33)
        self.assertInvalid(self.client.post(CLAIMS, too_many), "spec.devices.constraints",
                           "must have at most 32 items")
        no_domain = make_claim(constraints=[{"requests": ["cpus"], "matchAttribute": "numa"}])
        self.assertInvalid(self.client.post(CLAIMS, no_domain),
                           "spec.devices.constraints[0].matchAttribute", "must include a domain")
        configs = make_claim(config=[opaque_config({})] * 33)
        self.assertInvalid(self.client.post(CLAIMS, configs), "spec.devices.config",
                           "must have at most 32 items")

    def test_strict_unknown_field_rejected(self):
        obj = make_claim(requests=[{"name": "a", "firstAvailable": [
            {"name": "s", "deviceClassName": "c", "adminAccess": True}]}])
        obj["spec"]["devices"]["extra"] = 1
        r = self.client.post(CLAIMS + "?fieldValidation=Strict", obj)
        self.assertStatus(r, 400, "BadRequest")
        self.assertEqual(r.json["message"], 'strict decoding error: unknown field '
                                            '"spec.devices.requests[0].firstAvailable[0].'
                                            'adminAccess", unknown field "spec.devices.extra"')
        self.assertEqual(self.client.get(CLAIMS).json["items"], [])
        r = self.client.post(CLAIMS, obj)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(len(r.warnings()), 2)
        self.assertNotIn("adminAccess", r.json["spec"]["devices"]["requests"][0]
                         ["firstAvailable"][0])
        # Also on /status.
        body = dict(r.json, status={"allocation": make_allocation("a/s"), "bogus": True})
        r = self.client.put(CLAIMS + "/claim-a/status?fieldValidation=Strict", body)
        self.assertStatus(r, 400, "BadRequest")
        self.assertIn('unknown field "status.bogus"', r.json["message"])

    def test_result_requests(self):
        requests = [{"name": "cpus", "exactly": {"deviceClassName": "cpu.topodra.io"}},
                    {"name": "any", "firstAvailable": [
                        {"name": "big", "deviceClassName": "big.example.com"},
                        {"name": "small", "deviceClassName": "small.example.com"}]}]
        claim = self.create_claim(make_claim(requests=requests))
        for request in ("gpus", "cpus/big", "any/medium", "any/big/x"):
            with self.subTest(request=request):
                r = self.put_status(claim, {"allocation": make_allocation(request)})
                self.assertInvalid(r, "status.allocation.devices.results[0].request",
                                   "must be the name of a request in the claim")
        allocation = make_allocation("any/small")
        allocation["devices"]["config"][0]["requests"] = ["any/small"]
        self.assertEqual(self.allocate(claim, allocation)["status"]["allocation"]["devices"]
                         ["results"][0]["request"], "any/small")

    def test_status_rules(self):
        claim = self.create_claim(make_claim())
        results = make_allocation()["devices"]["results"] * 33
        cases = [
            ({"allocation": {"devices": {"results": results}}},
             "status.allocation.devices.results", "must have at most 32 items"),
            ({"allocation": make_allocation(driver="Bad Driver")},
             "status.allocation.devices.results[0].driver", "RFC 1123 subdomain"),
            ({"allocation": make_allocation(device="cpu_0")},
             "status.allocation.devices.results[0].device", "RFC 1123 label"),
            ({"allocation": make_allocation(shareID="not-a-uuid")},
             "status.allocation.devices.results[0].shareID", "must be a valid UUID"),
            ({"allocation": {"devices": {"config": [{"source": "FromNowhere",
                                                     **opaque_config({})}]}}},
             "status.allocation.devices.config[0].source", "Unsupported value"),
            ({"allocation": {"devices": {"config": [dict(source="FromClass",
                                                         **opaque_config({}))] * 65}}},
             "status.allocation.devices.config", "must have at most 64 items"),
            ({"allocation": make_allocation(),
              "reservedFor": [{"resource": "pods", "name": "p", "uid": POD_UID}] * 2},
             "status.reservedFor[1]", "Duplicate value"),
            ({"allocation": make_allocation(),
              "reservedFor": [{"resource": "pods", "name": "p%d" % i, "uid": "u%d" % i}
                              for i in range(257)]},
             "status.reservedFor", "must have at most 256 items"),
            ({"allocation": make_allocation(),
              "devices": [{"driver": "cpu.topodra.io", "pool": "node-a", "device": "cpu-0",
                           "data": ["x"]}]},
             "status.devices[0].data", "must be valid JSON object"),
            ({"allocation": make_allocation(),
              "devices": [{"driver": "cpu.topodra.io", "pool": "node-a", "device": "cpu-0",
                           "conditions": [{"type": "C%d" % i, "status": "True", "reason": "R",
                                           "lastTransitionTime": "2025-01-01T00:00:00Z"}
                                          for i in range(9)]}]},
             "status.devices[0].conditions", "must have at most 8 items"),
            ({"allocation": make_allocation(),
              "devices": [{"driver": "cpu.topodra.io", "pool": "node-a", "device": "cpu-0",
                           "shareID": "6f1c1a3e-2b4d-4e5f-8a9b-0c1d2e3f4a5b"}]},
             "status.devices[0]", "must be an allocated device in the claim"),
        ]
        for status, field, message in cases:
            with self.subTest(field=field, message=message):
                self.assertInvalid(self.put_status(claim, status), field, message)
        # consumedCapacity values are canonical quantities.
        allocated = self.allocate(claim, make_allocation(consumedCapacity={"cpus": "2000m"}))
        self.assertEqual(allocated["status"]["allocation"]["devices"]["results"][0]
                         ["consumedCapacity"], {"cpus": "2"})


class DeviceClassTest(ServerTestCase):
    def test_create_get_list_update_delete(self):
        cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": "cpu.topodra.io"},
               "spec": {"selectors": [{"cel": {"expression":
                                               'device.driver == "cpu.topodra.io"'}}],
                        "config": [opaque_config({"kind": "CpuConfig"})],
                        "extendedResourceName": "topodra.io/cpu"}}
        r = self.client.post(CLASSES, cls)
        self.assertEqual(r.code, 201, r.data)
        created = r.json
        self.assertEqual(created["kind"], "DeviceClass")
        self.assertNotIn("namespace", created["metadata"])
        self.assertEqual(created["spec"], cls["spec"])
        self.assertEqual(self.client.get(CLASSES + "/cpu.topodra.io").json, created)
        self.assertEqual(len(self.client.get(CLASSES).json["items"]), 1)
        self.assertStatus(self.client.get("/apis/resource.k8s.io/v1/namespaces/default/"
                                          "deviceclasses"), 404, "NotFound")
        updated = copy.deepcopy(created)
        updated["spec"]["selectors"] = []
        r = self.client.put(CLASSES + "/cpu.topodra.io", updated)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["generation"], 2)
        self.assertStatus(self.client.request("PATCH", CLASSES + "/cpu.topodra.io", {},
                                              content_type="application/merge-patch+json"),
                          405, "MethodNotAllowed")
        self.assertStatus(self.client.get(CLASSES + "/cpu.topodra.io/status"), 404, "NotFound")
        self.assertEqual(self.client.delete(CLASSES + "/cpu.topodra.io").code, 200)
        self.assertStatus(self.client.get(CLASSES + "/cpu.topodra.io"), 404, "NotFound")

    def test_validation(self):
        def cls(**spec):
            return {"metadata": {"name": "c"}, "spec": spec}
        cases = [
            (cls(config=[opaque_config("x")]), "spec.config[0].opaque.parameters",
             "must be valid JSON object"),
            (cls(config=[opaque_config({"b": "x" * 10240})]),
             "spec.config[0].opaque.parameters", "Too long"),
            (cls(config=[{}]), "spec.config[0]", "Required value"),
            (cls(selectors=[{}] * 33), "spec.selectors", "must have at most 32 items"),
            (cls(selectors=[{}]), "spec.selectors[0].cel", "Required value"),
            (cls(extendedResourceName="cpu"), "spec.extendedResourceName",
             "must be a valid extended resource name"),
        ]
        for obj, field, message in cases:
            with self.subTest(field=field):
                self.assertInvalid(self.client.post(CLASSES, obj), field, message)
        r = self.client.post(CLASSES + "?fieldValidation=Strict",
                             cls(selectors=[{"cel": {"expression": "true", "cost": 1}}]))
        self.assertStatus(r, 400, "BadRequest")
        self.assertIn('unknown field "spec.selectors[0].cel.cost"', r.json["message"])


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


class CrdCrudTest(CrdTestCase):
    def test_discovery(self):
        groups = self.client.get("/apis").json["groups"]
        topodra = [g for g in groups if g["name"] == "topodra.io"]
        self.assertEqual(len(topodra), 1, groups)
        self.assertEqual(topodra[0]["preferredVersion"], {"groupVersion": "topodra.io/v1alpha1",
                                                          "version": "v1alpha1"})
        self.assertIn("resource.k8s.io", [g["name"] for g in groups])
        group = self.client.get("/apis/topodra.io").json
        self.assertEqual(group["kind"], "APIGroup")
        self.assertEqual([v["version"] for v in group["versions"]], ["v1alpha1"])
        resources = self.client.get("/apis/topodra.io/v1alpha1").json
        self.assertEqual(resources["groupVersion"], "topodra.io/v1alpha1")
        by_name = {r["name"]: r for r in resources["resources"]}
        self.assertEqual(by_name["reservations"], {
            "name": "reservations", "singularName": "reservation", "namespaced": False,
            "kind": "Reservation", "shortNames": ["resv"],
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update",
                      "watch"]})
        self.assertEqual(by_name["reservations/status"]["verbs"], ["get", "patch", "update"])
        self.assertStatus(self.client.get("/apis/topodra.io/v1"), 404, "NotFound")
        self.assertStatus(self.client.get("/apis/topodra.io/v1/reservations"), 404, "NotFound")
        self.assertStatus(self.client.get("/apis/topodra.io/v1alpha1/namespaces/default/"
                                          "reservations"), 404, "NotFound")

    def test_create_applies_defaults_and_drops_status(self):
        obj = make_reservation()
        obj["status"] = {"phase": "Available"}
        created = self.create_resv(obj)
        self.assertEqual(created["kind"], "Reservation")
        self.assertEqual(created["apiVersion"], "topodra.io/v1alpha1")
        meta = created["metadata"]
        self.assertEqual(meta["generation"], 1)
        self.assertRegex(meta["uid"], r"^[0-9a-f-]{36}$")
        self.assertRegex(meta["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertNotIn("namespace", meta)
        self.assertIs(created["spec"]["preAllocation"], False)
        self.assertIs(created["spec"]["allocateOnce"], True)
        self.assertNotIn("status", created)  # only /status writes it; absent, not {}
        self.assertEqual(self.client.get(RESV + "/resv-a").json, created)
        # An explicit value is kept; null means absent and gets the default.
        created = self.create_resv(make_reservation("resv-b", preAllocation=True,
                                                    allocateOnce=None))
        self.assertIs(created["spec"]["preAllocation"], True)
        self.assertIs(created["spec"]["allocateOnce"], True)
        self.assertEqual(self.create_resv(make_reservation("resv-c"), "dryRun=All")["metadata"]
                         ["name"], "resv-c")
        self.assertStatus(self.client.get(RESV + "/resv-c"), 404, "NotFound")
        self.assertStatus(self.client.post(RESV, make_reservation()), 409, "AlreadyExists")

    def test_list_and_selectors(self):
        self.create_resv(make_reservation("a", node="n1"))
        self.create_resv(make_reservation("b", node="n2"))
        labelled = make_reservation("c", node="n1")
        labelled["metadata"]["labels"] = {"tier": "gold"}
        self.create_resv(labelled)
        lst = self.client.get(RESV).json
        self.assertEqual(lst["kind"], "ReservationList")
        self.assertEqual(lst["apiVersion"], "topodra.io/v1alpha1")
        self.assertEqual([(i["kind"], i["apiVersion"]) for i in lst["items"]],
                         [("Reservation", "topodra.io/v1alpha1")] * 3)
        self.assertEqual(self.names("fieldSelector=spec.nodeName%3Dn1"), ["a", "c"])
        self.assertEqual(self.names("fieldSelector=spec.nodeName%21%3Dn1"), ["b"])
        self.assertEqual(self.names("fieldSelector=spec.nodeName%3Dn1,metadata.name%3Dc"),
                         ["c"])
        self.assertEqual(self.names("labelSelector=tier%3Dgold"), ["c"])
        self.assertEqual(self.names("limit=2"), ["a", "b"])
        for field in ("spec.ttl", "spec.owners", "status.phase", "metadata.namespace"):
            with self.subTest(field):
                r = self.client.get(RESV + "?fieldSelector=%s%%3Dx" % field)
                self.assertStatus(r, 400, "BadRequest")
                self.assertEqual(r.json["message"], "field label not supported: " + field)

    def test_watch(self):
        w = Watch(self.client, RESV + "?watch=true&allowWatchBookmarks=true&"
                                      "fieldSelector=spec.nodeName%3Dn1")
        try:
            self.assertEqual(w.code, 200)
            created = self.create_resv(make_reservation("a", node="n1"))
            self.create_resv(make_reservation("b", node="n2"))  # filtered out
            ev = w.next_event()
            self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "a"))
            self.assertEqual(ev["object"]["kind"], "Reservation")
            self.assertEqual(ev["object"]["apiVersion"], "topodra.io/v1alpha1")
            created["metadata"]["labels"] = {"x": "y"}
            updated = self.put(created)
            self.assertEqual(updated.code, 200, updated.data)
            ev = w.next_event()
            self.assertEqual(ev["type"], "MODIFIED")
            self.assertEqual(ev["object"]["metadata"]["labels"], {"x": "y"})
            self.assertEqual(self.client.delete(RESV + "/a").code, 200)
            ev = w.next_event()
            self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("DELETED", "a"))
            while True:
                ev = w.next()
                if ev["type"] == "BOOKMARK":
                    break
            self.assertEqual(ev["object"]["kind"], "Reservation")
            self.assertEqual(ev["object"]["apiVersion"], "topodra.io/v1alpha1")
            rv = ev["object"]["metadata"]["resourceVersion"]
        finally:
            w.close()
        # A resumed watch sees only later events; after a reset it gets 410.
        w = Watch(self.client, RESV + "?watch=true&resourceVersion=" + rv)
        try:
            self.create_resv(make_reservation("c"))
            ev = w.next_event()
            self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "c"))
            self.assertEqual(self.client.request("POST", "/__control/reset").code, 200)
            ev = w.next_event()
            self.assertEqual(ev["type"], "ERROR")
            self.assertEqual(ev["object"]["code"], 410)
        finally:
            w.close()
        w = Watch(self.client, RESV + "/c?watch=true&resourceVersion=" + rv)
        try:
            self.assertEqual(w.next_event()["object"]["code"], 410)
        finally:
            w.close()

    def test_update_generation_and_conflicts(self):
        created = self.create_resv(make_reservation())
        rv = created["metadata"]["resourceVersion"]
        created["metadata"]["labels"] = {"a": "b"}
        r = self.put(created)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["generation"], 1)  # metadata only
        self.assertNotEqual(r.json["metadata"]["resourceVersion"], rv)
        stale = copy.deepcopy(created)  # still carries the first resourceVersion
        stale["spec"]["owners"].append({"namespace": "other"})
        r = self.put(stale)
        self.assertStatus(r, 409, "Conflict")
        self.assertIn("the object has been modified", r.json["message"])
        current = r = self.client.get(RESV + "/resv-a").json
        current["spec"]["owners"].append({"namespace": "other"})
        current["spec"]["ttl"] = "30m"
        r = self.put(current)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["generation"], 2)
        self.assertEqual(len(r.json["spec"]["owners"]), 2)
        self.assertIs(r.json["spec"]["allocateOnce"], True)
        # A no-op update stores nothing.
        same = self.put(r.json)
        self.assertEqual(same.json["metadata"]["resourceVersion"],
                         r.json["metadata"]["resourceVersion"])
        # Dropping a defaulted field defaults it again: no change, no new generation.
        del r.json["spec"]["allocateOnce"]
        again = self.put(r.json)
        self.assertEqual(again.json["metadata"]["generation"], 2)
        no_rv = copy.deepcopy(r.json)
        del no_rv["metadata"]["resourceVersion"]
        self.assertStatus(self.put(no_rv), 409, "Conflict")
        self.assertStatus(self.put(make_reservation("missing")), 404, "NotFound")

    def test_patch_and_delete(self):
        self.create_resv(make_reservation())
        r = self.client.request("PATCH", RESV + "/resv-a", {"spec": {"ttl": "2h"}},
                                content_type="application/merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["spec"]["ttl"], "2h")
        self.assertEqual(r.json["metadata"]["generation"], 2)
        r = self.client.request("PATCH", RESV + "/resv-a",
                                [{"op": "replace", "path": "/spec/owners/0/claimName",
                                  "value": "claim-b"}],
                                content_type="application/json-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["spec"]["owners"][0]["claimName"], "claim-b")
        r = self.client.request("PATCH", RESV + "/resv-a", {"spec": {"ttl": "soon"}},
                                content_type="application/merge-patch+json")
        self.assertInvalid(r, "spec.ttl", "should match")
        r = self.client.request("PATCH", RESV + "/resv-a", {"spec": {"ttl": "1h"}},
                                content_type="application/apply-patch+yaml")
        self.assertEqual(r.code, 415)
        r = self.client.delete(RESV + "/resv-a")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["status"], "Success")
        self.assertEqual(r.json["details"]["kind"], "reservations")
        r = self.client.get(RESV + "/resv-a")
        self.assertStatus(r, 404, "NotFound")
        self.assertEqual(r.json["message"], 'reservations.topodra.io "resv-a" not found')
        self.assertStatus(self.client.delete(RESV + "/resv-a"), 404, "NotFound")
        self.create_resv(make_reservation("x", node="n1"))
        self.create_resv(make_reservation("y", node="n2"))
        r = self.client.delete(RESV + "?fieldSelector=spec.nodeName%3Dn2")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual([i["metadata"]["name"] for i in r.json["items"]], ["y"])
        self.assertEqual(self.names(""), ["x"])


class CrdStatusTest(CrdTestCase):
    def test_status_write_changes_only_status(self):
        created = self.create_resv(make_reservation())
        body = copy.deepcopy(created)
        body["status"] = {"phase": "Available", "cpus": "4-7", "observedGeneration": 1,
                          "expiresAt": "2030-01-02T03:04:05Z",
                          "conditions": [{"type": "Ready", "status": "True"}]}
        body["spec"]["nodeName"] = "n9"  # ignored: status writes change only status
        body["spec"]["ttl"] = "1h"
        body["metadata"]["labels"] = {"ignored": "yes"}
        r = self.put(body, RESV + "/resv-a/status")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["status"]["phase"], "Available")
        self.assertEqual(r.json["spec"], created["spec"])
        self.assertNotIn("labels", r.json["metadata"])
        self.assertEqual(r.json["metadata"]["generation"], 1)
        self.assertEqual(self.client.get(RESV + "/resv-a/status").json, r.json)
        # The main resource ignores status, and a spec change there bumps the generation.
        main = copy.deepcopy(r.json)
        main["status"] = {"phase": "Failed"}
        main["spec"]["ttl"] = "3h"
        r2 = self.put(main)
        self.assertEqual(r2.code, 200, r2.data)
        self.assertEqual(r2.json["status"]["phase"], "Available")
        self.assertEqual(r2.json["spec"]["ttl"], "3h")
        self.assertEqual(r2.json["metadata"]["generation"], 2)
        # A status-only change through the main resource is a no-op.
        del main["status"]
        main["metadata"]["resourceVersion"] = r2.json["metadata"]["resourceVersion"]
        main["spec"]["ttl"] = "3h"
        r3 = self.put(main)
        self.assertEqual(r3.json["metadata"]["resourceVersion"],
                         r2.json["metadata"]["resourceVersion"])
        self.assertEqual(r3.json["status"]["phase"], "Available")
        # Patch of /status; removing the status through /status makes it absent.
        r = self.client.request("PATCH", RESV + "/resv-a/status",
                                {"status": {"phase": "Succeeded"}, "spec": {"ttl": "9h"}},
                                content_type="application/merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["status"]["phase"], "Succeeded")
        self.assertEqual(r.json["status"]["cpus"], "4-7")
        self.assertEqual(r.json["spec"]["ttl"], "3h")
        self.assertEqual(r.json["metadata"]["generation"], 2)
        r = self.client.request("PATCH", RESV + "/resv-a/status", {"status": None},
                                content_type="application/merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertNotIn("status", r.json)

    def test_status_is_validated(self):
        created = self.create_resv(make_reservation())
        for status, field, message in (
                ({"phase": "Done"}, "status.phase", 'Unsupported value: "Done"'),
                ({"expiresAt": "soon"}, "status.expiresAt", "must be of type date-time"),
                ({"conditions": [{"type": "Ready"}]}, "status.conditions[0].status",
                 "Required value"),
                ({"gpus": "gpu-0"}, "status.gpus", "must be of type array")):
            with self.subTest(field):
                body = copy.deepcopy(created)
                body["status"] = status
                self.assertInvalid(self.put(body, RESV + "/resv-a/status"), field, message)
        body = copy.deepcopy(created)
        body["status"] = {"phase": "Available", "bogus": 1}
        r = self.put(body, RESV + "/resv-a/status?fieldValidation=Strict")
        self.assertStatus(r, 400, "BadRequest")
        self.assertIn('unknown field "status.bogus"', r.json["message"])
        r = self.put(body, RESV + "/resv-a/status")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.warnings(), ['299 - "unknown field \\"status.bogus\\""'])
        self.assertEqual(r.json["status"], {"phase": "Available"})
        # Stale resourceVersion on /status.
        self.assertStatus(self.put(body, RESV + "/resv-a/status"), 409, "Conflict")
        self.assertStatus(self.client.put(RESV + "/missing/status", make_reservation("missing")),
                          404, "NotFound")


class CrdValidationTest(CrdTestCase):
    def check(self, cases):
        for name, mutate, field, message in cases:
            with self.subTest(name):
                obj = make_reservation()
                mutate(obj)
                self.assertInvalid(self.client.post(RESV, obj), field, message)
        self.assertEqual(self.client.get(RESV).json["items"], [])

    def test_schema_violations(self):
        self.check([
            ("wrong type", lambda o: _set(o, ("spec", "nodeName"), 5), "spec.nodeName",
             'Invalid value: "integer": spec.nodeName in body must be of type string: '
             '"integer"'),
            ("object for array", lambda o: _set(o, ("spec", "owners"), {}), "spec.owners",
             'spec.owners in body must be of type array: "object"'),
            ("float for integer", lambda o: _set(o, ("spec", "cpus", "count"), 1.5),
             "spec.cpus.count", 'must be of type integer: "number"'),
            ("string for boolean", lambda o: _set(o, ("spec", "preAllocation"), "yes"),
             "spec.preAllocation", 'must be of type boolean: "string"'),
            ("missing spec", lambda o: _del(o, ("spec",)), "spec", "Required value"),
            ("missing nodeName", lambda o: _del(o, ("spec", "nodeName")), "spec.nodeName",
             "Required value"),
            ("missing owners", lambda o: _del(o, ("spec", "owners")), "spec.owners",
             "Required value"),
            ("empty nodeName", lambda o: _set(o, ("spec", "nodeName"), ""), "spec.nodeName",
             "spec.nodeName in body should be at least 1 chars long"),
            ("no owners", lambda o: _set(o, ("spec", "owners"), []), "spec.owners",
             "Invalid value: 0: spec.owners in body should have at least 1 items"),
            ("17 owners", lambda o: _set(o, ("spec", "owners"), [{"namespace": "n"}] * 17),
             "spec.owners", "Too many: 17: must have at most 16 items"),
            ("empty owner", lambda o: _set(o, ("spec", "owners"), [{}]), "spec.owners[0]",
             "spec.owners[0] in body should have at least 1 properties"),
            ("enum", lambda o: _set(o, ("spec", "owners"), [{"claimSelector": {
                "matchExpressions": [{"key": "k", "operator": "Maybe"}]}}]),
             "spec.owners[0].claimSelector.matchExpressions[0].operator",
             'Unsupported value: "Maybe": supported values: "In", "NotIn", "Exists", '
             '"DoesNotExist"'),
            ("required in items", lambda o: _set(o, ("spec", "owners"), [{"controller": {
                "kind": "Pod"}}]), "spec.owners[0].controller.name", "Required value"),
            ("additionalProperties", lambda o: _set(o, ("spec", "owners"), [{"claimSelector": {
                "matchLabels": {"app": "x" * 64}}}]),
             "spec.owners[0].claimSelector.matchLabels.app",
             "Too long: may not be more than 63"),
            ("maxProperties", lambda o: _set(o, ("spec", "owners"), [{"claimSelector": {
                "matchLabels": {"k%d" % i: "v" for i in range(33)}}}]),
             "spec.owners[0].claimSelector.matchLabels",
             "Too many: 33: must have at most 32 items"),
            ("ttl pattern", lambda o: _set(o, ("spec", "ttl"), "30 minutes"), "spec.ttl",
             "spec.ttl in body should match '^([0-9]+(ms|s|m|h))+$'"),
            ("ttl pattern, trailing newline", lambda o: _set(o, ("spec", "ttl"), "30m\n"),
             "spec.ttl", "should match"),
            ("minimum", lambda o: _set(o, ("spec", "cpus", "count"), 0), "spec.cpus.count",
             "Invalid value: 0: spec.cpus.count in body should be greater than or equal to 1"),
            ("maximum", lambda o: _set(o, ("spec", "gpus"), {"count": 257}), "spec.gpus.count",
             "spec.gpus.count in body should be less than or equal to 256"),
            ("date-time", lambda o: _set(o, ("spec", "expires"), "tomorrow"), "spec.expires",
             'Invalid value: "tomorrow": spec.expires in body must be of type date-time: '
             '"tomorrow"'),
            ("date-time hour 24", lambda o: _set(o, ("spec", "expires"),
                                                 "2030-01-01T24:00:00Z"),
             "spec.expires", "must be of type date-time"),
            ("date-time without zone", lambda o: _set(o, ("spec", "expires"),
                                                      "2030-01-01T10:00:00"),
             "spec.expires", "must be of type date-time"),
            ("name too long", lambda o: _set(o, ("metadata", "name"), "r" * 64),
             "metadata.name", "Too long: may not be more than 63"),
            ("name not a DNS subdomain", lambda o: _set(o, ("metadata", "name"), "Resv_A"),
             "metadata.name", "a lowercase RFC 1123 subdomain"),
        ])
        r = self.client.post(RESV, dict(make_reservation(), spec={"nodeName": 5, "owners": []}))
        causes = [c["field"] for c in r.json["details"]["causes"]]
        self.assertEqual(causes, ["spec.nodeName", "spec.owners", "<nil>"])
        self.assertIn("some validation rules were not checked", r.json["message"])
        for expires in ("2030-01-01T10:00:00Z", "2030-01-01T10:00:00.123+02:00",
                        "2030-01-01t10:00:00z"):
            with self.subTest(expires):
                r = self.client.post(RESV + "?dryRun=All", make_reservation(expires=expires))
                self.assertEqual(r.code, 201, r.data)
        r = self.client.post(RESV + "?dryRun=All", make_reservation(
            cpus={"count": 2.0}, ttl="1h30m", gpus={"devices": ["gpu-0000-3b-00-0"]}))
        self.assertEqual(r.code, 201, r.data)
        self.assertIn(b'"cpus":{"count":2}', r.data)  # an integral float is an integer
        r = self.client.post(RESV + "?dryRun=All", dict(make_reservation(), metadata={
            "generateName": "r" * 70}))
        self.assertEqual(r.code, 201, r.data)  # generateName is cut so the name fits 63
        self.assertEqual(len(r.json["metadata"]["name"]), 63)

    def test_cel_rules(self):
        self.check([
            ("ttl and expires", lambda o: o["spec"].update(ttl="1h",
                                                           expires="2030-01-01T00:00:00Z"),
             "spec", 'Invalid value: "object": ttl and expires are mutually exclusive'),
            ("neither cpus nor gpus", lambda o: _del(o, ("spec", "cpus")), "spec",
             "a reservation holds cpus, gpus or both"),
            ("empty cpus", lambda o: _set(o, ("spec", "cpus"), {"numaNode": 0}), "spec.cpus",
             "cpus needs count or cpuset"),
            ("empty gpus", lambda o: _set(o, ("spec", "gpus"), {}), "spec.gpus",
             "gpus needs count or devices"),
        ])
        r = self.client.post(RESV, make_reservation(gpus={"count": 1}, cpus=None))
        self.assertEqual(r.code, 201, r.data)  # the null cpus is absent; gpus suffice
        self.assertNotIn("cpus", r.json["spec"])
        created = self.create_resv(make_reservation("resv-b"))
        for name, mutate, field, message in (
                ("cpus changed", lambda o: _set(o, ("spec", "cpus", "count"), 8), "spec.cpus",
                 'Invalid value: "object": cpus is immutable'),
                ("nodeName changed", lambda o: _set(o, ("spec", "nodeName"), "n2"), "spec",
                 "nodeName is immutable")):
            with self.subTest(name):
                body = copy.deepcopy(created)
                mutate(body)
                self.assertInvalid(self.put(body), field, message)
        # Adding gpus (absent before) skips the gpus transition rule, but the spec-level rule
        # catches it.
        body = copy.deepcopy(created)
        body["spec"]["gpus"] = {"count": 2}
        self.assertInvalid(self.put(body), "spec",
                           "cpus and gpus cannot be added or removed after creation")
        body = copy.deepcopy(created)
        del body["spec"]["cpus"]
        body["spec"]["gpus"] = {"count": 2}
        self.assertInvalid(self.put(body), "spec",
                           "cpus and gpus cannot be added or removed after creation")
        body = copy.deepcopy(created)
        body["spec"]["owners"] = [{"namespace": "other"}]
        body["spec"]["ttl"] = "2h"
        self.assertEqual(self.put(body).code, 200)

    def test_unknown_fields(self):
        obj = make_reservation()
        obj["spec"]["bogus"] = 1
        obj["spec"]["owners"][0]["extra"] = {"x": 1}
        obj["metadata"]["clusterName"] = "x"
        obj["top"] = True
        r = self.client.post(RESV + "?fieldValidation=Strict", obj)
        self.assertStatus(r, 400, "BadRequest")
        # In document order (bogus was added to spec after owners).
        self.assertEqual(r.json["message"], 'strict decoding error: unknown field '
                                            '"metadata.clusterName", unknown field '
                                            '"spec.owners[0].extra", unknown field "spec.bogus", '
                                            'unknown field "top"')
        for query in ("", "?fieldValidation=Warn"):
            with self.subTest(query or "default"):
                r = self.client.post(RESV + query, obj)
                self.assertEqual(r.code, 201, r.data)
                self.assertEqual(r.warnings(), [
                    '299 - "unknown field \\"metadata.clusterName\\""',
                    '299 - "unknown field \\"spec.owners[0].extra\\""',
                    '299 - "unknown field \\"spec.bogus\\""',
                    '299 - "unknown field \\"top\\""'])
                stored = self.client.get(RESV + "/resv-a").json
                self.assertNotIn("bogus", stored["spec"])
                self.assertNotIn("top", stored)
                self.assertEqual(stored["spec"]["owners"][0],
                                 {"namespace": "default", "claimName": "claim-a"})
                self.assertEqual(self.client.delete(RESV + "/resv-a").code, 200)
        r = self.client.post(RESV + "?fieldValidation=Ignore", obj)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.warnings(), [])
        self.assertNotIn("bogus", r.json["spec"])
        dup = json.dumps(make_reservation("resv-d")).replace('"nodeName": "n1"',
                                                             '"nodeName": "x", "nodeName": "n1"')
        r = self.client.post(RESV + "?fieldValidation=Strict", dup)
        self.assertStatus(r, 400, "BadRequest")
        self.assertIn('duplicate field "spec.nodeName"', r.json["message"])
        # Decode errors of metadata and a wrong kind are 400, as for every resource.
        bad = make_reservation("resv-e")
        bad["metadata"]["labels"] = "x"
        self.assertStatus(self.client.post(RESV, bad), 400, "BadRequest")
        bad = make_reservation("resv-e")
        bad["kind"] = "ResourceSlice"
        self.assertStatus(self.client.post(RESV, bad), 400, "BadRequest")


# A namespaced CRD with two served versions, a map-list, a set, free-form maps and rules with
# reasons and field paths: the parts of the CRD support the reservation CRD does not use.
WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, categories: [all]}
  versions:
    - name: v1alpha1
      served: false
      storage: false
      schema: {openAPIV3Schema: {type: object}}
    - name: v1beta1
      served: true
      storage: false
      schema: &schema
        openAPIV3Schema:
          type: object
          x-kubernetes-validations:
            - rule: "self.spec.size == oldSelf.spec.size"
              reason: FieldValueForbidden
              fieldPath: .spec.size
              message: size is fixed
          properties:
            spec:
              type: object
              properties:
                color: {type: string, enum: [red, blue], default: red}
                size: {type: integer, multipleOf: 2, exclusiveMinimum: true, minimum: 0}
                ratio: {type: number, maximum: 1.5, exclusiveMaximum: true}
                since: {type: string}
                extra:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
                tags:
                  type: array
                  x-kubernetes-list-type: set
                  items: {type: string}
                ports:
                  type: array
                  x-kubernetes-list-type: map
                  x-kubernetes-list-map-keys: [name]
                  items:
                    type: object
                    required: [name]
                    x-kubernetes-validations:
                      - rule: "self.port == oldSelf.port"
                        message: a port keeps its number
                    properties:
                      name: {type: string}
                      port: {type: integer, default: 80}
                note: {type: string, nullable: true}
            status:
              type: object
              properties:
                ready: {type: boolean}
      selectableFields:
        - jsonPath: .spec.color
        - jsonPath: .spec.size
    - name: v1
      served: true
      storage: true
      schema: *schema
      selectableFields:
        - jsonPath: .spec.color
"""
WIDGETS = "/apis/example.com/%s/namespaces/%s/widgets"


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


class KubectlSupportTest(CrdTestCase, ClaimTestCase):
    """What kubectl get/describe/apply need beyond the API a node driver uses: Table answers,
    OpenAPI v3 documents, events, Pods and ResourceClaimTemplates."""

    def table(self, path, accept=TABLE_ACCEPT, expect_version="v1"):
        r = self.client.get(path, headers={"Accept": accept})
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(dict((k.lower(), v) for k, v in r.headers)["content-type"],
                         "application/json;as=Table;v=%s;g=meta.k8s.io" % expect_version)
        self.assertEqual(r.json["kind"], "Table")
        self.assertEqual(r.json["apiVersion"], "meta.k8s.io/" + expect_version)
        return r.json

    @staticmethod
    def columns(table):
        return [c["name"] for c in table["columnDefinitions"]]

    def test_resourceslice_table_has_the_real_printer_columns(self):
        self.create(make_slice("slice-a", node="node-a", pool="pool-a"))
        self.create(make_slice("slice-b", node="node-b", driver="gpu.topodra.io"))
        t = self.table(SLICES)
        self.assertEqual(self.columns(t), ["Name", "Node", "Driver", "Pool", "Age"])
        self.assertEqual(t["columnDefinitions"][0]["format"], "name")
        self.assertEqual([r["cells"][:4] for r in t["rows"]],
                         [["slice-a", "node-a", "cpu.topodra.io", "pool-a"],
                          ["slice-b", "node-b", "gpu.topodra.io", "node-b"]])
        for row in t["rows"]:
            self.assertRegex(row["cells"][4], AGE_RE)
            self.assertEqual(row["object"]["kind"], "PartialObjectMetadata")
            self.assertEqual(row["object"]["apiVersion"], "meta.k8s.io/v1")
            self.assertIn("uid", row["object"]["metadata"])
        self.assertEqual(t["metadata"]["resourceVersion"],
                         self.client.get(SLICES).json["metadata"]["resourceVersion"])
        one = self.table(SLICES + "/slice-b")
        self.assertEqual([r["cells"][0] for r in one["rows"]], ["slice-b"])
        full = self.table(SLICES + "?includeObject=Object")
        self.assertEqual(full["rows"][0]["object"]["kind"], "ResourceSlice")
        self.assertEqual(full["rows"][0]["object"]["spec"]["driver"], "cpu.topodra.io")
        bare = self.table(SLICES + "?includeObject=None")
        self.assertNotIn("object", bare["rows"][0])
        self.assertStatus(self.client.get(SLICES + "?includeObject=All",
                                          headers={"Accept": TABLE_ACCEPT}), 400, "BadRequest")
        beta = self.table(SLICES, accept="application/json;as=Table;v=v1beta1;g=meta.k8s.io",
                          expect_version="v1beta1")
        self.assertEqual(len(beta["rows"]), 2)
        # Plain JSON first (or no Table at all): the list itself.
        for accept in ("application/json, " + TABLE_ACCEPT, "application/json", "*/*", ""):
            with self.subTest(accept=accept):
                r = self.client.get(SLICES, headers={"Accept": accept})
                self.assertEqual(r.json["kind"], "ResourceSliceList", accept)

    def test_only_unserved_representations_is_406(self):
        for accept in ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
                       "application/yaml", "application/vnd.kubernetes.protobuf",
                       "application/json;as=Table;v=v2;g=meta.k8s.io"):
            with self.subTest(accept=accept):
                self.assertStatus(self.client.get(SLICES, headers={"Accept": accept}), 406,
                                  "NotAcceptable")

    def test_reservation_table_has_the_crd_printer_columns(self):
        self.create_resv(make_reservation("resv-a", node="n1"))
        created = self.create_resv(make_reservation("resv-b", node="n2"))
        created["status"] = {"phase": "Available", "cpus": "4-7",
                             "gpus": ["0000:3b:00.0", "0000:af:00.0"],
                             "expiresAt": "2030-01-02T03:04:05Z"}
        r = self.client.put(RESV + "/resv-b/status", created)
        self.assertEqual(r.code, 200, r.data)
        t = self.table(RESV)
        self.assertEqual(self.columns(t), ["Name", "Node", "Phase", "CPUs", "GPUs", "Expires",
                                           "Age"])
        self.assertEqual([c["type"] for c in t["columnDefinitions"]],
                         ["string"] * 6 + ["date"])
        self.assertEqual(t["columnDefinitions"][1]["description"],
                         "Custom resource definition column (in JSONPath format): "
                         ".spec.nodeName")
        a, b = t["rows"]
        self.assertEqual(a["cells"][:6], ["resv-a", "n1", None, None, None, None])
        self.assertEqual(b["cells"][:6], ["resv-b", "n2", "Available", "4-7",
                                          '["0000:3b:00.0","0000:af:00.0"]',
                                          "2030-01-02T03:04:05Z"])
        self.assertRegex(b["cells"][6], AGE_RE)

    def test_crd_printer_columns_cells(self):
        fa = import_fake_apiserver()
        defs, row = fa.crd_table([
            {"name": "N", "type": "integer", "jsonPath": ".spec.n"},
            {"name": "F", "type": "number", "jsonPath": ".spec.n"},
            {"name": "B", "type": "boolean", "jsonPath": ".spec.b"},
            {"name": "S", "type": "string", "jsonPath": ".spec.items[1].name", "priority": 1},
            {"name": "Bad", "type": "integer", "jsonPath": ".spec.b"},
            {"name": "When", "type": "date", "jsonPath": ".spec.when"}], "cols")
        self.assertEqual([d["name"] for d in defs], ["Name", "N", "F", "B", "S", "Bad", "When"])
        self.assertEqual(defs[4]["priority"], 1)
        obj = {"metadata": {"name": "x"},
               "spec": {"n": 3, "b": True, "items": [{"name": "a"}, {"name": "b"}],
                        "when": "not a time"}}
        self.assertEqual(row(obj), ["x", 3, 3.0, True, "b", None, "<invalid>"])
        self.assertEqual(row({"metadata": {"name": "y"}}), ["y", None, None, None, None, None,
                                                            None])
        defs, row = fa.crd_table([], "cols")  # no columns: Age from creationTimestamp
        self.assertEqual([d["name"] for d in defs], ["Name", "Age"])
        self.assertEqual(row({"metadata": {"name": "z"}}), ["z", None])
        for columns, message in (
                ([{"name": "X", "type": "date-time", "jsonPath": ".a"}], "cols[0].type"),
                ([{"name": "X", "type": "string", "jsonPath": ".a[*].b"}], "cols[0].jsonPath"),
                ([{"name": "X", "type": "string", "jsonPath": "{.a}"}], "cols[0].jsonPath"),
                ([{"name": "X", "type": "string", "jsonPath": ".a", "width": 3}],
                 "cols[0].width"),
                ([{"name": "X", "type": "string"}], "cols[0].jsonPath")):
            with self.subTest(columns=columns):
                with self.assertRaises(fa.CrdError) as ctx:
                    fa.crd_table(columns, "cols")
                self.assertIn(message, str(ctx.exception))

    def test_human_duration(self):
        fa = import_fake_apiserver()
        for seconds, text in ((-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"),
                              (120, "2m"), (150, "2m30s"), (600, "10m"), (3 * 3600, "3h"),
                              (3 * 3600 + 600, "3h10m"), (8 * 3600, "8h"), (47 * 3600, "47h"),
                              (50 * 3600, "2d2h"), (8 * 86400, "8d"), (730 * 86400, "2y"),
                              (731 * 86400, "2y1d"), (9 * 365 * 86400, "9y")):
            with self.subTest(seconds=seconds):
                self.assertEqual(fa.human_duration(seconds), text)

    def test_claim_table_shows_the_state(self):
        self.create_claim(make_claim("pending"))
        allocated = self.create_claim(make_claim("allocated"))
        reserved = self.create_claim(make_claim("reserved"))
        self.allocate(allocated)
        self.allocate(reserved, reserved_for=[{"resource": "pods", "name": "p", "uid": POD_UID}])
        t = self.table(CLAIMS)
        self.assertEqual(self.columns(t), ["Name", "State", "Age"])
        self.assertEqual({r["cells"][0]: r["cells"][1] for r in t["rows"]},
                         {"pending": "pending", "allocated": "allocated",
                          "reserved": "allocated,reserved"})

    def test_types_without_a_printer_get_the_default_table(self):
        r = self.client.post(CLASSES, {"metadata": {"name": "cls"}, "spec": {}})
        self.assertEqual(r.code, 201, r.data)
        t = self.table(CLASSES)
        self.assertEqual(self.columns(t), ["Name", "Age"])
        nodes = self.table("/api/v1/nodes")
        self.assertEqual(self.columns(nodes), ["Name", "Status", "Roles", "Age", "Version"])
        self.assertEqual(nodes["rows"][0]["cells"][:3], ["node-a", "Unknown", "<none>"])

    def test_openapi_v3_root_names_every_group_version(self):
        r = self.client.get("/openapi/v3")
        self.assertEqual(r.code, 200, r.data)
        paths = r.json["paths"]
        self.assertEqual(sorted(paths), ["api/v1", "apis/resource.k8s.io/v1",
                                         "apis/resource.k8s.io/v1beta2",
                                         "apis/topodra.io/v1alpha1"])
        for key, entry in paths.items():
            with self.subTest(key=key):
                url = entry["serverRelativeURL"]
                self.assertRegex(url, r"^/openapi/v3/%s\?hash=[0-9A-F]{128}$" % key)
                doc = self.client.get(url)
                self.assertEqual(doc.code, 200, doc.data)
                self.assertEqual(doc.json["openapi"], "3.0.0")
        self.assertStatus(self.client.get("/openapi/v3/apis/topodra.io/v1"), 404, "NotFound")
        self.assertStatus(self.client.get("/openapi/v3/apis/nothing.io/v1"), 404, "NotFound")

    def test_openapi_v3_patch_operations_take_field_validation(self):
        """What kubectl's QueryParamVerifierV3 looks for before it leaves validation to the
        server (without it, kubectl apply wants /openapi/v2, which is not served)."""
        def patch_ops(doc):
            out = {}
            for path, item in doc["paths"].items():
                if "patch" in item:
                    gvk = item["patch"]["x-kubernetes-group-version-kind"]
                    out[(gvk["group"], gvk["version"], gvk["kind"])] = (path, item["patch"])
            return out

        core = patch_ops(self.client.get("/openapi/v3/api/v1").json)
        resource = patch_ops(self.client.get("/openapi/v3/apis/resource.k8s.io/v1").json)
        crd_doc = self.client.get("/openapi/v3/apis/topodra.io/v1alpha1").json
        crd = patch_ops(crd_doc)
        self.assertEqual(sorted(k[2] for k in core), ["Event", "Pod"])
        self.assertEqual(sorted(k[2] for k in resource), [
            "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"])
        self.assertEqual(list(crd), [("topodra.io", "v1alpha1", "Reservation")])
        for path, op in list(core.values()) + list(resource.values()) + list(crd.values()):
            with self.subTest(path=path):
                self.assertIn("fieldValidation", [p["name"] for p in op["parameters"]])
                self.assertTrue(path.endswith("/{name}"), path)
        self.assertEqual(resource[("resource.k8s.io", "v1", "ResourceClaim")][0],
                         "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}")
        kinds = sorted(crd[("topodra.io", "v1alpha1", "Reservation")][1]["requestBody"]["content"])
        self.assertEqual(kinds, ["application/json-patch+json", "application/merge-patch+json"])
        self.assertIn("application/strategic-merge-patch+json", resource[
            ("resource.k8s.io", "v1", "ResourceSlice")][1]["requestBody"]["content"])
        # Custom resources carry their schema (kubectl explain); built-ins carry none.
        schema = crd_doc["components"]["schemas"]["io.topodra.v1alpha1.Reservation"]
        self.assertEqual(schema["x-kubernetes-group-version-kind"],
                         [{"group": "topodra.io", "version": "v1alpha1", "kind": "Reservation"}])
        self.assertIn("nodeName", schema["properties"]["spec"]["properties"])
        self.assertEqual(self.client.get("/openapi/v3/api/v1").json["components"]["schemas"],
                         {})

    def test_discovery_lists_pods_events_and_claim_templates(self):
        core = {r["name"]: r for r in self.client.get("/api/v1").json["resources"]}
        self.assertEqual(sorted(core), ["events", "nodes", "pods", "pods/status"])
        self.assertTrue(core["pods"]["namespaced"])
        self.assertEqual(core["events"]["shortNames"], ["ev"])
        resource = {r["name"] for r in self.client.get(
            "/apis/resource.k8s.io/v1").json["resources"]}
        self.assertIn("resourceclaimtemplates", resource)

    def test_events_are_listed_by_involved_object(self):
        # kubectl describe of a cluster-scoped object lists events in all namespaces.
        query = ("?fieldSelector=" + urllib.parse.quote(
            "involvedObject.name=resv-a,involvedObject.namespace=,"
            "involvedObject.kind=Reservation,involvedObject.uid=u-1") + "&limit=500")
        r = self.client.get("/api/v1/events" + query)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual((r.json["kind"], r.json["items"]), ("EventList", []))
        event = {"metadata": {"name": "resv-a.1"}, "type": "Normal", "reason": "Placed",
                 "message": "CPUs 4-7", "involvedObject": {"kind": "Reservation",
                                                           "name": "resv-a", "uid": "u-1"},
                 "source": {"component": "topodra"}}
        r = self.client.post(EVENTS, event)
        self.assertEqual(r.code, 201, r.data)
        other = dict(event, metadata={"name": "resv-b.1"},
                     involvedObject={"kind": "Reservation", "name": "resv-b", "uid": "u-2"})
        self.assertEqual(self.client.post(EVENTS, other).code, 201)
        items = self.client.get("/api/v1/events" + query).json["items"]
        self.assertEqual([i["metadata"]["name"] for i in items], ["resv-a.1"])
        items = self.client.get(EVENTS + "?fieldSelector=source%3Dtopodra").json["items"]
        self.assertEqual(len(items), 2)
        t = self.table(EVENTS)
        self.assertEqual(self.columns(t), ["Last Seen", "Type", "Reason", "Object", "Message"])
        self.assertEqual(t["rows"][0]["cells"][1:], ["Normal", "Placed", "reservation/resv-a",
                                                     "CPUs 4-7"])
        self.assertStatus(self.client.get(EVENTS + "?fieldSelector=message%3Dx"), 400,
                          "BadRequest")

    def test_pods_are_stored_as_sent(self):
        r = self.client.post(PODS, make_pod())
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.json["spec"], make_pod()["spec"])
        self.assertEqual(r.json["metadata"]["namespace"], "default")
        self.assertEqual(self.client.get(PODS + "/pod-a").json["spec"]["containers"][0]["image"],
                         "busybox:1.36")
        self.assertEqual(len(self.client.get("/api/v1/pods").json["items"]), 1)
        t = self.table(PODS + "/pod-a")
        self.assertEqual(self.columns(t)[:5], ["Name", "Ready", "Status", "Restarts", "Age"])
        self.assertEqual(t["rows"][0]["cells"][:4], ["pod-a", "0/1", "Pending", "0"])
        self.assertEqual([c["priority"] for c in t["columnDefinitions"]], [0] * 5 + [1] * 4)
        # A merge patch works; a strategic merge patch with directives (what kubectl apply
        # sends for a changed container) is refused rather than stored as a field.
        r = self.client.request("PATCH", PODS + "/pod-a", {"metadata": {"labels": {"a": "b"}}},
                                content_type="application/strategic-merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["labels"], {"a": "b"})
        r = self.client.request(
            "PATCH", PODS + "/pod-a",
            {"spec": {"$setElementOrder/containers": [{"name": "app"}],
                      "containers": [{"name": "app", "image": "busybox:1.37"}]}},
            content_type="application/strategic-merge-patch+json")
        self.assertStatus(r, 415, "UnsupportedMediaType")
        self.assertIn("$setElementOrder/containers at spec", r.json["message"])
        self.assertEqual(self.client.get(PODS + "/pod-a").json["spec"], make_pod()["spec"])
        self.assertStatus(self.client.post(PODS, dict(make_pod(), metadata={"name": "Bad"})),
                          422, "Invalid")

    def test_strategic_merge_patch_refuses_only_real_directives(self):
        # "$schema" (or any "$" key) in opaque parameters is data, not a directive.
        params = {"$schema": "https://example.com/cpu-config.json", "$id": "c", "kind": "CpuConfig"}
        claim = self.create_claim(make_claim(config=[opaque_config(params)]))
        r = self.client.request("PATCH", CLAIMS + "/claim-a",
                                {"metadata": {"labels": {"a": "b"}}, "spec": claim["spec"]},
                                content_type="application/strategic-merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["labels"], {"a": "b"})
        self.assertEqual(r.json["spec"]["devices"]["config"][0]["opaque"]["parameters"], params)
        for directive in ({"$patch": "replace"}, {"$retainKeys": ["a"]},
                          {"$deleteFromPrimitiveList/finalizers": ["x"]},
                          {"$setElementOrder/finalizers": [], "finalizers": []}):
            with self.subTest(directive=directive):
                r = self.client.request("PATCH", CLAIMS + "/claim-a", {"metadata": directive},
                                        content_type="application/strategic-merge-patch+json")
                self.assertStatus(r, 415, "UnsupportedMediaType")
                self.assertIn("%s at metadata" % next(iter(directive)), r.json["message"])
        self.assertEqual(self.client.get(CLAIMS + "/claim-a").json["metadata"]["labels"],
                         {"a": "b"})

    def test_resourceclaimtemplates_validate_and_default_the_claim_spec(self):
        template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "four-cpus"},
                    "spec": {"metadata": {"labels": {"app": "x"}},
                             "spec": make_claim()["spec"]}}
        del template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"]
        del template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"]
        r = self.client.post(TEMPLATES, template)
        self.assertEqual(r.code, 201, r.data)
        exactly = r.json["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        self.assertEqual((exactly["allocationMode"], exactly["count"]), ("ExactCount", 1))
        self.assertEqual(r.json["spec"]["metadata"], {"labels": {"app": "x"}})
        self.assertNotIn("status", r.json)
        bad = copy.deepcopy(template)
        bad["metadata"]["name"] = "bad"
        bad["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = ""
        self.assertInvalid(self.client.post(TEMPLATES, bad),
                           "spec.spec.devices.requests[0].exactly.deviceClassName", "Required")
        changed = copy.deepcopy(r.json)
        changed["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
        self.assertInvalid(self.client.put(TEMPLATES + "/four-cpus", changed), "spec",
                           "field is immutable")
        t = self.table(TEMPLATES)
        self.assertEqual(self.columns(t), ["Name", "Age"])
        self.assertEqual(self.client.get(
            "/apis/resource.k8s.io/v1beta2/namespaces/default/resourceclaimtemplates/four-cpus"
        ).json["apiVersion"], "resource.k8s.io/v1beta2")


class WidgetCrdTest(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fake-apiserver-crd-")
        path = os.path.join(cls.tmp, "widgets.yaml")
        with open(path, "w") as f:
            f.write(WIDGET_CRD)
        cls.ARGS = ServerTestCase.ARGS + ("--crd", path, "--crd", CRD_FILE)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def widget(self, name="w", **spec):
        return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name},
                "spec": spec}

    def test_namespaced_versions_and_selectors(self):
        group = self.client.get("/apis/example.com").json
        self.assertEqual([v["version"] for v in group["versions"]], ["v1", "v1beta1"])
        self.assertEqual(group["preferredVersion"]["version"], "v1")
        self.assertStatus(self.client.get(WIDGETS % ("v1alpha1", "default")), 404, "NotFound")
        resources = self.client.get("/apis/example.com/v1beta1").json["resources"]
        self.assertEqual([(r["name"], r["namespaced"], r.get("categories")) for r in resources],
                         [("widgets", True, ["all"])])  # no status subresource
        created = self.client.post(WIDGETS % ("v1", "default"), self.widget(size=2))
        self.assertEqual(created.code, 201, created.data)
        self.assertEqual(created.json["metadata"]["namespace"], "default")
        self.assertEqual(created.json["spec"]["color"], "red")
        self.assertEqual(self.client.post(WIDGETS % ("v1beta1", "other"),
                                          dict(self.widget(color="blue", size=4),
                                               apiVersion="example.com/v1beta1")).code, 201)
        got = self.client.get(WIDGETS % ("v1beta1", "default") + "/w").json
        self.assertEqual(got["apiVersion"], "example.com/v1beta1")
        lst = self.client.get("/apis/example.com/v1/widgets").json
        self.assertEqual([(i["metadata"]["namespace"], i["apiVersion"]) for i in lst["items"]],
                         [("default", "example.com/v1"), ("other", "example.com/v1")])
        self.assertEqual(lst["kind"], "WidgetList")

        def names(query):
            r = self.client.get("/apis/example.com/v1/widgets?fieldSelector=" + query)
            self.assertEqual(r.code, 200, r.data)
            return [i["metadata"]["namespace"] for i in r.json["items"]]
        self.assertEqual(names("spec.color%3Dblue"), ["other"])
        self.assertEqual(names("metadata.namespace%3Dother"), ["other"])
        # Selectable fields are per version: spec.size only in v1beta1.
        r = self.client.get("/apis/example.com/v1beta1/widgets?fieldSelector=spec.size%3D2")
        self.assertEqual([i["metadata"]["namespace"] for i in r.json["items"]], ["default"])
        for field in ("spec.size", "spec.since"):
            self.assertStatus(self.client.get("/apis/example.com/v1/widgets?fieldSelector=%s%%3Dx"
                                              % field), 400, "BadRequest")
        r = self.client.post(WIDGETS % ("v1", "default"),
                             dict(self.widget(size=2), apiVersion="example.com/v1beta1"))
        self.assertStatus(r, 400, "BadRequest")

    def test_keywords_and_rules(self):
        path = WIDGETS % ("v1", "default")
        for name, spec, field, message in (
                ("exclusiveMinimum", {"size": 0}, "spec.size", "should be greater than 0"),
                ("multipleOf", {"size": 3}, "spec.size", "should be a multiple of 2"),
                ("exclusiveMaximum", {"ratio": 1.5}, "spec.ratio", "should be less than 1.5"),
                ("enum", {"color": "green"}, "spec.color", 'supported values: "red", "blue"'),
                ("set", {"tags": ["a", "b", "a"]}, "spec.tags[2]", 'Duplicate value: "a"'),
                ("map list", {"ports": [{"name": "a"}, {"name": "a", "port": 1}]},
                 "spec.ports[1]", "Duplicate value"),
                ("map list key", {"ports": [{"port": 1}]}, "spec.ports[0].name",
                 "Required value")):
            with self.subTest(name):
                self.assertInvalid(self.client.post(path, self.widget(**spec)), field, message)
        r = self.client.post(path + "?fieldValidation=Strict", self.widget(
            size=2, ratio=1, extra={"free": {"form": [1]}}, note=None,
            ports=[{"name": "http"}, {"name": "https", "port": 443}], tags=["x", "y"]))
        self.assertEqual(r.code, 201, r.data)
        w = r.json
        self.assertEqual(w["spec"]["extra"], {"free": {"form": [1]}})  # preserved
        self.assertIsNone(w["spec"]["note"])  # nullable: the null is kept
        self.assertEqual(w["spec"]["ports"][0], {"name": "http", "port": 80})
        # Root rule with reason and fieldPath.
        w["spec"]["size"] = 4
        r = self.client.put(path + "/w", w)
        self.assertStatus(r, 422, "Invalid")
        self.assertEqual(r.json["details"]["causes"], [
            {"reason": "FieldValueForbidden", "message": "Forbidden: size is fixed",
             "field": "spec.size"}])
        # Map-list items correlate by key: a port keeps its number, new ports are free, and
        # reordering the list is fine.
        w["spec"]["size"] = 2
        w["spec"]["ports"] = [{"name": "https", "port": 443}, {"name": "http", "port": 81}]
        self.assertInvalid(self.client.put(path + "/w", w), "spec.ports[1]",
                           "a port keeps its number")
        w["spec"]["ports"] = [{"name": "https", "port": 443}, {"name": "http", "port": 80},
                              {"name": "new", "port": 1}]
        w["status"] = {"ready": True}  # no status subresource: written with the object
        r = self.client.put(path + "/w", w)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["status"], {"ready": True})
        self.assertEqual(r.json["metadata"]["generation"], 2)
        w = r.json
        w["status"] = {"ready": False}
        r = self.client.put(path + "/w", w)
        self.assertEqual(r.json["metadata"]["generation"], 3)  # status is not a subresource
        self.assertStatus(self.client.put(path + "/w/status", w), 404, "NotFound")


# A custom resource whose top-level field is named items, as a list answer's is.
BUNDLE_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: bundles.example.com
spec:
  group: example.com
  scope: Cluster
  names: {plural: bundles, singular: bundle, kind: Bundle}
  versions:
    - name: v1
      served: true
      storage: true
      additionalPrinterColumns:
        - {name: Owner, type: string, jsonPath: .owner}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            owner: {type: string}
            items:
              type: array
              items: {type: object, properties: {name: {type: string}}}
"""
BUNDLES = "/apis/example.com/v1/bundles"


class TableOfItemsFieldTest(ServerTestCase):
    """A Table of one object is one row even when the object has a top-level items field."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fake-apiserver-crd-")
        path = os.path.join(cls.tmp, "bundles.yaml")
        with open(path, "w") as f:
            f.write(BUNDLE_CRD)
        cls.ARGS = ServerTestCase.ARGS + ("--crd", path)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_object_with_items_field(self):
        for name, owner in (("b1", "team-a"), ("b2", "team-b")):
            r = self.client.post(BUNDLES, {
                "apiVersion": "example.com/v1", "kind": "Bundle", "metadata": {"name": name},
                "owner": owner, "items": [{"name": "x"}, {"name": "y"}, {"name": "z"}]})
            self.assertEqual(r.code, 201, r.data)
        self.assertEqual(len(self.client.get(BUNDLES + "/b1").json["items"]), 3)
        one = self.client.get(BUNDLES + "/b1", headers={"Accept": TABLE_ACCEPT})
        self.assertEqual(one.code, 200, one.data)
        self.assertEqual(one.json["kind"], "Table")
        self.assertEqual([row["cells"][:2] for row in one.json["rows"]], [["b1", "team-a"]])
        full = self.client.get(BUNDLES + "/b1?includeObject=Object",
                               headers={"Accept": TABLE_ACCEPT}).json
        self.assertEqual(full["rows"][0]["object"]["kind"], "Bundle")
        everything = self.client.get(BUNDLES, headers={"Accept": TABLE_ACCEPT}).json
        self.assertEqual([row["cells"][:2] for row in everything["rows"]],
                         [["b1", "team-a"], ["b2", "team-b"]])


def import_fake_apiserver():
    import sys
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import fake_apiserver
    return fake_apiserver


class SmpDirectiveTest(unittest.TestCase):
    """Which keys of a strategic merge patch the fake refuses as directives."""

    def test_only_the_keys_strategicpatch_knows(self):
        fake = import_fake_apiserver()
        for patch, found in (
                ({"spec": {"$patch": "replace"}}, "$patch at spec"),
                ({"a": [{"b": {"$retainKeys": ["c"]}}]}, "$retainKeys at a[0].b"),
                ({"spec": {"$setElementOrder/containers": []}},
                 "$setElementOrder/containers at spec"),
                ({"$deleteFromPrimitiveList/finalizers": ["x"]},
                 "$deleteFromPrimitiveList/finalizers at ."),
                ({"spec": {"parameters": {"$schema": "s", "$ref": "#/x", "$": 1, "$patches": 2,
                                          "x$patch": 3}}}, None),
                ({"$schema": "s"}, None)):
            with self.subTest(patch=patch):
                self.assertEqual(fake.smp_directive(patch), found)


class CrdLoadTest(unittest.TestCase):
    """A CRD the fake cannot serve exactly is an error at start (exit 2), never ignored."""

    @classmethod
    def setUpClass(cls):
        cls.fa = import_fake_apiserver()
        cls.tmp = tempfile.mkdtemp(prefix="fake-apiserver-crd-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def write(self, crd, text=None):
        path = os.path.join(self.tmp, "crd.yaml")
        with open(path, "w") as f:
            if text is not None:
                f.write(text)
            else:
                json.dump(crd, f)  # JSON is YAML
        return path

    def load_error(self, crd, text=None):
        """The message of the CrdError that loading the CRD raises (in process: fast)."""
        try:
            self.fa.load_crds([self.write(crd, text)])
        except self.fa.CrdError as e:
            return str(e)
        self.fail("the CRD was loaded")

    def test_the_flag_exits_2(self):
        crd = load_crd_yaml()
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
            "x-kubernetes-validations"].append({"rule": "self.ttl.size() > 0"})
        for args, message in ((["--crd", self.write(crd)],
                               "x-kubernetes-validations[4]: rule \"self.ttl.size() > 0\""),
                              (["--crd", "/nonexistent.yaml"], "/nonexistent.yaml"),
                              (["--crd", CRD_FILE, "--crd", CRD_FILE], "already served")):
            with self.subTest(args[-1]):
                p = subprocess.run([PYTHON, SERVER] + args, capture_output=True, text=True,
                                   timeout=10)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("error: --crd: ", p.stderr)
                self.assertIn(message, p.stderr)

    def test_bad_crds_fail_at_start(self):
        def rule(text):
            def mutate(crd):
                spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
                    "spec"]
                spec["x-kubernetes-validations"].append({"rule": text, "message": "m"})
            return mutate

        def spec_prop(name, value):
            def mutate(crd):
                crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
                    "properties"][name] = value
            return mutate

        def version(name, value):
            def mutate(crd):
                crd["spec"]["versions"][0][name] = value
            return mutate

        cases = [
            ("comparison", rule("self.cpus.count > 1"), 'cannot parse ">'),
            ("function call", rule("self.owners.size() == self.owners.size()"),
             "self.owners has no fields"),
            ("call", rule("self.cpus.count() == self.cpus.count"), "unexpected ("),
            ("literal", rule("self.nodeName == 'n1'"), "cannot parse"),
            ("undefined field", rule("has(self.nodname)"), "undefined field 'nodname'"),
            ("type mismatch", rule("self.nodeName == self.owners"), "no matching overload"),
            ("not a bool", rule("self.nodeName"), "must evaluate to a bool"),
            ("has(self)", rule("has(self)"), "has() needs a field selection"),
            ("trailing", rule("has(self.ttl) has(self.expires)"), "unexpected has"),
            ("unbalanced", rule("!(has(self.ttl)"), "unexpected end"),
            ("messageExpression", lambda c: c["spec"]["versions"][0]["schema"][
                "openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"][0].update(
                messageExpression="'x'"), "messageExpression is not supported"),
            ("oneOf", spec_prop("x", {"oneOf": [{"type": "string"}]}), "oneOf is not supported"),
            ("no type", spec_prop("x", {"description": "d"}), "type: Required value"),
            ("format", spec_prop("x", {"type": "string", "format": "uuid"}),
             '"uuid" is not supported'),
            ("lookahead", spec_prop("x", {"type": "string", "pattern": "(?=a)a"}),
             "lookarounds are not RE2"),
            ("bad default", spec_prop("x", {"type": "integer", "minimum": 1, "default": 0}),
             "default: default: Invalid value: 0"),
            ("selectable array", version("selectableFields", [{"jsonPath": ".spec.owners"}]),
             "must be a string, integer or boolean field"),
            ("selectable missing", version("selectableFields", [{"jsonPath": ".spec.nope"}]),
             "is not a field of the schema"),
            ("scale", version("subresources", {"status": {}, "scale": {}}),
             "subresources.scale: not supported"),
            ("name", lambda c: c["metadata"].update(name="x.topodra.io"),
             "metadata.name: must be spec.names.plural"),
            ("built-in group", lambda c: (c["spec"].update(group="resource.k8s.io"),
                                          c["metadata"].update(name="reservations."
                                                                    "resource.k8s.io")),
             "already served"),
            ("metadata schema", lambda c: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
                "properties"]["metadata"]["properties"].update(labels={"type": "object"}),
             "only name and generateName"),
        ]
        for name, mutate, message in cases:
            with self.subTest(name):
                crd = load_crd_yaml()
                mutate(crd)
                self.assertIn(message, self.load_error(crd))
        for name, text, message in (("not YAML", "a: [", "not valid YAML"),
                                    ("empty", "", "no CustomResourceDefinition"),
                                    ("not a CRD", "kind: ConfigMap", "expected apiVersion")):
            with self.subTest(name):
                self.assertIn(message, self.load_error(None, text))
        # The real file loads, and YAML timestamps stay strings (as with sigs.k8s.io/yaml).
        self.assertEqual([rt.kind for rt in self.fa.load_crds([CRD_FILE])], ["Reservation"])
        crd = load_crd_yaml()
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
            "properties"]["expires"]["default"] = "2030-01-01T00:00:00Z"
        text = json.dumps(crd).replace('"2030-01-01T00:00:00Z"', "2030-01-01T00:00:00Z")
        rt, = self.fa.load_crds([self.write(None, text)])
        obj, _, _ = rt.decode({"spec": {}})
        self.assertEqual(obj["spec"]["expires"], "2030-01-01T00:00:00Z")


class CelTest(unittest.TestCase):
    """The CEL subset, in process."""

    @classmethod
    def setUpClass(cls):
        cls.fa = import_fake_apiserver()

    def rule(self, text, schema):
        node = self.fa.compile_schema(schema, "s")
        return self.fa.compile_rule({"rule": text}, node, "r")

    def test_evaluation(self):
        schema = {"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
            "c": {"type": "integer"}, "f": {"type": "boolean"},
            "l": {"type": "array", "items": {"type": "integer"}},
            "s": {"type": "array", "x-kubernetes-list-type": "set",
                  "items": {"type": "integer"}}}}
        ev = self.fa.cel_eval
        r = self.rule("has(self.a) && !has(self.c) || (self.f)", schema)
        self.assertTrue(ev(r.ast, {"a": {}}, None))
        self.assertFalse(ev(r.ast, {"a": {}, "c": 1, "f": False}, None))
        self.assertFalse(r.transition)
        # CEL error absorption: false && error is false, true || error is true.
        r = self.rule("has(self.c) && self.a.b == self.c", schema)
        self.assertFalse(ev(r.ast, {}, None))
        r = self.rule("self.a.b == self.c", schema)
        with self.assertRaisesRegex(self.fa.CelEvalError, "no such key: a"):
            ev(r.ast, {"c": 1}, None)
        r = self.rule("self.c == self.a.b || has(self.c)", schema)
        self.assertTrue(ev(r.ast, {"c": 1}, None))
        # Deep, typed equality; list order matters unless the list is a set.
        r = self.rule("self == oldSelf", schema)
        self.assertTrue(r.transition)
        self.assertTrue(ev(r.ast, {"a": {"b": 1}, "l": [1, 2]}, {"l": [1, 2], "a": {"b": 1}}))
        self.assertFalse(ev(r.ast, {"l": [1, 2]}, {"l": [2, 1]}))
        self.assertTrue(ev(r.ast, {"s": [1, 2]}, {"s": [2, 1]}))
        self.assertFalse(ev(r.ast, {"f": True}, {"f": 1}))
        self.assertFalse(ev(r.ast, {"a": {}}, {"a": {"b": 0}}))
        r = self.rule("self.l != oldSelf.l", schema)
        self.assertTrue(ev(r.ast, {"l": [1]}, {"l": []}))


class DeviceTaintsDropTest(ServerTestCase):
    ARGS = ServerTestCase.ARGS + ("--device-taints", "drop")

    def test_taints_are_dropped(self):
        obj = make_slice()
        obj["spec"]["devices"][0]["taints"] = [{"key": "topodra.io/maintenance",
                                                "effect": "NoExecute"}]
        r = self.client.post(SLICES + "?fieldValidation=Strict", obj)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.warnings(), [])
        self.assertNotIn("taints", r.json["spec"]["devices"][0])
        # Even invalid taints: the gate is off, so the field is gone before validation.
        r.json["spec"]["devices"][0]["taints"] = [{"key": "bad key", "effect": "Bogus"}] * 17
        r = self.client.put(SLICES + "/slice-a", r.json)
        self.assertEqual(r.code, 200, r.data)
        self.assertNotIn("taints", r.json["spec"]["devices"][0])
        self.assertEqual(self.client.get(SLICES + "/slice-a").json, r.json)


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = tempfile.mkdtemp(prefix="fake-apiserver-pki-")
        make_pki(cls.pki)
        p = lambda name: os.path.join(cls.pki, name)  # noqa: E731
        cls.server = ServerProcess("--tls-cert", p("server.crt"), "--tls-key", p("server.key"),
                                   "--token", "s3cret")
        cls.mtls = ServerProcess("--tls-cert", p("server.crt"), "--tls-key", p("server.key"),
                                 "--client-ca", p("ca.crt"))
        cls.ctx = ssl.create_default_context(cafile=p("ca.crt"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.mtls.stop()
        shutil.rmtree(cls.pki, ignore_errors=True)

    def test_https_with_token(self):
        self.assertEqual(self.server.stdout_line,
                         "listening on https://127.0.0.1:%d" % self.server.port)
        anonymous = Client(self.server.port, self.ctx)
        r = anonymous.get(SLICES)
        self.assertEqual(r.code, 401)
        self.assertEqual((r.json["kind"], r.json["reason"], r.json["code"]),
                         ("Status", "Unauthorized", 401))
        self.assertEqual(Client(self.server.port, self.ctx, token="wrong").get(SLICES).code,
                         401)
        self.assertEqual(anonymous.get("/healthz").code, 200)
        authed = Client(self.server.port, self.ctx, token="s3cret")
        self.assertEqual(authed.post(SLICES, make_slice()).code, 201)
        self.assertEqual(len(authed.get(SLICES).json["items"]), 1)
        watch = Watch(authed, SLICES + "?watch=1")
        self.assertEqual(watch.next_event()["type"], "ADDED")
        watch.close()

    def test_untrusted_client_fails_handshake(self):
        with self.assertRaises(ssl.SSLError):
            Client(self.server.port, ssl.create_default_context()).get("/healthz")

    def test_mtls(self):
        with self.assertRaises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            Client(self.mtls.port, self.ctx).get(SLICES)
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.crt"))
        ctx.load_cert_chain(os.path.join(self.pki, "client.crt"),
                            os.path.join(self.pki, "client.key"))
        self.assertEqual(Client(self.mtls.port, ctx).get(SLICES).code, 200)


class PoolChecksTest(ServerTestCase):
    """--pool-checks reject: device and shared counter set names are unique across the slices
    of one pool (driver, pool name, generation), k8s-api-cdi.md §1.3/§1.4."""
    ARGS = ServerTestCase.ARGS + ("--pool-checks", "reject")

    def test_device_name_used_in_another_slice_of_the_pool(self):
        self.create(make_slice("s0", devices=[make_device("cpu-0"), make_device("cpu-1")]))
        dup = make_slice("s1", devices=[make_device("cpu-2"), make_device("cpu-1")])
        r = self.client.post(SLICES, dup)
        self.assertInvalid(r, "spec.devices[1].name",
                           'Invalid value: "cpu-1": device name already used by ResourceSlice '
                           '"s0" of the same pool and generation')
        self.assertEqual(len(r.json["details"]["causes"]), 1)
        # Dry run refuses it too; an update that adds the name is refused as well.
        self.assertInvalid(self.client.post(SLICES + "?dryRun=All", dup),
                           "spec.devices[1].name", "must be unique in the pool")
        ok = self.create(make_slice("s1", devices=[make_device("cpu-2")]))
        ok["spec"]["devices"].append(make_device("cpu-0"))
        self.assertInvalid(self.client.put(SLICES + "/s1", ok), "spec.devices[1].name",
                           'already used by ResourceSlice "s0"')

    def test_what_is_not_a_duplicate(self):
        self.create(make_slice("s0", devices=[make_device("cpu-0")]))
        # Another generation of the pool (a publisher rewriting it), another pool, another
        # driver, and the slice itself on update.
        newer = make_slice("s1", devices=[make_device("cpu-0")])
        newer["spec"]["pool"]["generation"] = 2
        self.create(newer)
        self.create(make_slice("s2", pool="node-a/other", devices=[make_device("cpu-0")]))
        self.create(make_slice("s3", driver="gpu.topodra.io", devices=[make_device("cpu-0")]))
        same = self.client.get(SLICES + "/s0").json
        same["spec"]["devices"].append(make_device("cpu-1"))
        self.assertEqual(self.client.put(SLICES + "/s0", same).code, 200)

    def test_shared_counter_set_name_used_in_another_slice(self):
        def counters(name, sets):
            obj = make_slice(name)
            del obj["spec"]["devices"]
            obj["spec"]["sharedCounters"] = [{"name": n, "counters": {"c": {"value": "1"}}}
                                             for n in sets]
            return obj
        self.create(counters("c0", ["gpu-0"]))
        self.assertInvalid(self.client.post(SLICES, counters("c1", ["gpu-1", "gpu-0"])),
                           "spec.sharedCounters[1].name",
                           'counter set name already used by ResourceSlice "c0"')
        self.create(counters("c1", ["gpu-1"]))

    def test_default_accepts_like_the_real_server(self):
        server = ServerProcess()
        try:
            client = Client(server.port)
            self.assertEqual(client.post(SLICES, make_slice("s0")).code, 201)
            self.assertEqual(client.post(SLICES, make_slice("s1")).code, 201)
        finally:
            server.stop()


class SpecRulesTest(ServerTestCase):
    """Each rule of k8s-api-cdi.md §1.5-§1.8 not covered by ValidationTest: a payload that breaks
    it (422 Invalid with the field) and the boundary that passes."""
    ARGS = ServerTestCase.ARGS + ("--list-attributes", "accept")

    def breaks_and_passes(self, cases):
        for name, bad, good, field, message in cases:
            with self.subTest(name):
                obj = make_slice("bad")
                bad(obj)
                self.assertInvalid(self.client.post(SLICES, obj), field, message)
                obj = make_slice("good")
                good(obj)
                r = self.client.post(SLICES, obj)
                self.assertEqual(r.code, 201, r.data)
                self.assertEqual(self.client.delete(SLICES + "/good").code, 200)

    @staticmethod
    def policy(pol, value):
        def mutate(o):
            dev = o["spec"]["devices"][0]
            dev["allowMultipleAllocations"] = True
            dev["capacity"] = {"dra.cpu/cpu": {"value": value, "requestPolicy": pol}}
        return mutate

    def test_request_policies(self):
        rp = "spec.devices[0].capacity[dra.cpu/cpu].requestPolicy"
        pol = self.policy
        self.breaks_and_passes([
            # The one-CPU group of issue 14: min + step must not exceed the value.
            ("min + step above a value of 1",
             pol({"default": "1", "validRange": {"min": "1", "step": "1"}}, "1"),
             pol({"default": "1", "validRange": {"min": "1", "step": "1"}}, "2"),
             rp + ".validRange.step", "one step 2 is larger than capacity value: 1"),
            ("the same meaning for a value of 1: validValues",
             pol({"default": "1", "validValues": ["1", "2"]}, "1"),
             pol({"default": "1", "validValues": ["1"]}, "1"),
             rp + ".validValues[1]", "option is larger than capacity value: 1"),
            ("duplicate validValues", pol({"default": "1", "validValues": ["1", "1"]}, "4"),
             pol({"default": "1", "validValues": ["1", "2"]}, "4"),
             rp + ".validValues[1]", 'Duplicate value: "1"'),
            ("11 validValues", pol({"default": "1", "validValues": [str(i) for i in
                                                                    range(1, 12)]}, "16"),
             pol({"default": "1", "validValues": [str(i) for i in range(1, 11)]}, "16"),
             rp + ".validValues", "Too many: 11: must have at most 10 items"),
            ("min above value", pol({"default": "5", "validRange": {"min": "5"}}, "4"),
             pol({"default": "4", "validRange": {"min": "4"}}, "4"),
             rp + ".validRange.min", "min is larger than capacity value: 4"),
            ("min above max", pol({"default": "3", "validRange": {"min": "3", "max": "2"}}, "4"),
             pol({"default": "2", "validRange": {"min": "2", "max": "2"}}, "4"),
             rp + ".validRange.max", "min is larger than max: 2"),
            ("default above max",
             pol({"default": "3", "validRange": {"min": "1", "max": "2"}}, "4"),
             pol({"default": "2", "validRange": {"min": "1", "max": "2"}}, "4"),
             rp + ".validRange.default", "default is more than max: 2"),
            ("max off step",
             pol({"default": "1", "validRange": {"min": "1", "max": "4", "step": "2"}}, "8"),
             pol({"default": "1", "validRange": {"min": "1", "max": "5", "step": "2"}}, "8"),
             rp + ".validRange.step", "value is not a multiple of a given step (2) from (1)"),
            ("negative step", pol({"default": "1", "validRange": {"min": "1", "step": "-1"}}, "8"),
             pol({"default": "1", "validRange": {"min": "1", "step": "7"}}, "8"),
             rp + ".validRange.step", "must be greater than zero"),
            ("negative min", pol({"default": "0", "validRange": {"min": "-2", "step": "2"}}, "8"),
             pol({"default": "0", "validRange": {"min": "0", "step": "2"}}, "8"),
             rp + ".validRange.min", "must be greater than or equal to 0"),
        ])

    def test_attribute_values(self):
        def attrs(a):
            return lambda o: _set(o, ("spec", "devices", 0, "attributes"), a)
        at = "spec.devices[0].attributes"
        self.breaks_and_passes([
            ("string of 65 bytes", attrs({"x": {"string": "é" * 32 + "a"}}),
             attrs({"x": {"string": "é" * 32}}), at + "[x].string",
             "Too long: may not be more than 64 bytes"),
            ("version of 65", attrs({"x": {"version": "1.0.0-" + "a" * 59}}),
             attrs({"x": {"version": "1.0.0-" + "a" * 58}}), at + "[x].version", "Too long"),
            ("version with leading zero", attrs({"x": {"version": "01.0.0"}}),
             attrs({"x": {"version": "10.0.0"}}), at + "[x].version", "semver.org"),
            ("empty list", attrs({"x": {"ints": []}}), attrs({"x": {"ints": [0]}}),
             at + "[x].ints", "must not be empty if specified"),
            ("list string of 65", attrs({"x": {"strings": ["a" * 65]}}),
             attrs({"x": {"strings": ["a" * 64]}}), at + "[x].strings[0]", "Too long"),
            ("49 attribute values", attrs({"x": {"ints": list(range(48))}, "y": {"int": 1}}),
             attrs({"x": {"ints": list(range(47))}, "y": {"int": 1}}), "spec.devices[0]",
             "the total number of attribute values must not exceed 48"),
        ])

    def test_names(self):
        def dev(field, value):
            return lambda o: _set(o, ("spec", "devices", 0, field), value)
        self.breaks_and_passes([
            # 1.36 does not look at a key with two slashes (§1.7); its first part still is.
            ("attribute domain empty", dev("attributes", {"/x": {"int": 1}}),
             dev("attributes", {"a/b/c": {"int": 1}}), "spec.devices[0].attributes",
             "Required value: the domain must not be empty"),
            ("device name of 64", dev("name", "a" * 64), dev("name", "a" * 63),
             "spec.devices[0].name", "must be no more than 63 characters"),
            ("device name ending in -", dev("name", "cpu-"), dev("name", "0cpu-0"),
             "spec.devices[0].name", "RFC 1123 label"),
            ("capacity key of 33", dev("capacity", {"c" * 33: {"value": "1"}}),
             dev("capacity", {"c" * 32: {"value": "1"}}), "spec.devices[0].capacity",
             "Too long: may not be more than 32"),
            ("attribute domain of 64", dev("attributes", {"a" * 60 + ".com/x": {"int": 1}}),
             dev("attributes", {"a" * 59 + ".com/x": {"int": 1}}), "spec.devices[0].attributes",
             "Too long: may not be more than 63"),
            ("taint value of 64", dev("taints", [{"key": "k", "value": "v" * 64,
                                                  "effect": "None"}]),
             dev("taints", [{"key": "k", "value": "v" * 63, "effect": "None"}]),
             "spec.devices[0].taints[0].value", "must be no more than 63 characters"),
            ("taint key name of 64", dev("taints", [{"key": "x.io/" + "k" * 64,
                                                     "effect": "None"}]),
             dev("taints", [{"key": "x.io/" + "k" * 63, "effect": "None"}]),
             "spec.devices[0].taints[0].key", "name part must be no more than 63 characters"),
            ("binding condition format", lambda o: (
                dev("bindingConditions", ["not ok"])(o),
                dev("bindingFailureConditions", ["failed"])(o)),
             lambda o: (dev("bindingConditions", ["x.io/ready"])(o),
                        dev("bindingFailureConditions", ["failed"])(o)),
             "spec.devices[0].bindingConditions[0]", "name part must consist of"),
            ("counter name", dev("consumesCounters", [{"counterSet": "s", "counters": {
                "Mem": {"value": "1"}}}]),
             dev("consumesCounters", [{"counterSet": "s", "counters": {"mem": {"value": "1"}}}]),
             "spec.devices[0].consumesCounters[0].counters", "RFC 1123 label"),
            ("counter set name", dev("consumesCounters", [{"counterSet": "S", "counters": {
                "mem": {"value": "1"}}}]),
             dev("consumesCounters", [{"counterSet": "s", "counters": {"mem": {"value": "1"}}}]),
             "spec.devices[0].consumesCounters[0].counterSet", "RFC 1123 label"),
        ])

    def test_limits(self):
        def dev(field, value):
            return lambda o: _set(o, ("spec", "devices", 0, field), value)

        def taints(n):
            return [{"key": "k%d" % i, "effect": "NoSchedule"} for i in range(n)]

        def conditions(n, prefix):
            return ["%s%d" % (prefix, i) for i in range(n)]

        def consumption(n):
            return [{"counterSet": "s", "counters": {"c%d" % i: {"value": "1"}
                                                     for i in range(n)}}]
        listy = [make_device("d%d" % i) for i in range(65)]
        listy[0]["attributes"] = {"cores": {"ints": [0]}}
        self.breaks_and_passes([
            ("17 taints", dev("taints", taints(17)), dev("taints", taints(16)),
             "spec.devices[0].taints", "Too many: 17: must have at most 16 items"),
            ("5 binding conditions", lambda o: (
                dev("bindingConditions", conditions(5, "ok"))(o),
                dev("bindingFailureConditions", ["failed"])(o)),
             lambda o: (dev("bindingConditions", conditions(4, "ok"))(o),
                        dev("bindingFailureConditions", conditions(4, "failed"))(o)),
             "spec.devices[0].bindingConditions", "Too many: 5: must have at most 4 items"),
            ("binding condition in both lists", lambda o: (
                dev("bindingConditions", ["x"])(o), dev("bindingFailureConditions", ["x"])(o)),
             lambda o: (dev("bindingConditions", ["x"])(o),
                        dev("bindingFailureConditions", ["y"])(o)),
             "spec.devices[0].bindingFailureConditions[0]", "must not overlap"),
            ("33 counters consumed", dev("consumesCounters", consumption(33)),
             dev("consumesCounters", consumption(32)),
             "spec.devices[0].consumesCounters[0].counters",
             "Too many: 33: must have at most 32 items"),
            ("a counter set consumed twice", dev("consumesCounters", consumption(1) * 2),
             dev("consumesCounters", consumption(1)), "spec.devices[0].consumesCounters[1]",
             'Duplicate value: "s"'),
            ("65 devices with a list attribute", lambda o: _set(o, ("spec", "devices"), listy),
             lambda o: _set(o, ("spec", "devices"), listy[:64]), "spec.devices",
             "Too many: 65: must have at most 64 items"),
        ])

    def test_one_of_node_selection(self):
        selector = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}
        self.breaks_and_passes([
            ("nodeName and nodeSelector", lambda o: _set(o, ("spec", "nodeSelector"), selector),
             lambda o: (_del(o, ("spec", "nodeName")), _set(o, ("spec", "nodeSelector"),
                                                            selector)),
             "spec", "multiple fields are set"),
            ("perDeviceNodeSelection false", lambda o: (
                _del(o, ("spec", "nodeName")), _set(o, ("spec", "perDeviceNodeSelection"),
                                                    False)),
             lambda o: (_del(o, ("spec", "nodeName")),
                        _set(o, ("spec", "perDeviceNodeSelection"), True),
                        _set(o, ("spec", "devices", 0, "allNodes"), True)),
             "spec.perDeviceNodeSelection", "must be either unset or set to true"),
            ("two device node fields", lambda o: (
                _del(o, ("spec", "nodeName")), _set(o, ("spec", "perDeviceNodeSelection"), True),
                _set(o, ("spec", "devices", 0, "allNodes"), True),
                _set(o, ("spec", "devices", 0, "nodeName"), "node-a")),
             lambda o: (_del(o, ("spec", "nodeName")),
                        _set(o, ("spec", "perDeviceNodeSelection"), True),
                        _set(o, ("spec", "devices", 0, "nodeName"), "node-a")),
             "spec.devices[0]", "exactly one of `nodeName`, `nodeSelector`, or `allNodes`"),
            ("matchFields on another field", lambda o: (
                _del(o, ("spec", "nodeName")), _set(o, ("spec", "nodeSelector"), {
                    "nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.uid", "operator": "In", "values": ["x"]}]}]})),
             lambda o: (_del(o, ("spec", "nodeName")), _set(o, ("spec", "nodeSelector"),
                                                            selector)),
             "spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].key",
             "not a valid field selector key"),
        ])


class CommandLineTest(unittest.TestCase):
    def test_port_file_and_banner(self):
        server = ServerProcess()
        try:
            self.assertEqual(server.stdout_line,
                             "listening on http://127.0.0.1:%d" % server.port)
            self.assertEqual(Client(server.port).get("/healthz").code, 200)
        finally:
            server.stop()

    def test_bad_flags_exit_2(self):
        for args in (["--versions", "v1beta1"], ["--node", "bad"], ["--mixins", "maybe"],
                     ["--watch-history", "0"], ["--device-taints", "maybe"],
                     ["--pool-checks", "maybe"]):
            with self.subTest(args):
                p = subprocess.run([PYTHON, SERVER] + args, capture_output=True, text=True,
                                   timeout=10)
                self.assertEqual(p.returncode, 2, p.stderr)

    def test_fixed_port_can_be_reused_at_once(self):
        first = ServerProcess()
        port = first.port
        Client(port).post(SLICES, make_slice())
        first.stop()
        second = ServerProcess("--port", str(port))
        try:
            self.assertEqual(second.port, port)
            self.assertEqual(Client(port).get(SLICES).json["items"], [])
        finally:
            second.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
