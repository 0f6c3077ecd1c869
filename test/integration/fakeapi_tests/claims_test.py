"""ResourceClaims and DeviceClasses (fakeapi/claims.py): server-set fields and defaults, the
/status subresource, namespaced paths and 404s, spec and status validation."""

import copy
import json

from fakeapi_tests.harness import (ALL_CLAIMS, CLAIMS, CLAIMS_V, ClaimTestCase, CLASSES,
                                   make_allocation, make_claim, make_slice, opaque_config, POD_UID,
                                   ServerTestCase, SLICES, Watch)


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
        # As a real server lists them: an operator's `kubectl apply` patches a class.
        self.assertEqual(sorted(resources["deviceclasses"]["verbs"]),
                         ["create", "delete", "deletecollection", "get", "list", "patch",
                          "update", "watch"])

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
        # Patched like any built-in object (kubectl apply of a changed class), and validated.
        r = self.client.request("PATCH", CLASSES + "/cpu.topodra.io",
                                {"spec": {"extendedResourceName": "example.com/cpu"}},
                                content_type="application/merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["spec"]["extendedResourceName"], "example.com/cpu")
        self.assertInvalid(self.client.request("PATCH", CLASSES + "/cpu.topodra.io",
                                               {"spec": {"extendedResourceName": "cpu"}},
                                               content_type="application/merge-patch+json"),
                           "spec.extendedResourceName", "must be a valid extended resource name")
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

    # k8s-1.35-1.37-addendum.md §2.2: v1helper.IsExtendedResourceName. A name with '/', nowhere
    # "kubernetes.io/", not starting "requests.", and "requests.<name>" a qualified name (prefix
    # a DNS subdomain of at most 253 characters, name part at most 63 of [-A-Za-z0-9_.] starting
    # and ending alphanumeric).
    EXTENDED_REFUSED = [
        "cpu",                                  # native: no '/'
        "",                                     # native too
        "kubernetes.io/gpu",                    # the native prefix
        "example.kubernetes.io/gpu",            # "kubernetes.io/" anywhere
        "deviceclass.resource.kubernetes.io/c",  # the implicit name of a class is not settable
        "requests.example.com/gpu",             # a quota key
        "example.com/",                         # empty name part
        "/gpu",                                 # "requests./gpu": prefix ends with '.'
        "example.com/a/b",                      # two '/'
        "Example.com/gpu",                      # prefix not lower case
        "example_com/gpu",                      # '_' in the prefix
        "example.com/-gpu",                     # name part starts with '-'
        "example.com/gpu.",                     # name part ends with '.'
        "example.com/g pu",                     # space
        "example.com/" + "g" * 64,              # name part of 64
        "e" * 245 + "/gpu",                     # requests.<prefix> of 254
    ]
    EXTENDED_ACCEPTED = [
        "topodra.io/gpu",
        "example.com/GPU_a.b-c",                # the name part may be mixed case
        "kubernetes.io.example.com/gpu",        # "kubernetes.io" but not "kubernetes.io/"
        "example.com/" + "g" * 63,
        "e" * 244 + "/gpu",                     # requests.<prefix> of 253
        "a/b",
    ]

    def test_extended_resource_name(self):
        def cls(name, value):
            return {"metadata": {"name": name}, "spec": {"extendedResourceName": value}}
        for i, value in enumerate(self.EXTENDED_REFUSED):
            with self.subTest(value=value):
                r = self.client.post(CLASSES, cls("refused-%d" % i, value))
                self.assertInvalid(r, "spec.extendedResourceName",
                                   "must be a valid extended resource name")
                # The value is quoted in the cause, as field.Invalid does.
                cause = [c for c in r.json["details"]["causes"]
                         if c["field"] == "spec.extendedResourceName"][0]
                self.assertIn(json.dumps(value), cause["message"])
        for i, value in enumerate(self.EXTENDED_ACCEPTED):
            with self.subTest(value=value):
                r = self.client.post(CLASSES, cls("accepted-%d" % i, value))
                self.assertEqual(r.code, 201, r.data)
                self.assertEqual(r.json["spec"]["extendedResourceName"], value)
        # Mutable, and checked on update too; two classes may map the same name (the later
        # created one wins in the scheduler).
        stored = self.client.get(CLASSES + "/accepted-0").json
        changed = copy.deepcopy(stored)
        changed["spec"]["extendedResourceName"] = "example.com/tpu"
        r = self.client.put(CLASSES + "/accepted-0", changed)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["spec"]["extendedResourceName"], "example.com/tpu")
        changed = copy.deepcopy(r.json)
        changed["spec"]["extendedResourceName"] = "cpu"
        self.assertInvalid(self.client.put(CLASSES + "/accepted-0", changed),
                           "spec.extendedResourceName", "must be a valid extended resource name")
        self.assertEqual(self.client.post(CLASSES, cls("twin", "example.com/tpu")).code, 201)
        # Removing the mapping is an update like any other.
        del changed["spec"]["extendedResourceName"]
        r = self.client.put(CLASSES + "/accepted-0", changed)
        self.assertEqual(r.code, 200, r.data)
        self.assertNotIn("extendedResourceName", r.json["spec"])
        # Watchers see the mapping come and go (the daemon's DeviceClass check relies on it).
        listed = {c["metadata"]["name"]: c["spec"].get("extendedResourceName")
                  for c in self.client.get(CLASSES).json["items"]}
        self.assertEqual(listed["twin"], "example.com/tpu")
        self.assertIsNone(listed["accepted-0"])

    def test_extended_resource_name_in_every_version(self):
        for version in ("v1", "v1beta2"):
            with self.subTest(version=version):
                path = "/apis/resource.k8s.io/%s/deviceclasses" % version
                r = self.client.post(path, {"metadata": {"name": "c-" + version},
                                            "spec": {"extendedResourceName": "cpu"}})
                self.assertInvalid(r, "spec.extendedResourceName",
                                   "must be a valid extended resource name")
