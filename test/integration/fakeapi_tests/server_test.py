"""HTTP behaviour (fakeapi/server.py, api.py, cli.py): error injection, hostile input, held
requests (/__control/hang), TLS with a token and mTLS, and the command line."""

import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import unittest

from fakeapi_tests.harness import (CLAIMS, ClaimTestCase, Client, make_claim, make_pki, make_slice,
                                   PYTHON, SERVER, ServerProcess, ServerTestCase, SLICES, Watch)


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
                     ["--pool-checks", "maybe"], ["--node-allocatable", "v1.38"]):
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
