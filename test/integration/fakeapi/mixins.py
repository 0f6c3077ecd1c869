"""The KEP-5234 "ResourceSlice mixins" model, served only with --mixins accept: spec.mixins
(device, deviceCounterConsumption, counterSet), the includes[] lists of devices, counter
consumptions and shared counter sets, and the proposed limits (mixins per kind, includes per
entry, attributes+capacities per slice and per flattened device, counters per slice).
test/schema/schema_test.py checks topodra's mixin output against this model.

Source: k8s-api-cdi.md §1.10: KEP-5234 did not land (no mixins/includes field in any released
resource.k8s.io version; the implementation PR was closed unmerged), so the shapes and limits
here are the KEP text's proposal; a real server drops these fields as unknown (Warn) or rejects
them (Strict), which is what --mixins reject (the default) does."""

from .decode import ListOf, MapOf, Obj, STR
from .errors import (child, f_duplicate, f_forbidden, f_invalid, f_not_found, f_required,
                     f_too_many, index, key)
from .formats import is_dns1123_label, validate_qualified_key
from .slice_fields import (MAX_ATTRS_AND_CAPS, MAX_COUNTERS_PER_SET, validate_attributes,
                           validate_counters)


# KEP-5234 (mixins), only with --mixins accept.
MAX_INCLUDES_PER_DEVICE = 8
MAX_INCLUDES_PER_COUNTER_SET = 8
MAX_INCLUDES_PER_CONSUMPTION = 4
MAX_DEVICE_MIXINS = 128
MAX_CONSUMPTION_MIXINS = 128
MAX_COUNTER_SET_MIXINS = 32
MAX_SLICE_ATTRS_AND_CAPS = 4096
MAX_SLICE_CONSUMED_COUNTERS = 2048
MAX_SLICE_MIXIN_COUNTERS = 256


def add_mixin_fields(spec, device, consumption, counter_set, attribute, capacity, counter):
    """Adds the KEP-5234 fields to the schema pieces of a ResourceSlice (in place)."""
    device["includes"] = ListOf(STR)
    consumption["includes"] = ListOf(STR)
    counter_set["includes"] = ListOf(STR)
    spec["mixins"] = Obj({
        "device": ListOf(Obj({"name": STR, "attributes": MapOf(attribute),
                              "capacity": MapOf(capacity)}, zero=("name",))),
        "deviceCounterConsumption": ListOf(Obj({"name": STR, "counters": MapOf(counter)},
                                               zero=("name",))),
        "counterSet": ListOf(Obj({"name": STR, "counters": MapOf(counter)},
                                 zero=("name",))),
    })


def validate_includes(includes, known, path, limit):
    if not includes:
        return []
    if len(includes) > limit:
        return [f_too_many(path, len(includes), limit)]
    errs = []
    for i, name in enumerate(includes):
        if name not in known:
            errs.append(f_not_found(index(path, i), name))
    return errs


def validate_device_includes(device, attributes, capacity, path, device_mixins):
    """A device's includes name device mixins of the slice, and the device with its mixins
    merged in stays within the per-device limit of attributes and capacities."""
    includes = device.get("includes", [])
    errs = validate_includes(includes, device_mixins, child(path, "includes"),
                             MAX_INCLUDES_PER_DEVICE)
    if includes:
        attr_keys, cap_keys = set(attributes), set(capacity)
        for name in includes[:MAX_INCLUDES_PER_DEVICE]:
            mixin = device_mixins.get(name)
            if mixin is not None:
                attr_keys.update(mixin.get("attributes", {}))
                cap_keys.update(mixin.get("capacity", {}))
        flat = len(attr_keys) + len(cap_keys)
        if flat > MAX_ATTRS_AND_CAPS:
            errs.append(f_invalid(path, flat, "the total number of attributes and "
                                  "capacities of the device including its mixins must "
                                  "not exceed %d" % MAX_ATTRS_AND_CAPS))
    return errs


def validate_mixins(spec):
    errs = []
    mixins = spec["mixins"]
    total = sum(len(d.get("attributes", {})) + len(d.get("capacity", {}))
                for d in spec.get("devices", []))
    for kind, limit in (("device", MAX_DEVICE_MIXINS),
                        ("deviceCounterConsumption", MAX_CONSUMPTION_MIXINS),
                        ("counterSet", MAX_COUNTER_SET_MIXINS)):
        items = mixins.get(kind, [])
        path = "spec.mixins." + kind
        if len(items) > limit:
            errs.append(f_too_many(path, len(items), limit))
            continue
        seen = set()
        counters = 0
        for i, m in enumerate(items):
            p = index(path, i)
            name = m.get("name", "")
            if not name:
                errs.append(f_required(child(p, "name")))
            else:
                errs.extend(f_invalid(child(p, "name"), name, msg)
                            for msg in is_dns1123_label(name))
            if name in seen:
                errs.append(f_duplicate(child(p, "name"), name))
            seen.add(name)
            if kind == "device":
                attributes = m.get("attributes", {})
                capacity = m.get("capacity", {})
                n = len(attributes) + len(capacity)
                total += n
                if n > MAX_ATTRS_AND_CAPS:
                    errs.append(f_invalid(p, n, "the total number of attributes and "
                                          "capacities must not exceed %d"
                                          % MAX_ATTRS_AND_CAPS))
                errs.extend(validate_attributes(attributes, child(p, "attributes")))
                for cname, cap in capacity.items():
                    errs.extend(validate_qualified_key(cname, child(p, "capacity")))
                    if "requestPolicy" in cap:
                        errs.append(f_forbidden(child(key(child(p, "capacity"), cname),
                                                      "requestPolicy"),
                                                "allowMultipleAllocations must be true"))
            else:
                errs.extend(validate_counters(m.get("counters", {}), child(p, "counters"),
                                              MAX_COUNTERS_PER_SET))
                counters += len(m.get("counters", {}))
        if kind == "deviceCounterConsumption" and counters > MAX_SLICE_CONSUMED_COUNTERS:
            errs.append(f_invalid(path, counters, "the total number of counters must not "
                                  "exceed %d" % MAX_SLICE_CONSUMED_COUNTERS))
        if kind == "counterSet" and counters > MAX_SLICE_MIXIN_COUNTERS:
            errs.append(f_invalid(path, counters, "the total number of counters must not "
                                  "exceed %d" % MAX_SLICE_MIXIN_COUNTERS))
    if total > MAX_SLICE_ATTRS_AND_CAPS:
        errs.append(f_invalid("spec", total, "the total number of attributes and "
                              "capacities in devices and mixins must not exceed %d"
                              % MAX_SLICE_ATTRS_AND_CAPS))
    return errs
