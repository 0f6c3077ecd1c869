#!/usr/bin/python3
"""A scriptable HTTP(S) server for the kube client tests (Python stdlib only).

usage: http_stub.py --routes ROUTES.json --log REQUESTS.jsonl [--cert C --key K [--client-ca CA]]

Listens on 127.0.0.1 on an ephemeral port and prints "PORT <n>" once ready. ROUTES.json is
{"routes": [route, ...]}; the first route whose method and path match answers:
  method        "GET", ... (absent: any)
  path          exact path with query; or path_prefix
  require_token answer 401 (a v1 Status) unless "Authorization: Bearer <require_token>"
  delay         seconds to sleep before answering
  status        HTTP code (default 200); reason: the reason phrase
  headers       [[name, value], ...]
  body          a JSON value to send; body_text: raw text; echo: true sends the request back as
                {"method", "path", "headers" (lower-case names), "body", "client_cn"}
  chunks        chunked response: items are text, {"text": t, "repeat": n} or {"sleep": s};
                hold: seconds to wait before the final chunk
  hang_up_next  after answering, read the next request's first line on the same connection and
                close it unanswered (a kept-alive connection the server dropped), logged as
                {"method": "hung-up", "path": <request line>}
Every request is appended to the log as {"method", "path", "authorization", "body"}.
"""
import argparse
import http.server
import json
import socketserver
import ssl
import sys
import threading
import time

ROUTES = []
LOG_PATH = None
LOG_LOCK = threading.Lock()


def status_body(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def log_request(entry):
    with LOG_LOCK, open(LOG_PATH, "a") as log:
        log.write(json.dumps(entry) + "\n")


def find_route(method, path):
    for route in ROUTES:
        if route.get("method", method) != method:
            continue
        if "path" in route and route["path"] != path:
            continue
        if "path_prefix" in route and not path.startswith(route["path_prefix"]):
            continue
        return route
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_one_request(self):
        if getattr(self, "hang_up_next", False):
            line = self.rfile.readline(65537).decode("latin-1").strip()
            if line:
                log_request({"method": "hung-up", "path": line, "authorization": None,
                             "body": ""})
            self.close_connection = True
            return
        try:
            super().handle_one_request()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, TimeoutError):
            self.close_connection = True

    def do_GET(self):
        self.serve()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def read_body(self):
        length = int(self.headers.get("Content-Length", "0") or "0")
        return self.rfile.read(length).decode("utf-8", "replace") if length > 0 else ""

    def client_cn(self):
        getpeercert = getattr(self.connection, "getpeercert", None)
        cert = getpeercert() if getpeercert else None
        for rdn in (cert or {}).get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    return value
        return None

    def send(self, code, reason, headers, payload):
        self.send_response(code, reason)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def serve(self):
        text = self.read_body()
        auth = self.headers.get("Authorization")
        log_request({"method": self.command, "path": self.path, "authorization": auth,
                     "body": text})
        route = find_route(self.command, self.path)
        if route is None:
            body = status_body(404, "NotFound", "no route for %s %s" % (self.command, self.path))
            self.send(404, None, [["Content-Type", "application/json"]], json.dumps(body).encode())
            return
        token = route.get("require_token")
        if token is not None and auth != "Bearer " + token:
            body = status_body(401, "Unauthorized", "Unauthorized")
            self.send(401, None, [["Content-Type", "application/json"]], json.dumps(body).encode())
            return
        time.sleep(route.get("delay", 0))
        code = route.get("status", 200)
        headers = route.get("headers", [])
        if "chunks" in route:
            self.send_chunks(code, route.get("reason"), headers, route)
            return
        if route.get("echo"):
            try:
                sent = json.loads(text) if text else None
            except ValueError:
                sent = text
            body = {"method": self.command, "path": self.path, "body": sent,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "client_cn": self.client_cn()}
            payload = json.dumps(body).encode()
        elif "body_text" in route:
            payload = route["body_text"].encode()
        elif "body" in route:
            payload = json.dumps(route["body"]).encode()
        else:
            payload = b""
        self.send(code, route.get("reason"), headers + [["Content-Type", "application/json"]],
                  payload)
        self.hang_up_next = route.get("hang_up_next", False)

    def send_chunks(self, code, reason, headers, route):
        self.send_response(code, reason)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for item in route["chunks"]:
            if isinstance(item, dict) and "sleep" in item:
                time.sleep(item["sleep"])
                continue
            if isinstance(item, dict):
                data = (item["text"] * item.get("repeat", 1)).encode()
            else:
                data = item.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        time.sleep(route.get("hold", 0))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global ROUTES, LOG_PATH
    parser = argparse.ArgumentParser()
    parser.add_argument("--routes", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--client-ca")
    args = parser.parse_args()
    with open(args.routes) as f:
        ROUTES = json.load(f)["routes"]
    LOG_PATH = args.log
    server = Server(("127.0.0.1", 0), Handler)
    if args.cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        if args.client_ca:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(args.client_ca)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print("PORT %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
