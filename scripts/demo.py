#!/usr/bin/python3
"""A whole node, locally: the fake API server, `topodra run` on a temporary kubelet directory, and
the kubelet simulator. Shows the published slices, prepares a grouped claim, a prioritized-list
claim and (after a restart with --group-by machine) an external-scheduler claim with an opaque
cpuset, prints a CDI file, shows a bad cpuset rejected, and unprepares everything.

usage: scripts/demo.py BUILD_DIR [TOPOLOGY_XML]
"""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = "demo-node"


def banner(text):
    print("\n== " + text, flush=True)


class Api:
    def __init__(self, url):
        self.url = url

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req) as resp:
            return json.loads(resp.read())

    def claim(self, name, requests, results, config=()):
        """Creates the claim and allocates it as the scheduler would; returns ns/name/uid."""
        base = "/apis/resource.k8s.io/v1/namespaces/demo/resourceclaims"
        spec = {"devices": {"requests": requests}}
        created = self.call("POST", base, {"metadata": {"name": name}, "spec": spec})
        created["status"] = {
            "allocation": {"devices": {"results": results, "config": list(config)}},
            "reservedFor": [{"resource": "pods", "name": "pod-" + name, "uid": "pod-uid-" + name}],
        }
        self.call("PUT", base + "/" + name + "/status", created)
        return "demo/%s/%s" % (name, created["metadata"]["uid"])


def request(name, cls="dra.cpu"):
    return {"name": name, "exactly": {"deviceClassName": cls}}


def result(req, device, cpus=None):
    r = {"request": req, "driver": "dra.cpu", "pool": NODE, "device": device}
    if cpus:
        r["consumedCapacity"] = {"dra.cpu/cpu": cpus}
    return r


def cpuset(cpus, requests=()):
    return {"source": "FromClaim", "requests": list(requests),
            "opaque": {"driver": "dra.cpu",
                       "parameters": {"apiVersion": "v1alpha1", "cpuConfig": {"cpuset": cpus}}}}


def main():
    build = sys.argv[1]
    topology = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        REPO, "test", "fixtures", "topologies", "32em64t-2n8c2t-pci-normalio.xml")
    topodra = os.path.join(build, "cmd", "topodra")
    sim = os.path.join(build, "test", "kubelet_sim", "kubelet_sim")
    work = tempfile.mkdtemp(prefix="topodra-demo-")
    kubelet = os.path.join(work, "kubelet")
    procs = []
    try:
        port_file = os.path.join(work, "port")
        procs.append(subprocess.Popen(
            ["/usr/bin/python3", os.path.join(REPO, "test", "integration", "fake_apiserver.py"),
             "--port", "0", "--port-file", port_file, "--node", NODE + "=uid-" + NODE],
            stderr=subprocess.DEVNULL))
        for _ in range(200):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.05)
        port = open(port_file).read().strip()
        api = Api("http://127.0.0.1:" + port)
        kubeconfig = os.path.join(work, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\ncurrent-context: demo\n"
                    "clusters: [{name: demo, cluster: {server: 'http://127.0.0.1:%s'}}]\n"
                    "users: [{name: demo, user: {}}]\n"
                    "contexts: [{name: demo, context: {cluster: demo, user: demo}}]\n" % port)
        print("fake API server on 127.0.0.1:%s; node %s is %s; kubelet root %s"
              % (port, NODE, os.path.basename(topology), kubelet))

        def start_daemon(*extra):
            log = open(os.path.join(work, "topodra.log"), "a")
            p = subprocess.Popen([topodra, "run", "--kubeconfig", kubeconfig, "--node-name", NODE,
                                  "--topology-file", topology, "--kubelet-root-dir", kubelet,
                                  "--cdi-dir", os.path.join(work, "cdi"),
                                  "--state-dir", os.path.join(work, "state"),
                                  # Never the host's: pinning is off, and stays off the host if
                                  # a demo step turns it on.
                                  "--cgroup-root", os.path.join(work, "cgroup"),
                                  "--hook-dir", os.path.join(work, "hook"),
                                  "--enforce", "none", "--metrics-address", "none",
                                  "--health-address", "none"] + list(extra),
                                 stderr=log)
            procs.append(p)
            out = subprocess.run([sim, "--root-dir", kubelet, "wait", "dra.cpu"],
                                 capture_output=True, text=True, check=True)
            print("kubelet simulator: registered " + out.stdout.strip())
            return p

        def kubelet_call(verb, *claims):
            out = subprocess.run([sim, "--root-dir", kubelet, verb, "dra.cpu"] + list(claims),
                                 capture_output=True, text=True)
            print(out.stdout.strip() or out.stderr.strip())
            return json.loads(out.stdout) if out.stdout.strip() else {}

        def show_cdi(uid):
            # The name ends with the instance marker (_i<16 hex digits>.json).
            paths = glob.glob(os.path.join(work, "cdi", "dra.cpu-claim_%s_i*.json" % uid))
            if len(paths) != 1:
                sys.exit("demo: want one CDI file of claim %s, found %s" % (uid, paths))
            print("-- " + paths[0])
            print(open(paths[0]).read().strip())

        banner("topodra run (grouped by NUMA node); the slices it published")
        daemon = start_daemon()
        for _ in range(100):
            slices = api.call("GET", "/apis/resource.k8s.io/v1/resourceslices")["items"]
            if slices:
                break
            time.sleep(0.05)
        for s in slices:
            spec = s["spec"]
            names = ", ".join(d["name"] for d in spec.get("devices", []))
            print("%s: driver %s, pool %s: %s" % (s["metadata"]["name"], spec["driver"],
                                                   spec["pool"]["name"], names))

        banner("a grouped claim: 4 CPUs of NUMA node 1, chosen by topodra")
        grouped = api.claim("grouped", [request("cpus")], [result("cpus", "cpudevnuma001", "4")])
        kubelet_call("prepare", grouped)
        show_cdi(grouped.split("/")[2])

        banner("a prioritized-list claim: subrequest 'small' was allocated; its config applies")
        prio = api.claim("prioritized",
                         [{"name": "cpus", "firstAvailable": [
                             {"name": "large", "deviceClassName": "dra.cpu"},
                             {"name": "small", "deviceClassName": "dra.cpu"}]}],
                         [result("cpus/small", "cpudevnuma000", "2")],
                         [cpuset("2-3", ["cpus/small"])])
        kubelet_call("prepare", prio)

        banner("a bad cpuset is rejected, with its value in the message")
        bad = api.claim("bad-cpuset", [request("cpus")], [result("cpus", "cpudevnuma000", "2")],
                        [cpuset("4,9,40")])
        kubelet_call("prepare", bad)

        banner("unprepare everything")
        kubelet_call("unprepare", grouped, prio, bad)

        banner("restart with --group-by machine: an external scheduler names the CPUs")
        daemon.send_signal(signal.SIGTERM)
        daemon.wait()
        start_daemon("--group-by", "machine")
        external = api.claim("external", [request("cpus")],
                             [result("cpus", "cpudevmachine", "6")], [cpuset("10-12,26-28")])
        kubelet_call("prepare", external)
        show_cdi(external.split("/")[2])
        banner("unprepare it")
        kubelet_call("unprepare", external)
        print("CDI files left: %s" % sorted(os.listdir(os.path.join(work, "cdi"))))
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait()
        banner("topodra log")
        log = os.path.join(work, "topodra.log")
        if os.path.exists(log):
            print(open(log).read().strip())
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
