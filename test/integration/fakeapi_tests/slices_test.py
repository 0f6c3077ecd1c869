"""ResourceSlice validation (fakeapi/slices.py, slice_fields.py, mixins.py, decode.py,
formats.py): the 1.36 shapes and limits, quantities, field validation, the KEP-5234 mixin model
(--mixins accept), --device-taints drop, --pool-checks reject and each rule of k8s-api-cdi.md
§1.5-§1.8."""

import json

from fakeapi_tests.harness import (_del, _set, Client, make_device, make_slice, ServerProcess,
                                   ServerTestCase, SLICES)


class ValidationTest(ServerTestCase):
    def check(self, cases):
        for name, mutate, field, message in cases:
            with self.subTest(name):
                obj = make_slice()
                mutate(obj)
                self.assertInvalid(self.client.post(SLICES, obj), field, message)
        self.assertEqual(self.client.get(SLICES).json["items"], [])

    def test_metadata(self):
        self.check([
            ("name not a DNS subdomain", lambda o: _set(o, ("metadata", "name"), "Bad_Name"),
             "metadata.name", "RFC 1123 subdomain"),
            ("name too long", lambda o: _set(o, ("metadata", "name"), "a" * 254),
             "metadata.name", "must be no more than 253 characters"),
            ("label key", lambda o: _set(o, ("metadata", "labels"), {"-bad": "x"}),
             "metadata.labels", "name part must consist of"),
            ("label value", lambda o: _set(o, ("metadata", "labels"), {"ok": "not ok"}),
             "metadata.labels", "a valid label must be"),
            ("two controllers", lambda o: _set(o, ("metadata", "ownerReferences"), [
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u", "controller": True},
                {"apiVersion": "v1", "kind": "Node", "name": "m", "uid": "v",
                 "controller": True}]),
             "metadata.ownerReferences", "Only one reference can have Controller"),
        ])
        ok = make_slice("a" * 253)
        self.assertEqual(self.client.post(SLICES, ok).code, 201)

    def test_driver_and_pool(self):
        self.check([
            ("driver missing", lambda o: _set(o, ("spec", "driver"), ""), "spec.driver",
             "Required value"),
            ("driver too long", lambda o: _set(o, ("spec", "driver"), "a" * 60 + ".com"),
             "spec.driver", "Too long: may not be more than 63"),
            ("driver not a subdomain", lambda o: _set(o, ("spec", "driver"), "-cpu.io"),
             "spec.driver", "RFC 1123 subdomain"),
            ("driver underscore", lambda o: _set(o, ("spec", "driver"), "cpu_x.io"),
             "spec.driver", "RFC 1123 subdomain"),
            ("pool name empty", lambda o: _set(o, ("spec", "pool", "name"), ""),
             "spec.pool.name", "Required value"),
            ("pool name empty part", lambda o: _set(o, ("spec", "pool", "name"), "a//b"),
             "spec.pool.name", "RFC 1123 subdomain"),
            ("pool name too long", lambda o: _set(o, ("spec", "pool", "name"),
                                                  "/".join(["a" * 63] * 4) + "/aa"),
             "spec.pool.name", "Too long: may not be more than 253"),
            ("pool generation negative", lambda o: _set(o, ("spec", "pool", "generation"), -1),
             "spec.pool.generation", "must be greater than or equal to zero"),
            ("slice count zero", lambda o: _set(o, ("spec", "pool", "resourceSliceCount"), 0),
             "spec.pool.resourceSliceCount", "must be greater than zero"),
            ("slice count missing", lambda o: _del(o, ("spec", "pool", "resourceSliceCount")),
             "spec.pool.resourceSliceCount", "must be greater than zero"),
        ])
        upper = make_slice()
        upper["spec"]["driver"] = "CPU.Topodra.IO"
        r = self.client.post(SLICES, upper)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.warnings(), ['299 - "spec.driver: driver names should be lowercase; '
                                        '\\"CPU.Topodra.IO\\" contains uppercase characters"'])
        nested = make_slice("nested")
        nested["spec"]["pool"]["name"] = "node-a/numa.0"
        self.assertEqual(self.client.post(SLICES, nested).code, 201)

    def test_node_selection(self):
        one_term = {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]}
        self.check([
            ("none", lambda o: _del(o, ("spec", "nodeName")), "spec",
             "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` "
             "is required"),
            ("two", lambda o: _set(o, ("spec", "allNodes"), True), "spec",
             "multiple fields are set"),
            ("empty nodeName", lambda o: _set(o, ("spec", "nodeName"), ""), "spec.nodeName",
             "must be either unset or set to a non-empty string"),
            ("bad nodeName", lambda o: _set(o, ("spec", "nodeName"), "Node_A"),
             "spec.nodeName", "RFC 1123 subdomain"),
            ("allNodes false", lambda o: (_del(o, ("spec", "nodeName")),
                                          _set(o, ("spec", "allNodes"), False)),
             "spec.allNodes", "must be either unset or set to true"),
            ("two selector terms", lambda o: (_del(o, ("spec", "nodeName")),
                                              _set(o, ("spec", "nodeSelector"), {
                                                  "nodeSelectorTerms": one_term[
                                                      "nodeSelectorTerms"] * 2})),
             "spec.nodeSelector.nodeSelectorTerms", "must have exactly one node selector term"),
            ("device node without perDevice",
             lambda o: _set(o, ("spec", "devices", 0, "nodeName"), "node-a"),
             "spec.devices[0]", "can only be set if `perDeviceNodeSelection` is set to true"),
            ("perDevice without device node",
             lambda o: (_del(o, ("spec", "nodeName")),
                        _set(o, ("spec", "perDeviceNodeSelection"), True)),
             "spec.devices[0]", "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is "
                                "required when `perDeviceNodeSelection`"),
        ])
        for mutate in (lambda o: (_del(o, ("spec", "nodeName")),
                                  _set(o, ("spec", "nodeSelector"), one_term)),
                       lambda o: (_del(o, ("spec", "nodeName")),
                                  _set(o, ("spec", "allNodes"), True)),
                       lambda o: (_del(o, ("spec", "nodeName")),
                                  _set(o, ("spec", "perDeviceNodeSelection"), True),
                                  _set(o, ("spec", "devices", 0, "nodeName"), "node-a"))):
            obj = make_slice("ok")
            mutate(obj)
            self.assertEqual(self.client.post(SLICES, obj).code, 201)
            self.assertEqual(self.client.delete(SLICES + "/ok").code, 200)

    def test_device_count_limits(self):
        many = [make_device("d%d" % i) for i in range(129)]
        tainted = [make_device("d%d" % i) for i in range(65)]
        tainted[7]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
        counters = [make_device("d%d" % i) for i in range(65)]
        counters[3]["consumesCounters"] = [{"counterSet": "s", "counters": {"c": {"value": "1"}}}]
        self.check([
            ("129 devices", lambda o: _set(o, ("spec", "devices"), many), "spec.devices",
             "Too many: 129: must have at most 128 items"),
            ("65 devices with a taint", lambda o: _set(o, ("spec", "devices"), tainted),
             "spec.devices", "Too many: 65: must have at most 64 items"),
            ("65 devices with counters", lambda o: _set(o, ("spec", "devices"), counters),
             "spec.devices", "Too many: 65: must have at most 64 items"),
        ])
        self.assertEqual(self.client.post(SLICES, make_slice(devices=many[:128])).code, 201)
        self.assertEqual(self.client.post(SLICES, make_slice("t", devices=tainted[:64])).code,
                         201)

    def test_device_names_and_attributes(self):
        attrs33 = {"a%d" % i: {"int": i} for i in range(32)}
        attrs32 = {"a%d" % i: {"int": i} for i in range(31)}
        self.check([
            ("device name", lambda o: _set(o, ("spec", "devices", 0, "name"), "CPU0"),
             "spec.devices[0].name", "RFC 1123 label"),
            ("device name too long", lambda o: _set(o, ("spec", "devices", 0, "name"), "a" * 64),
             "spec.devices[0].name", "must be no more than 63 characters"),
            ("duplicate device", lambda o: _set(o, ("spec", "devices"),
                                                [make_device("x"), make_device("x")]),
             "spec.devices[1]", 'Duplicate value: "x"'),
            ("33 attributes+capacities", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                        attrs33),
             "spec.devices[0]", "the total number of attributes and capacities must not exceed "
                                "32"),
            ("attribute key", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                             {"9bad": {"int": 1}}),
             "spec.devices[0].attributes", "a valid C identifier"),
            ("attribute key empty", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                   {"": {"int": 1}}),
             "spec.devices[0].attributes", "Required value: name required"),
            ("attribute name empty", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                    {"x.io/": {"int": 1}}),
             "spec.devices[0].attributes", "Required value: the name must not be empty"),
            ("attribute domain", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                {"Bad_Domain/x": {"int": 1}}),
             "spec.devices[0].attributes", "RFC 1123 subdomain"),
            ("attribute key too long", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                      {"a" * 33: {"int": 1}}),
             "spec.devices[0].attributes", "Too long: may not be more than 32"),
            ("two values", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                          {"x": {"int": 1, "string": "s"}}),
             "spec.devices[0].attributes[x]", "exactly one value must be specified"),
            ("no value", lambda o: _set(o, ("spec", "devices", 0, "attributes"), {"x": {}}),
             "spec.devices[0].attributes[x]", "exactly one value must be specified"),
            ("string too long", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                               {"x": {"string": "s" * 65}}),
             "spec.devices[0].attributes[x].string", "Too long: may not be more than 64"),
            ("version not semver", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                  {"x": {"version": "1.02.3"}}),
             "spec.devices[0].attributes[x].version", "semver.org spec 2.0.0"),
            ("version too long", lambda o: _set(o, ("spec", "devices", 0, "attributes"),
                                                {"x": {"version": "1.0.0-" + "a" * 60}}),
             "spec.devices[0].attributes[x].version", "Too long"),
        ])
        good = make_slice(devices=[make_device("d", attributes=dict(
            attrs32, **{"dra.example.com/model": {"string": "s" * 64},
                        "ver": {"version": "1.2.3-rc.1+build.5"}}))])
        del good["spec"]["devices"][0]["attributes"]["a30"]
        good["spec"]["devices"][0]["capacity"] = {"cpus": {"value": "1"}}
        del good["spec"]["devices"][0]["attributes"]["a29"]
        self.assertEqual(self.client.post(SLICES, good).code, 201, "32 entries are allowed")

    def test_request_policy(self):
        def policy(pol, multi=True, value="16"):
            def mutate(o):
                dev = o["spec"]["devices"][0]
                dev["capacity"] = {"mem": {"value": value, "requestPolicy": pol}}
                if multi:
                    dev["allowMultipleAllocations"] = True
            return mutate
        rp = "spec.devices[0].capacity[mem].requestPolicy"
        self.check([
            ("without allowMultipleAllocations", policy({"default": "1"}, multi=False), rp,
             "allowMultipleAllocations must be true"),
            ("validValues without default", policy({"validValues": ["1"]}), rp + ".default",
             "required when validValues is defined"),
            ("more than 10 validValues", policy({"default": "1", "validValues":
                                                 [str(i) for i in range(1, 12)]}),
             rp + ".validValues", "Too many: 11: must have at most 10 items"),
            ("validValues not ascending", policy({"default": "1", "validValues": ["2", "1"]}),
             rp + ".validValues[1]", "values must be sorted in ascending order"),
            ("default not in validValues", policy({"default": "3", "validValues": ["1", "2"]}),
             rp + ".validValues", "default value is not valid according to the requestPolicy"),
            ("option above capacity", policy({"default": "1", "validValues": ["1", "32"]}),
             rp + ".validValues[1]", "option is larger than capacity value: 16"),
            ("both policies", policy({"default": "1", "validValues": ["1"],
                                      "validRange": {"min": "1"}}), rp,
             "exactly one policy can be specified"),
            ("range without default", policy({"validRange": {"min": "1"}}), rp + ".default",
             "required when validRange is defined"),
            ("range without min", policy({"default": "1", "validRange": {"max": "4"}}),
             rp + ".validRange.min", "required when validRange is defined"),
            ("default below min", policy({"default": "1", "validRange": {"min": "2"}}),
             rp + ".validRange.default", "default is less than min: 2"),
            ("max above capacity", policy({"default": "2", "validRange": {"min": "2",
                                                                          "max": "32"}}),
             rp + ".validRange.max", "max is larger than capacity value: 16"),
            ("default off step", policy({"default": "3", "validRange": {"min": "2",
                                                                        "step": "2"}}),
             rp + ".validRange.step", "value is not a multiple of a given step (2) from (2)"),
            ("step zero", policy({"default": "2", "validRange": {"min": "2", "step": "0"}}),
             rp + ".validRange.step", "must be greater than zero"),
            ("one step above capacity", policy({"default": "8", "validRange": {
                "min": "8", "step": "16"}}), rp + ".validRange.step",
             "one step 24 is larger than capacity value: 16"),
        ])
        for pol in ({"default": "4", "validValues": ["2", "4", "8"]},
                    {"default": "4Gi", "validRange": {"min": "2Gi", "max": "16Gi",
                                                      "step": "2Gi"}}):
            obj = make_slice("ok")
            policy(pol, value="16Gi")(obj)
            r = self.client.post(SLICES, obj)
            self.assertEqual(r.code, 201, r.data)
            self.assertEqual(self.client.delete(SLICES + "/ok").code, 200)

    def test_taints_counters_binding(self):
        taints17 = [{"key": "k%d" % i, "effect": "NoSchedule"} for i in range(17)]
        self.check([
            ("17 taints", lambda o: _set(o, ("spec", "devices", 0, "taints"), taints17),
             "spec.devices[0].taints", "Too many: 17: must have at most 16 items"),
            ("taint effect", lambda o: _set(o, ("spec", "devices", 0, "taints"),
                                            [{"key": "k", "effect": "PreferNoSchedule"}]),
             "spec.devices[0].taints[0].effect",
             'Unsupported value: "PreferNoSchedule": supported values: "NoExecute", '
             '"NoSchedule", "None"'),
            ("taint without effect", lambda o: _set(o, ("spec", "devices", 0, "taints"),
                                                    [{"key": "k"}]),
             "spec.devices[0].taints[0].effect", "Required value"),
            ("taint key", lambda o: _set(o, ("spec", "devices", 0, "taints"),
                                         [{"key": "bad key", "effect": "None"}]),
             "spec.devices[0].taints[0].key", "name part must consist of"),
            ("three consumesCounters", lambda o: _set(
                o, ("spec", "devices", 0, "consumesCounters"),
                [{"counterSet": "s%d" % i, "counters": {"c": {"value": "1"}}} for i in range(3)]),
             "spec.devices[0].consumesCounters", "Too many: 3: must have at most 2 items"),
            ("devices and sharedCounters", lambda o: _set(
                o, ("spec", "sharedCounters"), [{"name": "s", "counters": {"c": {"value": "1"}}}]),
             "spec", "only one of `sharedCounters` or `devices` is allowed"),
            ("nine counter sets", lambda o: (_del(o, ("spec", "devices")), _set(
                o, ("spec", "sharedCounters"),
                [{"name": "s%d" % i, "counters": {"c": {"value": "1"}}} for i in range(9)])),
             "spec.sharedCounters", "Too many: 9: must have at most 8 items"),
            ("33 counters", lambda o: (_del(o, ("spec", "devices")), _set(
                o, ("spec", "sharedCounters"),
                [{"name": "s", "counters": {"c%d" % i: {"value": "1"} for i in range(33)}}])),
             "spec.sharedCounters[0].counters", "Too many: 33: must have at most 32 items"),
            ("binding without failure conditions", lambda o: _set(
                o, ("spec", "devices", 0, "bindingConditions"), ["ready"]),
             "spec.devices[0].bindingFailureConditions",
             "bindingFailureConditions are required to use bindingConditions"),
        ])
        obj = make_slice()
        obj["spec"]["devices"][0]["taints"] = [{"key": "topodra.io/maintenance",
                                                "value": "yes", "effect": "NoExecute"}]
        created = self.create(obj)
        taint = created["spec"]["devices"][0]["taints"][0]
        self.assertRegex(taint["timeAdded"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

    def test_list_attributes_are_dropped(self):
        obj = make_slice()
        obj["spec"]["devices"][0]["attributes"] = {"cores": {"ints": [0, 1]},
                                                   "model": {"string": "x", "strings": ["y"]}}
        self.assertInvalid(self.client.post(SLICES, obj), "spec.devices[0].attributes[cores]",
                           "exactly one value must be specified")
        del obj["spec"]["devices"][0]["attributes"]["cores"]
        created = self.create(obj)
        self.assertEqual(created["spec"]["devices"][0]["attributes"], {"model": {"string": "x"}})

    def test_decode_errors_are_400(self):
        cases = [
            ("string for int", lambda o: _set(o, ("spec", "pool", "generation"), "1")),
            ("float for int", lambda o: _set(o, ("spec", "pool", "generation"), 1.5)),
            ("int out of range", lambda o: _set(o, ("spec", "pool", "generation"), 1 << 63)),
            ("number for string", lambda o: _set(o, ("spec", "driver"), 5)),
            ("object for list", lambda o: _set(o, ("spec", "devices"), {})),
            ("bad quantity", lambda o: _set(o, ("spec", "devices", 0, "capacity"),
                                            {"c": {"value": "12 Gi"}})),
            ("bad time", lambda o: _set(o, ("spec", "devices", 0, "taints"),
                                        [{"key": "k", "effect": "None", "timeAdded": "now"}])),
        ]
        for name, mutate in cases:
            with self.subTest(name):
                obj = make_slice()
                mutate(obj)
                r = self.client.post(SLICES, obj)
                self.assertStatus(r, 400, "BadRequest")
                self.assertIn('ResourceSlice in version "v1" cannot be handled as a '
                              'ResourceSlice', r.json["message"])


class QuantityTest(ServerTestCase):
    def test_quantity_grammar_and_canonical_form(self):
        canonical = {"64": "64", "500m": "500m", "16Gi": "16Gi", "1e3": "1e3", "1.5": "1500m",
                     "1024Mi": "1Gi", "1536Mi": "1536Mi", "0.5Ki": "512", "1000": "1k",
                     "1500": "1500", "+7": "7", ".5": "500m", "2.": "2", "1E6": "1e6",
                     "100n": "100n", "0": "0", "0.0000000001": "1n", "10u": "10u", "1k": "1k",
                     "2048": "2048", "1Ki": "1Ki", "3M": "3M", "1e-3": "1e-3", "-5": "-5",
                     "1.5Ki": "1536", "1025Ki": "1025Ki", "-2Gi": "-2Gi", "0.1Ki": "102400m"}
        capacity = {"q%d" % i: {"value": text} for i, text in enumerate(canonical)}
        obj = make_slice(devices=[make_device("d", attributes={}, capacity=capacity)])
        created = self.create(obj)
        got = created["spec"]["devices"][0]["capacity"]
        for i, (text, want) in enumerate(canonical.items()):
            self.assertEqual(got["q%d" % i]["value"], want, text)
        for bad in ("", "Gi", "1.2.3", "1Qi", "1e", "12 Gi", "0x10", "1KI", "e3", "1.5.5Gi",
                    "--1"):
            with self.subTest(bad):
                obj = make_slice("bad", devices=[make_device("d", capacity={
                    "c": {"value": bad}})])
                self.assertStatus(self.client.post(SLICES, obj), 400, "BadRequest")

    def test_json_number_quantity(self):
        obj = make_slice(devices=[make_device("d", capacity={"c": {"value": 2048}})])
        self.assertEqual(self.create(obj)["spec"]["devices"][0]["capacity"]["c"]["value"], "2048")


class FieldValidationTest(ServerTestCase):
    def slice_with_mixins(self, name="slice-a"):
        obj = make_slice(name)
        obj["spec"]["mixins"] = {"device": [{"name": "m", "attributes": {"x": {"int": 1}}}]}
        obj["spec"]["devices"][0]["includes"] = ["m"]
        return obj

    def test_strict_rejects_unknown_fields(self):
        r = self.client.post(SLICES + "?fieldValidation=Strict", self.slice_with_mixins())
        self.assertStatus(r, 400, "BadRequest")
        # In document order, as the real decoder reports them.
        self.assertEqual(r.json["message"], 'strict decoding error: unknown field '
                                            '"spec.devices[0].includes", unknown field '
                                            '"spec.mixins"')
        self.assertEqual([c["field"] for c in r.json["details"]["causes"]],
                         [".spec.devices[0].includes", ".spec.mixins"])
        self.assertEqual(self.client.get(SLICES).json["items"], [])

    def test_warn_drops_unknown_fields_with_warning(self):
        for query in ("", "?fieldValidation=Warn"):
            with self.subTest(query or "default"):
                r = self.client.post(SLICES + query, self.slice_with_mixins())
                self.assertEqual(r.code, 201, r.data)
                self.assertEqual(r.warnings(), ['299 - "unknown field '
                                                '\\"spec.devices[0].includes\\""',
                                                '299 - "unknown field \\"spec.mixins\\""'])
                self.assertNotIn("mixins", r.json["spec"])
                self.assertNotIn("includes", r.json["spec"]["devices"][0])
                stored = self.client.get(SLICES + "/slice-a").json
                self.assertNotIn("mixins", stored["spec"])
                self.assertEqual(self.client.delete(SLICES + "/slice-a").code, 200)

    def test_ignore_drops_silently(self):
        r = self.client.post(SLICES + "?fieldValidation=Ignore", self.slice_with_mixins())
        self.assertEqual(r.code, 201)
        self.assertEqual(r.warnings(), [])
        self.assertNotIn("mixins", r.json["spec"])

    def test_unknown_metadata_and_duplicate_fields(self):
        body = json.dumps(make_slice())[:-1] + ', "status": {}}'
        r = self.client.post(SLICES + "?fieldValidation=Strict", body)
        self.assertStatus(r, 400, "BadRequest")
        self.assertIn('unknown field "status"', r.json["message"])
        obj = make_slice()
        obj["metadata"]["clusterName"] = "x"
        r = self.client.post(SLICES + "?fieldValidation=Strict", obj)
        self.assertIn('unknown field "metadata.clusterName"', r.json["message"])
        dup = json.dumps(make_slice()).replace('"name": "slice-a"',
                                               '"name": "x", "name": "slice-a"')
        r = self.client.post(SLICES + "?fieldValidation=Strict", dup)
        self.assertStatus(r, 400, "BadRequest")
        self.assertIn('duplicate field "metadata.name"', r.json["message"])
        self.assertStatus(self.client.post(SLICES + "?fieldValidation=Loose", make_slice()), 400,
                          "BadRequest")


class MixinsAcceptTest(ServerTestCase):
    ARGS = ("--mixins", "accept", "--list-attributes", "accept")

    def with_mixins(self, device_mixins, includes, name="slice-a"):
        obj = make_slice(name)
        obj["spec"]["mixins"] = {"device": device_mixins}
        obj["spec"]["devices"][0]["includes"] = includes
        return obj

    def test_mixins_are_stored(self):
        obj = self.with_mixins([{"name": "common", "attributes": {"vendor": {"string": "x"}}}],
                               ["common"])
        r = self.client.post(SLICES + "?fieldValidation=Strict", obj)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.json["spec"]["mixins"]["device"][0]["name"], "common")
        self.assertEqual(r.json["spec"]["devices"][0]["includes"], ["common"])

    def test_mixin_rules(self):
        mixins = [{"name": "m%d" % i, "attributes": {"k%d" % i: {"int": i}}} for i in range(9)]
        wide = [{"name": "w", "attributes": {"w%d" % i: {"int": i} for i in range(31)}}]
        cases = [
            ("include of a missing mixin", self.with_mixins(mixins[:1], ["nope"]),
             "spec.devices[0].includes[0]", 'Not found: "nope"'),
            ("nine includes", self.with_mixins(mixins, ["m%d" % i for i in range(9)]),
             "spec.devices[0].includes", "Too many: 9: must have at most 8 items"),
            ("flattened device above 32", self.with_mixins(wide, ["w"]), "spec.devices[0]",
             "including its mixins must not exceed 32"),
            ("mixin name", self.with_mixins([{"name": "Bad"}], []), "spec.mixins.device[0].name",
             "RFC 1123 label"),
            ("duplicate mixin", self.with_mixins([{"name": "a"}, {"name": "a"}], []),
             "spec.mixins.device[1].name", 'Duplicate value: "a"'),
            ("129 mixins", self.with_mixins([{"name": "m%d" % i} for i in range(129)], []),
             "spec.mixins.device", "Too many: 129: must have at most 128 items"),
        ]
        big = make_slice("big", devices=[make_device("d%d" % i, attributes={
            "a%d" % j: {"int": j} for j in range(31)}) for i in range(128)])
        big["spec"]["mixins"] = {"device": [{"name": "m%d" % i, "attributes": {
            "a%d" % j: {"int": j} for j in range(32)}} for i in range(10)]}
        cases.append(("more than 4096 per slice", big, "spec",
                      "in devices and mixins must not exceed 4096"))
        for name, obj, field, message in cases:
            with self.subTest(name):
                self.assertInvalid(self.client.post(SLICES, obj), field, message)
        ok = self.with_mixins(wide, ["w"])
        del ok["spec"]["devices"][0]["capacity"]
        self.assertEqual(self.client.post(SLICES, ok).code, 201, "exactly 32 flattened")

    def test_list_attributes_accepted(self):
        obj = make_slice()
        obj["spec"]["devices"][0]["attributes"] = {"cores": {"ints": [0, 1]}}
        self.assertEqual(self.create(obj)["spec"]["devices"][0]["attributes"],
                         {"cores": {"ints": [0, 1]}})
        listy = make_slice("many", devices=[make_device("d%d" % i) for i in range(65)])
        listy["spec"]["devices"][0]["attributes"] = {"cores": {"ints": [0]}}
        self.assertInvalid(self.client.post(SLICES, listy), "spec.devices",
                           "must have at most 64 items")
        values = make_slice("values")
        values["spec"]["devices"][0]["attributes"] = {"cores": {"ints": list(range(49))}}
        self.assertInvalid(self.client.post(SLICES, values), "spec.devices[0]",
                           "the total number of attribute values must not exceed 48")


class DeviceTaintsDropTest(ServerTestCase):
    ARGS = ServerTestCase.ARGS + ("--device-taints", "drop")

    def test_taints_are_dropped(self):
        obj = make_slice()
        obj["spec"]["devices"][0]["taints"] = [{"key": "topodra.io/maintenance",
                                                "effect": "NoExecute"}]
        r = self.client.post(SLICES + "?fieldValidation=Strict", obj)
        self.assertEqual(r.code, 201, r.data)
        self.assertEqual(r.warnings(), [])
        self.assertNotIn("taints", r.json["spec"]["devices"][0])
        # Even invalid taints: the gate is off, so the field is gone before validation.
        r.json["spec"]["devices"][0]["taints"] = [{"key": "bad key", "effect": "Bogus"}] * 17
        r = self.client.put(SLICES + "/slice-a", r.json)
        self.assertEqual(r.code, 200, r.data)
        self.assertNotIn("taints", r.json["spec"]["devices"][0])
        self.assertEqual(self.client.get(SLICES + "/slice-a").json, r.json)


def _mapped_device(name, field, value):
    dev = make_device(name, allowMultipleAllocations=True,
                      capacity={"dra.cpu/cpu": {"value": "16"}})
    dev[field] = value
    return dev


V137_GROUPED = {"cpu": {"mapping": {"capacityKey": "dra.cpu/cpu", "capacityMultiplier": "1"}}}
V137_INDIVIDUAL = {"cpu": {"mapping": {"deviceMultiplier": "1"}}}
V136_GROUPED = {"cpu": {"capacityKey": "dra.cpu/cpu", "allocationMultiplier": "1"}}


class NodeAllocatableDropTest(ServerTestCase):
    """Default (--node-allocatable drop, DRANodeAllocatableResources off): both releases'
    fields are known and silently dropped, even invalid ones (addendum §4.1)."""

    def test_both_fields_dropped(self):
        for field, value in (("nodeAllocatableResources", V137_GROUPED),
                             ("nodeAllocatableResourceMappings", V136_GROUPED),
                             ("nodeAllocatableResources", {"example.com/foo": {}})):
            with self.subTest(field=field, value=value):
                obj = make_slice(devices=[_mapped_device("cpu-0", field, value)])
                r = self.client.post(SLICES + "?fieldValidation=Strict&dryRun=All", obj)
                self.assertEqual(r.code, 201, r.data)
                self.assertEqual(r.warnings(), [])
                self.assertNotIn(field, r.json["spec"]["devices"][0])


class NodeAllocatableV137Test(ServerTestCase):
    """--node-allocatable v1.37: nodeAllocatableResources stored and validated (addendum §4.2);
    the tombstoned 1.36 field is unknown."""
    ARGS = ServerTestCase.ARGS + ("--node-allocatable", "v1.37")

    def test_kept(self):
        for name, value in (("grouped", V137_GROUPED), ("individual", V137_INDIVIDUAL),
                            ("overhead", {"memory": {"overhead": {"perPod": "1Gi",
                                                                  "perContainer": "256Mi"}}}),
                            ("hugepages", {"hugepages-2Mi": {"mapping": {
                                "deviceMultiplier": "2Mi"}}})):
            with self.subTest(name):
                obj = make_slice(name, devices=[_mapped_device("cpu-0",
                                                               "nodeAllocatableResources", value)])
                stored = self.create(obj)
                self.assertEqual(stored["spec"]["devices"][0]["nodeAllocatableResources"], value)

    def test_quantities_canonicalised_and_parsed(self):
        value = {"cpu": {"mapping": {"deviceMultiplier": "1000m"}}}
        stored = self.create(make_slice(devices=[_mapped_device(
            "cpu-0", "nodeAllocatableResources", value)]))
        self.assertEqual(stored["spec"]["devices"][0]["nodeAllocatableResources"],
                         {"cpu": {"mapping": {"deviceMultiplier": "1"}}})
        bad = make_slice("bad", devices=[_mapped_device(
            "cpu-0", "nodeAllocatableResources",
            {"cpu": {"mapping": {"deviceMultiplier": "one"}}})])
        self.assertEqual(self.client.post(SLICES, bad).code, 400)

    def test_rules(self):
        cases = (
            ("neither mapping nor overhead", {"cpu": {}}, "nodeAllocatableResources[cpu]",
             "at least one of `mapping` or `overhead`"),
            ("capacityKey alone", {"cpu": {"mapping": {"capacityKey": "dra.cpu/cpu"}}},
             "nodeAllocatableResources[cpu].mapping.capacityMultiplier",
             "must be set together"),
            ("capacityMultiplier alone", {"cpu": {"mapping": {"capacityMultiplier": "1"}}},
             "nodeAllocatableResources[cpu].mapping.capacityKey", "must be set together"),
            ("extended resource", {"example.com/gpu": {"mapping": {"deviceMultiplier": "1"}}},
             "nodeAllocatableResources[example.com/gpu]",
             "extended resource names are not allowed"),
            ("not allocatable", {"pods": {"mapping": {"deviceMultiplier": "1"}}},
             "nodeAllocatableResources[pods]", "must be a node allocatable resource name"),
            ("bad capacity key", {"cpu": {"mapping": {"capacityKey": "Bad_Domain/cpu",
                                                      "capacityMultiplier": "1"}}},
             "nodeAllocatableResources[cpu].mapping.capacityKey", ""),
        )
        for name, value, field, message in cases:
            with self.subTest(name):
                obj = make_slice("bad", devices=[_mapped_device(
                    "cpu-0", "nodeAllocatableResources", value)])
                self.assertInvalid(self.client.post(SLICES, obj), "spec.devices[0]." + field,
                                   message)

    def test_v136_field_unknown(self):
        obj = make_slice(devices=[_mapped_device("cpu-0", "nodeAllocatableResourceMappings",
                                                 V136_GROUPED)])
        r = self.client.post(SLICES + "?fieldValidation=Strict&dryRun=All", obj)
        self.assertEqual(r.code, 400, r.data)
        self.assertIn("nodeAllocatableResourceMappings", r.data.decode())
        r = self.client.post(SLICES + "?dryRun=All", obj)
        self.assertEqual(r.code, 201, r.data)
        self.assertNotIn("nodeAllocatableResourceMappings", r.json["spec"]["devices"][0])
        self.assertTrue(any("unknown field" in w for w in r.warnings()), r.warnings())


class NodeAllocatableV136Test(ServerTestCase):
    """--node-allocatable v1.36: nodeAllocatableResourceMappings stored and validated; the
    1.37 field does not exist yet."""
    ARGS = ServerTestCase.ARGS + ("--node-allocatable", "v1.36")

    def test_kept_and_validated(self):
        stored = self.create(make_slice(devices=[_mapped_device(
            "cpu-0", "nodeAllocatableResourceMappings", V136_GROUPED)]))
        self.assertEqual(stored["spec"]["devices"][0]["nodeAllocatableResourceMappings"],
                         V136_GROUPED)
        # allocationMultiplier is optional (defaults to 1 on the scheduler's side).
        self.create(make_slice("individual", devices=[_mapped_device(
            "cpu-0", "nodeAllocatableResourceMappings", {"cpu": {}})]))
        bad = make_slice("bad", devices=[_mapped_device(
            "cpu-0", "nodeAllocatableResourceMappings",
            {"example.com/gpu": {"allocationMultiplier": "1"}})])
        self.assertInvalid(self.client.post(SLICES, bad),
                           "spec.devices[0].nodeAllocatableResourceMappings[example.com/gpu]",
                           "extended resource names are not allowed")

    def test_v137_field_unknown(self):
        obj = make_slice(devices=[_mapped_device("cpu-0", "nodeAllocatableResources",
                                                 V137_GROUPED)])
        r = self.client.post(SLICES + "?fieldValidation=Strict&dryRun=All", obj)
        self.assertEqual(r.code, 400, r.data)
        r = self.client.post(SLICES + "?dryRun=All", obj)
        self.assertEqual(r.code, 201, r.data)
        self.assertNotIn("nodeAllocatableResources", r.json["spec"]["devices"][0])


class PoolChecksTest(ServerTestCase):
    """--pool-checks reject: device and shared counter set names are unique across the slices
    of one pool (driver, pool name, generation), k8s-api-cdi.md §1.3/§1.4."""
    ARGS = ServerTestCase.ARGS + ("--pool-checks", "reject")

    def test_device_name_used_in_another_slice_of_the_pool(self):
        self.create(make_slice("s0", devices=[make_device("cpu-0"), make_device("cpu-1")]))
        dup = make_slice("s1", devices=[make_device("cpu-2"), make_device("cpu-1")])
        r = self.client.post(SLICES, dup)
        self.assertInvalid(r, "spec.devices[1].name",
                           'Invalid value: "cpu-1": device name already used by ResourceSlice '
                           '"s0" of the same pool and generation')
        self.assertEqual(len(r.json["details"]["causes"]), 1)
        # Dry run refuses it too; an update that adds the name is refused as well.
        self.assertInvalid(self.client.post(SLICES + "?dryRun=All", dup),
                           "spec.devices[1].name", "must be unique in the pool")
        ok = self.create(make_slice("s1", devices=[make_device("cpu-2")]))
        ok["spec"]["devices"].append(make_device("cpu-0"))
        self.assertInvalid(self.client.put(SLICES + "/s1", ok), "spec.devices[1].name",
                           'already used by ResourceSlice "s0"')

    def test_what_is_not_a_duplicate(self):
        self.create(make_slice("s0", devices=[make_device("cpu-0")]))
        # Another generation of the pool (a publisher rewriting it), another pool, another
        # driver, and the slice itself on update.
        newer = make_slice("s1", devices=[make_device("cpu-0")])
        newer["spec"]["pool"]["generation"] = 2
        self.create(newer)
        self.create(make_slice("s2", pool="node-a/other", devices=[make_device("cpu-0")]))
        self.create(make_slice("s3", driver="gpu.topodra.io", devices=[make_device("cpu-0")]))
        same = self.client.get(SLICES + "/s0").json
        same["spec"]["devices"].append(make_device("cpu-1"))
        self.assertEqual(self.client.put(SLICES + "/s0", same).code, 200)

    def test_shared_counter_set_name_used_in_another_slice(self):
        def counters(name, sets):
            obj = make_slice(name)
            del obj["spec"]["devices"]
            obj["spec"]["sharedCounters"] = [{"name": n, "counters": {"c": {"value": "1"}}}
                                             for n in sets]
            return obj
        self.create(counters("c0", ["gpu-0"]))
        self.assertInvalid(self.client.post(SLICES, counters("c1", ["gpu-1", "gpu-0"])),
                           "spec.sharedCounters[1].name",
                           'counter set name already used by ResourceSlice "c0"')
        self.create(counters("c1", ["gpu-1"]))

    def test_default_accepts_like_the_real_server(self):
        server = ServerProcess()
        try:
            client = Client(server.port)
            self.assertEqual(client.post(SLICES, make_slice("s0")).code, 201)
            self.assertEqual(client.post(SLICES, make_slice("s1")).code, 201)
        finally:
            server.stop()


class SpecRulesTest(ServerTestCase):
    """Each rule of k8s-api-cdi.md §1.5-§1.8 not covered by ValidationTest: a payload that breaks
    it (422 Invalid with the field) and the boundary that passes."""
    ARGS = ServerTestCase.ARGS + ("--list-attributes", "accept")

    def breaks_and_passes(self, cases):
        for name, bad, good, field, message in cases:
            with self.subTest(name):
                obj = make_slice("bad")
                bad(obj)
                self.assertInvalid(self.client.post(SLICES, obj), field, message)
                obj = make_slice("good")
                good(obj)
                r = self.client.post(SLICES, obj)
                self.assertEqual(r.code, 201, r.data)
                self.assertEqual(self.client.delete(SLICES + "/good").code, 200)

    @staticmethod
    def policy(pol, value):
        def mutate(o):
            dev = o["spec"]["devices"][0]
            dev["allowMultipleAllocations"] = True
            dev["capacity"] = {"dra.cpu/cpu": {"value": value, "requestPolicy": pol}}
        return mutate

    def test_request_policies(self):
        rp = "spec.devices[0].capacity[dra.cpu/cpu].requestPolicy"
        pol = self.policy
        self.breaks_and_passes([
            # The one-CPU group of issue 14: min + step must not exceed the value.
            ("min + step above a value of 1",
             pol({"default": "1", "validRange": {"min": "1", "step": "1"}}, "1"),
             pol({"default": "1", "validRange": {"min": "1", "step": "1"}}, "2"),
             rp + ".validRange.step", "one step 2 is larger than capacity value: 1"),
            ("the same meaning for a value of 1: validValues",
             pol({"default": "1", "validValues": ["1", "2"]}, "1"),
             pol({"default": "1", "validValues": ["1"]}, "1"),
             rp + ".validValues[1]", "option is larger than capacity value: 1"),
            ("duplicate validValues", pol({"default": "1", "validValues": ["1", "1"]}, "4"),
             pol({"default": "1", "validValues": ["1", "2"]}, "4"),
             rp + ".validValues[1]", 'Duplicate value: "1"'),
            ("11 validValues", pol({"default": "1", "validValues": [str(i) for i in
                                                                    range(1, 12)]}, "16"),
             pol({"default": "1", "validValues": [str(i) for i in range(1, 11)]}, "16"),
             rp + ".validValues", "Too many: 11: must have at most 10 items"),
            ("min above value", pol({"default": "5", "validRange": {"min": "5"}}, "4"),
             pol({"default": "4", "validRange": {"min": "4"}}, "4"),
             rp + ".validRange.min", "min is larger than capacity value: 4"),
            ("min above max", pol({"default": "3", "validRange": {"min": "3", "max": "2"}}, "4"),
             pol({"default": "2", "validRange": {"min": "2", "max": "2"}}, "4"),
             rp + ".validRange.max", "min is larger than max: 2"),
            ("default above max",
             pol({"default": "3", "validRange": {"min": "1", "max": "2"}}, "4"),
             pol({"default": "2", "validRange": {"min": "1", "max": "2"}}, "4"),
             rp + ".validRange.default", "default is more than max: 2"),
            ("max off step",
             pol({"default": "1", "validRange": {"min": "1", "max": "4", "step": "2"}}, "8"),
             pol({"default": "1", "validRange": {"min": "1", "max": "5", "step": "2"}}, "8"),
             rp + ".validRange.step", "value is not a multiple of a given step (2) from (1)"),
            ("negative step", pol({"default": "1", "validRange": {"min": "1", "step": "-1"}}, "8"),
             pol({"default": "1", "validRange": {"min": "1", "step": "7"}}, "8"),
             rp + ".validRange.step", "must be greater than zero"),
            ("negative min", pol({"default": "0", "validRange": {"min": "-2", "step": "2"}}, "8"),
             pol({"default": "0", "validRange": {"min": "0", "step": "2"}}, "8"),
             rp + ".validRange.min", "must be greater than or equal to 0"),
        ])

    def test_attribute_values(self):
        def attrs(a):
            return lambda o: _set(o, ("spec", "devices", 0, "attributes"), a)
        at = "spec.devices[0].attributes"
        self.breaks_and_passes([
            ("string of 65 bytes", attrs({"x": {"string": "é" * 32 + "a"}}),
             attrs({"x": {"string": "é" * 32}}), at + "[x].string",
             "Too long: may not be more than 64 bytes"),
            ("version of 65", attrs({"x": {"version": "1.0.0-" + "a" * 59}}),
             attrs({"x": {"version": "1.0.0-" + "a" * 58}}), at + "[x].version", "Too long"),
            ("version with leading zero", attrs({"x": {"version": "01.0.0"}}),
             attrs({"x": {"version": "10.0.0"}}), at + "[x].version", "semver.org"),
            ("empty list", attrs({"x": {"ints": []}}), attrs({"x": {"ints": [0]}}),
             at + "[x].ints", "must not be empty if specified"),
            ("list string of 65", attrs({"x": {"strings": ["a" * 65]}}),
             attrs({"x": {"strings": ["a" * 64]}}), at + "[x].strings[0]", "Too long"),
            ("49 attribute values", attrs({"x": {"ints": list(range(48))}, "y": {"int": 1}}),
             attrs({"x": {"ints": list(range(47))}, "y": {"int": 1}}), "spec.devices[0]",
             "the total number of attribute values must not exceed 48"),
        ])

    def test_names(self):
        def dev(field, value):
            return lambda o: _set(o, ("spec", "devices", 0, field), value)
        self.breaks_and_passes([
            # 1.36 does not look at a key with two slashes (§1.7); its first part still is.
            ("attribute domain empty", dev("attributes", {"/x": {"int": 1}}),
             dev("attributes", {"a/b/c": {"int": 1}}), "spec.devices[0].attributes",
             "Required value: the domain must not be empty"),
            ("device name of 64", dev("name", "a" * 64), dev("name", "a" * 63),
             "spec.devices[0].name", "must be no more than 63 characters"),
            ("device name ending in -", dev("name", "cpu-"), dev("name", "0cpu-0"),
             "spec.devices[0].name", "RFC 1123 label"),
            ("capacity key of 33", dev("capacity", {"c" * 33: {"value": "1"}}),
             dev("capacity", {"c" * 32: {"value": "1"}}), "spec.devices[0].capacity",
             "Too long: may not be more than 32"),
            ("attribute domain of 64", dev("attributes", {"a" * 60 + ".com/x": {"int": 1}}),
             dev("attributes", {"a" * 59 + ".com/x": {"int": 1}}), "spec.devices[0].attributes",
             "Too long: may not be more than 63"),
            ("taint value of 64", dev("taints", [{"key": "k", "value": "v" * 64,
                                                  "effect": "None"}]),
             dev("taints", [{"key": "k", "value": "v" * 63, "effect": "None"}]),
             "spec.devices[0].taints[0].value", "must be no more than 63 characters"),
            ("taint key name of 64", dev("taints", [{"key": "x.io/" + "k" * 64,
                                                     "effect": "None"}]),
             dev("taints", [{"key": "x.io/" + "k" * 63, "effect": "None"}]),
             "spec.devices[0].taints[0].key", "name part must be no more than 63 characters"),
            ("binding condition format", lambda o: (
                dev("bindingConditions", ["not ok"])(o),
                dev("bindingFailureConditions", ["failed"])(o)),
             lambda o: (dev("bindingConditions", ["x.io/ready"])(o),
                        dev("bindingFailureConditions", ["failed"])(o)),
             "spec.devices[0].bindingConditions[0]", "name part must consist of"),
            ("counter name", dev("consumesCounters", [{"counterSet": "s", "counters": {
                "Mem": {"value": "1"}}}]),
             dev("consumesCounters", [{"counterSet": "s", "counters": {"mem": {"value": "1"}}}]),
             "spec.devices[0].consumesCounters[0].counters", "RFC 1123 label"),
            ("counter set name", dev("consumesCounters", [{"counterSet": "S", "counters": {
                "mem": {"value": "1"}}}]),
             dev("consumesCounters", [{"counterSet": "s", "counters": {"mem": {"value": "1"}}}]),
             "spec.devices[0].consumesCounters[0].counterSet", "RFC 1123 label"),
        ])

    def test_limits(self):
        def dev(field, value):
            return lambda o: _set(o, ("spec", "devices", 0, field), value)

        def taints(n):
            return [{"key": "k%d" % i, "effect": "NoSchedule"} for i in range(n)]

        def conditions(n, prefix):
            return ["%s%d" % (prefix, i) for i in range(n)]

        def consumption(n):
            return [{"counterSet": "s", "counters": {"c%d" % i: {"value": "1"}
                                                     for i in range(n)}}]
        listy = [make_device("d%d" % i) for i in range(65)]
        listy[0]["attributes"] = {"cores": {"ints": [0]}}
        self.breaks_and_passes([
            ("17 taints", dev("taints", taints(17)), dev("taints", taints(16)),
             "spec.devices[0].taints", "Too many: 17: must have at most 16 items"),
            ("5 binding conditions", lambda o: (
                dev("bindingConditions", conditions(5, "ok"))(o),
                dev("bindingFailureConditions", ["failed"])(o)),
             lambda o: (dev("bindingConditions", conditions(4, "ok"))(o),
                        dev("bindingFailureConditions", conditions(4, "failed"))(o)),
             "spec.devices[0].bindingConditions", "Too many: 5: must have at most 4 items"),
            ("binding condition in both lists", lambda o: (
                dev("bindingConditions", ["x"])(o), dev("bindingFailureConditions", ["x"])(o)),
             lambda o: (dev("bindingConditions", ["x"])(o),
                        dev("bindingFailureConditions", ["y"])(o)),
             "spec.devices[0].bindingFailureConditions[0]", "must not overlap"),
            ("33 counters consumed", dev("consumesCounters", consumption(33)),
             dev("consumesCounters", consumption(32)),
             "spec.devices[0].consumesCounters[0].counters",
             "Too many: 33: must have at most 32 items"),
            ("a counter set consumed twice", dev("consumesCounters", consumption(1) * 2),
             dev("consumesCounters", consumption(1)), "spec.devices[0].consumesCounters[1]",
             'Duplicate value: "s"'),
            ("65 devices with a list attribute", lambda o: _set(o, ("spec", "devices"), listy),
             lambda o: _set(o, ("spec", "devices"), listy[:64]), "spec.devices",
             "Too many: 65: must have at most 64 items"),
        ])

    def test_one_of_node_selection(self):
        selector = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}
        self.breaks_and_passes([
            ("nodeName and nodeSelector", lambda o: _set(o, ("spec", "nodeSelector"), selector),
             lambda o: (_del(o, ("spec", "nodeName")), _set(o, ("spec", "nodeSelector"),
                                                            selector)),
             "spec", "multiple fields are set"),
            ("perDeviceNodeSelection false", lambda o: (
                _del(o, ("spec", "nodeName")), _set(o, ("spec", "perDeviceNodeSelection"),
                                                    False)),
             lambda o: (_del(o, ("spec", "nodeName")),
                        _set(o, ("spec", "perDeviceNodeSelection"), True),
                        _set(o, ("spec", "devices", 0, "allNodes"), True)),
             "spec.perDeviceNodeSelection", "must be either unset or set to true"),
            ("two device node fields", lambda o: (
                _del(o, ("spec", "nodeName")), _set(o, ("spec", "perDeviceNodeSelection"), True),
                _set(o, ("spec", "devices", 0, "allNodes"), True),
                _set(o, ("spec", "devices", 0, "nodeName"), "node-a")),
             lambda o: (_del(o, ("spec", "nodeName")),
                        _set(o, ("spec", "perDeviceNodeSelection"), True),
                        _set(o, ("spec", "devices", 0, "nodeName"), "node-a")),
             "spec.devices[0]", "exactly one of `nodeName`, `nodeSelector`, or `allNodes`"),
            ("matchFields on another field", lambda o: (
                _del(o, ("spec", "nodeName")), _set(o, ("spec", "nodeSelector"), {
                    "nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.uid", "operator": "In", "values": ["x"]}]}]})),
             lambda o: (_del(o, ("spec", "nodeName")), _set(o, ("spec", "nodeSelector"),
                                                            selector)),
             "spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].key",
             "not a valid field selector key"),
        ])
