"""What kubectl needs (fakeapi/kubectl.py, core.py, patch.py): Tables, /openapi/v3, Pods,
Events, ResourceClaimTemplates, client-side apply, and which strategic-merge-patch keys are
refused as directives."""

import copy
import os
import shutil
import tempfile
import unittest
import urllib.parse

from fakeapi_tests.harness import (AGE_RE, CLAIMS, ClaimTestCase, CLASSES, CrdTestCase, EVENTS,
                                   import_fake_apiserver, make_claim, make_pod, make_reservation,
                                   make_slice, opaque_config, POD_UID, PODS, RESV, ServerTestCase,
                                   SLICES, TABLE_ACCEPT, TEMPLATES)


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
            "DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"])
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
