"""The object store and watches (fakeapi/store.py, api.py, server.py): server-set fields,
resourceVersion conflicts, generateName, delete preconditions, 404/409/410, field and label
selectors, dry-run, watch order, bookmarks and 410 Expired, the history window, wipe and
restart, served versions and --unconditional-update."""

import copy
import urllib.parse

from fakeapi_tests.harness import (Client, make_device, make_slice, NODE_UID, ServerProcess,
                                   ServerTestCase, SLICES, SLICES_BETA)


class CrudTest(ServerTestCase):
    def test_create_sets_server_fields(self):
        before = int(self.client.get(SLICES).json["metadata"]["resourceVersion"])
        created = self.create(make_slice())
        self.assertEqual(created["kind"], "ResourceSlice")
        self.assertEqual(created["apiVersion"], "resource.k8s.io/v1")
        meta = created["metadata"]
        self.assertEqual(meta["name"], "slice-a")
        self.assertRegex(meta["uid"], r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-"
                                      r"[0-9a-f]{12}$")
        self.assertEqual(int(meta["resourceVersion"]), before + 1)
        self.assertIsInstance(meta["resourceVersion"], str)
        self.assertRegex(meta["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(meta["generation"], 1)
        self.assertEqual(created["spec"], make_slice()["spec"])

    def test_get_list_update_delete(self):
        created = self.create(make_slice())
        got = self.client.get(SLICES + "/slice-a")
        self.assertEqual(got.code, 200)
        self.assertEqual(got.json, created)

        lst = self.client.get(SLICES).json
        self.assertEqual(lst["kind"], "ResourceSliceList")
        self.assertEqual(lst["apiVersion"], "resource.k8s.io/v1")
        self.assertEqual(lst["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"])
        self.assertEqual([i["metadata"]["name"] for i in lst["items"]], ["slice-a"])
        self.assertNotIn("kind", lst["items"][0])  # built-in lists carry no per-item TypeMeta

        changed = copy.deepcopy(created)
        changed["spec"]["devices"].append(make_device("cpu-1"))
        r = self.client.put(SLICES + "/slice-a", changed)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(int(r.json["metadata"]["resourceVersion"]),
                         int(created["metadata"]["resourceVersion"]) + 1)
        self.assertEqual(r.json["metadata"]["generation"], 2)
        self.assertEqual(r.json["metadata"]["uid"], created["metadata"]["uid"])
        self.assertEqual(len(r.json["spec"]["devices"]), 2)

        labels_only = copy.deepcopy(r.json)
        labels_only["metadata"]["labels"] = {"team": "cpu"}
        r2 = self.client.put(SLICES + "/slice-a", labels_only)
        self.assertEqual(r2.code, 200, r2.data)
        self.assertEqual(r2.json["metadata"]["generation"], 2)  # no spec change, no bump

        d = self.client.delete(SLICES + "/slice-a")
        self.assertEqual(d.code, 200)
        self.assertEqual(d.json["kind"], "Status")
        self.assertEqual(d.json["status"], "Success")
        self.assertEqual(d.json["details"]["name"], "slice-a")
        self.assertEqual(d.json["details"]["uid"], created["metadata"]["uid"])
        r404 = self.client.get(SLICES + "/slice-a")
        self.assertStatus(r404, 404, "NotFound")
        self.assertEqual(r404.json["message"],
                         'resourceslices.resource.k8s.io "slice-a" not found')
        self.assertStatus(self.client.delete(SLICES + "/slice-a"), 404, "NotFound")

    def test_noop_update_does_not_bump_resource_version(self):
        created = self.create(make_slice())
        r = self.client.put(SLICES + "/slice-a", created)
        self.assertEqual(r.code, 200)
        self.assertEqual(r.json["metadata"]["resourceVersion"],
                         created["metadata"]["resourceVersion"])

    def test_create_conflicts_and_errors(self):
        self.create(make_slice())
        r = self.client.post(SLICES, make_slice())
        self.assertStatus(r, 409, "AlreadyExists")
        self.assertEqual(r.json["details"]["name"], "slice-a")
        with_rv = make_slice("slice-b")
        with_rv["metadata"]["resourceVersion"] = "5"
        r = self.client.post(SLICES, with_rv)
        self.assertEqual(r.code, 500)
        self.assertEqual(r.json["message"],
                         "resourceVersion should not be set on objects to be created")
        no_name = make_slice()
        del no_name["metadata"]["name"]
        self.assertInvalid(self.client.post(SLICES, no_name), "metadata.name",
                           "name or generateName is required")
        wrong_version = make_slice("slice-c")
        wrong_version["apiVersion"] = "resource.k8s.io/v1beta2"
        self.assertStatus(self.client.post(SLICES, wrong_version), 400, "BadRequest")

    def test_update_resource_version_rules(self):
        created = self.create(make_slice())
        stale = copy.deepcopy(created)
        current = copy.deepcopy(created)
        current["metadata"]["labels"] = {"a": "b"}
        self.assertEqual(self.client.put(SLICES + "/slice-a", current).code, 200)
        stale["metadata"]["labels"] = {"a": "c"}
        r = self.client.put(SLICES + "/slice-a", stale)
        self.assertStatus(r, 409, "Conflict")
        self.assertIn("the object has been modified", r.json["message"])

        missing = copy.deepcopy(created)
        del missing["metadata"]["resourceVersion"]
        self.assertStatus(self.client.put(SLICES + "/slice-a", missing), 409, "Conflict")

        absent = make_slice("slice-z")
        absent["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
        self.assertStatus(self.client.put(SLICES + "/slice-z", absent), 404, "NotFound")

        mismatch = self.client.get(SLICES + "/slice-a").json
        self.assertStatus(self.client.put(SLICES + "/other", mismatch), 400, "BadRequest")

    def test_update_immutable_fields(self):
        created = self.create(make_slice())
        for path, value in ((("spec", "driver"), "other.topodra.io"),
                            (("spec", "pool", "name"), "other-pool"),
                            (("spec", "nodeName"), "node-b")):
            with self.subTest(field=".".join(path)):
                obj = copy.deepcopy(created)
                target = obj
                for p in path[:-1]:
                    target = target[p]
                target[path[-1]] = value
                self.assertInvalid(self.client.put(SLICES + "/slice-a", obj), ".".join(path),
                                   "field is immutable")

    def test_delete_preconditions(self):
        created = self.create(make_slice())
        uid, rv = created["metadata"]["uid"], created["metadata"]["resourceVersion"]
        opts = {"kind": "DeleteOptions", "apiVersion": "v1",
                "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}
        r = self.client.delete(SLICES + "/slice-a", opts)
        self.assertStatus(r, 409, "Conflict")
        self.assertIn("Precondition failed: UID in precondition", r.json["message"])
        opts["preconditions"] = {"uid": uid, "resourceVersion": str(int(rv) - 1)}
        r = self.client.delete(SLICES + "/slice-a", opts)
        self.assertStatus(r, 409, "Conflict")
        self.assertIn("ResourceVersion in precondition", r.json["message"])
        self.assertEqual(self.client.get(SLICES + "/slice-a").code, 200)
        opts["preconditions"] = {"uid": uid, "resourceVersion": rv}
        self.assertEqual(self.client.delete(SLICES + "/slice-a", opts).code, 200)
        self.assertEqual(self.client.get(SLICES + "/slice-a").code, 404)

    def test_generate_name(self):
        obj = make_slice()
        del obj["metadata"]["name"]
        obj["metadata"]["generateName"] = "node-a-cpu.topodra.io-"
        names = set()
        for _ in range(3):
            created = self.create(obj)
            name = created["metadata"]["name"]
            self.assertRegex(name, r"^node-a-cpu\.topodra\.io-[bcdfghjklmnpqrstvwxz2456789]{5}$")
            self.assertEqual(created["metadata"]["generateName"], "node-a-cpu.topodra.io-")
            names.add(name)
        self.assertEqual(len(names), 3)
        self.assertEqual(len(self.client.get(SLICES).json["items"]), 3)

    def test_finalizers_delay_deletion(self):
        obj = make_slice()
        obj["metadata"]["finalizers"] = ["topodra.io/test"]
        self.create(obj)
        r = self.client.delete(SLICES + "/slice-a")
        self.assertEqual(r.code, 200)
        self.assertIn("deletionTimestamp", r.json["metadata"])
        still = self.client.get(SLICES + "/slice-a").json
        still["metadata"]["finalizers"] = []
        self.assertEqual(self.client.put(SLICES + "/slice-a", still).code, 200)
        self.assertEqual(self.client.get(SLICES + "/slice-a").code, 404)

    def test_patch(self):
        created = self.create(make_slice())
        r = self.client.request("PATCH", SLICES + "/slice-a",
                                {"metadata": {"labels": {"x": "y"}}},
                                content_type="application/merge-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["labels"], {"x": "y"})
        r = self.client.request("PATCH", SLICES + "/slice-a",
                                [{"op": "replace", "path": "/spec/pool/generation", "value": 2}],
                                content_type="application/json-patch+json")
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["spec"]["pool"]["generation"], 2)
        self.assertEqual(r.json["metadata"]["generation"], 2)
        stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
        self.assertStatus(self.client.request("PATCH", SLICES + "/slice-a", stale,
                                              content_type="application/merge-patch+json"),
                          409, "Conflict")
        self.assertInvalid(self.client.request("PATCH", SLICES + "/slice-a",
                                               {"spec": {"nodeName": "node-b"}},
                                               content_type="application/merge-patch+json"),
                           "spec.nodeName", "field is immutable")

    def test_delete_collection(self):
        self.create(make_slice("a", node="node-a"))
        self.create(make_slice("b", node="node-b"))
        r = self.client.delete(SLICES + "?fieldSelector=spec.nodeName%3Dnode-a")
        self.assertEqual(r.code, 200)
        self.assertEqual([i["metadata"]["name"] for i in r.json["items"]], ["a"])
        self.assertEqual([i["metadata"]["name"] for i in self.client.get(SLICES).json["items"]],
                         ["b"])

    def test_pagination(self):
        for i in range(5):
            self.create(make_slice("s%d" % i))
        first = self.client.get(SLICES + "?limit=2").json
        self.assertEqual([i["metadata"]["name"] for i in first["items"]], ["s0", "s1"])
        self.assertEqual(first["metadata"]["remainingItemCount"], 3)
        token = urllib.parse.quote(first["metadata"]["continue"])
        second = self.client.get(SLICES + "?limit=2&continue=" + token).json
        self.assertEqual([i["metadata"]["name"] for i in second["items"]], ["s2", "s3"])
        self.assertEqual(second["metadata"]["resourceVersion"],
                         first["metadata"]["resourceVersion"])
        self.client.request("POST", "/__control/reset")
        token = urllib.parse.quote(second["metadata"]["continue"])
        self.assertStatus(self.client.get(SLICES + "?limit=2&continue=" + token), 410,
                          "Expired")

    def test_nodes(self):
        r = self.client.get("/api/v1/nodes/node-a")
        self.assertEqual(r.code, 200)
        self.assertEqual(r.json["kind"], "Node")
        self.assertEqual(r.json["apiVersion"], "v1")
        self.assertEqual(r.json["metadata"]["uid"], NODE_UID)
        self.assertStatus(self.client.get("/api/v1/nodes/node-b"), 404, "NotFound")
        self.assertStatus(self.client.delete("/api/v1/nodes/node-a"), 405, "MethodNotAllowed")
        self.client.request("POST", "/__control/reset")  # configured nodes survive a reset
        self.assertEqual(self.client.get("/api/v1/nodes/node-a").json["metadata"]["uid"],
                         NODE_UID)


class SelectorTest(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.create(make_slice("a", node="node-a", driver="cpu.topodra.io"))
        self.create(make_slice("b", node="node-b", driver="cpu.topodra.io"))
        self.create(make_slice("c", node="node-a", driver="gpu.example.com", pool="pool-x"))
        labelled = make_slice("d", node="node-c")
        labelled["metadata"]["labels"] = {"tier": "gold", "zone": "z1"}
        self.create(labelled)

    def names(self, query):
        r = self.client.get(SLICES + "?" + query)
        self.assertEqual(r.code, 200, r.data)
        return [i["metadata"]["name"] for i in r.json["items"]]

    def fsel(self, selector):
        return self.names("fieldSelector=" + urllib.parse.quote(selector))

    def test_field_selectors(self):
        self.assertEqual(self.fsel("spec.nodeName=node-a"), ["a", "c"])
        self.assertEqual(self.fsel("spec.nodeName==node-a"), ["a", "c"])
        self.assertEqual(self.fsel("spec.nodeName!=node-a"), ["b", "d"])
        self.assertEqual(self.fsel("spec.driver=cpu.topodra.io"), ["a", "b", "d"])
        self.assertEqual(self.fsel("spec.driver=cpu.topodra.io,spec.nodeName=node-a"), ["a"])
        self.assertEqual(self.fsel("spec.pool.name=pool-x"), ["c"])
        self.assertEqual(self.fsel("metadata.name=b"), ["b"])
        self.assertEqual(self.fsel("spec.nodeName=node-z"), [])

    def test_unsupported_field_selector_is_400(self):
        r = self.client.get(SLICES + "?fieldSelector=spec.allNodes%3Dtrue")
        self.assertStatus(r, 400, "BadRequest")
        self.assertEqual(r.json["message"], "field label not supported: spec.allNodes")
        self.assertStatus(self.client.get(SLICES + "?fieldSelector=spec.nodeName"), 400,
                          "BadRequest")

    def test_label_selectors(self):
        self.assertEqual(self.names("labelSelector=tier%3Dgold"), ["d"])
        self.assertEqual(self.names("labelSelector=tier%21%3Dgold"), ["a", "b", "c"])
        self.assertEqual(self.names("labelSelector=tier%3Dgold,zone%3Dz2"), [])
        self.assertEqual(self.names("labelSelector=zone"), ["d"])
        self.assertEqual(self.names("labelSelector=zone%20in%20(z1,z2)"), ["d"])
        self.assertStatus(self.client.get(SLICES + "?labelSelector=%3D%3Dx"), 400,
                          "BadRequest")


class DryRunTest(ServerTestCase):
    def test_dry_run_stores_nothing_and_sends_no_events(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=" + rv0)
        r = self.client.post(SLICES + "?dryRun=All", make_slice("dry"))
        self.assertEqual(r.code, 201)
        self.assertEqual(r.json["metadata"]["name"], "dry")
        self.assertNotIn("resourceVersion", r.json["metadata"])
        self.assertEqual(self.client.get(SLICES + "/dry").code, 404)

        real = self.create(make_slice("real"))
        changed = copy.deepcopy(real)
        changed["metadata"]["labels"] = {"dry": "run"}
        self.assertEqual(self.client.put(SLICES + "/real?dryRun=All", changed).code, 200)
        self.assertNotIn("labels", self.client.get(SLICES + "/real").json["metadata"])
        self.assertEqual(self.client.delete(SLICES + "/real?dryRun=All").code, 200)
        self.assertEqual(self.client.delete(SLICES + "/real",
                                            {"dryRun": ["All"]}).code, 200)
        self.assertEqual(self.client.get(SLICES + "/real").code, 200)
        self.assertStatus(self.client.post(SLICES + "?dryRun=Some", make_slice("x")), 400,
                          "BadRequest")
        self.assertEqual(self.client.delete(SLICES + "/real").code, 200)

        first = watch.next_event()
        self.assertEqual((first["type"], first["object"]["metadata"]["name"]), ("ADDED", "real"))
        second = watch.next_event()
        self.assertEqual((second["type"], second["object"]["metadata"]["name"]),
                         ("DELETED", "real"))
        self.assertEqual(int(second["object"]["metadata"]["resourceVersion"]),
                         int(real["metadata"]["resourceVersion"]) + 1)
        watch.close()
        dry = [e for e in self.client.get("/__control/requests").json if "dryRun" in e["query"]]
        self.assertEqual([(e["method"], e["code"]) for e in dry],
                         [("POST", 201), ("PUT", 200), ("DELETE", 200), ("POST", 400)])


class WatchTest(ServerTestCase):
    def test_events_in_order(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=" + rv0)
        self.assertEqual(watch.code, 200)
        self.assertEqual(watch.headers.get("Transfer-Encoding"), "chunked")
        created = self.create(make_slice())
        updated = copy.deepcopy(created)
        updated["spec"]["pool"]["generation"] = 2
        updated = self.client.put(SLICES + "/slice-a", updated).json
        self.assertEqual(self.client.delete(SLICES + "/slice-a").code, 200)

        events = [watch.next_event() for _ in range(3)]
        self.assertEqual([e["type"] for e in events], ["ADDED", "MODIFIED", "DELETED"])
        self.assertEqual(events[0]["object"], created)
        self.assertEqual(events[1]["object"], updated)
        deleted = events[2]["object"]
        self.assertEqual(deleted["spec"], updated["spec"])
        self.assertEqual(int(deleted["metadata"]["resourceVersion"]),
                         int(updated["metadata"]["resourceVersion"]) + 1)
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        self.assertEqual(rvs, sorted(rvs))
        watch.close()

    def test_watch_without_resource_version_starts_with_added(self):
        self.create(make_slice("a"))
        self.create(make_slice("b"))
        watch = self.client.watch("")
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"])
                          for e in (watch.next_event(), watch.next_event())],
                         [("ADDED", "a"), ("ADDED", "b")])
        self.create(make_slice("c"))
        ev = watch.next_event()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "c"))
        watch.close()

    def test_bookmarks(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=%s&allowWatchBookmarks=true" % rv0)
        ev = watch.next()
        self.assertEqual(ev["type"], "BOOKMARK")
        self.assertEqual(ev["object"], {"kind": "ResourceSlice",
                                        "apiVersion": "resource.k8s.io/v1",
                                        "metadata": {"resourceVersion": rv0}})
        created = self.create(make_slice("other", node="node-b"))
        watch.close()
        watch = self.client.watch("resourceVersion=%s&allowWatchBookmarks=true&fieldSelector="
                                  "spec.nodeName%%3Dnode-a" % rv0)
        ev = watch.next()
        self.assertEqual(ev["type"], "BOOKMARK")  # the filtered-out event still advances the RV
        self.assertEqual(ev["object"]["metadata"]["resourceVersion"],
                         created["metadata"]["resourceVersion"])
        watch.close()
        no_bookmarks = self.client.watch("resourceVersion=%s&timeoutSeconds=1" % rv0)
        self.assertEqual(no_bookmarks.next()["type"], "ADDED")
        self.assertIsNone(no_bookmarks.next())  # timeoutSeconds ends the stream, no bookmarks
        no_bookmarks.close()

    def test_selector_filtering(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=%s&fieldSelector=%s" % (
            rv0, urllib.parse.quote("spec.driver=cpu.topodra.io,spec.nodeName=node-a")))
        self.create(make_slice("b", node="node-b"))
        self.create(make_slice("g", driver="gpu.example.com"))
        mine = self.create(make_slice("a"))
        moved = copy.deepcopy(mine)
        moved["metadata"]["labels"] = {"x": "y"}
        self.client.put(SLICES + "/a", moved)
        self.client.delete(SLICES + "/b")
        self.client.delete(SLICES + "/a")
        got = [(e["type"], e["object"]["metadata"]["name"])
               for e in (watch.next_event(), watch.next_event(), watch.next_event())]
        self.assertEqual(got, [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")])
        watch.close()
        bad = self.client.watch("fieldSelector=spec.foo%3Dbar")
        self.assertEqual(bad.code, 400)
        bad.close()

    def test_label_change_moves_object_out_of_selector(self):
        obj = make_slice()
        obj["metadata"]["labels"] = {"tier": "gold"}
        created = self.create(obj)
        watch = self.client.watch("resourceVersion=%s&labelSelector=tier%%3Dgold"
                                  % created["metadata"]["resourceVersion"])
        created["metadata"]["labels"] = {"tier": "silver"}
        self.assertEqual(self.client.put(SLICES + "/slice-a", created).code, 200)
        ev = watch.next_event()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["labels"]),
                         ("DELETED", {"tier": "silver"}))
        watch.close()

    def test_410_after_reset(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=" + rv0)
        self.create(make_slice())
        self.assertEqual(watch.next_event()["type"], "ADDED")
        self.assertEqual(self.client.request("POST", "/__control/reset").code, 200)
        ev = watch.next_event()
        self.assertEqual(ev["type"], "ERROR")
        self.assertEqual(ev["object"]["kind"], "Status")
        self.assertEqual(ev["object"]["code"], 410)
        self.assertEqual(ev["object"]["reason"], "Expired")
        self.assertIsNone(watch.next())
        watch.close()
        again = self.client.watch("resourceVersion=" + rv0)
        self.assertEqual(again.code, 200)
        ev = again.next()
        self.assertEqual((ev["type"], ev["object"]["code"]), ("ERROR", 410))
        again.close()
        self.assertEqual(self.client.get(SLICES).json["items"], [])

    def test_close_watches(self):
        watch = self.client.watch("allowWatchBookmarks=true")
        self.assertEqual(watch.next()["type"], "BOOKMARK")
        state = self.client.get("/__control/state").json
        self.assertEqual(state["openWatches"], 1)
        r = self.client.request("POST", "/__control/close-watches")
        self.assertEqual(r.json, {"closed": 1})
        for _ in range(5):  # bookmarks come every 0.2 s; the stream must end well before
            ev = watch.next()
            if ev is None:
                break
            self.assertEqual(ev["type"], "BOOKMARK")
        else:
            self.fail("the watch stream did not end after /__control/close-watches")
        watch.close()

    def test_future_resource_version(self):
        rv = int(self.client.get(SLICES).json["metadata"]["resourceVersion"])
        r = self.client.get(SLICES + "?watch=1&resourceVersion=%d" % (rv + 100))
        self.assertStatus(r, 504, "Timeout")
        self.assertStatus(self.client.get(SLICES + "?watch=1&resourceVersion=abc"), 400,
                          "BadRequest")

    def test_many_concurrent_watches(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watches = [self.client.watch("resourceVersion=" + rv0) for _ in range(40)]
        self.create(make_slice())
        for w in watches:
            self.assertEqual(w.next_event()["type"], "ADDED")
            w.close()


class HistoryWindowTest(ServerTestCase):
    ARGS = ("--watch-history", "5")

    def test_resource_version_older_than_window(self):
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        for i in range(5):
            self.create(make_slice("s%d" % i))
        watch = self.client.watch("resourceVersion=" + rv0)  # exactly at the window: fine
        self.assertEqual(watch.next_event()["object"]["metadata"]["name"], "s0")
        watch.close()
        self.create(make_slice("s5"))
        watch = self.client.watch("resourceVersion=" + rv0)
        ev = watch.next()
        self.assertEqual(ev["type"], "ERROR")
        self.assertEqual(ev["object"]["code"], 410)
        self.assertEqual(ev["object"]["reason"], "Expired")
        self.assertIn("too old resource version: %s" % rv0, ev["object"]["message"])
        watch.close()


class WipeAndRestartTest(ServerTestCase):
    """What a node's publisher meets when its slices go (issue 14): the kubelet's node-wide wipe
    (a DELETE of the collection by spec.nodeName), writes to objects deleted meanwhile, and an API
    server that comes back empty."""

    NODE_A = "?fieldSelector=" + urllib.parse.quote("spec.nodeName=node-a")

    def test_update_of_a_deleted_object_is_404(self):
        created = self.create(make_slice())
        self.assertEqual(self.client.delete(SLICES + "/slice-a").code, 200)
        # ResourceSlices cannot be created by a PUT (AllowCreateOnUpdate is false), with or
        # without the old resourceVersion.
        r = self.client.put(SLICES + "/slice-a", created)
        self.assertStatus(r, 404, "NotFound")
        self.assertEqual(r.json["message"], 'resourceslices.resource.k8s.io "slice-a" not found')
        self.assertEqual(r.json["details"], {"name": "slice-a", "group": "resource.k8s.io",
                                             "kind": "resourceslices"})
        del created["metadata"]["resourceVersion"]
        self.assertStatus(self.client.put(SLICES + "/slice-a", created), 404, "NotFound")
        self.assertEqual(self.client.get(SLICES).json["items"], [])

    def test_kubelet_wipe_deletes_every_slice_of_the_node(self):
        mine = [self.create(make_slice("node-a-%s-%d" % (driver, i), driver=driver))
                for driver in ("cpu.topodra.io", "gpu.topodra.io") for i in range(3)]
        other = self.create(make_slice("node-b-cpu", node="node-b"))
        rv0 = other["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=%s&fieldSelector=%s" % (
            rv0, urllib.parse.quote("spec.driver=cpu.topodra.io,spec.nodeName=node-a")))
        r = self.client.delete(SLICES + self.NODE_A, {"kind": "DeleteOptions",
                                                      "apiVersion": "v1"})
        self.assertEqual(r.code, 200, r.data)
        # The answer is the list as it was before the deletions, in name order.
        self.assertEqual(r.json["kind"], "ResourceSliceList")
        self.assertEqual(r.json["metadata"]["resourceVersion"], rv0)
        untyped = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in mine]
        self.assertEqual(r.json["items"], sorted(untyped, key=lambda o: o["metadata"]["name"]))
        self.assertEqual([i["metadata"]["name"] for i in self.client.get(SLICES).json["items"]],
                         ["node-b-cpu"])
        # One DELETED event per object, each with a resourceVersion of its own after the old one.
        events = [watch.next_event() for _ in range(3)]
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in events],
                         [("DELETED", "node-a-cpu.topodra.io-%d" % i) for i in range(3)])
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        self.assertEqual(rvs, sorted(set(rvs)))
        self.assertGreater(rvs[0], int(rv0))
        for e, before in zip(events, mine):
            self.assertEqual(e["object"]["metadata"]["uid"], before["metadata"]["uid"])
            self.assertEqual(e["object"]["spec"], before["spec"])
        self.assertEqual(self.client.get(SLICES).json["metadata"]["resourceVersion"],
                         str(rvs[-1] + 3))  # the three GPU slices came after
        watch.close()
        # Gone for good: updates are 404, creates start afresh.
        self.assertStatus(self.client.put(SLICES + "/" + mine[0]["metadata"]["name"], mine[0]),
                          404, "NotFound")
        again = self.create(make_slice(mine[0]["metadata"]["name"]))
        self.assertNotEqual(again["metadata"]["uid"], mine[0]["metadata"]["uid"])
        # Nothing left to delete: an empty list, no error.
        self.client.delete(SLICES + "/" + again["metadata"]["name"])
        r = self.client.delete(SLICES + self.NODE_A)
        self.assertEqual((r.code, r.json["items"]), (200, []))

    def test_wipe_with_finalizers_and_dry_run(self):
        held = make_slice("held")
        held["metadata"]["finalizers"] = ["topodra.io/test"]
        held = self.create(held)
        self.create(make_slice("plain"))
        r = self.client.delete(SLICES + self.NODE_A + "&dryRun=All")
        self.assertEqual([i["metadata"]["name"] for i in r.json["items"]], ["held", "plain"])
        self.assertEqual(len(self.client.get(SLICES).json["items"]), 2)
        watch = self.client.watch("resourceVersion=" + held["metadata"]["resourceVersion"])
        self.assertEqual(watch.next_event()["object"]["metadata"]["name"], "plain")  # its ADDED
        r = self.client.delete(SLICES + self.NODE_A)
        self.assertEqual([i["metadata"]["name"] for i in r.json["items"]], ["held", "plain"])
        # As a single DELETE: the object with a finalizer stays, marked for deletion.
        ev = watch.next_event()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("MODIFIED", "held"))
        self.assertIn("deletionTimestamp", ev["object"]["metadata"])
        ev = watch.next_event()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("DELETED", "plain"))
        watch.close()
        left = self.client.get(SLICES).json["items"]
        self.assertEqual([i["metadata"]["name"] for i in left], ["held"])
        self.assertIn("deletionTimestamp", left[0]["metadata"])

    def test_restarted_server_is_empty_and_expires_old_watches(self):
        """A restarted server with an empty store is what an etcd restored with
        `etcdutl snapshot restore --bump-revision --mark-compacted` looks like (etcd-io/etcd#16028,
        the procedure for Kubernetes): resourceVersions never go back, and watches from before
        get 410 Expired. Open watches end with the process, as with a real API server restart."""
        self.create(make_slice())
        rv0 = self.client.get(SLICES).json["metadata"]["resourceVersion"]
        watch = self.client.watch("resourceVersion=" + rv0)
        restarted = ServerProcess(*self.ARGS)  # a new process: nothing of the old one is kept
        try:
            self.server.stop()
            self.assertIsNone(watch.next())  # the old process took its watches with it
            watch.close()
            c = Client(restarted.port)
            lst = c.get(SLICES).json
            self.assertEqual(lst["items"], [])
            self.assertGreater(int(lst["metadata"]["resourceVersion"]), int(rv0))
            again = c.watch("resourceVersion=" + rv0)
            ev = again.next()
            self.assertEqual((ev["type"], ev["object"]["code"], ev["object"]["reason"]),
                             ("ERROR", 410, "Expired"))
            again.close()
            self.assertStatus(c.put(SLICES + "/slice-a", make_slice()), 404, "NotFound")
        finally:
            type(self).server = restarted
            type(self).client = Client(restarted.port)

    def test_restored_without_bumped_revision_resource_versions_go_back(self):
        """Without --bump-revision a restore starts resourceVersions over; a watch from a
        resourceVersion the server has not reached is 504 ResourceVersionTooLarge (what the real
        server answers once it has waited for it in vain)."""
        low = ServerProcess("--initial-resource-version", "1")
        try:
            c = Client(low.port)
            rv = int(c.get(SLICES).json["metadata"]["resourceVersion"])
            self.assertEqual(rv, 1)
            r = c.get(SLICES + "?watch=true&resourceVersion=%d" % (rv + 1000))
            self.assertStatus(r, 504, "Timeout")
            self.assertEqual(r.json["details"]["causes"][0]["reason"], "ResourceVersionTooLarge")
        finally:
            low.stop()


class VersionsTest(ServerTestCase):
    def test_v1beta2_renders_its_api_version(self):
        created = self.create(make_slice())
        r = self.client.get(SLICES_BETA + "/slice-a")
        self.assertEqual(r.code, 200)
        self.assertEqual(r.json["apiVersion"], "resource.k8s.io/v1beta2")
        self.assertEqual(r.json["spec"], created["spec"])
        beta = make_slice("beta")
        beta["apiVersion"] = "resource.k8s.io/v1beta2"
        r = self.client.post(SLICES_BETA, beta)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.json["apiVersion"], "resource.k8s.io/v1beta2")
        self.assertEqual(self.client.get(SLICES + "/beta").json["apiVersion"],
                         "resource.k8s.io/v1")
        lst = self.client.get(SLICES_BETA).json
        self.assertEqual(lst["apiVersion"], "resource.k8s.io/v1beta2")
        self.assertEqual(len(lst["items"]), 2)

    def test_discovery(self):
        group = self.client.get("/apis/resource.k8s.io").json
        self.assertEqual(group["kind"], "APIGroup")
        self.assertEqual([v["version"] for v in group["versions"]], ["v1", "v1beta2"])
        self.assertEqual(group["preferredVersion"]["version"], "v1")
        resources = self.client.get("/apis/resource.k8s.io/v1").json
        self.assertEqual(resources["kind"], "APIResourceList")
        self.assertIn("resourceslices", [r["name"] for r in resources["resources"]])
        self.assertStatus(self.client.get("/apis/resource.k8s.io/v1beta1/resourceslices"), 404,
                          "NotFound")


class OnlyV1Test(ServerTestCase):
    ARGS = ("--versions", "v1")

    def test_unserved_version_is_404(self):
        self.assertStatus(self.client.get(SLICES_BETA), 404, "NotFound")
        self.assertStatus(self.client.get("/apis/resource.k8s.io/v1beta2"), 404, "NotFound")
        group = self.client.get("/apis/resource.k8s.io").json
        self.assertEqual([v["version"] for v in group["versions"]], ["v1"])
        self.assertEqual(self.client.get(SLICES).code, 200)


class UnconditionalUpdateTest(ServerTestCase):
    ARGS = ("--unconditional-update", "allow")

    def test_put_without_resource_version(self):
        created = self.create(make_slice())
        del created["metadata"]["resourceVersion"]
        created["metadata"]["labels"] = {"a": "b"}
        r = self.client.put(SLICES + "/slice-a", created)
        self.assertEqual(r.code, 200, r.data)
        self.assertEqual(r.json["metadata"]["labels"], {"a": "b"})
        created["metadata"]["resourceVersion"] = "1"  # a stale one still conflicts
        self.assertStatus(self.client.put(SLICES + "/slice-a", created), 409, "Conflict")
