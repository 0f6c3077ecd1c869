"""ResourceSlices as a Kubernetes 1.36 API server validates and stores them:
validation.ValidateResourceSlice(Update) with feature gates at their 1.36 defaults (devices,
sharedCounters, per-device node selection, taints, binding conditions, immutable driver, pool
name and nodeName), the default timeAdded of taints, the lowercase-driver warning, field
selectors spec.driver, spec.nodeName and spec.pool.name; with --pool-checks reject also the
pool-wide uniqueness of device and counter set names that the real server leaves to the
scheduler.

Source: k8s-api-cdi.md §1.2-§1.9 (object, spec, devices, attributes, capacity, names, limits,
feature-gate matrix), §1.11 (publishing semantics, pools and generations);
k8s-1.35-1.37-addendum.md §4 (node allocatable resources: --node-allocatable drop = gate off,
both fields known and dropped; v1.36 / v1.37 = gate on, that release's field validated and the
other one unknown, since each release prunes the other's), §6 (device taints, KEP-5055), §7
(slice limits)."""

from .decode import (BOOL, INT, ListOf, MapOf, METADATA_SCHEMA, now_rfc3339, Obj, QTY, STR, TIME,
                     validate_object_meta)
from .errors import (child, f_duplicate, f_forbidden, f_invalid, f_not_supported, f_required,
                     f_too_many, index, key)
from .formats import (is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name,
                      validate_driver_name, validate_pool_name, validate_qualified_key)
from .kubectl import RESOURCESLICE_TABLE
from .mixins import (add_mixin_fields, MAX_INCLUDES_PER_CONSUMPTION, MAX_INCLUDES_PER_COUNTER_SET,
                     validate_device_includes, validate_includes, validate_mixins)
from .resource_type import RESOURCE_GROUP, ResourceType
from .slice_fields import (has_list_values, LIST_ATTRIBUTE_FIELDS, MAX_ATTRIBUTE_VALUES,
                           MAX_ATTRS_AND_CAPS, MAX_BINDING_CONDITIONS, MAX_CONSUMPTIONS_PER_DEVICE,
                           MAX_COUNTER_SETS, MAX_COUNTERS_PER_CONSUMPTION, MAX_COUNTERS_PER_SET,
                           MAX_DEVICES, MAX_DEVICES_ADVANCED, MAX_TAINTS, NODE_ALLOCATABLE_V136,
                           NODE_ALLOCATABLE_V137, node_allocatable_schemas, node_selector_schema,
                           TAINT_EFFECTS, validate_attributes, validate_counters,
                           validate_node_allocatable_v136, validate_node_allocatable_v137,
                           validate_node_selector, validate_request_policy)


def resourceslice_schema(accept_mixins, accept_list_attributes, accept_device_taints=True,
                         node_allocatable="drop"):
    node_selector = node_selector_schema()
    counter = Obj({"value": QTY}, zero=("value",))
    attribute = Obj({"int": INT, "bool": BOOL, "string": STR, "version": STR,
                     "ints": ListOf(INT), "bools": ListOf(BOOL), "strings": ListOf(STR),
                     "versions": ListOf(STR)},
                    dropped=() if accept_list_attributes else LIST_ATTRIBUTE_FIELDS)
    capacity = Obj({"value": QTY,
                    "requestPolicy": Obj({"default": QTY, "validValues": ListOf(QTY),
                                          "validRange": Obj({"min": QTY, "max": QTY,
                                                             "step": QTY})})},
                   zero=("value",))
    taint = Obj({"key": STR, "value": STR, "effect": STR, "timeAdded": TIME},
                zero=("key", "effect"))
    consumption = {"counterSet": STR, "counters": MapOf(counter)}
    counter_set = {"name": STR, "counters": MapOf(counter)}
    v136, v137 = node_allocatable_schemas()
    device = {
        "name": STR, "attributes": MapOf(attribute), "capacity": MapOf(capacity),
        "nodeName": STR, "nodeSelector": node_selector, "allNodes": BOOL,
        "taints": ListOf(taint), "bindsToNode": BOOL, "bindingConditions": ListOf(STR),
        "bindingFailureConditions": ListOf(STR), "allowMultipleAllocations": BOOL,
    }
    # DRANodeAllocatableResources (alpha): off, both releases' fields are known and silently
    # dropped; on, a release knows only its own field.
    if node_allocatable in ("drop", "v1.36"):
        device[NODE_ALLOCATABLE_V136] = MapOf(v136)
    if node_allocatable in ("drop", "v1.37"):
        device[NODE_ALLOCATABLE_V137] = MapOf(v137)
    spec = {
        "driver": STR,
        "pool": Obj({"name": STR, "generation": INT, "resourceSliceCount": INT},
                    zero=("name", "generation", "resourceSliceCount")),
        "nodeName": STR, "nodeSelector": node_selector, "allNodes": BOOL,
        "perDeviceNodeSelection": BOOL,
        # DRAPartitionableDevicesType and DRAOptionalNodeOperations are alpha (off).
        "partitionTypeAttribute": STR, "skipNodeOperations": ListOf(STR),
    }
    if accept_mixins:
        add_mixin_fields(spec, device, consumption, counter_set, attribute, capacity,
                         counter)
    device["consumesCounters"] = ListOf(Obj(consumption, zero=("counterSet",)))
    # DRADeviceTaints off (--device-taints drop): taints are known but silently dropped.
    device_dropped = ((NODE_ALLOCATABLE_V136, NODE_ALLOCATABLE_V137)
                      if node_allocatable == "drop" else ())
    device_dropped += () if accept_device_taints else ("taints",)
    spec["devices"] = ListOf(Obj(device, dropped=device_dropped, zero=("name",)))
    spec["sharedCounters"] = ListOf(Obj(counter_set, zero=("name",)))
    return Obj({"apiVersion": STR, "kind": STR, "metadata": METADATA_SCHEMA,
                "spec": Obj(spec, dropped=("partitionTypeAttribute", "skipNodeOperations"),
                            zero=("driver", "pool"))},
               zero=("spec",))


class SliceValidator:
    """validation.ValidateResourceSlice(Update) of Kubernetes 1.36 (gates at their 1.36
    defaults), plus KEP-5234 mixins when configured to accept them, plus (with --pool-checks
    reject) the rules that span the slices of a pool."""

    def __init__(self, accept_mixins, pool_checks=False, node_allocatable="drop"):
        self.accept_mixins = accept_mixins
        self.pool_checks = pool_checks
        self.node_allocatable = node_allocatable
        self.stored = lambda: {}  # name -> stored ResourceSlice; the Api sets it (under its lock)

    def validate_create(self, obj):
        errs = validate_object_meta(obj.get("metadata", {}), namespaced=False)
        errs += self.validate_spec(obj["spec"], None)
        return errs + self.validate_pool(obj) if self.pool_checks else errs

    def validate_update(self, obj, old):
        errs = validate_object_meta(obj.get("metadata", {}), namespaced=False)
        errs += self.validate_spec(obj["spec"], old["spec"])
        return errs + self.validate_pool(obj) if self.pool_checks else errs

    def validate_pool(self, obj):
        """Device names and shared counter set names are unique in a pool (k8s-api-cdi.md
        §1.3, §1.4). The real API server validates each object alone and stores such a slice;
        the scheduler then finds the duplicate and ignores the whole pool, so no device of it is
        allocatable. Here the write that makes the duplicate is refused instead. Slices count as
        one pool when driver, pool name and pool generation agree: consumers use only the
        slices of the newest generation, so a publisher may move a device while it rewrites
        the pool under a new generation."""
        spec = obj["spec"]
        pool = spec.get("pool", {})
        this = (spec.get("driver"), pool.get("name"), pool.get("generation", 0))
        name = obj.get("metadata", {}).get("name")
        devices, counter_sets = {}, {}
        for other in self.stored().values():
            other_name = other.get("metadata", {}).get("name")
            other_spec = other.get("spec", {})
            other_pool = other_spec.get("pool", {})
            if other_name == name or this != (other_spec.get("driver"), other_pool.get("name"),
                                              other_pool.get("generation", 0)):
                continue
            for d in other_spec.get("devices", []):
                devices.setdefault(d.get("name"), other_name)
            for cs in other_spec.get("sharedCounters", []):
                counter_sets.setdefault(cs.get("name"), other_name)
        errs = []
        for field, items, seen, what in (("spec.devices", spec.get("devices", []), devices,
                                          "device"),
                                         ("spec.sharedCounters", spec.get("sharedCounters", []),
                                          counter_sets, "counter set")):
            for i, item in enumerate(items):
                if item.get("name") in seen:
                    errs.append(f_invalid(child(index(field, i), "name"), item["name"],
                                          "%s name already used by ResourceSlice \"%s\" of the "
                                          "same pool and generation; it must be unique in the "
                                          "pool" % (what, seen[item["name"]])))
        return errs

    def validate_spec(self, spec, old):
        errs = []
        errs.extend(validate_driver_name(spec.get("driver", ""), "spec.driver"))
        pool = spec.get("pool", {})
        errs.extend(validate_pool_name(pool.get("name", ""), "spec.pool.name"))
        if pool.get("resourceSliceCount", 0) <= 0:
            errs.append(f_invalid("spec.pool.resourceSliceCount",
                                  pool.get("resourceSliceCount", 0), "must be greater than zero"))
        if pool.get("generation", 0) < 0:
            errs.append(f_invalid("spec.pool.generation", pool.get("generation", 0),
                                  "must be greater than or equal to zero"))
        if old is not None:
            for path, new_v, old_v in (
                    ("spec.pool.name", pool.get("name"), old.get("pool", {}).get("name")),
                    ("spec.driver", spec.get("driver"), old.get("driver")),
                    ("spec.nodeName", spec.get("nodeName"), old.get("nodeName"))):
                if new_v != old_v:
                    errs.append(f_invalid(path, new_v, "field is immutable"))

        set_fields = []
        if "nodeName" in spec:
            if spec["nodeName"]:
                set_fields.append("`nodeName`")
                errs.extend(f_invalid("spec.nodeName", spec["nodeName"], m)
                            for m in is_dns1123_subdomain(spec["nodeName"]))
            else:
                errs.append(f_invalid("spec.nodeName", "", "must be either unset or set to a "
                                      "non-empty string"))
        if "nodeSelector" in spec:
            set_fields.append("`nodeSelector`")
            errs.extend(validate_node_selector(spec["nodeSelector"], "spec.nodeSelector"))
            terms = spec["nodeSelector"].get("nodeSelectorTerms", [])
            if len(terms) != 1:
                errs.append(f_invalid("spec.nodeSelector.nodeSelectorTerms", terms,
                                      "must have exactly one node selector term"))
        for f in ("allNodes", "perDeviceNodeSelection"):
            if f in spec:
                if spec[f]:
                    set_fields.append("`%s`" % f)
                else:
                    errs.append(f_invalid("spec." + f, False, "must be either unset or set to "
                                          "true"))
        if not set_fields:
            errs.append(f_required("spec", "exactly one of `nodeName`, `nodeSelector`, "
                                   "`allNodes`, `perDeviceNodeSelection` is required"))
        elif len(set_fields) > 1:
            errs.append(f_invalid("spec", "{%s}" % ", ".join(set_fields),
                                  "exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                                  "`perDeviceNodeSelection` is required, but multiple fields "
                                  "are set"))
        if "sharedCounters" in spec and "devices" in spec:
            errs.append(f_invalid("spec", "", "only one of `sharedCounters` or `devices` is "
                                  "allowed"))

        devices = spec.get("devices", [])
        advanced = any(d.get("taints") or d.get("consumesCounters")
                       or any(not a.keys().isdisjoint(LIST_ATTRIBUTE_FIELDS)
                              for a in d.get("attributes", {}).values())
                       for d in devices)
        limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
        mixins = spec.get("mixins", {}) if self.accept_mixins else {}
        device_mixins = {m.get("name"): m for m in mixins.get("device", [])}
        consumption_mixins = {m.get("name") for m in mixins.get("deviceCounterConsumption", [])}
        per_device = bool(spec.get("perDeviceNodeSelection"))
        if len(devices) > limit:
            errs.append(f_too_many("spec.devices", len(devices), limit))
        else:
            seen = set()
            for i, device in enumerate(devices):
                p = index("spec.devices", i)
                errs.extend(self.validate_device(device, p, per_device, device_mixins,
                                                  consumption_mixins))
                if device.get("name") in seen:
                    errs.append(f_duplicate(p, device.get("name")))
                seen.add(device.get("name"))

        counter_sets = spec.get("sharedCounters", [])
        set_mixins = {m.get("name") for m in mixins.get("counterSet", [])}
        if len(counter_sets) > MAX_COUNTER_SETS:
            errs.append(f_too_many("spec.sharedCounters", len(counter_sets), MAX_COUNTER_SETS))
        else:
            seen = set()
            for i, cs in enumerate(counter_sets):
                p = index("spec.sharedCounters", i)
                name = cs.get("name", "")
                if not name:
                    errs.append(f_required(child(p, "name")))
                else:
                    errs.extend(f_invalid(child(p, "name"), name, m)
                                for m in is_dns1123_label(name))
                includes = cs.get("includes", [])
                errs.extend(validate_includes(includes, set_mixins, child(p, "includes"),
                                              MAX_INCLUDES_PER_COUNTER_SET))
                if not cs.get("counters") and not includes:
                    errs.append(f_required(child(p, "counters")))
                else:
                    errs.extend(validate_counters(cs.get("counters", {}), child(p, "counters"),
                                                  MAX_COUNTERS_PER_SET))
                if name in seen:
                    errs.append(f_duplicate(p, name))
                seen.add(name)
        if self.accept_mixins and "mixins" in spec:
            errs.extend(validate_mixins(spec))
        return errs

    def validate_device(self, device, path, per_device, device_mixins, consumption_mixins):
        errs = []
        name = device.get("name", "")
        errs.extend(f_invalid(child(path, "name"), name, m) for m in is_dns1123_label(name))
        attributes = device.get("attributes", {})
        capacity = device.get("capacity", {})
        n = len(attributes) + len(capacity)
        if n > MAX_ATTRS_AND_CAPS:
            errs.append(f_invalid(path, n, "the total number of attributes and capacities must "
                                  "not exceed %d" % MAX_ATTRS_AND_CAPS))
        values = 0
        for a in attributes.values():
            if a.keys().isdisjoint(LIST_ATTRIBUTE_FIELDS):
                values += 1
            else:
                values += (len(a.get("bools", ())) + len(a.get("ints", ()))
                           + len(a.get("strings", ())) + len(a.get("versions", ()))) or 1
        if values > MAX_ATTRIBUTE_VALUES:
            errs.append(f_invalid(path, values, "the total number of attribute values must not "
                                  "exceed %d" % MAX_ATTRIBUTE_VALUES))
        errs.extend(validate_attributes(attributes, child(path, "attributes")))
        multi = bool(device.get("allowMultipleAllocations"))
        errs.extend(self.validate_capacity(capacity, child(path, "capacity"), multi))

        taints = device.get("taints", [])
        tp = child(path, "taints")
        if len(taints) > MAX_TAINTS:
            errs.append(f_too_many(tp, len(taints), MAX_TAINTS))
        else:
            for i, taint in enumerate(taints):
                p = index(tp, i)
                errs.extend(f_invalid(child(p, "key"), taint.get("key", ""), m)
                            for m in is_qualified_name(taint.get("key", "")))
                if taint.get("value"):
                    errs.extend(f_invalid(child(p, "value"), taint["value"], m)
                                for m in is_label_value(taint["value"]))
                effect = taint.get("effect", "")
                if not effect:
                    errs.append(f_required(child(p, "effect")))
                elif effect not in TAINT_EFFECTS:
                    errs.append(f_not_supported(child(p, "effect"), effect, TAINT_EFFECTS))

        consumptions = device.get("consumesCounters", [])
        cp = child(path, "consumesCounters")
        if len(consumptions) > MAX_CONSUMPTIONS_PER_DEVICE:
            errs.append(f_too_many(cp, len(consumptions), MAX_CONSUMPTIONS_PER_DEVICE))
        else:
            seen = set()
            for i, c in enumerate(consumptions):
                p = index(cp, i)
                cs = c.get("counterSet", "")
                if not cs:
                    errs.append(f_required(child(p, "counterSet")))
                else:
                    errs.extend(f_invalid(child(p, "counterSet"), cs, m)
                                for m in is_dns1123_label(cs))
                includes = c.get("includes", [])
                errs.extend(validate_includes(includes, consumption_mixins, child(p, "includes"),
                                              MAX_INCLUDES_PER_CONSUMPTION))
                if not c.get("counters") and not includes:
                    errs.append(f_required(child(p, "counters")))
                else:
                    errs.extend(validate_counters(c.get("counters", {}), child(p, "counters"),
                                                  MAX_COUNTERS_PER_CONSUMPTION))
                if cs in seen:
                    errs.append(f_duplicate(p, cs))
                seen.add(cs)

        node_fields = [f for f in ("nodeName", "nodeSelector", "allNodes") if f in device]
        if per_device:
            set_fields = []
            if "nodeName" in device:
                if device["nodeName"]:
                    set_fields.append("`nodeName`")
                    errs.extend(f_invalid(child(path, "nodeName"), device["nodeName"], m)
                                for m in is_dns1123_subdomain(device["nodeName"]))
                else:
                    errs.append(f_invalid(child(path, "nodeName"), "", "must not be empty"))
            if "nodeSelector" in device:
                set_fields.append("`nodeSelector`")
                errs.extend(validate_node_selector(device["nodeSelector"],
                                                   child(path, "nodeSelector")))
            if "allNodes" in device:
                if device["allNodes"]:
                    set_fields.append("`allNodes`")
                else:
                    errs.append(f_invalid(child(path, "allNodes"), False,
                                          "must be either unset or set to true"))
            msg = ("exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
                   "`perDeviceNodeSelection` is set to true in the ResourceSlice spec")
            if not set_fields:
                errs.append(f_required(path, msg))
            elif len(set_fields) > 1:
                errs.append(f_invalid(path, "{%s}" % ", ".join(set_fields), msg))
        elif node_fields:
            errs.append(f_invalid(path, None, "`nodeName`, `nodeSelector` and `allNodes` can "
                                  "only be set if `perDeviceNodeSelection` is set to true in the "
                                  "ResourceSlice spec"))

        errs.extend(self.validate_binding(device.get("bindingConditions", []),
                                          device.get("bindingFailureConditions", []), path))
        if NODE_ALLOCATABLE_V136 in device:
            errs.extend(validate_node_allocatable_v136(device[NODE_ALLOCATABLE_V136],
                                                       child(path, NODE_ALLOCATABLE_V136)))
        if NODE_ALLOCATABLE_V137 in device:
            errs.extend(validate_node_allocatable_v137(device[NODE_ALLOCATABLE_V137],
                                                       child(path, NODE_ALLOCATABLE_V137)))

        if self.accept_mixins:
            errs.extend(validate_device_includes(device, attributes, capacity, path,
                                                 device_mixins))
        return errs

    def validate_capacity(self, capacity, path, multi):
        errs = []
        for name, cap in capacity.items():
            errs.extend(validate_qualified_key(name, path))
            if "requestPolicy" in cap:
                rp = child(key(path, name), "requestPolicy")
                if not multi:
                    errs.append(f_forbidden(rp, "allowMultipleAllocations must be true"))
                else:
                    errs.extend(validate_request_policy(cap.get("value", "0"),
                                                        cap["requestPolicy"], rp))
        return errs

    def validate_binding(self, conditions, failures, path):
        errs = []
        for field, items in (("bindingConditions", conditions),
                             ("bindingFailureConditions", failures)):
            p = child(path, field)
            if len(items) > MAX_BINDING_CONDITIONS:
                errs.append(f_too_many(p, len(items), MAX_BINDING_CONDITIONS))
                continue
            for i, c in enumerate(items):
                errs.extend(f_invalid(index(p, i), c, m) for m in is_qualified_name(c))
        seen = set()
        for i, c in enumerate(conditions):
            if c in seen:
                errs.append(f_duplicate(index(child(path, "bindingConditions"), i), c))
            seen.add(c)
        seen_failures = set()
        for i, c in enumerate(failures):
            p = index(child(path, "bindingFailureConditions"), i)
            if c in seen_failures:
                errs.append(f_duplicate(p, c))
            seen_failures.add(c)
            if c in seen:
                errs.append(f_invalid(p, c, "bindingFailureConditions must not overlap with "
                                      "bindingConditions"))
        if not conditions and failures:
            errs.append(f_invalid(child(path, "bindingConditions"), conditions,
                                  "bindingConditions are required to use "
                                  "bindingFailureConditions"))
        if not failures and conditions:
            errs.append(f_invalid(child(path, "bindingFailureConditions"), failures,
                                  "bindingFailureConditions are required to use "
                                  "bindingConditions"))
        return errs


def prepare_resourceslice(obj, old):
    """Defaulting the server applies on every write: taints get timeAdded (now) when unset."""
    now = None
    for device in obj.get("spec", {}).get("devices", []):
        for taint in device.get("taints", []):
            if not taint.get("timeAdded"):
                now = now or now_rfc3339()
                taint["timeAdded"] = now


def resourceslice_warnings(obj):
    driver = obj.get("spec", {}).get("driver", "")
    if driver != driver.lower():
        return ['spec.driver: driver names should be lowercase; "%s" contains uppercase '
                'characters' % driver]
    return []


def make_resourceslice_type(cfg):
    node_allocatable = getattr(cfg, "node_allocatable", "drop")
    validator = SliceValidator(cfg.accept_mixins, cfg.pool_checks, node_allocatable)
    rt = ResourceType(
        RESOURCE_GROUP, cfg.versions, "resourceslices", "resourceslice", "ResourceSlice",
        namespaced=False,
        verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update",
               "watch"),
        schema=resourceslice_schema(cfg.accept_mixins, cfg.accept_list_attributes,
                                    cfg.accept_device_taints, node_allocatable),
        field_labels={
            "spec.driver": lambda o: o.get("spec", {}).get("driver", ""),
            "spec.nodeName": lambda o: o.get("spec", {}).get("nodeName", ""),
            "spec.pool.name": lambda o: o.get("spec", {}).get("pool", {}).get("name", ""),
        },
        validate_create=validator.validate_create,
        validate_update=validator.validate_update,
        prepare=prepare_resourceslice,
        warnings=resourceslice_warnings,
        table=RESOURCESLICE_TABLE)
    rt.slice_validator = validator
    return rt
