"""The command line of fake_apiserver.py: flags (port and port files, TLS and token, served
versions, gate-like switches --mixins, --list-attributes, --device-taints, --node-allocatable,
--pool-checks,
--unconditional-update, --crd, --node, watch history and bookmarks, request log) and main(),
which serves until killed. The --help text is the package docstring (fakeapi/__init__.py).

Source: the switches model the feature gates of k8s-api-cdi.md §1.9 and
k8s-1.35-1.37-addendum.md §5-§6 and KEP-5234 (§1.10); the rest is test plumbing."""

import argparse
import os
import ssl
import sys
import threading

from . import __doc__ as PACKAGE_DOC
from .api import Api, Config
from .crd import load_crds
from .errors import CrdError
from .formats import is_dns1123_subdomain
from .resource_type import RESOURCE_VERSIONS
from .server import make_server


def write_port_file(path, port):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def parse_args(argv):
    p = argparse.ArgumentParser(description=PACKAGE_DOC.split("\n\n")[0],
                                epilog="\n\n".join(
                                    para for para in PACKAGE_DOC.split("\n\n")
                                    if para.startswith(("For kubectl", "Custom resources",
                                                        "Control endpoints",
                                                        "Where it differs"))),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: ephemeral)")
    p.add_argument("--port-file", help="write the port here (atomically) once listening")
    p.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (chain)")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument("--client-ca", help="require client certificates signed by this CA (mTLS)")
    p.add_argument("--token", default="", help="require 'Authorization: Bearer TOKEN'")
    p.add_argument("--versions", default="v1,v1beta2",
                   help="resource.k8s.io versions to serve (of v1, v1beta2)")
    p.add_argument("--mixins", choices=("reject", "accept"), default="reject",
                   help="reject: spec.mixins/includes are unknown fields (the real API); "
                        "accept: KEP-5234 fields are part of the schema and validated")
    p.add_argument("--list-attributes", choices=("drop", "accept"), default="drop",
                   help="ints/bools/strings/versions attributes: drop (gate "
                        "DRAListTypeAttributes off, as in 1.36) or accept")
    p.add_argument("--device-taints", choices=("drop", "accept"), default="accept",
                   help="spec.devices[].taints of ResourceSlices: accept (validated, timeAdded "
                        "defaulted) or drop (silently, like a server with DRADeviceTaints off)")
    p.add_argument("--node-allocatable", choices=("drop", "v1.36", "v1.37"), default="drop",
                   help="node-allocatable fields of ResourceSlice devices (KEP-5517): drop (gate "
                        "DRANodeAllocatableResources off: both fields silently dropped), v1.36 "
                        "(nodeAllocatableResourceMappings validated, nodeAllocatableResources "
                        "unknown) or v1.37 (nodeAllocatableResources validated, "
                        "nodeAllocatableResourceMappings unknown)")
    p.add_argument("--pool-checks", choices=("accept", "reject"), default="accept",
                   help="a device or shared counter set name used in two slices of one pool "
                        "(same driver, pool name and generation): accept (default; the real "
                        "API server stores it and the scheduler ignores the pool) or reject "
                        "(422 Invalid naming the other slice)")
    p.add_argument("--crd", action="append", default=[], metavar="FILE",
                   help="serve the CustomResourceDefinition(s) in this YAML file (repeatable; "
                        "needs PyYAML)")
    p.add_argument("--unconditional-update", choices=("reject", "allow"), default="reject",
                   help="PUT without metadata.resourceVersion: reject with 409 (default) or "
                        "allow (what the real server does for ResourceSlices)")
    p.add_argument("--node", action="append", default=[], metavar="NAME=UID",
                   help="serve a Node object at /api/v1/nodes/NAME (repeatable)")
    p.add_argument("--watch-history", type=int, default=1000,
                   help="events kept for watches; older resourceVersions get 410 Expired")
    p.add_argument("--bookmark-interval", type=float, default=1.0,
                   help="seconds between BOOKMARK events (allowWatchBookmarks=true)")
    p.add_argument("--initial-resource-version", type=int, default=None,
                   help="first resourceVersion (default: microseconds since the epoch, so a "
                        "restarted server never reuses the resourceVersions of an earlier one)")
    p.add_argument("--control-port-file",
                   help="also serve /__control/* and /healthz over plain HTTP on another "
                        "ephemeral port (also when the API port is TLS) and write that port here")
    p.add_argument("--log", help="append one line per API request to this file")
    args = p.parse_args(argv)
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    if not versions or any(v not in RESOURCE_VERSIONS for v in versions):
        p.error("--versions: expected a comma-separated subset of %s, got %r"
                % (",".join(RESOURCE_VERSIONS), args.versions))
    args.versions = list(dict.fromkeys(versions))
    nodes = []
    for spec in args.node:
        name, sep, uid = spec.partition("=")
        if not sep or not name or not uid or is_dns1123_subdomain(name):
            p.error("--node: expected NAME=UID with NAME a DNS subdomain, got %r" % spec)
        nodes.append((name, uid))
    args.nodes = nodes
    if args.watch_history < 1:
        p.error("--watch-history must be at least 1")
    if args.bookmark_interval <= 0:
        p.error("--bookmark-interval must be positive")
    if bool(args.tls_cert) != bool(args.tls_key):
        p.error("--tls-cert and --tls-key go together")
    if args.client_ca and not args.tls_cert:
        p.error("--client-ca needs --tls-cert/--tls-key")
    if not 0 <= args.port <= 65535:
        p.error("--port must be in 0..65535")
    try:
        args.crd_types = load_crds(args.crd)
    except CrdError as e:
        p.error("--crd: %s" % e)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log_file = open(args.log, "a") if args.log else None
    api = Api(Config(args), log_file)
    try:
        server = make_server(api, args.port, args.tls_cert, args.tls_key, args.client_ca)
    except (OSError, ssl.SSLError) as e:
        print("fake_apiserver: cannot listen on 127.0.0.1:%d: %s" % (args.port, e),
              file=sys.stderr)
        return 1
    port = server.server_address[1]
    if args.control_port_file:
        control = make_server(api, 0, control_only=True)
        threading.Thread(target=control.serve_forever, kwargs={"poll_interval": 0.2},
                         daemon=True).start()
        write_port_file(args.control_port_file, control.server_address[1])
    if args.port_file:
        write_port_file(args.port_file, port)
    scheme = "https" if args.tls_cert else "http"
    print("listening on %s://127.0.0.1:%d" % (scheme, port), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0
