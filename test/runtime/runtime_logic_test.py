#!/usr/bin/python3
"""The host-side logic of runtime_real_host_test.py on fake trees, so that the parts this host
(a hybrid cgroup v1/v2 machine) does not take are covered too: the cgroup v2 (unified) cpuset
detection, and what a stale kubepods tree must hold to be removed instead of refused. No root,
no host state."""

import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runtime_real_host_test as rt  # noqa: E402


def write(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class CpusetDetection(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_v1_cpuset_hierarchy(self):
        write(self.root + "/cpuset/cpuset.cpus", "0-3\n")
        self.assertTrue(rt.has_cpuset(self.root))

    def test_v2_unified_with_cpuset(self):
        write(self.root + "/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
        self.assertTrue(rt.has_cpuset(self.root))

    def test_v2_unified_without_cpuset(self):
        # The unified mount of a hybrid host: cpuset is bound to v1, so v2 lists none.
        write(self.root + "/cgroup.controllers", "cpu io memory pids\n")
        self.assertFalse(rt.has_cpuset(self.root))
        write(self.root + "/cgroup.controllers", "cpusetx\n")
        self.assertFalse(rt.has_cpuset(self.root))

    def test_nothing_mounted(self):
        self.assertFalse(rt.has_cpuset(self.root))

    def test_kubepods_on_a_unified_mount(self):
        os.makedirs(self.root + "/kubepods")
        os.makedirs(self.root + "/kubepods.slice")
        self.assertEqual(rt.kubepods_dirs([self.root]),
                         [self.root + "/kubepods", self.root + "/kubepods.slice"])


class StaleTree(unittest.TestCase):
    """A kubepods tree is removed only when it holds nothing but this test's pods, and no
    process; the cgroup.procs files stand for the kernel's."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.tree = self.tmp.name + "/kubepods"
        self.pod = self.tree + "/besteffort/pod" + rt.pod_uid()
        for d in (self.tree, self.tree + "/besteffort", self.pod, self.pod + "/conmon",
                  self.pod + "/libpod-" + "ab" * 32):
            write(d + "/cgroup.procs")

    def tearDown(self):
        self.tmp.cleanup()

    def test_our_empty_pods_are_stale(self):
        self.assertIsNone(rt.stale_problem(self.tree))

    def test_a_process_anywhere_refuses(self):
        write(self.pod + "/libpod-" + "ab" * 32 + "/cgroup.procs", "4242\n")
        self.assertRegex(rt.stale_problem(self.tree), r"^processes 4242 run in .*/libpod-ab")

    def test_a_foreign_pod_refuses(self):
        foreign = self.tree + "/besteffort/pod0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
        write(foreign + "/cgroup.procs")
        self.assertIn("is not ours (pod UIDs of this test start with 7e57c0de-)",
                      rt.stale_problem(self.tree))

    def test_another_qos_class_refuses(self):
        write(self.tree + "/burstable/cgroup.procs")
        self.assertIn("burstable is not ours", rt.stale_problem(self.tree))

    def test_the_systemd_layout_refuses(self):
        os.makedirs(self.tmp.name + "/kubepods.slice")
        self.assertIn("not the cgroupfs layout",
                      rt.stale_problem(self.tmp.name + "/kubepods.slice"))

    def test_our_pod_uids_are_uuids_the_daemon_accepts(self):
        for _ in range(20):
            uid = rt.pod_uid()
            self.assertRegex(uid, r"^7e57c0de-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
            self.assertTrue(rt.OUR_POD.match("pod" + uid))
        self.assertFalse(rt.OUR_POD.match("pod7e57c0de-0000-0000-0000-00000000000"))


class HostSnapshot(unittest.TestCase):
    def test_diff_names_new_gone_and_changed(self):
        before = {"/etc/cni/net.d": (1, 2, 3), "/etc/cdi/a": (1, 1, 1)}
        after = {"/etc/cni/net.d": (1, 2, 4), "/etc/cni/net.d/cni.lock": (1, 0, 5)}
        self.assertEqual(rt.snapshot_diff(before, after),
                         ["new /etc/cni/net.d/cni.lock", "gone /etc/cdi/a",
                          "changed /etc/cni/net.d"])


if __name__ == "__main__":
    unittest.main()
