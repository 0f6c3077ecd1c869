#!/usr/bin/python3
"""The pod spec -> `podman run` translation of image_real_host_test.py, on hand-made DaemonSets
(no podman, no root): what the kubelet does with each field the chart renders, and a refusal of
every field the translation does not know, so a chart change cannot pass the image test
unnoticed."""

import copy
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import image_real_host_test as t  # noqa: E402


def daemonset(host):
    return {"kind": "DaemonSet", "spec": {"template": {"spec": {
        "hostNetwork": True, "automountServiceAccountToken": True,
        "terminationGracePeriodSeconds": 30,
        "containers": [{
            "name": "topodra", "image": "topodra:0.1.0", "command": ["topodra"],
            "args": ["run", "--node-name=$(NODE_NAME)", "--x=$$(NODE_NAME)", "--y=$(OTHER)"],
            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {
                "fieldPath": "spec.nodeName"}}}, {"name": "PLAIN", "value": "v"}],
            "ports": [{"name": "health", "containerPort": 9478}],
            "resources": {"limits": {"memory": "256Mi"}},
            "securityContext": {"runAsUser": 0, "runAsGroup": 0, "privileged": False,
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "volumeMounts": [{"name": "state", "mountPath": "/var/lib/topodra"},
                             {"name": "sys", "mountPath": "/sys", "readOnly": True},
                             {"name": "tmp", "mountPath": "/tmp"}]}],
        "volumes": [
            {"name": "state", "hostPath": {"path": host + "/state", "type": "DirectoryOrCreate"}},
            {"name": "sys", "hostPath": {"path": host, "type": "Directory"}},
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}]}}}}


class Translation(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.host = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_the_chart_shape_becomes_the_kubelets_container(self):
        args, image, argv, grace, ports = t.podman_run_args(daemonset(self.host), "/sa", 6443)
        self.assertEqual(image, "topodra:0.1.0")
        self.assertEqual(argv, ["run", "--node-name=" + t.NODE, "--x=$(NODE_NAME)",
                                "--y=$(OTHER)"])
        self.assertEqual(grace, 30)
        self.assertEqual(ports, {"health": 9478})
        joined = " ".join(args)
        for want in ("--network host", "--user 0:0", "--security-opt no-new-privileges",
                     "--read-only --read-only-tmpfs=false", "--cap-drop ALL",
                     "--memory 268435456", "--entrypoint topodra", "-e PLAIN=v",
                     "-e NODE_NAME=" + t.NODE, "-e KUBERNETES_SERVICE_PORT=6443",
                     "-v /sa:" + t.SA_DIR + ":ro", "-v %s/state:/var/lib/topodra" % self.host,
                     "-v %s:/sys:ro" % self.host, "--tmpfs /tmp:rw,size=16777216"):
            self.assertIn(want, joined)
        self.assertNotIn("--privileged", args)
        # DirectoryOrCreate: made on the host, as the kubelet does.
        self.assertTrue(os.path.isdir(self.host + "/state"))

    def test_unknown_fields_are_refused(self):
        cases = [
            (lambda p: p.update(hostPID=True), "pod spec fields"),
            (lambda p: p["containers"][0].update(stdin=True), "container fields"),
            (lambda p: p["containers"][0]["securityContext"].update(procMount="Unmasked"),
             "securityContext fields"),
            (lambda p: p["containers"][0]["securityContext"].update(
                seccompProfile={"type": "Unconfined"}), "seccompProfile"),
            (lambda p: p["containers"][0]["resources"]["limits"].update(cpu="1"), "CPU limit"),
            (lambda p: p["volumes"].append({"name": "cm", "configMap": {"name": "x"}}) or
             p["containers"][0]["volumeMounts"].append({"name": "cm", "mountPath": "/etc/x"}),
             "only hostPath and emptyDir"),
            (lambda p: p["volumes"][2]["emptyDir"].pop("medium"), "on disk"),
            (lambda p: p["volumes"][1]["hostPath"].update(path=self.host + "/absent"),
             "does not exist"),
            (lambda p: p["volumes"][1]["hostPath"].update(type="Socket"), "hostPath type"),
            (lambda p: p["containers"][0]["env"].append(
                {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
             "spec.nodeName"),
            (lambda p: p["containers"].append(copy.deepcopy(p["containers"][0])),
             "want one container"),
        ]
        for mutate, message in cases:
            with self.subTest(message):
                ds = daemonset(self.host)
                mutate(ds["spec"]["template"]["spec"])
                with self.assertRaises(t.Failure) as ctx:
                    t.podman_run_args(ds, "/sa", 6443)
                self.assertIn(message, str(ctx.exception))

    def test_expansion_and_quantities(self):
        env = {"A": "1", "B.c": "2"}
        self.assertEqual(t.expand("$(A)-$(B.c)-$(Z)-$$(A)-$$$(A)", env), "1-2-$(Z)-$(A)-$1")
        self.assertEqual(t.memory_bytes("64Mi"), 64 << 20)
        self.assertEqual(t.memory_bytes("1G"), 10**9)
        self.assertEqual(t.memory_bytes(1024), 1024)
        with self.assertRaises(t.Failure):
            t.memory_bytes("1.5Gi")


if __name__ == "__main__":
    unittest.main()
