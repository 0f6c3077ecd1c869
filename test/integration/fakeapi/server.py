"""HTTP(S) in front of api.py: routing of /api, /apis, /openapi/v3, /healthz and /__control
paths, bearer-token and mTLS authentication, bodies of at most 3 MiB (413), content types and
Accept negotiation (Tables, 406), Warning headers, and watch streams (chunked newline-delimited
events, bookmarks, 410 Expired as an ERROR event, timeoutSeconds, streams ended by
/__control/close-watches or reset).

Source: k8s-api-cdi.md §3.1 (paths), §3.2 (operations and status codes; 429 with
Retry-After), §3.3 (watch semantics, bookmarks, expiry), §3.4/§3.5 (bearer token, CA,
kubeconfig for tests), §1.8 (request-body cap of about 3 MiB, unverified there)."""

import hmac
import json
import os
import select
import socket
import ssl
import sys
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .api import ClientGone, parse_bool
from .errors import ApiError, bad_request, method_not_allowed, not_found_path, status_object
from .formats import is_dns1123_label
from .kubectl import to_table, wants_table


MAX_BODY_BYTES = 3 * 1024 * 1024
MAX_DRAINED_BYTES = 64 * 1024 * 1024  # an oversized body is read and dropped up to this size


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-apiserver"
    sys_version = ""
    disable_nagle_algorithm = True
    timeout = 300  # idle keep-alive connections

    api = None  # set on the subclass made by make_server
    control_only = False  # the plain-HTTP control listener serves /__control/* and /healthz

    def setup(self):
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
        super().setup()

    def version_string(self):
        return self.server_version

    def log_message(self, fmt, *args):
        pass

    def log_request(self, code="-", size="-"):
        path, _, query = (getattr(self, "path", None) or "").partition("?")
        if path.startswith("/__control/") or path in ("/healthz", "/readyz", "/livez"):
            return
        try:
            code = int(code)
        except (TypeError, ValueError):
            code = 0
        self.api.record(self.command or "", path, query, code)

    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    # --- plumbing --------------------------------------------------------------------------------

    def dispatch(self):
        self.headers_sent = False
        self.undrained = 0
        try:
            self.route()
        except ApiError as e:
            if self.headers_sent:
                self.close_connection = True
            else:
                self.send_json(e.code, e.body(), e.headers)
                self.drain()
        except (ClientGone, BrokenPipeError, ConnectionResetError, socket.timeout, ssl.SSLError):
            self.close_connection = True
        except Exception as e:  # never let bad input kill the thread without an answer
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            if not self.headers_sent:
                try:
                    self.send_json(500, status_object(500, "InternalError",
                                                      "Internal error occurred: %s" % e))
                except OSError:
                    pass

    def send_json(self, code, body, headers=(), content_type="application/json"):
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.headers_sent = True
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_text(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.headers_sent = True
        if self.command != "HEAD":
            self.wfile.write(data)

    def drain(self):
        """After answering 413: reads and drops the rest of the body (bounded), so that a client
        still sending it gets to read the answer instead of a reset connection."""
        left = min(self.undrained, MAX_DRAINED_BYTES)
        self.undrained = 0
        try:
            self.connection.settimeout(5)
            while left > 0:
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    break
                left -= len(chunk)
        except (OSError, ValueError):
            pass

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if te.lower() == "chunked":
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise ClientGone()
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    raise bad_request("malformed chunked request body")
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY_BYTES:
                    self.close_connection = True
                    raise ApiError(413, "RequestEntityTooLarge",
                                   "Request entity too large: limit is %d" % MAX_BODY_BYTES)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
            return b"".join(chunks)
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            n = int(length)
            if n < 0:
                raise ValueError()
        except ValueError:
            self.close_connection = True
            raise bad_request("invalid Content-Length: %s" % length)
        if n > MAX_BODY_BYTES:
            self.close_connection = True
            self.undrained = n
            raise ApiError(413, "RequestEntityTooLarge",
                           "Request entity too large: limit is %d" % MAX_BODY_BYTES)
        data = self.rfile.read(n)
        if len(data) < n:
            raise ClientGone()
        return data

    # --- routing ----------------------------------------------------------------------------------

    def route(self):
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        params = {k: v[0] for k, v in
                  urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        body = self.read_body()
        method = self.command
        api = self.api

        if path in ("/healthz", "/readyz", "/livez"):
            return self.send_text(200, "ok")
        if path.startswith("/__control/"):
            return self.control(path[len("/__control/"):], method, params)
        if self.control_only:
            raise not_found_path()

        if api.cfg.token:
            expected = ("Bearer " + api.cfg.token).encode()
            given = self.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                raise ApiError(401, "Unauthorized", "Unauthorized")
        hang = api.take_hang(method, path)
        if hang:
            api.hold(hang, self.client_closed)
        failure = api.take_injected_failure(method, path)
        if failure:
            raise failure
        self.table_version = wants_table(self.headers.get("Accept", ""))

        segs = [urllib.parse.unquote(s) for s in path.split("/") if s]
        discovery = self.discovery(segs)
        if discovery is not None:
            if method not in ("GET", "HEAD"):
                raise method_not_allowed()
            return self.send_json(200, discovery)
        if len(segs) < 3 or segs[0] not in ("api", "apis"):
            raise not_found_path()
        if segs[0] == "api":
            group, version, rest = "", segs[1], segs[2:]
        else:
            if len(segs) < 4:
                raise not_found_path()
            group, version, rest = segs[1], segs[2], segs[3:]
        if version not in api.served_versions(group):
            raise not_found_path()
        ns = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise not_found_path()
        rt = api.types.get((group, version, rest[0]))
        if rt is None or (ns and not rt.namespaced):
            raise not_found_path()
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and (sub != "status" or not rt.status_subresource):
            raise not_found_path()
        if rt.namespaced and not ns and name:
            raise not_found_path()
        if ns and is_dns1123_label(ns):
            # Namespaces are implicit: every valid name exists, no other does.
            raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns,
                           {"name": ns, "kind": "namespaces"})
        if sub:
            return self.status_subresource(rt, version, ns, name, method, params, body)
        self.resource(rt, version, ns, name, method, params, body)

    def status_subresource(self, rt, version, ns, name, method, params, body):
        """GET, PUT and PATCH of <object>/status."""
        api = self.api
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if method in ("GET", "HEAD") and "get" in rt.verbs:
            return self.send_json(200, api.get(rt, version, ns, name))
        if method == "PUT" and "update" in rt.verbs:
            if content_type not in ("", "application/json"):
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                               "unknown format - accepted media types include: "
                               "application/json")
            code, obj, warnings = api.update(rt, version, ns, name, body, params,
                                             subresource="status")
            return self.send_json(code, obj, self.warning_headers(warnings))
        if method == "PATCH" and "patch" in rt.verbs:
            self.check_patch_type(content_type)
            code, obj, warnings = api.patch(rt, version, ns, name, body, params, content_type,
                                            subresource="status")
            return self.send_json(code, obj, self.warning_headers(warnings))
        raise method_not_allowed()

    @staticmethod
    def check_patch_type(content_type):
        if content_type == "application/apply-patch+yaml":
            raise ApiError(415, "UnsupportedMediaType", "server-side apply is not supported "
                           "by the fake API server")
        if content_type not in ("application/merge-patch+json", "application/json-patch+json",
                                "application/strategic-merge-patch+json"):
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                           "unknown format - accepted media types include: "
                           "application/json-patch+json, application/merge-patch+json, "
                           "application/strategic-merge-patch+json")

    def discovery(self, segs):
        """The discovery document at segs, or None when segs is not a discovery path."""
        api = self.api
        if segs[:2] == ["openapi", "v3"]:
            if len(segs) == 2:
                return api.openapi_root()
            rest = segs[2:]
            if len(rest) == 2 and rest[0] == "api" and rest[1] in api.served_versions(""):
                return api.openapi_document("", rest[1])
            if (len(rest) == 3 and rest[0] == "apis"
                    and rest[2] in api.served_versions(rest[1])):
                return api.openapi_document(rest[1], rest[2])
            raise not_found_path()
        if segs == ["version"]:
            return {"major": "1", "minor": "36", "gitVersion": "v1.36.0-fake",
                    "platform": "linux/amd64"}
        if segs == ["api"]:
            return {"kind": "APIVersions", "versions": api.served_versions("")}
        if segs == ["apis"]:
            groups = []
            for g in sorted({rt.group for rt in api.type_list if rt.group}):
                doc = api.api_group(g)
                del doc["kind"], doc["apiVersion"]
                groups.append(doc)
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if len(segs) == 2 and segs[0] == "api" and segs[1] in api.served_versions(""):
            return api.resource_list("", segs[1])
        if len(segs) == 2 and segs[0] == "apis" and api.served_versions(segs[1]):
            return api.api_group(segs[1])
        if (len(segs) == 3 and segs[0] == "apis"
                and segs[2] in api.served_versions(segs[1])):
            return api.resource_list(segs[1], segs[2])
        return None

    def resource(self, rt, version, ns, name, method, params, body):
        api = self.api

        def need(verb):
            if verb not in rt.verbs:
                raise method_not_allowed()

        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if method in ("POST", "PUT") and content_type not in ("", "application/json"):
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                           "unknown format - accepted media types include: application/json")
        if not name:
            if method in ("GET", "HEAD"):
                if parse_bool(params, "watch"):
                    need("watch")
                    return self.watch(rt, version, ns, params)
                need("list")
                return self.send_object(rt, version, api.list(rt, version, ns, params), params,
                                        is_list=True)
            if method == "POST":
                need("create")
                if rt.namespaced and not ns:
                    raise method_not_allowed()
                code, obj, warnings = api.create(rt, version, ns, body, params)
                return self.send_json(code, obj, self.warning_headers(warnings))
            if method == "DELETE":
                need("deletecollection")
                if rt.namespaced and not ns:
                    raise method_not_allowed()
                code, obj = api.delete_collection(rt, version, ns, params, body)
                return self.send_json(code, obj)
            raise method_not_allowed()
        if method in ("GET", "HEAD"):
            if parse_bool(params, "watch"):
                need("watch")
                params = dict(params)
                extra = "metadata.name=" + name.replace("\\", "\\\\").replace(",", "\\,")
                params["fieldSelector"] = ",".join(
                    s for s in (params.get("fieldSelector", ""), extra) if s)
                return self.watch(rt, version, ns, params)
            need("get")
            return self.send_object(rt, version, api.get(rt, version, ns, name), params,
                                    is_list=False)
        if method == "PUT":
            need("update")
            code, obj, warnings = api.update(rt, version, ns, name, body, params)
            return self.send_json(code, obj, self.warning_headers(warnings))
        if method == "PATCH":
            need("patch")
            self.check_patch_type(content_type)
            code, obj, warnings = api.patch(rt, version, ns, name, body, params, content_type)
            return self.send_json(code, obj, self.warning_headers(warnings))
        if method == "DELETE":
            need("delete")
            code, obj = api.delete(rt, version, ns, name, body, params)
            return self.send_json(code, obj)
        raise method_not_allowed()

    def send_object(self, rt, version, body, params, is_list):
        """A GET answer: the object or list, or its Table when the client asked for one."""
        if self.table_version is None:
            return self.send_json(200, body)
        table = to_table(rt, version, body, self.table_version, params, is_list)
        return self.send_json(200, table, content_type="application/json;as=Table;v=%s;"
                              "g=meta.k8s.io" % self.table_version)

    @staticmethod
    def warning_headers(warnings):
        return [("Warning", '299 - %s' % json.dumps(w)) for w in warnings]

    # --- watch ------------------------------------------------------------------------------------

    def write_chunk(self, data):
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except (OSError, ValueError):
            raise ClientGone()

    def write_event(self, etype, obj):
        line = json.dumps({"type": etype, "object": obj}, separators=(",", ":")) + "\n"
        self.write_chunk(line.encode())

    def write_event_text(self, etype, object_text):
        """write_event with the object already encoded: the same bytes."""
        self.write_chunk(('{"type":%s,"object":%s}\n' % (json.dumps(etype), object_text))
                         .encode())

    def client_closed(self):
        """True when the peer has closed its side (EOF), checked without consuming data."""
        sock = self.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        if not readable:
            return False
        try:
            if isinstance(sock, ssl.SSLSocket):
                raw = socket.socket(fileno=os.dup(sock.fileno()))
                try:
                    return raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
                finally:
                    raw.close()
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def watch(self, rt, version, ns, params):
        api = self.api
        store = api.store
        fsel, lsel = api._selectors(rt, params)
        bookmarks = parse_bool(params, "allowWatchBookmarks")
        send_initial = parse_bool(params, "sendInitialEvents")
        timeout = params.get("timeoutSeconds", "")
        try:
            timeout = int(timeout) if timeout else 0
            if timeout < 0:
                raise ValueError()
        except ValueError:
            raise bad_request("invalid timeoutSeconds: %s" % params.get("timeoutSeconds"))
        if send_initial and (params.get("resourceVersionMatch") != "NotOlderThan"
                             or not bookmarks):
            raise ApiError(422, "Invalid", 'ListOptions.meta.k8s.io "" is invalid: '
                           'sendInitialEvents: Forbidden: sendInitialEvents is forbidden for '
                           'watch unless resourceVersionMatch is set to NotOlderThan and '
                           'allowWatchBookmarks is set to true')
        rv_text = params.get("resourceVersion", "")
        expired = None
        with store.lock:
            reset_epoch, close_epoch = store.reset_epoch, store.close_epoch
            if rv_text in ("", "0") or send_initial:
                if rv_text not in ("", "0"):
                    api._check_rv_param(params)
                table = store.tables[rt.type_key]
                initial = [table[k] for k in sorted(table)
                           if api._matches(rt, table[k], ns, fsel, lsel)]
                last = store.rv
            else:
                try:
                    start = int(rv_text)
                except ValueError:
                    raise bad_request("invalid resource version: %s" % json.dumps(rv_text))
                if start > store.rv:
                    api._check_rv_param(params)
                initial = []
                last = start
                if start < store.floor:
                    expired = "too old resource version: %d (%d)" % (start, store.floor)
            store.open_watches += 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            self.headers_sent = True
            self.close_connection = True
            if expired:
                self.write_event("ERROR", status_object(410, "Expired", expired))
            else:
                self.stream(rt, version, ns, fsel, lsel, initial, last, bookmarks,
                            send_initial, timeout, reset_epoch, close_epoch)
            self.write_chunk(b"")
        except ClientGone:
            pass
        finally:
            with store.lock:
                store.open_watches -= 1

    def stream(self, rt, version, ns, fsel, lsel, initial, last, bookmarks, send_initial,
               timeout, reset_epoch, close_epoch):
        api = self.api
        store = api.store
        for obj in initial:
            self.write_event("ADDED", rt.render(obj, version))
        if send_initial:
            self.write_event("BOOKMARK", {
                "kind": rt.kind, "apiVersion": rt.group_version(version),
                "metadata": {"resourceVersion": str(last),
                             "annotations": {"k8s.io/initial-events-end": "true"}}})
        now = time.monotonic()
        deadline = now + timeout if timeout else None
        interval = api.cfg.bookmark_interval
        next_bookmark = now + interval if bookmarks else None
        while True:
            with store.lock:
                while True:
                    if store.reset_epoch != reset_epoch or store.floor > last:
                        error = "too old resource version: %d (%d)" % (last, store.floor)
                        events = None
                        break
                    if store.close_epoch != close_epoch:
                        return
                    events = store.events_after(last)
                    now = time.monotonic()
                    if events or (deadline is not None and now >= deadline) or (
                            next_bookmark is not None and now >= next_bookmark):
                        break
                    wait = 0.5
                    if deadline is not None:
                        wait = min(wait, deadline - now)
                    if next_bookmark is not None:
                        wait = min(wait, next_bookmark - now)
                    store.cond.wait(max(wait, 0.001))
                    if time.monotonic() - now >= 0.4 and not events:
                        break  # periodically look at the socket outside the lock
            if events is None:
                self.write_event("ERROR", status_object(410, "Expired", error))
                return
            for ev in events:
                last = ev.rv
                if ev.type_key != rt.type_key:
                    continue
                etype = ev.etype
                new_match = api._matches(rt, ev.obj, ns, fsel, lsel)
                if etype == "MODIFIED":
                    old_match = api._matches(rt, ev.old, ns, fsel, lsel)
                    if not old_match and not new_match:
                        continue
                    if not old_match:
                        etype = "ADDED"
                    elif not new_match:
                        etype = "DELETED"
                elif not new_match:
                    continue
                self.write_event_text(etype, ev.text(rt, version))
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            if next_bookmark is not None and now >= next_bookmark:
                self.write_event("BOOKMARK", {"kind": rt.kind,
                                              "apiVersion": rt.group_version(version),
                                              "metadata": {"resourceVersion": str(last)}})
                next_bookmark = now + interval
            if not events and self.client_closed():
                raise ClientGone()

    # --- control ----------------------------------------------------------------------------------

    def control(self, what, method, params):
        api = self.api
        store = api.store
        if what == "requests":
            if method == "GET":
                with api.requests_lock:
                    return self.send_json(200, list(api.requests))
            if method == "DELETE":
                with api.requests_lock:
                    api.requests.clear()
                return self.send_json(200, [])
            raise method_not_allowed()
        if what == "hang":
            return self.control_hang(method, params)
        if what == "state" and method == "GET":
            with store.lock:
                count = sum(len(t) for t in store.tables.values())
                return self.send_json(200, {"resourceVersion": str(store.rv),
                                            "oldestWatchableResourceVersion": str(store.floor),
                                            "openWatches": store.open_watches,
                                            "objects": count})
        if method != "POST":
            raise method_not_allowed() if what in ("reset", "fail", "close-watches") \
                else not_found_path()
        if what == "reset":
            with store.lock:
                store.wipe()
                api.seed_nodes()
                api.snapshots.clear()
                return self.send_json(200, {"resourceVersion": str(store.rv)})
        if what == "fail":
            try:
                count = int(params.get("count", "1"))
                code = int(params.get("code", "503"))
                retry_after = int(params.get("retryAfter", "1"))
                if count < 0 or not 400 <= code <= 599:
                    raise ValueError()
            except ValueError:
                raise bad_request("usage: POST /__control/fail?count=N&code=4xx|5xx"
                                  "[&method=M][&path=SUBSTRING][&retryAfter=S]")
            with api.fail_lock:
                api.fail = {"count": count, "code": code, "method": params.get("method", ""),
                            "path": params.get("path", ""), "retry_after": retry_after}
            return self.send_json(200, {"count": count, "code": code})
        if what == "close-watches":
            with store.lock:
                n = store.open_watches
                store.close_epoch += 1
                store.cond.notify_all()
            return self.send_json(200, {"closed": n})
        raise not_found_path()


    def control_hang(self, method, params):
        api = self.api
        if method == "GET":
            with api.hang_cond:
                return self.send_json(200, [dict(h) for h in api.hangs])
        if method == "DELETE":
            with api.hang_cond:
                released = sum(h["waiting"] for h in api.hangs)
                api.hangs = []
                api.hang_epoch += 1
                api.hang_cond.notify_all()
            return self.send_json(200, {"released": released})
        if method != "POST":
            raise method_not_allowed()
        try:
            seconds = float(params.get("seconds", "3600"))
            count = int(params.get("count", "-1"))
            if not params.get("path") or not 0 <= seconds <= 3600 or count < -1:
                raise ValueError()
        except ValueError:
            raise bad_request("usage: POST /__control/hang?path=SUBSTRING[&method=M]"
                              "[&seconds=S (0-3600, default 3600)][&count=N]")
        rule = {"method": params.get("method", ""), "path": params["path"], "seconds": seconds,
                "count": count, "matched": 0, "waiting": 0}
        with api.hang_cond:
            api.hangs.append(rule)
            return self.send_json(200, {"rule": len(api.hangs) - 1})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (OSError, ssl.SSLError, ClientGone)):
            return  # failed handshakes, resets: the client's problem
        traceback.print_exc(file=sys.stderr)


def make_server(api, port, tls_cert=None, tls_key=None, client_ca=None, control_only=False):
    handler = type("BoundHandler", (Handler,), {"api": api, "control_only": control_only})
    deadline = time.monotonic() + 5
    while True:
        try:
            server = Server(("127.0.0.1", port), handler)
            break
        except OSError as e:
            # A restart on the same port may race the old process' socket going away.
            if port == 0 or time.monotonic() > deadline or e.errno not in (98, 99):
                raise
            time.sleep(0.05)
    if tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(tls_cert, tls_key)
        if client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(client_ca)
        server.socket = ctx.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    return server
