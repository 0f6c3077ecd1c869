"""CustomResourceDefinitions (fakeapi/crd.py, crd_schema.py, cel.py): topodra's Reservation
CRD served (discovery, verbs, status subresource, schema and rule validation), a CRD using the
parts the Reservation CRD does not, CRDs refused at start, and the CEL subset in process."""

import copy
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from fakeapi_tests.harness import (_del, _set, CRD_FILE, CrdTestCase, import_fake_apiserver,
                                   load_crd_yaml, make_reservation, PYTHON, RESV, SERVER,
                                   ServerTestCase, Watch)


class CrdCrudTest(CrdTestCase):
    def test_discovery(self):
        groups = self.client.get("/apis").json["groups"]
        topodra = [g for g in groups if g["name"] == "topodra.io"]
        self.assertEqual(len(topodra), 1, groups)
        self.assertEqual(topodra[0]["preferredVersion"], {"groupVersion": "topodra.io/v1alpha1",
                                                          "version": "v1alpha1"})
        self.assertIn("resource.k8s.io", [g["name"] for g in groups])
        group = self.client.get("/apis/topodra.io").json
        self.assertEqual(group["kind"], "APIGroup")
        self.assertEqual([v["version"] for v in group["versions"]], ["v1alpha1"])
        resources = self.client.get("/apis/topodra.io/v1alpha1").json
        self.assertEqual(resources["groupVersion"], "topodra.io/v1alpha1")
        by_name = {r["name"]: r for r in resources["resources"]}
        self.assertEqual(by_name["reservations"], {
            "name": "reservations", "singularName": "reservation", "namespaced": False,
            "kind": "Reservation", "shortNames": ["resv"],
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update",
                      "watch"]})
        self.assertEqual(by_name["reservations/status"]["verbs"], ["get", "patch", "update"])
        self.assertStatus(self.client.get("/apis/topodra.io/v1"), 404, "NotFound")
        self.assertStatus(self.client.get("/apis/topodra.io/v1/reservations"), 404, "NotFound")
        self.assertStatus(self.client.get("/apis/topodra.io/v1alpha1/namespaces/default/"
                                          "reservations"), 404, "NotFound")

    def test_create_applies_defaults_and_drops_status(self):
        obj = make_reservation()
        obj["status"] = {"phase": "Available"}
        created = self.create_resv(obj)
        self.assertEqual(created["kind"], "Reservation")
        self.assertEqual(created["apiVersion"], "topodra.io/v1alpha1")
        meta = created["metadata"]
        self.assertEqual(meta["generation"], 1)
        self.assertRegex(meta["uid"], r"^[0-9a-f-]{36}$")
        self.assertRegex(meta["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertNotIn("namespace", meta)
        self.assertIs(created["spec"]["preAllocation"], False)
        self.assertIs(created["spec"]["allocateOnce"], True)
        self.assertNotIn("status", created)  # only /status writes it; absent, not {}
        self.assertEqual(self.client.get(RESV + "/resv-a").json, created)
        # An explicit value is kept; null means absent and gets the default.
        created = self.create_resv(make_reservation("resv-b", preAllocation=True,
                                                    allocateOnce=None))
        self.assertIs(created["spec"]["preAllocation"], True)
        self.assertIs(created["spec"]["allocateOnce"], True)
        self.assertEqual(self.create_resv(make_reservation("resv-c"), "dryRun=All")["metadata"]
                         ["name"], "resv-c")
        self.assertStatus(self.client.get(RESV + "/resv-c"), 404, "NotFound")
        self.assertStatus(self.client.post(RESV, make_reservation()), 409, "AlreadyExists")

    def test_list_and_selectors(self):
        self.create_resv(make_reservation("a", node="n1"))
        self.create_resv(make_reservation("b", node="n2"))
        labelled = make_reservation("c", node="n1")
        labelled["metadata"]["labels"] = {"tier": "gold"}
        self.create_resv(labelled)
        lst = self.client.get(RESV).json
        self.assertEqual(lst["kind"], "ReservationList")
        self.assertEqual(lst["apiVersion"], "topodra.io/v1alpha1")
        self.assertEqual([(i["kind"], i["apiVersion"]) for i in lst["items"]],
                         [("Reservation", "topodra.io/v1alpha1")] * 3)
        self.assertEqual(self.names("fieldSelector=spec.nodeName%3Dn1"), ["a", "c"])
        self.assertEqual(self.names("fieldSelector=spec.nodeName%21%3Dn1"), ["b"])
        self.assertEqual(self.names("fieldSelector=spec.nodeName%3Dn1,metadata.name%3Dc"),
                         ["c"])
        self.assertEqual(self.names("labelSelector=tier%3Dgold"), ["c"])
        self.assertEqual(self.names("limit=2"), ["a", "b"])
        for field in ("spec.ttl", "spec.owners", "status.phase", "metadata.namespace"):
            with self.subTest(field):
                r = self.client.get(RESV + "?fieldSelector=%s%%3Dx" % field)
                self.assertStatus(r, 400, "BadRequest")
                self.assertEqual(r.json["message"], "field label not supported: " + field)

    def test_watch(self):
        w = Watch(self.client, RESV + "?watch=true&allowWatchBookmarks=true&"
                                      "fieldSelector=spec.nodeName%3Dn1")
        try:
            self.assertEqual(w.code, 200)
            created = self.create_resv(make_reservation("a", node="n1"))
            self.create_resv(make_reservation("b", node="n2"))  # filtered out
            ev = w.next_event()
            self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "a"))
            self.assertEqual(ev["object"]["kind"], "Reservation")
            self.assertEqual(ev["object"]["apiVersion"], "topodra.io/v1alpha1")
            created["metadata"]["labels"] = {"x": "y"}
            updated = self.put(created)
            self.assertEqual(updated.code, 200, updated.data)
            ev = w.next_event()
            self.assertEqual(ev["type"], "MODIFIED")
            self.assertEqual(ev["object"]["metadata"]["labels"], {"x": "y"})
            self.assertEqual(self.client.delete(RESV + "/a").code, 200)
            ev = w.next_event()
            self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("DELETED", "a"))
            while True:
                ev = w.next()
                if ev["type"] == "BOOKMARK":
                    break
            self.assertEqual(ev["object"]["kind"], "Reservation")
            self.assertEqual(ev["object"]["apiVersion"], "topodra.io/v1alpha1")
            rv = ev["object"]["metadata"]["resourceVersion"]
        finally:
            w.close()
        # A resumed watch sees only later events; after a reset it gets 410.
        w = Watch(self.client, RESV + "?watch=true&resourceVersion=" + rv)
        try:
            self.create_resv(make_reservation("c"))
            ev = w.next_event()
            self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "c"))
            self.assertEqual(self.client.request("POST", "/__control/reset").code, 200)
            ev = w.next_event()
            self.assertEqual(ev["type"], "ERROR")
            self.assertEqual(ev["object"]["code"], 410)
        finally:
            w.close()
        w = Watch(self.client, RESV + "/c?watch=true&resourceVersion=" + rv)
        try:
            self.assertEqual(w.next_event()["object"]["code"], 410)
        finally:
            w.close()

    def test_update_generation_and_conflicts(self):
        created = self.create_resv(make_reservation())
        rv = created["metadata"]["resourceVersion"]
        created["metadata"]["labels"] = {"a": "b"}
        r = self.put(created)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["generation"], 1)  # metadata only
        self.assertNotEqual(r.json["metadata"]["resourceVersion"], rv)
        stale = copy.deepcopy(created)  # still carries the first resourceVersion
        stale["spec"]["owners"].append({"namespace": "other"})
        r = self.put(stale)
        self.assertStatus(r, 409, "Conflict")
        self.assertIn("the object has been modified", r.json["message"])
        current = r = self.client.get(RESV + "/resv-a").json
        current["spec"]["owners"].append({"namespace": "other"})
        current["spec"]["ttl"] = "30m"
        r = self.put(current)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["generation"], 2)
        self.assertEqual(len(r.json["spec"]["owners"]), 2)
        self.assertIs(r.json["spec"]["allocateOnce"], True)
        # A no-op update stores nothing.
        same = self.put(r.json)
        self.assertEqual(same.json["metadata"]["resourceVersion"],
                         r.json["metadata"]["resourceVersion"])
        # Dropping a defaulted field defaults it again: no change, no new generation.
        del r.json["spec"]["allocateOnce"]
        again = self.put(r.json)
        self.assertEqual(again.json["metadata"]["generation"], 2)
        no_rv = copy.deepcopy(r.json)
        del no_rv["metadata"]["resourceVersion"]
        self.assertStatus(self.put(no_rv), 409, "Conflict")
        self.assertStatus(self.put(make_reservation("missing")), 404, "NotFound")

    def test_patch_and_delete(self):
        self.create_resv(make_reservation())
        r = self.client.request("PATCH", RESV + "/resv-a", {"spec": {"ttl": "2h"}},
                                content_type="application/merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["spec"]["ttl"], "2h")
        self.assertEqual(r.json["metadata"]["generation"], 2)
        r = self.client.request("PATCH", RESV + "/resv-a",
                                [{"op": "replace", "path": "/spec/owners/0/claimName",
                                  "value": "claim-b"}],
                                content_type="application/json-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["spec"]["owners"][0]["claimName"], "claim-b")
        r = self.client.request("PATCH", RESV + "/resv-a", {"spec": {"ttl": "soon"}},
                                content_type="application/merge-patch+json")
        self.assertInvalid(r, "spec.ttl", "should match")
        r = self.client.request("PATCH", RESV + "/resv-a", {"spec": {"ttl": "1h"}},
                                content_type="application/apply-patch+yaml")
        self.assertEqual(r.code, 415)
        r = self.client.delete(RESV + "/resv-a")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["status"], "Success")
        self.assertEqual(r.json["details"]["kind"], "reservations")
        r = self.client.get(RESV + "/resv-a")
        self.assertStatus(r, 404, "NotFound")
        self.assertEqual(r.json["message"], 'reservations.topodra.io "resv-a" not found')
        self.assertStatus(self.client.delete(RESV + "/resv-a"), 404, "NotFound")
        self.create_resv(make_reservation("x", node="n1"))
        self.create_resv(make_reservation("y", node="n2"))
        r = self.client.delete(RESV + "?fieldSelector=spec.nodeName%3Dn2")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual([i["metadata"]["name"] for i in r.json["items"]], ["y"])
        self.assertEqual(self.names(""), ["x"])


class CrdStatusTest(CrdTestCase):
    def test_status_write_changes_only_status(self):
        created = self.create_resv(make_reservation())
        body = copy.deepcopy(created)
        body["status"] = {"phase": "Available", "cpus": "4-7", "observedGeneration": 1,
                          "expiresAt": "2030-01-02T03:04:05Z",
                          "conditions": [{"type": "Ready", "status": "True"}]}
        body["spec"]["nodeName"] = "n9"  # ignored: status writes change only status
        body["spec"]["ttl"] = "1h"
        body["metadata"]["labels"] = {"ignored": "yes"}
        r = self.put(body, RESV + "/resv-a/status")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["status"]["phase"], "Available")
        self.assertEqual(r.json["spec"], created["spec"])
        self.assertNotIn("labels", r.json["metadata"])
        self.assertEqual(r.json["metadata"]["generation"], 1)
        self.assertEqual(self.client.get(RESV + "/resv-a/status").json, r.json)
        # The main resource ignores status, and a spec change there bumps the generation.
        main = copy.deepcopy(r.json)
        main["status"] = {"phase": "Failed"}
        main["spec"]["ttl"] = "3h"
        r2 = self.put(main)
        self.assertEqual(r2.code, 200, r2.data)
        self.assertEqual(r2.json["status"]["phase"], "Available")
        self.assertEqual(r2.json["spec"]["ttl"], "3h")
        self.assertEqual(r2.json["metadata"]["generation"], 2)
        # A status-only change through the main resource is a no-op.
        del main["status"]
        main["metadata"]["resourceVersion"] = r2.json["metadata"]["resourceVersion"]
        main["spec"]["ttl"] = "3h"
        r3 = self.put(main)
        self.assertEqual(r3.json["metadata"]["resourceVersion"],
                         r2.json["metadata"]["resourceVersion"])
        self.assertEqual(r3.json["status"]["phase"], "Available")
        # Patch of /status; removing the status through /status makes it absent.
        r = self.client.request("PATCH", RESV + "/resv-a/status",
                                {"status": {"phase": "Succeeded"}, "spec": {"ttl": "9h"}},
                                content_type="application/merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["status"]["phase"], "Succeeded")
        self.assertEqual(r.json["status"]["cpus"], "4-7")
        self.assertEqual(r.json["spec"]["ttl"], "3h")
        self.assertEqual(r.json["metadata"]["generation"], 2)
        r = self.client.request("PATCH", RESV + "/resv-a/status", {"status": None},
                                content_type="application/merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertNotIn("status", r.json)

    def test_status_is_validated(self):
        created = self.create_resv(make_reservation())
        for status, field, message in (
                ({"phase": "Done"}, "status.phase", 'Unsupported value: "Done"'),
                ({"expiresAt": "soon"}, "status.expiresAt", "must be of type date-time"),
                ({"conditions": [{"type": "Ready"}]}, "status.conditions[0].status",
                 "Required value"),
                ({"gpus": "gpu-0"}, "status.gpus", "must be of type array")):
            with self.subTest(field):
                body = copy.deepcopy(created)
                body["status"] = status
                self.assertInvalid(self.put(body, RESV + "/resv-a/status"), field, message)
        body = copy.deepcopy(created)
        body["status"] = {"phase": "Available", "bogus": 1}
        r = self.put(body, RESV + "/resv-a/status?fieldValidation=Strict")
        self.assertStatus(r, 400, "BadRequest")
        self.assertIn('unknown field "status.bogus"', r.json["message"])
        r = self.put(body, RESV + "/resv-a/status")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.warnings(), ['299 - "unknown field \\"status.bogus\\""'])
        self.assertEqual(r.json["status"], {"phase": "Available"})
        # Stale resourceVersion on /status.
        self.assertStatus(self.put(body, RESV + "/resv-a/status"), 409, "Conflict")
        self.assertStatus(self.client.put(RESV + "/missing/status", make_reservation("missing")),
                          404, "NotFound")


class CrdValidationTest(CrdTestCase):
    def check(self, cases):
        for name, mutate, field, message in cases:
            with self.subTest(name):
                obj = make_reservation()
                mutate(obj)
                self.assertInvalid(self.client.post(RESV, obj), field, message)
        self.assertEqual(self.client.get(RESV).json["items"], [])

    def test_schema_violations(self):
        self.check([
            ("wrong type", lambda o: _set(o, ("spec", "nodeName"), 5), "spec.nodeName",
             'Invalid value: "integer": spec.nodeName in body must be of type string: '
             '"integer"'),
            ("object for array", lambda o: _set(o, ("spec", "owners"), {}), "spec.owners",
             'spec.owners in body must be of type array: "object"'),
            ("float for integer", lambda o: _set(o, ("spec", "cpus", "count"), 1.5),
             "spec.cpus.count", 'must be of type integer: "number"'),
            ("string for boolean", lambda o: _set(o, ("spec", "preAllocation"), "yes"),
             "spec.preAllocation", 'must be of type boolean: "string"'),
            ("missing spec", lambda o: _del(o, ("spec",)), "spec", "Required value"),
            ("missing nodeName", lambda o: _del(o, ("spec", "nodeName")), "spec.nodeName",
             "Required value"),
            ("missing owners", lambda o: _del(o, ("spec", "owners")), "spec.owners",
             "Required value"),
            ("empty nodeName", lambda o: _set(o, ("spec", "nodeName"), ""), "spec.nodeName",
             "spec.nodeName in body should be at least 1 chars long"),
            ("no owners", lambda o: _set(o, ("spec", "owners"), []), "spec.owners",
             "Invalid value: 0: spec.owners in body should have at least 1 items"),
            ("17 owners", lambda o: _set(o, ("spec", "owners"), [{"namespace": "n"}] * 17),
             "spec.owners", "Too many: 17: must have at most 16 items"),
            ("empty owner", lambda o: _set(o, ("spec", "owners"), [{}]), "spec.owners[0]",
             "spec.owners[0] in body should have at least 1 properties"),
            ("enum", lambda o: _set(o, ("spec", "owners"), [{"claimSelector": {
                "matchExpressions": [{"key": "k", "operator": "Maybe"}]}}]),
             "spec.owners[0].claimSelector.matchExpressions[0].operator",
             'Unsupported value: "Maybe": supported values: "In", "NotIn", "Exists", '
             '"DoesNotExist"'),
            ("required in items", lambda o: _set(o, ("spec", "owners"), [{"controller": {
                "kind": "Pod"}}]), "spec.owners[0].controller.name", "Required value"),
            ("additionalProperties", lambda o: _set(o, ("spec", "owners"), [{"claimSelector": {
                "matchLabels": {"app": "x" * 64}}}]),
             "spec.owners[0].claimSelector.matchLabels.app",
             "Too long: may not be more than 63"),
            ("maxProperties", lambda o: _set(o, ("spec", "owners"), [{"claimSelector": {
                "matchLabels": {"k%d" % i: "v" for i in range(33)}}}]),
             "spec.owners[0].claimSelector.matchLabels",
             "Too many: 33: must have at most 32 items"),
            ("ttl pattern", lambda o: _set(o, ("spec", "ttl"), "30 minutes"), "spec.ttl",
             "spec.ttl in body should match '^([0-9]+(ms|s|m|h))+$'"),
            ("ttl pattern, trailing newline", lambda o: _set(o, ("spec", "ttl"), "30m\n"),
             "spec.ttl", "should match"),
            ("minimum", lambda o: _set(o, ("spec", "cpus", "count"), 0), "spec.cpus.count",
             "Invalid value: 0: spec.cpus.count in body should be greater than or equal to 1"),
            ("maximum", lambda o: _set(o, ("spec", "gpus"), {"count": 257}), "spec.gpus.count",
             "spec.gpus.count in body should be less than or equal to 256"),
            ("date-time", lambda o: _set(o, ("spec", "expires"), "tomorrow"), "spec.expires",
             'Invalid value: "tomorrow": spec.expires in body must be of type date-time: '
             '"tomorrow"'),
            ("date-time hour 24", lambda o: _set(o, ("spec", "expires"),
                                                 "2030-01-01T24:00:00Z"),
             "spec.expires", "must be of type date-time"),
            ("date-time without zone", lambda o: _set(o, ("spec", "expires"),
                                                      "2030-01-01T10:00:00"),
             "spec.expires", "must be of type date-time"),
            ("name too long", lambda o: _set(o, ("metadata", "name"), "r" * 64),
             "metadata.name", "Too long: may not be more than 63"),
            ("name not a DNS subdomain", lambda o: _set(o, ("metadata", "name"), "Resv_A"),
             "metadata.name", "a lowercase RFC 1123 subdomain"),
        ])
        r = self.client.post(RESV, dict(make_reservation(), spec={"nodeName": 5, "owners": []}))
        causes = [c["field"] for c in r.json["details"]["causes"]]
        self.assertEqual(causes, ["spec.nodeName", "spec.owners", "<nil>"])
        self.assertIn("some validation rules were not checked", r.json["message"])
        for expires in ("2030-01-01T10:00:00Z", "2030-01-01T10:00:00.123+02:00",
                        "2030-01-01t10:00:00z"):
            with self.subTest(expires):
                r = self.client.post(RESV + "?dryRun=All", make_reservation(expires=expires))
                self.assertEqual(r.code, 201, r.data)
        r = self.client.post(RESV + "?dryRun=All", make_reservation(
            cpus={"count": 2.0}, ttl="1h30m", gpus={"devices": ["gpu-0000-3b-00-0"]}))
        self.assertEqual(r.code, 201, r.data)
        self.assertIn(b'"cpus":{"count":2}', r.data)  # an integral float is an integer
        r = self.client.post(RESV + "?dryRun=All", dict(make_reservation(), metadata={
            "generateName": "r" * 70}))
        self.assertEqual(r.code, 201, r.data)  # generateName is cut so the name fits 63
        self.assertEqual(len(r.json["metadata"]["name"]), 63)

    def test_cel_rules(self):
        self.check([
            ("ttl and expires", lambda o: o["spec"].update(ttl="1h",
                                                           expires="2030-01-01T00:00:00Z"),
             "spec", 'Invalid value: "object": ttl and expires are mutually exclusive'),
            ("neither cpus nor gpus", lambda o: _del(o, ("spec", "cpus")), "spec",
             "a reservation holds cpus, gpus or both"),
            ("empty cpus", lambda o: _set(o, ("spec", "cpus"), {"numaNode": 0}), "spec.cpus",
             "cpus needs count or cpuset"),
            ("empty gpus", lambda o: _set(o, ("spec", "gpus"), {}), "spec.gpus",
             "gpus needs count or devices"),
        ])
        r = self.client.post(RESV, make_reservation(gpus={"count": 1}, cpus=None))
        self.assertEqual(r.code, 201, r.data)  # the null cpus is absent; gpus suffice
        self.assertNotIn("cpus", r.json["spec"])
        created = self.create_resv(make_reservation("resv-b"))
        for name, mutate, field, message in (
                ("cpus changed", lambda o: _set(o, ("spec", "cpus", "count"), 8), "spec.cpus",
                 'Invalid value: "object": cpus is immutable'),
                ("nodeName changed", lambda o: _set(o, ("spec", "nodeName"), "n2"), "spec",
                 "nodeName is immutable")):
            with self.subTest(name):
                body = copy.deepcopy(created)
                mutate(body)
                self.assertInvalid(self.put(body), field, message)
        # Adding gpus (absent before) skips the gpus transition rule, but the spec-level rule
        # catches it.
        body = copy.deepcopy(created)
        body["spec"]["gpus"] = {"count": 2}
        self.assertInvalid(self.put(body), "spec",
                           "cpus and gpus cannot be added or removed after creation")
        body = copy.deepcopy(created)
        del body["spec"]["cpus"]
        body["spec"]["gpus"] = {"count": 2}
        self.assertInvalid(self.put(body), "spec",
                           "cpus and gpus cannot be added or removed after creation")
        body = copy.deepcopy(created)
        body["spec"]["owners"] = [{"namespace": "other"}]
        body["spec"]["ttl"] = "2h"
        self.assertEqual(self.put(body).code, 200)

    def test_unknown_fields(self):
        obj = make_reservation()
        obj["spec"]["bogus"] = 1
        obj["spec"]["owners"][0]["extra"] = {"x": 1}
        obj["metadata"]["clusterName"] = "x"
        obj["top"] = True
        r = self.client.post(RESV + "?fieldValidation=Strict", obj)
        self.assertStatus(r, 400, "BadRequest")
        # In document order (bogus was added to spec after owners).
        self.assertEqual(r.json["message"], 'strict decoding error: unknown field '
                                            '"metadata.clusterName", unknown field '
                                            '"spec.owners[0].extra", unknown field "spec.bogus", '
                                            'unknown field "top"')
        for query in ("", "?fieldValidation=Warn"):
            with self.subTest(query or "default"):
                r = self.client.post(RESV + query, obj)
                self.assertEqual(r.code, 201, r.data)
                self.assertEqual(r.warnings(), [
                    '299 - "unknown field \\"metadata.clusterName\\""',
                    '299 - "unknown field \\"spec.owners[0].extra\\""',
                    '299 - "unknown field \\"spec.bogus\\""',
                    '299 - "unknown field \\"top\\""'])
                stored = self.client.get(RESV + "/resv-a").json
                self.assertNotIn("bogus", stored["spec"])
                self.assertNotIn("top", stored)
                self.assertEqual(stored["spec"]["owners"][0],
                                 {"namespace": "default", "claimName": "claim-a"})
                self.assertEqual(self.client.delete(RESV + "/resv-a").code, 200)
        r = self.client.post(RESV + "?fieldValidation=Ignore", obj)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.warnings(), [])
        self.assertNotIn("bogus", r.json["spec"])
        dup = json.dumps(make_reservation("resv-d")).replace('"nodeName": "n1"',
                                                             '"nodeName": "x", "nodeName": "n1"')
        r = self.client.post(RESV + "?fieldValidation=Strict", dup)
        self.assertStatus(r, 400, "BadRequest")
        self.assertIn('duplicate field "spec.nodeName"', r.json["message"])
        # Decode errors of metadata and a wrong kind are 400, as for every resource.
        bad = make_reservation("resv-e")
        bad["metadata"]["labels"] = "x"
        self.assertStatus(self.client.post(RESV, bad), 400, "BadRequest")
        bad = make_reservation("resv-e")
        bad["kind"] = "ResourceSlice"
        self.assertStatus(self.client.post(RESV, bad), 400, "BadRequest")


# A namespaced CRD with two served versions, a map-list, a set, free-form maps and rules with
# reasons and field paths: the parts of the CRD support the reservation CRD does not use.
WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, categories: [all]}
  versions:
    - name: v1alpha1
      served: false
      storage: false
      schema: {openAPIV3Schema: {type: object}}
    - name: v1beta1
      served: true
      storage: false
      schema: &schema
        openAPIV3Schema:
          type: object
          x-kubernetes-validations:
            - rule: "self.spec.size == oldSelf.spec.size"
              reason: FieldValueForbidden
              fieldPath: .spec.size
              message: size is fixed
          properties:
            spec:
              type: object
              properties:
                color: {type: string, enum: [red, blue], default: red}
                size: {type: integer, multipleOf: 2, exclusiveMinimum: true, minimum: 0}
                ratio: {type: number, maximum: 1.5, exclusiveMaximum: true}
                since: {type: string}
                extra:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
                tags:
                  type: array
                  x-kubernetes-list-type: set
                  items: {type: string}
                ports:
                  type: array
                  x-kubernetes-list-type: map
                  x-kubernetes-list-map-keys: [name]
                  items:
                    type: object
                    required: [name]
                    x-kubernetes-validations:
                      - rule: "self.port == oldSelf.port"
                        message: a port keeps its number
                    properties:
                      name: {type: string}
                      port: {type: integer, default: 80}
                note: {type: string, nullable: true}
            status:
              type: object
              properties:
                ready: {type: boolean}
      selectableFields:
        - jsonPath: .spec.color
        - jsonPath: .spec.size
    - name: v1
      served: true
      storage: true
      schema: *schema
      selectableFields:
        - jsonPath: .spec.color
"""
WIDGETS = "/apis/example.com/%s/namespaces/%s/widgets"


class WidgetCrdTest(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fake-apiserver-crd-")
        path = os.path.join(cls.tmp, "widgets.yaml")
        with open(path, "w") as f:
            f.write(WIDGET_CRD)
        cls.ARGS = ServerTestCase.ARGS + ("--crd", path, "--crd", CRD_FILE)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def widget(self, name="w", **spec):
        return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name},
                "spec": spec}

    def test_namespaced_versions_and_selectors(self):
        group = self.client.get("/apis/example.com").json
        self.assertEqual([v["version"] for v in group["versions"]], ["v1", "v1beta1"])
        self.assertEqual(group["preferredVersion"]["version"], "v1")
        self.assertStatus(self.client.get(WIDGETS % ("v1alpha1", "default")), 404, "NotFound")
        resources = self.client.get("/apis/example.com/v1beta1").json["resources"]
        self.assertEqual([(r["name"], r["namespaced"], r.get("categories")) for r in resources],
                         [("widgets", True, ["all"])])  # no status subresource
        created = self.client.post(WIDGETS % ("v1", "default"), self.widget(size=2))
        self.assertEqual(created.code, 201, created.data)
        self.assertEqual(created.json["metadata"]["namespace"], "default")
        self.assertEqual(created.json["spec"]["color"], "red")
        self.assertEqual(self.client.post(WIDGETS % ("v1beta1", "other"),
                                          dict(self.widget(color="blue", size=4),
                                               apiVersion="example.com/v1beta1")).code, 201)
        got = self.client.get(WIDGETS % ("v1beta1", "default") + "/w").json
        self.assertEqual(got["apiVersion"], "example.com/v1beta1")
        lst = self.client.get("/apis/example.com/v1/widgets").json
        self.assertEqual([(i["metadata"]["namespace"], i["apiVersion"]) for i in lst["items"]],
                         [("default", "example.com/v1"), ("other", "example.com/v1")])
        self.assertEqual(lst["kind"], "WidgetList")

        def names(query):
            r = self.client.get("/apis/example.com/v1/widgets?fieldSelector=" + query)
            self.assertEqual(r.code, 200, r.data)
            return [i["metadata"]["namespace"] for i in r.json["items"]]
        self.assertEqual(names("spec.color%3Dblue"), ["other"])
        self.assertEqual(names("metadata.namespace%3Dother"), ["other"])
        # Selectable fields are per version: spec.size only in v1beta1.
        r = self.client.get("/apis/example.com/v1beta1/widgets?fieldSelector=spec.size%3D2")
        self.assertEqual([i["metadata"]["namespace"] for i in r.json["items"]], ["default"])
        for field in ("spec.size", "spec.since"):
            self.assertStatus(self.client.get("/apis/example.com/v1/widgets?fieldSelector=%s%%3Dx"
                                              % field), 400, "BadRequest")
        r = self.client.post(WIDGETS % ("v1", "default"),
                             dict(self.widget(size=2), apiVersion="example.com/v1beta1"))
        self.assertStatus(r, 400, "BadRequest")

    def test_keywords_and_rules(self):
        path = WIDGETS % ("v1", "default")
        for name, spec, field, message in (
                ("exclusiveMinimum", {"size": 0}, "spec.size", "should be greater than 0"),
                ("multipleOf", {"size": 3}, "spec.size", "should be a multiple of 2"),
                ("exclusiveMaximum", {"ratio": 1.5}, "spec.ratio", "should be less than 1.5"),
                ("enum", {"color": "green"}, "spec.color", 'supported values: "red", "blue"'),
                ("set", {"tags": ["a", "b", "a"]}, "spec.tags[2]", 'Duplicate value: "a"'),
                ("map list", {"ports": [{"name": "a"}, {"name": "a", "port": 1}]},
                 "spec.ports[1]", "Duplicate value"),
                ("map list key", {"ports": [{"port": 1}]}, "spec.ports[0].name",
                 "Required value")):
            with self.subTest(name):
                self.assertInvalid(self.client.post(path, self.widget(**spec)), field, message)
        r = self.client.post(path + "?fieldValidation=Strict", self.widget(
            size=2, ratio=1, extra={"free": {"form": [1]}}, note=None,
            ports=[{"name": "http"}, {"name": "https", "port": 443}], tags=["x", "y"]))
        self.assertEqual(r.code, 201, r.data)
        w = r.json
        self.assertEqual(w["spec"]["extra"], {"free": {"form": [1]}})  # preserved
        self.assertIsNone(w["spec"]["note"])  # nullable: the null is kept
        self.assertEqual(w["spec"]["ports"][0], {"name": "http", "port": 80})
        # Root rule with reason and fieldPath.
        w["spec"]["size"] = 4
        r = self.client.put(path + "/w", w)
        self.assertStatus(r, 422, "Invalid")
        self.assertEqual(r.json["details"]["causes"], [
            {"reason": "FieldValueForbidden", "message": "Forbidden: size is fixed",
             "field": "spec.size"}])
        # Map-list items correlate by key: a port keeps its number, new ports are free, and
        # reordering the list is fine.
        w["spec"]["size"] = 2
        w["spec"]["ports"] = [{"name": "https", "port": 443}, {"name": "http", "port": 81}]
        self.assertInvalid(self.client.put(path + "/w", w), "spec.ports[1]",
                           "a port keeps its number")
        w["spec"]["ports"] = [{"name": "https", "port": 443}, {"name": "http", "port": 80},
                              {"name": "new", "port": 1}]
        w["status"] = {"ready": True}  # no status subresource: written with the object
        r = self.client.put(path + "/w", w)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["status"], {"ready": True})
        self.assertEqual(r.json["metadata"]["generation"], 2)
        w = r.json
        w["status"] = {"ready": False}
        r = self.client.put(path + "/w", w)
        self.assertEqual(r.json["metadata"]["generation"], 3)  # status is not a subresource
        self.assertStatus(self.client.put(path + "/w/status", w), 404, "NotFound")


# A custom resource whose top-level field is named items, as a list answer's is.


class CrdLoadTest(unittest.TestCase):
    """A CRD the fake cannot serve exactly is an error at start (exit 2), never ignored."""

    @classmethod
    def setUpClass(cls):
        cls.fa = import_fake_apiserver()
        cls.tmp = tempfile.mkdtemp(prefix="fake-apiserver-crd-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def write(self, crd, text=None):
        path = os.path.join(self.tmp, "crd.yaml")
        with open(path, "w") as f:
            if text is not None:
                f.write(text)
            else:
                json.dump(crd, f)  # JSON is YAML
        return path

    def load_error(self, crd, text=None):
        """The message of the CrdError that loading the CRD raises (in process: fast)."""
        try:
            self.fa.load_crds([self.write(crd, text)])
        except self.fa.CrdError as e:
            return str(e)
        self.fail("the CRD was loaded")

    def test_the_flag_exits_2(self):
        crd = load_crd_yaml()
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
            "x-kubernetes-validations"].append({"rule": "self.ttl.size() > 0"})
        for args, message in ((["--crd", self.write(crd)],
                               "x-kubernetes-validations[4]: rule \"self.ttl.size() > 0\""),
                              (["--crd", "/nonexistent.yaml"], "/nonexistent.yaml"),
                              (["--crd", CRD_FILE, "--crd", CRD_FILE], "already served")):
            with self.subTest(args[-1]):
                p = subprocess.run([PYTHON, SERVER] + args, capture_output=True, text=True,
                                   timeout=10)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("error: --crd: ", p.stderr)
                self.assertIn(message, p.stderr)

    def test_bad_crds_fail_at_start(self):
        def rule(text):
            def mutate(crd):
                spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
                    "spec"]
                spec["x-kubernetes-validations"].append({"rule": text, "message": "m"})
            return mutate

        def spec_prop(name, value):
            def mutate(crd):
                crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
                    "properties"][name] = value
            return mutate

        def version(name, value):
            def mutate(crd):
                crd["spec"]["versions"][0][name] = value
            return mutate

        cases = [
            ("comparison", rule("self.cpus.count > 1"), 'cannot parse ">'),
            ("function call", rule("self.owners.size() == self.owners.size()"),
             "self.owners has no fields"),
            ("call", rule("self.cpus.count() == self.cpus.count"), "unexpected ("),
            ("literal", rule("self.nodeName == 'n1'"), "cannot parse"),
            ("undefined field", rule("has(self.nodname)"), "undefined field 'nodname'"),
            ("type mismatch", rule("self.nodeName == self.owners"), "no matching overload"),
            ("not a bool", rule("self.nodeName"), "must evaluate to a bool"),
            ("has(self)", rule("has(self)"), "has() needs a field selection"),
            ("trailing", rule("has(self.ttl) has(self.expires)"), "unexpected has"),
            ("unbalanced", rule("!(has(self.ttl)"), "unexpected end"),
            ("messageExpression", lambda c: c["spec"]["versions"][0]["schema"][
                "openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"][0].update(
                messageExpression="'x'"), "messageExpression is not supported"),
            ("oneOf", spec_prop("x", {"oneOf": [{"type": "string"}]}), "oneOf is not supported"),
            ("no type", spec_prop("x", {"description": "d"}), "type: Required value"),
            ("format", spec_prop("x", {"type": "string", "format": "uuid"}),
             '"uuid" is not supported'),
            ("lookahead", spec_prop("x", {"type": "string", "pattern": "(?=a)a"}),
             "lookarounds are not RE2"),
            ("bad default", spec_prop("x", {"type": "integer", "minimum": 1, "default": 0}),
             "default: default: Invalid value: 0"),
            ("selectable array", version("selectableFields", [{"jsonPath": ".spec.owners"}]),
             "must be a string, integer or boolean field"),
            ("selectable missing", version("selectableFields", [{"jsonPath": ".spec.nope"}]),
             "is not a field of the schema"),
            ("scale", version("subresources", {"status": {}, "scale": {}}),
             "subresources.scale: not supported"),
            ("name", lambda c: c["metadata"].update(name="x.topodra.io"),
             "metadata.name: must be spec.names.plural"),
            ("built-in group", lambda c: (c["spec"].update(group="resource.k8s.io"),
                                          c["metadata"].update(name="reservations."
                                                                    "resource.k8s.io")),
             "already served"),
            ("metadata schema", lambda c: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
                "properties"]["metadata"]["properties"].update(labels={"type": "object"}),
             "only name and generateName"),
        ]
        for name, mutate, message in cases:
            with self.subTest(name):
                crd = load_crd_yaml()
                mutate(crd)
                self.assertIn(message, self.load_error(crd))
        for name, text, message in (("not YAML", "a: [", "not valid YAML"),
                                    ("empty", "", "no CustomResourceDefinition"),
                                    ("not a CRD", "kind: ConfigMap", "expected apiVersion")):
            with self.subTest(name):
                self.assertIn(message, self.load_error(None, text))
        # The real file loads, and YAML timestamps stay strings (as with sigs.k8s.io/yaml).
        self.assertEqual([rt.kind for rt in self.fa.load_crds([CRD_FILE])], ["Reservation"])
        crd = load_crd_yaml()
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
            "properties"]["expires"]["default"] = "2030-01-01T00:00:00Z"
        text = json.dumps(crd).replace('"2030-01-01T00:00:00Z"', "2030-01-01T00:00:00Z")
        rt, = self.fa.load_crds([self.write(None, text)])
        obj, _, _ = rt.decode({"spec": {}})
        self.assertEqual(obj["spec"]["expires"], "2030-01-01T00:00:00Z")


class CelTest(unittest.TestCase):
    """The CEL subset, in process."""

    @classmethod
    def setUpClass(cls):
        cls.fa = import_fake_apiserver()

    def rule(self, text, schema):
        node = self.fa.compile_schema(schema, "s")
        return self.fa.compile_rule({"rule": text}, node, "r")

    def test_evaluation(self):
        schema = {"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
            "c": {"type": "integer"}, "f": {"type": "boolean"},
            "l": {"type": "array", "items": {"type": "integer"}},
            "s": {"type": "array", "x-kubernetes-list-type": "set",
                  "items": {"type": "integer"}}}}
        ev = self.fa.cel_eval
        r = self.rule("has(self.a) && !has(self.c) || (self.f)", schema)
        self.assertTrue(ev(r.ast, {"a": {}}, None))
        self.assertFalse(ev(r.ast, {"a": {}, "c": 1, "f": False}, None))
        self.assertFalse(r.transition)
        # CEL error absorption: false && error is false, true || error is true.
        r = self.rule("has(self.c) && self.a.b == self.c", schema)
        self.assertFalse(ev(r.ast, {}, None))
        r = self.rule("self.a.b == self.c", schema)
        with self.assertRaisesRegex(self.fa.CelEvalError, "no such key: a"):
            ev(r.ast, {"c": 1}, None)
        r = self.rule("self.c == self.a.b || has(self.c)", schema)
        self.assertTrue(ev(r.ast, {"c": 1}, None))
        # Deep, typed equality; list order matters unless the list is a set.
        r = self.rule("self == oldSelf", schema)
        self.assertTrue(r.transition)
        self.assertTrue(ev(r.ast, {"a": {"b": 1}, "l": [1, 2]}, {"l": [1, 2], "a": {"b": 1}}))
        self.assertFalse(ev(r.ast, {"l": [1, 2]}, {"l": [2, 1]}))
        self.assertTrue(ev(r.ast, {"s": [1, 2]}, {"s": [2, 1]}))
        self.assertFalse(ev(r.ast, {"f": True}, {"f": 1}))
        self.assertFalse(ev(r.ast, {"a": {}}, {"a": {"b": 0}}))
        r = self.rule("self.l != oldSelf.l", schema)
        self.assertTrue(ev(r.ast, {"l": [1]}, {"l": []}))
