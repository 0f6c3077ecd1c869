#!/usr/bin/python3
"""runtime_real_host_test: a real OCI runtime (podman 4.3 + runc) consumes the CDI specs topodra
writes and runs its cpuset hook, against this host's real cgroup hierarchy.

A whole node as `make demo` runs it (the fake API server, `topodra run`, the kubelet simulator),
in two instances sharing the CDI directory:
  * "real": this machine's topology (hwloc), --enforce=cgroup on /sys/fs/cgroup, the hook in a
    temporary --hook-dir, the CPU device plugin on;
  * "gpu": a simulated machine with GPUs (nvidiaDGX2.xml), --enforce=none, a fake --host-root
    whose /dev holds real device nodes (mknod) for one GPU.
For a grouped CPU claim, a machine-mode claim with an opaque cpuset, a GPU claim and a
device-plugin CPU allocation it runs a busybox container with `podman run --device <CDI id from
the prepare answer>` and checks inside: every environment variable of the spec (the runtime's
environment of pid 1, and through busybox `sh`, which drops names with '-': their shell-safe
twins must be there), the device nodes with their major:minor, and Cpus_allowed_list = the
claim's CPUs (the hook). It also checks that a container without a claim is kept off claimed
CPUs (the reconciler), that a hook failing (a CPU not on the machine) fails the container's
creation, and that after unprepare the reconciler widens a running container back to the
shared pool.

Exercises the REAL HOST: it creates cgroups under <cgroup mount>/kubepods (the layout of a
kubelet with the cgroupfs driver; podman names its containers libpod-<id> there). Every pod UID
it uses starts with 7e57c0de-, so a tree a killed run left (only such pods, no process in it) is
removed at the start; any other kubepods hierarchy (a real node) makes it refuse. It removes
every cgroup it created at the end, also on failure, a deadline or SIGTERM/SIGHUP/SIGINT (on
cgroup v2, controllers runc enabled in the root's cgroup.subtree_control stay enabled). Two
runs on one host (two build trees) take turns on an flock of
/run/lock/topodra-runtime-test.lock.
Everything else stays in temporary directories and private namespaces (mount and PID: every
process the inner part starts, podman's conmon and the containers included, dies with it):
/run/cdi and /etc/cdi (podman 4.3 reads CDI specs only there), /dev/shm (podman's locks),
podman's storage (--root, --runroot, --tmpdir), its network configuration
(--network-config-dir: otherwise it creates /etc/containers/networks/netavark.lock or
/etc/cni/net.d/cni.lock on the host even with --network none). Where AppArmor is enabled,
containers run with apparmor=unconfined: podman would otherwise load its default profile into
the host's kernel.

Skips (exit 77, one line why) where the host cannot run containers at all: not root, no podman
or runc, no cpuset controller.

usage: runtime_real_host_test.py --topodra BIN --kubelet-sim BIN --source SOURCE_DIR
(topodra finds topodra-cpuset-hook beside itself and installs it into a temporary --hook-dir)
"""

import argparse
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
import uuid

SKIP = 77
# The inner part's deadline; its cleanup takes at most CLEANUP_S more. The outer part gives it
# DEADLINE_S + CLEANUP_S + 30, then SIGTERM, then (10 s later) SIGKILL, and removes the cgroups.
# It waits at most LOCK_WAIT_S for another run's lock. ctest's TIMEOUT (CMakeLists.txt) is above
# the sum, so the cgroup cleanup runs before ctest kills us.
DEADLINE_S = 150
CLEANUP_S = 40
LOCK_WAIT_S = 200
LOCK_FILE = "/run/lock/topodra-runtime-test.lock"
# Every pod UID of the test starts with this (a valid UUID: the daemon's cgroup layout parser
# accepts only those); a stale kubepods tree holding only such pods is a killed run's.
POD_UID_PREFIX = "7e57c0de-"
WORK_PREFIX = "topodra-runtime-"
WORK_MARKER = "topodra-runtime-test.work"  # in every work directory: a killed run's is removed
NODE = "rt-node"
GPU_NODE = "rt-gpu-node"
CPU_DRIVER = "dra.cpu"
GPU_DRIVER = "gpu.topodra.io"
DP_RESOURCE = "topodra.io/cpu"


def apparmor_enabled():
    try:
        with open("/sys/module/apparmor/parameters/enabled") as f:
            return f.read().strip() == "Y"
    except OSError:
        return False


PODMAN_RUN = ["--runtime", "runc", "--ulimit", "nofile=20000:20000",
              "--ulimit", "nproc=1000:1000", "--network", "none"] + (
    # podman would load its containers-default profile into the host's kernel (it stays there).
    ["--security-opt", "apparmor=unconfined"] if apparmor_enabled() else [])
APPLETS = ["sh", "cat", "env", "grep", "cut", "stat", "tr", "sleep", "echo", "ls"]
# The newest cdiVersion Debian bookworm's podman 4.3 (container-device-interface 0.5) reads.
PODMAN_CDI_VERSION = (0, 5, 0)
# Under /run: state of runc, crun, podman and CRI tools, and CDI specs; never the host's.
RUNTIME_STATE_IN_RUN = {"runc", "crun", "libpod", "containers", "netns", "cdi", "mount"}
# Where a container finds the device metadata of its claims (KEP-5304), whatever the claim,
# request and driver: .../resourceclaims/<claim>/<request>/<driver>-metadata.json
METADATA_GLOB = "/var/run/kubernetes.io/dra-device-attributes/*/*/*/*-metadata.json"
SAFE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
OUR_POD = re.compile(r"^pod" + POD_UID_PREFIX + r"[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PR_SET_PDEATHSIG = 1


def pod_uid():
    return POD_UID_PREFIX + str(uuid.uuid4())[len(POD_UID_PREFIX):]


def die_with_parent():
    """preexec_fn: SIGKILL this child when the process that started it dies (even by SIGKILL)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(127)


class Failure(Exception):
    pass


def log(msg):
    # ctest killed by a signal closes our stdout: the cleanup must go on without it.
    try:
        print(msg, flush=True)
    except OSError:
        pass


# ----------------------------------------------------------------------------------------------
# Outside the mount namespace: preconditions, and the cleanup of the host's cgroups.

def cgroup_mounts():
    """Every cgroup (v1 and v2) mount point of this host."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] in ("cgroup", "cgroup2"):
                out.append(parts[1])
    return sorted(set(out))


def kubepods_dirs(mounts=None):
    return [os.path.join(m, n) for m in (cgroup_mounts() if mounts is None else mounts)
            for n in ("kubepods", "kubepods.slice") if os.path.isdir(os.path.join(m, n))]


def has_cpuset(root="/sys/fs/cgroup"):
    """v1: a cpuset hierarchy at <root>/cpuset; v2 (unified): cpuset among the root's
    controllers."""
    if os.path.exists(root + "/cpuset/cpuset.cpus"):
        return True
    try:
        with open(root + "/cgroup.controllers") as f:
            return "cpuset" in f.read().split()
    except OSError:
        return False


def stale_problem(tree):
    """Why `tree` (a kubepods directory) is not a killed run's leftover of this test, or None if
    it is: only besteffort/pod<our prefix>... below it (anything under such a pod is podman's)
    and no process anywhere."""
    if os.path.basename(tree) != "kubepods":
        return "%s is not the cgroupfs layout this test makes" % tree
    for root, _dirs, _files in os.walk(tree):
        rel = os.path.relpath(root, tree).split(os.sep)
        if rel != ["."] and rel[0] != "besteffort":
            return "%s is not ours (this test makes only besteffort pods)" % root
        if len(rel) >= 2 and not OUR_POD.match(rel[1]):
            return "%s is not ours (pod UIDs of this test start with %s)" % (root, POD_UID_PREFIX)
        try:
            with open(os.path.join(root, "cgroup.procs")) as f:
                procs = f.read().split()
        except OSError as e:
            return "cannot read %s/cgroup.procs: %s" % (root, e)
        if procs:
            return "processes %s run in %s" % (" ".join(procs), root)
    return None


def remove_cgroup_trees(trees, attempts=50):
    """Kills what still runs in them (our containers' leftovers: the tree did not exist before
    the test) and removes the directories bottom-up. Returns what could not be removed."""
    left = []
    for _ in range(attempts):
        left = []
        for tree in trees:
            if not os.path.isdir(tree):
                continue
            for root, _dirs, _files in os.walk(tree, topdown=False):
                try:
                    with open(os.path.join(root, "cgroup.procs")) as f:
                        for pid in f.read().split():
                            try:
                                os.kill(int(pid), signal.SIGKILL)
                            except ProcessLookupError:
                                pass
                except OSError:
                    pass
                try:
                    os.rmdir(root)
                except OSError:
                    left.append(root)
        if not left:
            return []
        time.sleep(0.1)
    return left


# Where podman, runc, crun and CNI/netavark keep configuration, state and locks on a host: the
# test must change nothing there (its own are in the work directory and private namespaces).
# Only theirs: other tests and services may write elsewhere in /run or /dev/shm meanwhile.
HOST_RUNTIME_PATHS = ["/etc/containers", "/etc/cni", "/etc/cdi", "/run/runc", "/run/crun",
                      "/run/libpod", "/run/containers", "/run/cdi", "/run/netns",
                      "/var/lib/containers", "/var/lib/cni", "/dev/shm/libpod_lock"]


def host_snapshot():
    """Every file and directory under HOST_RUNTIME_PATHS with its type, size and mtime."""
    out = {}
    for top in HOST_RUNTIME_PATHS:
        if os.path.lexists(top) and not os.path.isdir(top):
            st = os.lstat(top)
            out[top] = (st.st_mode, st.st_size, st.st_mtime_ns)
        for root, dirs, files in os.walk(top):
            for name in [""] + dirs + files:
                path = os.path.join(root, name) if name else root
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                out[path] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def snapshot_diff(before, after):
    return (["new %s" % p for p in sorted(set(after) - set(before))] +
            ["gone %s" % p for p in sorted(set(before) - set(after))] +
            ["changed %s" % p for p in sorted(set(before) & set(after))
             if before[p] != after[p]])


def take_lock():
    """An flock every run of this test on the host takes before it looks at kubepods, held until
    its cgroups are gone (RESOURCE_LOCK serialises only the tests of one ctest). The fd, or None
    after LOCK_WAIT_S."""
    os.makedirs(os.path.dirname(LOCK_FILE), exist_ok=True)
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline = time.monotonic() + LOCK_WAIT_S
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            if not said:
                log("another run of this test holds %s: waiting up to %d s" % (LOCK_FILE,
                                                                             LOCK_WAIT_S))
                said = True
            time.sleep(0.5)


def inner_pid(unshare_pid):
    """The inner python: unshare --fork's only child (PID 1 of the new PID namespace)."""
    try:
        with open("/proc/%d/task/%d/children" % (unshare_pid, unshare_pid)) as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except (OSError, ValueError):
        return None


def run_inner(argv):
    """Runs the inner part in new mount and PID namespaces and waits for it. unshare ignores
    SIGTERM and SIGINT while it waits: the outer's signals and deadline go to the inner python
    (which cleans up), and 10 s later SIGKILL goes to unshare, whose --kill-child then kills the
    namespace's PID 1 and so every process in it. PDEATHSIG does the same if we are killed.
    unshare runs in its own session, so a hangup or Ctrl-C of the terminal reaches only us (and
    is forwarded as SIGTERM), not unshare, which would kill the inner part without its cleanup."""
    proc = subprocess.Popen(["unshare", "-m", "-p", "-f", "--kill-child", "--mount-proc",
                             "--propagation", "private", sys.executable,
                             os.path.abspath(__file__), "--inside"] + argv,
                            preexec_fn=die_with_parent, start_new_session=True)
    got = []

    def on_signal(signum, _frame):
        got.append(signum)
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        deadline = time.monotonic() + DEADLINE_S + CLEANUP_S + 30
        term_sent = None
        delivered = False
        while True:
            try:
                return proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if term_sent is None and (got or now > deadline):
                log("outer: %s: SIGTERM to the inner part" % (
                    "got signal %d" % got[0] if got else "the inner part overran its deadline"))
                term_sent = now
            # Sent again until the inner python exists and has had time to set its handlers: as
            # a PID namespace's init it ignores signals it has no handler for.
            if term_sent is not None and not delivered:
                pid = inner_pid(proc.pid)
                if pid is not None:
                    os.kill(pid, signal.SIGTERM)
                    delivered = now > term_sent + 3
                if now > term_sent + 8:
                    delivered = True
            if term_sent is None:
                continue
            if now > term_sent + (CLEANUP_S + 5 if got else 10):
                log("outer: the inner part did not stop: SIGKILL to its PID namespace")
                proc.kill()
                proc.wait()
                return 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for s, h in old.items():
            signal.signal(s, h)
        if got:
            log("outer: stopped by signal %d" % got[0])


def outer(args):
    if os.geteuid() != 0:
        log("SKIP: not root: running containers with podman/runc and writing host cgroups needs root")
        return SKIP
    for tool in ("podman", "runc", "unshare", "mount"):
        if shutil.which(tool) is None:
            log("SKIP: no %s on this host (scripts/build-deps.txt installs podman and runc)" % tool)
            return SKIP
    if not has_cpuset():
        log("SKIP: no cpuset cgroup controller under /sys/fs/cgroup: containers cannot be pinned")
        return SKIP
    busybox = shutil.which("busybox")
    if busybox is None or "not a dynamic executable" not in subprocess.run(
            ["ldd", busybox], capture_output=True, text=True).stderr:
        log("FAIL: busybox-static is not installed (scripts/build-deps.txt): no container rootfs")
        return 1
    lock = take_lock()
    if lock is None:
        log("FAIL: another run of this test held %s for more than %d s" % (LOCK_FILE, LOCK_WAIT_S))
        return 1
    try:
        # Every tree is judged before any is removed: one that is not ours leaves all in place.
        for tree in kubepods_dirs():
            problem = stale_problem(tree)
            if problem:
                log("FAIL: refusing to run: %s exists and %s (a kubelet's pod hierarchy: this "
                    "looks like a real node)" % (tree, problem))
                return 1
        for tree in kubepods_dirs():
            left = remove_cgroup_trees([tree], attempts=10)
            if left:
                log("FAIL: %s is a killed run's leftover, but %s cannot be removed" % (tree, left))
                return 1
            log("removed %s: a killed run's leftover (only pods %s..., no process)" % (
                tree, POD_UID_PREFIX))
        # Under the lock no other run is alive: a work directory with our marker is a killed
        # run's (its mounts died with its mount namespace).
        tmp = tempfile.gettempdir()
        for name in sorted(os.listdir(tmp)):
            path = os.path.join(tmp, name)
            if name.startswith(WORK_PREFIX) and os.path.isfile(os.path.join(path, WORK_MARKER)):
                shutil.rmtree(path, ignore_errors=True)
                log("removed %s: a killed run's work directory" % path)
        trees = [os.path.join(m, "kubepods") for m in cgroup_mounts()]
        start = time.monotonic()
        before = host_snapshot()
        try:
            rc = run_inner(sys.argv[1:])
        finally:
            left = remove_cgroup_trees(trees)
        if left:
            log("FAIL: could not remove the cgroups this test created: %s" % left)
            return 1
        changed = snapshot_diff(before, host_snapshot())
        if changed:
            log("FAIL: the host's container runtime files changed during the test (the test "
                "must keep podman/runc in its own directories): %s" % changed[:20])
            return 1
        if kubepods_dirs():
            log("FAIL: kubepods cgroups left behind: %s" % kubepods_dirs())
            return 1
        log("wall time %.1f s; every cgroup the test created is removed, nothing under %s "
            "changed" % (time.monotonic() - start, " ".join(HOST_RUNTIME_PATHS)))
        return rc
    finally:
        os.close(lock)  # releases the flock


# ----------------------------------------------------------------------------------------------
# Inside the private mount and PID namespaces.

def sh(cmd, check=True, **kw):
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and res.returncode != 0:
        raise Failure("%s exited %d:\n%s%s" % (" ".join(cmd), res.returncode, res.stdout,
                                                res.stderr))
    return res


def mount(*args):
    # -n: no utab under the host's /run/mount (libmount would create that directory).
    sh(["mount", "-n"] + list(args))


def private_cdi_dirs(work):
    """/run/cdi (= /var/run/cdi) and /etc/cdi become temporary directories of this namespace,
    without creating anything on the host: /run is replaced by a tmpfs that mirrors the host's
    /run entry by entry (bind mounts), except what a container runtime keeps state in (runc's and
    crun's container state, podman's, the CDI specs), which starts empty here."""
    run = os.path.realpath("/var/run")
    old = work + "/host-run"
    os.makedirs(old)
    mount("--rbind", run, old)
    mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", run)
    for name in os.listdir(old):
        if name in RUNTIME_STATE_IN_RUN:
            continue
        src, dst = os.path.join(old, name), os.path.join(run, name)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isdir(src):
            os.mkdir(dst)
            mount("--rbind", src, dst)
        else:
            open(dst, "w").close()
            mount("--bind", src, dst)
    # The mirror holds its own bind mounts now; the copy of the host's /run must not stay under
    # the work directory, whose removal would then delete the host's files.
    mount("--make-rprivate", old)
    sh(["umount", "-n", "--recursive", "--lazy", old])
    os.rmdir(old)
    run_cdi = run + "/cdi"
    os.mkdir(run_cdi)
    if os.path.isdir("/etc/cdi"):
        os.makedirs(work + "/etc-cdi")
        mount("--bind", work + "/etc-cdi", "/etc/cdi")
    # podman's locks (/dev/shm/libpod_lock) are global: never share them with the host's podman.
    mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/dev/shm")
    return run_cdi


def reap_conmons():
    """This process is PID 1 of its namespace: conmon (podman's monitor, which daemonizes)
    becomes its child and a zombie when it exits. Only conmons are reaped: a subprocess child
    reaped here would lose its exit status."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if comm == "conmon" and fields[0] == "Z" and fields[1] == str(os.getpid()):
            try:
                os.waitpid(int(entry), os.WNOHANG)
            except ChildProcessError:
                pass


class Api:
    def __init__(self, url):
        self.url = url

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req) as resp:
            return json.loads(resp.read())

    def claim(self, name, requests, results, config=(), pod_uid=None):
        base = "/apis/resource.k8s.io/v1/namespaces/rt/resourceclaims"
        created = self.call("POST", base, {"metadata": {"name": name},
                                           "spec": {"devices": {"requests": requests}}})
        created["status"] = {
            "allocation": {"devices": {"results": results, "config": list(config)}},
            "reservedFor": [{"resource": "pods", "name": "pod-" + name,
                             "uid": pod_uid or str(uuid.uuid4())}],
        }
        self.call("PUT", base + "/" + name + "/status", created)
        return "rt/%s/%s" % (name, created["metadata"]["uid"])


def read_cpu_list(text):
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def fmt_cpus(cpus):
    out, cpus = [], sorted(cpus)
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else "%d-%d" % (cpus[i], cpus[j]))
        i = j + 1
    return ",".join(out)


class Node:
    """The node: the fake API server, two topodra instances, the kubelet simulator, podman."""

    def __init__(self, args, work, cdi_dir):
        self.args, self.work, self.cdi_dir = args, work, cdi_dir
        self.topodra, self.sim = args.topodra, args.kubelet_sim
        self.procs = {}
        self.checks = 0
        self.rootfs = os.path.join(work, "rootfs")
        for d in ("bin", "proc", "sys", "dev", "etc", "tmp"):
            os.makedirs(os.path.join(self.rootfs, d))
        shutil.copy(shutil.which("busybox"), os.path.join(self.rootfs, "bin", "busybox"))
        for applet in APPLETS:
            os.symlink("busybox", os.path.join(self.rootfs, "bin", applet))
        self.podman_base = ["podman", "--root", work + "/storage", "--runroot", work + "/runroot",
                            "--tmpdir", work + "/libpod-tmp", "--storage-driver", "vfs",
                            "--events-backend", "none", "--cgroup-manager", "cgroupfs",
                            "--network-config-dir", work + "/networks"]
        with open("/sys/devices/system/cpu/online") as f:
            self.online = read_cpu_list(f.read())

    def check(self, cond, what):
        if not cond:
            raise Failure(what)
        self.checks += 1

    # -- processes
    def start_apiserver(self):
        port_file = os.path.join(self.work, "port")
        server = os.path.join(self.args.source, "test", "integration", "fake_apiserver.py")
        if not os.path.isfile(server):
            raise Failure("no fake API server at %s (is --source %s the source directory?)" % (
                server, self.args.source))
        self.procs["apiserver"] = subprocess.Popen(
            [sys.executable, server,
             "--port", "0", "--port-file", port_file, "--node", NODE + "=uid-" + NODE,
             "--node", GPU_NODE + "=uid-" + GPU_NODE],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.work, "apiserver.log"), "w"))
        port = ""
        deadline = time.monotonic() + 20
        while not port and time.monotonic() < deadline:
            if self.procs["apiserver"].poll() is not None:
                break
            if os.path.exists(port_file):
                with open(port_file) as f:
                    port = f.read().strip()
            time.sleep(0.05)
        if not port:
            with open(os.path.join(self.work, "apiserver.log")) as f:
                log_tail = f.read()[-2000:]
            raise Failure("the fake API server %s wrote no port to %s (%s):\n%s" % (
                server, port_file, "exited %d" % self.procs["apiserver"].returncode
                if self.procs["apiserver"].poll() is not None else "still running after 20 s",
                log_tail))
        self.api = Api("http://127.0.0.1:" + port)
        self.kubeconfig = os.path.join(self.work, "kubeconfig")
        with open(self.kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\ncurrent-context: rt\n"
                    "clusters: [{name: rt, cluster: {server: 'http://127.0.0.1:%s'}}]\n"
                    "users: [{name: rt, user: {}}]\n"
                    "contexts: [{name: rt, context: {cluster: rt, user: rt}}]\n" % port)

    def start_daemon(self, name, extra):
        kubelet = os.path.join(self.work, "kubelet-" + name)
        cmd = [self.topodra, "run", "--kubeconfig", self.kubeconfig,
               "--kubelet-root-dir", kubelet, "--cdi-dir", self.cdi_dir,
               "--state-dir", os.path.join(self.work, "state-" + name),
               "--metrics-address", "none", "--health-address", "none"] + extra
        logf = open(os.path.join(self.work, "topodra-%s.log" % name), "a")
        p = subprocess.Popen(cmd, stderr=logf, stdout=logf)
        self.procs["topodra-" + name] = p
        res = subprocess.run([self.sim, "--root-dir", kubelet, "--timeout", "20s", "wait",
                              CPU_DRIVER], capture_output=True, text=True)
        if res.returncode != 0:
            raise Failure("topodra (%s) did not register: %s\n%s" % (
                name, res.stderr.strip(), self.daemon_log(name)))
        return kubelet

    def stop_daemon(self, name):
        """SIGTERM: the daemon stops with exit 0 (under ASan, also without a report)."""
        p = self.procs.pop("topodra-" + name)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=20)
        self.check(rc == 0, "topodra (%s) exited %d on SIGTERM:\n%s" % (name, rc,
                                                                      self.daemon_log(name)))

    def daemon_log(self, name):
        path = os.path.join(self.work, "topodra-%s.log" % name)
        return open(path).read()[-4000:] if os.path.exists(path) else ""

    def kubelet(self, kubelet_dir, verb, driver, *items):
        res = subprocess.run([self.sim, "--root-dir", kubelet_dir, "--timeout", "20s", verb,
                              driver] + list(items), capture_output=True, text=True)
        if res.returncode != 0:
            raise Failure("kubelet_sim %s %s %s: exit %d: %s" % (verb, driver, items,
                                                                  res.returncode, res.stderr))
        return json.loads(res.stdout)

    def prepare(self, kubelet_dir, driver, claim, request):
        """The claim's uid and its CDI ids: the device's, then its device metadata's (one
        request, one device)."""
        uid = claim.split("/")[2]
        answer = self.kubelet(kubelet_dir, "prepare", driver, claim)[uid]
        if answer["error"]:
            raise Failure("prepare %s: %s" % (claim, answer["error"]))
        ids = [i for d in answer["devices"] for i in d["cdiDeviceIds"]]
        meta = "%s/metadata=%s_%s" % (driver, uid, request)
        self.check(len(ids) == 2 and ids[1] == meta, "claim %s: want the device's CDI id and "
                   "then %s, got %s" % (claim, meta, ids))
        return uid, ids

    def unprepare(self, kubelet_dir, driver, claim):
        uid = claim.split("/")[2]
        answer = self.kubelet(kubelet_dir, "unprepare", driver, claim)[uid]
        if answer["error"]:
            raise Failure("unprepare %s: %s" % (claim, answer["error"]))

    def podman(self, *args, check=True, timeout=60):
        try:
            return sh(self.podman_base + list(args), check=check, timeout=timeout)
        finally:
            reap_conmons()

    def cleanup(self):
        """Each step on its own: one failing (podman hanging on a lock a killed podman held)
        must not keep the others from running. At most 20 s + 5 s per process (CLEANUP_S). What
        survives dies with the PID namespace when this process exits."""
        try:
            self.podman("rm", "--force", "--all", "--time", "0", check=False, timeout=20)
        except Exception as e:  # noqa: BLE001 - logged, the processes must still be stopped
            log("cleanup: podman rm --all: %s: %s" % (type(e).__name__, e))
        finally:
            for name in reversed(list(self.procs)):
                p = self.procs[name]
                try:
                    if p.poll() is None:
                        p.send_signal(signal.SIGTERM)
                        try:
                            p.wait(timeout=5)
                        except subprocess.TimeoutExpired:
                            log("cleanup: %s did not stop on SIGTERM in 5 s: SIGKILL" % name)
                            p.kill()
                            p.wait(timeout=5)
                except Exception as e:  # noqa: BLE001
                    log("cleanup: stopping %s: %s: %s" % (name, type(e).__name__, e))

    # -- CDI
    def spec_of(self, cdi_id):
        """The spec file holding the device `cdi_id` (kind=name), and the device."""
        kind, _, name = cdi_id.partition("=")
        for fname in sorted(os.listdir(self.cdi_dir)):
            with open(os.path.join(self.cdi_dir, fname)) as f:
                spec = json.load(f)
            if spec.get("kind") != kind:
                continue
            for dev in spec.get("devices", []):
                if dev["name"] == name:
                    version = tuple(int(x) for x in spec["cdiVersion"].split("."))
                    self.check(version <= PODMAN_CDI_VERSION, "%s: cdiVersion %s: podman 4.3's "
                               "CDI library reads specs up to %s and silently ignores newer "
                               "ones (\"unresolvable CDI devices\")" % (
                                   fname, spec["cdiVersion"],
                                   ".".join(map(str, PODMAN_CDI_VERSION))))
                    return fname, spec, dev
        raise Failure("no CDI spec in %s has device %s (files: %s)"
                      % (self.cdi_dir, cdi_id, os.listdir(self.cdi_dir)))

    # -- containers
    def run_container(self, label, pod_uid, cdi_ids, detach=False, name=None, runtime="runc"):
        """Runs busybox sh in pod <pod_uid>'s cgroup with the CDI devices; the script reports
        what the container sees. Returns the parsed report."""
        script = ("echo \"affinity=$(grep Cpus_allowed_list /proc/1/status | cut -f2)\"; "
                  "echo \"mems=$(grep Mems_allowed_list /proc/1/status | cut -f2)\"; "
                  "echo '--- pid1'; tr '\\000' '\\n' < /proc/1/environ; "
                  "echo '--- sh'; env; "
                  "echo '--- dev'; for d in $(ls /dev/dri/* /dev/nvidia* 2>/dev/null); do "
                  "stat -c 'dev %n %F %t:%T' $d; done; "
                  "echo '--- meta'; cat " + METADATA_GLOB + " 2>/dev/null; echo '--- end'")
        cmd = ["run", "--cgroup-parent", "/kubepods/besteffort/pod" + pod_uid] + PODMAN_RUN
        cmd[cmd.index("--runtime") + 1] = runtime
        for i in cdi_ids:
            cmd += ["--device", i]
        if detach:
            cmd += ["-d", "--name", name, "--rootfs", self.rootfs, "/bin/sh", "-c",
                    "(%s) > /tmp/report 2>&1; exec sleep 600" % script]
            self.podman(*cmd)
            deadline = time.monotonic() + 30
            res = None
            while time.monotonic() < deadline:
                res = self.podman("exec", name, "cat", "/tmp/report", check=False)
                if res.returncode == 0 and "--- end" in res.stdout:
                    return self.parse_report(res.stdout)
                time.sleep(0.1)
            raise Failure("%s: container %s wrote no report in 30 s (last podman exec: exit %s, "
                          "%s)" % (label, name, res and res.returncode,
                                   res and (res.stdout + res.stderr).strip()[-500:]))
        cmd += ["--rm", "--rootfs", self.rootfs, "/bin/sh", "-c", script]
        return self.parse_report(self.podman(*cmd).stdout)

    @staticmethod
    def parse_report(text):
        rep = {"affinity": None, "mems": None, "pid1": {}, "sh": {}, "dev": {}, "meta": ""}
        section = None
        for line in text.splitlines():
            if line.startswith("affinity="):
                rep["affinity"] = line[len("affinity="):]
            elif line.startswith("mems="):
                rep["mems"] = line[len("mems="):]
            elif line.startswith("--- "):
                section = line[4:]
            elif section in ("pid1", "sh") and "=" in line:
                k, _, v = line.partition("=")
                rep[section][k] = v
            elif section == "meta":
                rep["meta"] += line + "\n"
            elif section == "dev" and line.startswith("dev "):
                _, path, rest = line.split(" ", 2)
                ftype, _, majmin = rest.rpartition(" ")
                mj, mn = majmin.split(":")
                rep["dev"][path] = (ftype, int(mj, 16), int(mn, 16))
        return rep

    def check_env(self, label, spec, dev, rep):
        """Every variable of the spec (its own edits and the device's) reaches pid 1 as the
        spec says; every name a shell cannot keep has a shell-safe twin with the same value,
        and busybox sh passes on the shell-safe names."""
        env = list(spec.get("containerEdits", {}).get("env", [])) + list(
            dev.get("containerEdits", {}).get("env", []))
        self.check(env, "%s: the CDI spec sets no environment variable" % label)
        names = {}
        for item in env:
            k, _, v = item.partition("=")
            names[k] = v
            self.check(rep["pid1"].get(k) == v, "%s: %s: the container's pid 1 has %r, the CDI "
                       "spec says %r" % (label, k, rep["pid1"].get(k), v))
        for k, v in names.items():
            if SAFE_NAME.match(k):
                self.check(rep["sh"].get(k) == v, "%s: busybox sh does not pass on %s=%s (got "
                           "%r)" % (label, k, v, rep["sh"].get(k)))
            else:
                twin = re.sub(r"[^A-Za-z0-9_]", "_", k)
                self.check(names.get(twin) == v, "%s: %s has no shell-safe twin %s with the same "
                           "value in the spec (%s)" % (label, k, twin, sorted(names)))
                self.check(rep["sh"].get(twin) == v, "%s: busybox sh does not pass on the "
                           "twin %s" % (label, twin))
        return names

    def check_metadata(self, label, rep, want_name):
        """The device metadata file as the container read it (cat): a JSON stream, v1beta1
        first, then v1alpha1. Returns the first device's attributes."""
        objects, text, decoder = [], rep["meta"].strip(), json.JSONDecoder()
        while text:
            try:
                obj, end = decoder.raw_decode(text)
            except ValueError as e:
                raise Failure("%s: the metadata file in the container is not a JSON stream (%s): "
                              "%r" % (label, e, rep["meta"][:500]))
            objects.append(obj)
            text = text[end:].strip()
        self.check([o.get("apiVersion") for o in objects] == [
            "metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1"],
            "%s: the container's metadata file holds %s, want v1beta1 then v1alpha1" % (
                label, [o.get("apiVersion") for o in objects]))
        self.check(objects[0]["metadata"]["name"] == want_name, "%s: the metadata names claim "
                   "%s, want %s" % (label, objects[0]["metadata"]["name"], want_name))
        return objects[0]["requests"][0]["devices"][0].get("attributes", {})

    def check_affinity(self, label, rep, want):
        self.check(rep["affinity"] is not None and read_cpu_list(rep["affinity"]) == want,
                   "%s: Cpus_allowed_list in the container is %r, want %s" % (
                       label, rep["affinity"], fmt_cpus(want)))

    def hook_of(self, spec):
        hooks = spec.get("containerEdits", {}).get("hooks", [])
        self.check(len(hooks) == 1 and hooks[0]["hookName"] == "createRuntime",
                   "want one createRuntime hook in the spec, got %s" % hooks)
        return hooks[0]

    def container_affinity(self, name):
        res = self.podman("exec", name, "grep", "Cpus_allowed_list", "/proc/1/status")
        return read_cpu_list(res.stdout.split(":", 1)[1])

    def wait_affinity(self, name, want, what, timeout=30):
        got = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.container_affinity(name)
            if got == want:
                self.checks += 1
                return
            time.sleep(0.1)
        raise Failure("%s: container %s runs on CPUs %s, want %s after %d s" % (
            what, name, fmt_cpus(got or set()), fmt_cpus(want), timeout))


def gpu_of_fixture(xml_path):
    """The first NVIDIA 3D controller of the fixture: its PCI address."""
    with open(xml_path) as f:
        for m in re.finditer(r'pci_busid="([0-9a-f:.]+)" pci_type="030[02] \[10de:', f.read()):
            return m.group(1)
    raise Failure("no NVIDIA GPU in %s" % xml_path)


def fake_host_root(root, bdf):
    """/sys, /proc and /dev of a host where `bdf` is NVIDIA GPU minor 3 with DRM card1 and
    renderD129; real character device nodes, so the runtime can stat them."""
    nodes = {"/dev/dri/card1": (226, 1), "/dev/dri/renderD129": (226, 129),
             "/dev/nvidia3": (195, 3), "/dev/nvidiactl": (195, 255),
             "/dev/nvidia-uvm": (510, 0), "/dev/nvidia-uvm-tools": (510, 1)}
    for path, (major, minor) in nodes.items():
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        os.mknod(root + path, 0o20666, os.makedev(major, minor))
    drm = root + "/sys/bus/pci/devices/%s/drm" % bdf
    for name in ("card1", "renderD129"):
        os.makedirs(os.path.join(drm, name))
    info = root + "/proc/driver/nvidia/gpus/%s" % bdf
    os.makedirs(info)
    with open(info + "/information", "w") as f:
        f.write("Model: \t\t Tesla V100-SXM3-32GB\nDevice Minor: \t 3\n")
    return nodes


def request(name, cls):
    return {"name": name, "exactly": {"deviceClassName": cls}}


def result(req, driver, pool, device, cpus=None):
    r = {"request": req, "driver": driver, "pool": pool, "device": device}
    if cpus:
        r["consumedCapacity"] = {"dra.cpu/cpu": cpus}
    return r


def cpuset_config(cpus):
    return {"source": "FromClaim", "requests": [],
            "opaque": {"driver": CPU_DRIVER,
                       "parameters": {"apiVersion": "v1alpha1", "cpuConfig": {"cpuset": cpus}}}}


def scenario(node, work):
    real_extra = ["--node-name", NODE, "--enforce", "cgroup", "--cgroup-root", "/sys/fs/cgroup",
                  "--hook-dir", os.path.join(work, "hook"), "--device-plugin", "cpu"]
    online = node.online
    node.check(len(online) >= 2, "this test needs at least 2 online CPUs (one claimed, one shared),"
               " the host has %s" % fmt_cpus(online))

    # ---- the GPU node: simulated, with device nodes under a fake host root
    fixture = os.path.join(node.args.source, "test", "fixtures", "topologies", "nvidiaDGX2.xml")
    bdf = gpu_of_fixture(fixture)
    host_root = os.path.join(work, "host-root")
    gpu_nodes = fake_host_root(host_root, bdf)
    kubelet_gpu = node.start_daemon("gpu", [
        "--node-name", GPU_NODE, "--topology-file", fixture, "--enforce", "none",
        "--host-root", host_root, "--cgroup-root", os.path.join(work, "fake-cgroup"),
        "--hook-dir", os.path.join(work, "hook-gpu")])
    gpu_device = "gpu-" + re.sub(r"[:.]", "-", bdf)
    gpu_claim = node.api.claim("gpu", [request("gpus", GPU_DRIVER)],
                               [result("gpus", GPU_DRIVER, GPU_NODE, gpu_device)])
    gpu_uid, gpu_ids = node.prepare(kubelet_gpu, GPU_DRIVER, gpu_claim, "gpus")
    gpu_id = gpu_ids[0]
    log("GPU claim %s prepared: %s" % (gpu_uid, gpu_id))

    # ---- the real node, grouped by NUMA node (the default)
    kubelet_real = node.start_daemon("real", real_extra)

    # A container without any claim, started first: the reconciler must move it off the CPUs a
    # claim takes later.
    bystander_pod = pod_uid()
    node.run_container("bystander", bystander_pod, [], detach=True, name="bystander")
    node.wait_affinity("bystander", online, "no claim prepared yet")

    grouped = node.api.claim("grouped", [request("cpus", CPU_DRIVER)],
                             [result("cpus", CPU_DRIVER, NODE, "cpudevnuma000", "1")])
    g_uid, g_ids = node.prepare(kubelet_real, CPU_DRIVER, grouped, "cpus")
    g_id = g_ids[0]
    g_file, g_spec, g_dev = node.spec_of(g_id)
    log("grouped claim %s prepared: %s in %s (cdiVersion %s)" % (g_uid, g_id, g_file,
                                                                 g_spec["cdiVersion"]))
    g_env = dict(e.partition("=")[::2] for e in g_spec["containerEdits"].get("env", []))
    node.check("DRA_CPUSET_" + g_uid in g_env, "grouped: the spec has no DRA_CPUSET_%s "
               "(dra-driver-cpu's name): %s" % (g_uid, sorted(g_env)))
    g_cpus = read_cpu_list(g_env["DRA_CPUSET_" + g_uid])
    hook = node.hook_of(g_spec)
    node.check(read_cpu_list(hook["args"][hook["args"].index("--cpus") + 1]) == g_cpus,
               "grouped: the hook's --cpus %s is not the claim's CPUs %s" % (
                   hook["args"], fmt_cpus(g_cpus)))
    grouped_pod = pod_uid()
    rep = node.run_container("grouped claim", grouped_pod, g_ids, detach=True, name="grouped")
    names = node.check_env("grouped claim", g_spec, g_dev, rep)
    node.check_affinity("grouped claim", rep, g_cpus)
    attrs = node.check_metadata("grouped claim", rep, "grouped")
    got = attrs.get("dra.cpu/cpuset", {}).get("string")
    node.check(got is not None and read_cpu_list(got) == g_cpus, "grouped claim: the metadata "
               "file in the container says dra.cpu/cpuset %r, the container runs on %s" % (
                   got, fmt_cpus(g_cpus)))
    log("grouped claim: the container read its CPU set %s from its device metadata file" % got)
    # --numa-memory=claim (the default): the hook gets the claim's NUMA nodes and the container
    # allocates memory only there.
    node.check("--mems" in hook["args"], "grouped: the hook has no --mems: %s" % hook["args"])
    if "--mems" in hook["args"]:
        g_mems = read_cpu_list(hook["args"][hook["args"].index("--mems") + 1])
        node.check(rep["mems"] is not None and read_cpu_list(rep["mems"]) == g_mems,
                   "grouped claim: Mems_allowed_list in the container is %r, want the hook's "
                   "--mems %s" % (rep["mems"], fmt_cpus(g_mems)))
        log("grouped claim: container allocates on NUMA nodes %s (the hook's --mems)"
            % rep["mems"])
    lost = sorted(k for k in names if not SAFE_NAME.match(k) and k in rep["sh"])
    log("grouped claim: container on CPUs %s (the claim's); env %s; names busybox sh kept "
        "although not shell-safe: %s" % (rep["affinity"], sorted(names), lost))
    node.wait_affinity("bystander", online - g_cpus, "the grouped claim is prepared: a container "
                       "without a claim must be on the shared pool")

    # ---- a failing hook fails the container's creation: the claim's spec, a CPU not on the
    # machine (the kernel's NR_CPUS is at most 8192)
    bad_cpu = 9000
    bad = json.loads(json.dumps(g_spec))
    bad["kind"] = "topodra-test.io/badhook"
    args = bad["containerEdits"]["hooks"][0]["args"]
    args[args.index("--cpus") + 1] = str(bad_cpu)
    args[args.index("--records") + 1] = os.path.join(work, "bad-records")
    args[args.index("--claim") + 1] = "badhook"
    bad_path = os.path.join(node.cdi_dir, "topodra-test.io-badhook.json")
    with open(bad_path, "w") as f:
        json.dump(bad, f)
    res = node.podman("run", "--rm", "--cgroup-parent",
                      "/kubepods/besteffort/pod" + pod_uid(), *PODMAN_RUN,
                      "--device", "topodra-test.io/badhook=" + g_dev["name"],
                      "--rootfs", node.rootfs, "/bin/sh", "-c", "echo STARTED", check=False)
    node.check(res.returncode != 0 and "STARTED" not in res.stdout,
               "a hook with --cpus %d (not on this machine) did not fail the container: exit %d, "
               "%s %s" % (bad_cpu, res.returncode, res.stdout, res.stderr))
    node.check("topodra-cpuset-hook: --cpus \"%d\": CPU %d is not present on this machine" % (
        bad_cpu, bad_cpu) in res.stderr, "the failed creation does not say the hook failed "
        "because CPU %d is not present on this machine: %s" % (bad_cpu, res.stderr))
    node.check(not os.path.exists(os.path.join(work, "bad-records")),
               "the failing hook wrote a record in %s" % os.path.join(work, "bad-records"))
    log("hook with --cpus %d: container creation failed (exit %d): %s" % (
        bad_cpu, res.returncode, res.stderr.strip().splitlines()[-1][:300]))
    os.remove(bad_path)

    # ---- unprepare: the reconciler widens the still running container back to the pool
    node.unprepare(kubelet_real, CPU_DRIVER, grouped)
    node.check(not os.path.exists(os.path.join(node.cdi_dir, g_file)),
               "unprepare left %s" % g_file)
    node.wait_affinity("grouped", online, "the grouped claim is unprepared: its running "
                       "container must be back on the shared pool")
    node.wait_affinity("bystander", online, "the grouped claim is unprepared: the bystander")
    log("after unprepare: the grouped claim's container and the bystander run on %s"
        % fmt_cpus(online))
    node.podman("rm", "--force", "--time", "0", "grouped", "bystander")

    # ---- restart with --group-by machine: an opaque cpuset names the CPU
    node.stop_daemon("real")
    kubelet_real = node.start_daemon("real", real_extra + ["--group-by", "machine"])
    want = {max(online)}
    machine = node.api.claim("machine", [request("cpus", CPU_DRIVER)],
                             [result("cpus", CPU_DRIVER, NODE, "cpudevmachine", "1")],
                             [cpuset_config(fmt_cpus(want))])
    m_uid, m_ids = node.prepare(kubelet_real, CPU_DRIVER, machine, "cpus")
    m_id = m_ids[0]
    _m_file, m_spec, m_dev = node.spec_of(m_id)
    rep = node.run_container("machine-mode claim", pod_uid(), m_ids)
    got = node.check_metadata("machine-mode claim", rep, "machine").get("dra.cpu/cpuset", {})
    node.check(got.get("string") == fmt_cpus(want), "machine-mode claim: the metadata file "
               "says dra.cpu/cpuset %r, want the opaque cpuset %s" % (got, fmt_cpus(want)))
    node.check_env("machine-mode claim", m_spec, m_dev, rep)
    node.check_affinity("machine-mode claim", rep, want)
    node.check(rep["pid1"].get("DRA_CPUSET_" + m_uid) == fmt_cpus(want),
               "machine-mode claim: DRA_CPUSET_%s is %r, want the opaque cpuset %s" % (
                   m_uid, rep["pid1"].get("DRA_CPUSET_" + m_uid), fmt_cpus(want)))
    log("machine-mode claim %s: container on CPUs %s" % (m_uid, rep["affinity"]))
    # crun too, where the host lets it run containers: it refuses cgroup hierarchies in hybrid
    # mode unless every v2 controller is also mounted v1 (the kind of host CI has).
    if shutil.which("crun"):
        try:
            rep = node.run_container("machine-mode claim (crun)", pod_uid(), [m_id],
                                     runtime="crun")
        except Failure as e:
            if "hybrid mode not supported" not in str(e):
                raise
            log("crun: not run, it refuses this host's cgroups: %s" % [
                line for line in str(e).splitlines() if "hybrid" in line][0].strip())
        else:
            node.check_env("machine-mode claim (crun)", m_spec, m_dev, rep)
            node.check_affinity("machine-mode claim (crun)", rep, want)
            log("machine-mode claim with crun: container on CPUs %s" % rep["affinity"])
    node.unprepare(kubelet_real, CPU_DRIVER, machine)

    # ---- the device plugin: the kubelet's device manager allocates 1 CPU
    alloc = node.kubelet(kubelet_real, "allocate", DP_RESOURCE, "1")
    node.check(len(alloc["cdiDevices"]) == 1, "device plugin: want one CDI device, got %s" % alloc)
    dp_id = alloc["cdiDevices"][0]
    dp_cpus = read_cpu_list(",".join(alloc["deviceIds"]))
    dp_file, dp_spec, dp_dev = node.spec_of(dp_id)
    rep = node.run_container("device-plugin CPU", pod_uid(), [dp_id])
    names = node.check_env("device-plugin CPU", dp_spec, dp_dev, rep)
    node.check(names.get("TOPODRA_CPUSET") == fmt_cpus(dp_cpus),
               "device plugin: TOPODRA_CPUSET=%r, allocated %s" % (names.get("TOPODRA_CPUSET"),
                                                                    fmt_cpus(dp_cpus)))
    node.check_affinity("device-plugin CPU", rep, dp_cpus)
    log("device-plugin allocation %s: container on CPUs %s" % (dp_id, rep["affinity"]))

    # ---- the GPU claim's container
    _gfile, gspec, gdev = node.spec_of(gpu_id)
    rep = node.run_container("GPU claim", pod_uid(), gpu_ids)
    names = node.check_env("GPU claim", gspec, gdev, rep)
    got = node.check_metadata("GPU claim", rep, "gpu").get("resource.kubernetes.io/pciBusID")
    node.check(got == {"string": bdf}, "GPU claim: the metadata file says pciBusID %r, want %s"
               % (got, bdf))
    node.check(any(v == bdf for v in names.values()),
               "GPU claim: no variable names the GPU %s: %s" % (bdf, names))
    for path, (major, minor) in gpu_nodes.items():
        got = rep["dev"].get(path)
        node.check(got == ("character special file", major, minor),
                   "GPU claim: %s in the container is %s, want a character device %d:%d"
                   % (path, got, major, minor))
    log("GPU claim: device nodes %s" % ", ".join(
        "%s %d:%d" % (p, mj, mn) for p, (mj, mn) in sorted(gpu_nodes.items())))
    node.unprepare(kubelet_gpu, GPU_DRIVER, gpu_claim)
    node.check(sorted(os.listdir(node.cdi_dir)) == [dp_file], "CDI files left: %s, want only "
               "the device-plugin allocation's %s" % (sorted(os.listdir(node.cdi_dir)), dp_file))
    node.podman("rm", "--force", "--all", "--time", "0")
    node.stop_daemon("real")
    node.stop_daemon("gpu")


class Stop(Exception):
    """The deadline passed or a signal came: the scenario stops, the cleanup runs."""


def inside(args):
    stopping = []

    def stop(why):
        def handler(_signum, _frame):
            stopping.append(why)
            if len(stopping) == 1:  # once: a second signal must not break into the cleanup
                raise Stop(why)
        return handler
    signal.signal(signal.SIGALRM, stop("deadline of %d s passed" % DEADLINE_S))
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, stop("signal %d" % s))
    signal.alarm(DEADLINE_S)
    node = None
    rc = 1
    work = None
    try:
        # Under /tmp by default (TMPDIR moves it): the hook and busybox are executed from it.
        work = tempfile.mkdtemp(prefix=WORK_PREFIX)
        open(os.path.join(work, WORK_MARKER), "w").close()
        if os.statvfs(work).f_flag & os.ST_NOEXEC:
            raise Failure("%s is on a noexec mount: the hook and the container's busybox run "
                          "from the work directory; set TMPDIR to a directory that allows exec"
                          % work)
        cdi_dir = private_cdi_dirs(work)
        node = Node(args, work, cdi_dir)
        node.start_apiserver()
        scenario(node, work)
        log("PASS: %d checks" % node.checks)
        rc = 0
    except BaseException as e:  # every failure, expected or not, gets its FAIL line and the logs
        log("FAIL: %s%s" % ("" if isinstance(e, (Failure, Stop)) else type(e).__name__ + ": ",
                            e))
        if not isinstance(e, (Failure, Stop)):
            traceback.print_exc()
        if node is not None:
            for name in ("real", "gpu"):
                log("--- topodra (%s) log, last lines:\n%s" % (name, node.daemon_log(name)))
    finally:
        signal.alarm(0)
        stopping.append("cleanup")  # from here on a signal is only noted
        if node is not None:
            node.cleanup()
        if work is None:
            pass
        elif os.environ.get("TOPODRA_KEEP_WORK"):
            log("work directory kept: %s" % work)
        else:
            try:
                with open("/proc/self/mounts") as f:
                    mounted = [line.split()[1] for line in f
                               if line.split()[1].startswith(work + "/")]
                if mounted:
                    log("FAIL: not removing %s: mounts are left under it: %s" % (work, mounted))
                    rc = 1
                else:
                    shutil.rmtree(work, ignore_errors=True)
            except Exception as e:  # noqa: BLE001
                log("FAIL: removing %s: %s: %s" % (work, type(e).__name__, e))
                rc = 1
    return rc


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--topodra", required=True, help="the topodra binary")
    p.add_argument("--kubelet-sim", required=True, help="test/kubelet_sim's kubelet_sim binary")
    p.add_argument("--source", required=True, help="the source directory")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    for a in ("topodra", "kubelet_sim", "source"):
        setattr(args, a, os.path.abspath(getattr(args, a)))
    return inside(args) if args.inside else outer(args)


if __name__ == "__main__":
    sys.exit(main())
