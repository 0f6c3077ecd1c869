"""The building blocks of ResourceSlice validation shared with ResourceClaims and the KEP-5234
mixins: the Kubernetes 1.36 per-device limits, node selectors, device attributes (one of
int/bool/string/version; list attributes behind DRAListTypeAttributes), capacity request
policies (consumable capacity: default, validValues, validRange) and counters, and the two
incompatible node-allocatable fields of KEP-5517 (1.36 nodeAllocatableResourceMappings, 1.37
nodeAllocatableResources) with their validation.

Source: k8s-api-cdi.md §1.4 (spec.devices[]), §1.5 (attribute values), §1.6 (capacity and
consumable capacity), §1.7 (qualified keys), §1.8 (validation limits by release: the 1.36
column); k8s-1.35-1.37-addendum.md §5 (list-type attributes, KEP-5491), §7 (consumable capacity
and slice limits 1.35 -> 1.37), §4 (node allocatable resources: 1.37 shape and rules; the 1.36
shape as the 1.36 API reference describes NodeAllocatableResourceMapping: keys are node
allocatable resource names, extended resource names are not permitted, allocationMultiplier
defaults to 1). Numeric bounds of the multipliers are UNVERIFIED (addendum §9) and not
enforced."""

from .decode import INT64_MAX, ListOf, Obj, QTY, STR
from .errors import (child, f_duplicate, f_forbidden, f_invalid, f_required, f_too_long,
                     f_too_many, index, key)
from .formats import (is_dns1123_label, is_dns1123_subdomain, is_qualified_name, parse_quantity,
                      Quantity, SEMVER_RE, validate_qualified_key)


MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64  # any taints, consumesCounters or list attributes
MAX_ATTRS_AND_CAPS = 32
MAX_ATTRIBUTE_VALUES = 48
MAX_STRING_LEN = 64
MAX_TAINTS = 16
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMPTIONS_PER_DEVICE = 2
MAX_COUNTERS_PER_CONSUMPTION = 32
MAX_BINDING_CONDITIONS = 4
MAX_VALID_VALUES = 10
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")
LIST_ATTRIBUTE_FIELDS = ("ints", "bools", "strings", "versions")

# KEP-5517: which release's node-allocatable field the server knows (--node-allocatable).
NODE_ALLOCATABLE_V136 = "nodeAllocatableResourceMappings"
NODE_ALLOCATABLE_V137 = "nodeAllocatableResources"
NODE_ALLOCATABLE_MODES = ("drop", "v1.36", "v1.37")
NODE_ALLOCATABLE_NAMES = ("cpu", "memory", "ephemeral-storage")


def node_allocatable_schemas():
    """(1.36 entry, 1.37 entry) schemas of the two map values."""
    v136 = Obj({"capacityKey": STR, "allocationMultiplier": QTY})
    v137 = Obj({
        "mapping": Obj({"capacityKey": STR, "capacityMultiplier": QTY, "deviceMultiplier": QTY}),
        "overhead": Obj({"perPod": QTY, "perContainer": QTY})})
    return v136, v137


def _validate_node_allocatable_name(name, path):
    if name in NODE_ALLOCATABLE_NAMES or name.startswith("hugepages-"):
        return []
    if "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io"):
        return [f_invalid(key(path, name), name, "extended resource names are not allowed; "
                          "must be a node allocatable resource name")]
    return [f_invalid(key(path, name), name, "must be a node allocatable resource name (cpu, "
                      "memory, ephemeral-storage or hugepages-<size>)")]


def validate_node_allocatable_v136(mappings, path):
    """nodeAllocatableResourceMappings (1.36): keys as in 1.37; capacityKey, when set, is a
    qualified capacity name; allocationMultiplier is optional (default 1)."""
    errs = []
    for name, entry in mappings.items():
        errs.extend(_validate_node_allocatable_name(name, path))
        if "capacityKey" in entry:
            errs.extend(validate_qualified_key(entry["capacityKey"],
                                               child(key(path, name), "capacityKey")))
    return errs


def validate_node_allocatable_v137(resources, path):
    """nodeAllocatableResources (1.37): keys are node allocatable names; each value has mapping
    and/or overhead (at least one); capacityKey and capacityMultiplier both or neither."""
    errs = []
    for name, entry in resources.items():
        p = key(path, name)
        errs.extend(_validate_node_allocatable_name(name, path))
        if "mapping" not in entry and "overhead" not in entry:
            errs.append(f_required(p, "at least one of `mapping` or `overhead` must be "
                                   "specified"))
        mapping = entry.get("mapping")
        if mapping is not None:
            mp = child(p, "mapping")
            has_key, has_mult = "capacityKey" in mapping, "capacityMultiplier" in mapping
            if has_key != has_mult:
                missing = "capacityMultiplier" if has_key else "capacityKey"
                errs.append(f_required(child(mp, missing), "`capacityKey` and "
                                       "`capacityMultiplier` must be set together"))
            if has_key:
                errs.extend(validate_qualified_key(mapping["capacityKey"],
                                                   child(mp, "capacityKey")))
    return errs


def node_selector_schema():
    requirement = Obj({"key": STR, "operator": STR, "values": ListOf(STR)},
                      zero=("key", "operator"))
    return Obj({"nodeSelectorTerms": ListOf(Obj({"matchExpressions": ListOf(requirement),
                                                 "matchFields": ListOf(requirement)}))},
               zero=("nodeSelectorTerms",))


def _quantity(text):
    return parse_quantity(text)


def validate_node_selector(sel, path):
    errs = []
    terms = sel.get("nodeSelectorTerms", [])
    tp = child(path, "nodeSelectorTerms")
    if not terms:
        errs.append(f_required(tp, "must have at least one node selector term"))
    for i, term in enumerate(terms):
        p = index(tp, i)
        for j, req in enumerate(term.get("matchExpressions", [])):
            rp = index(child(p, "matchExpressions"), j)
            values = req.get("values", [])
            op = req.get("operator", "")
            if op in ("In", "NotIn"):
                if not values:
                    errs.append(f_required(child(rp, "values"),
                                           "must be specified when `operator` is 'In' or "
                                           "'NotIn'"))
            elif op in ("Exists", "DoesNotExist"):
                if values:
                    errs.append(f_forbidden(child(rp, "values"),
                                            "may not be specified when `operator` is 'Exists' "
                                            "or 'DoesNotExist'"))
            elif op in ("Gt", "Lt"):
                if len(values) != 1:
                    errs.append(f_required(child(rp, "values"),
                                           "must be specified single value when `operator` is "
                                           "'Lt' or 'Gt'"))
            else:
                errs.append(f_invalid(child(rp, "operator"), op, "not a valid selector operator"))
            errs.extend(f_invalid(child(rp, "key"), req.get("key", ""), m)
                        for m in is_qualified_name(req.get("key", "")))
        for j, req in enumerate(term.get("matchFields", [])):
            rp = index(child(p, "matchFields"), j)
            if req.get("key") != "metadata.name":
                errs.append(f_invalid(child(rp, "key"), req.get("key", ""),
                                      "not a valid field selector key"))
            if req.get("operator") not in ("In", "NotIn"):
                errs.append(f_invalid(child(rp, "operator"), req.get("operator", ""),
                                      "not a valid selector operator"))
            values = req.get("values", [])
            if len(values) != 1:
                errs.append(f_required(child(rp, "values"),
                                       "must be only one value when `operator` is 'In' or "
                                       "'NotIn' for node field selector"))
            else:
                errs.extend(f_invalid(index(child(rp, "values"), 0), values[0], m)
                            for m in is_dns1123_subdomain(values[0]))
    return errs


def has_list_values(attr):
    return not attr.keys().isdisjoint(LIST_ATTRIBUTE_FIELDS)


_SCALAR_NO_CHECKS = frozenset(("bool", "int"))  # decoded as such: nothing left to check


def validate_attribute(attr, path):
    if len(attr) == 1 and next(iter(attr)) in _SCALAR_NO_CHECKS:
        return []  # exactly one value, of a type whose values are all valid
    errs = []
    count = 0
    for f in ("bool", "int"):
        if f in attr:
            count += 1
    for f in ("string", "version"):
        if f in attr:
            count += 1
            errs.extend(_validate_attribute_string(attr[f], child(path, f), f == "version"))
    for f in LIST_ATTRIBUTE_FIELDS:
        if f in attr:
            count += 1
            values = attr[f]
            if not values:
                errs.append(f_invalid(child(path, f), values, "must not be empty if specified"))
            if f in ("strings", "versions"):
                for i, v in enumerate(values):
                    errs.extend(_validate_attribute_string(v, index(child(path, f), i),
                                                           f == "versions"))
    if count != 1:
        errs.append(f_invalid(path, "" if count == 0 else attr, "exactly one value must be "
                              "specified"))
    return errs


def _validate_attribute_string(value, path, is_version):
    errs = []
    if is_version and not SEMVER_RE.fullmatch(value):
        errs.append(f_invalid(path, value, "must be a string compatible with semver.org spec "
                              "2.0.0"))
    if len(value.encode("utf-8")) > MAX_STRING_LEN:
        errs.append(f_too_long(path, MAX_STRING_LEN))
    return errs


def validate_request_policy(capacity_value, policy, path):
    errs = []
    cap = _quantity(capacity_value).value
    valid_values = policy.get("validValues")
    valid_range = policy.get("validRange")
    default = policy.get("default")
    if valid_values and valid_range is not None:
        return [f_forbidden(path, 'exactly one policy can be specified, cannot specify '
                            '"validValues" and "validRange" at the same time')]
    if valid_values:
        if default is None:
            return [f_required(child(path, "default"), "required when validValues is defined")]
        vp = child(path, "validValues")
        if len(valid_values) > MAX_VALID_VALUES:
            return [f_too_many(vp, len(valid_values), MAX_VALID_VALUES)]
        qs = [_quantity(v) for v in valid_values]
        for i in range(len(qs) - 1):
            if qs[i].value > qs[i + 1].value:
                errs.append(f_invalid(index(vp, i + 1), valid_values[i + 1],
                                      "values must be sorted in ascending order"))
        dq = _quantity(default).value
        seen = set()
        found = False
        for i, q in enumerate(qs):
            if q.value > cap:
                errs.append(f_invalid(index(vp, i), valid_values[i],
                                      "option is larger than capacity value: %s"
                                      % capacity_value))
            if q.value == dq:
                found = True
            k = q.as_int()
            if k in seen:
                errs.append(f_duplicate(index(vp, i), str(k)))
            seen.add(k)
        if not found:
            errs.append(f_invalid(vp, default,
                                  "default value is not valid according to the requestPolicy"))
    elif valid_range is not None:
        rp = child(path, "validRange")
        if default is None:
            return [f_required(child(path, "default"), "required when validRange is defined")]
        if "min" not in valid_range:
            return [f_required(child(rp, "min"), "required when validRange is defined")]
        lo = _quantity(valid_range["min"])
        d = _quantity(default)
        if lo.value > cap:
            errs.append(f_invalid(child(rp, "min"), valid_range["min"],
                                  "min is larger than capacity value: %s" % capacity_value))
        if d.value < lo.value:
            errs.append(f_invalid(child(rp, "default"), default,
                                  "default is less than min: %s" % valid_range["min"]))
        hi = None
        if "max" in valid_range:
            hi = _quantity(valid_range["max"])
            if lo.value > hi.value:
                errs.append(f_invalid(child(rp, "max"), valid_range["min"],
                                      "min is larger than max: %s" % valid_range["max"]))
            if hi.value > cap:
                errs.append(f_invalid(child(rp, "max"), valid_range["max"],
                                      "max is larger than capacity value: %s" % capacity_value))
            if d.value > hi.value:
                errs.append(f_invalid(child(rp, "default"), default,
                                      "default is more than max: %s" % valid_range["max"]))
        if "step" in valid_range:
            step = _quantity(valid_range["step"])
            sp = child(rp, "step")
            if step.value <= 0:
                errs.append(f_invalid(sp, valid_range["step"], "must be greater than zero"))
            else:
                if lo.value + step.value > cap:
                    errs.append(f_invalid(sp, valid_range["step"],
                                          "one step %s is larger than capacity value: %s"
                                          % (Quantity(lo.value + step.value, lo.fmt).canonical(),
                                             capacity_value)))
                bounds = [("default", d), ("min", lo), ("max", hi), ("step", step)]
                unsafe = False
                for name, q in bounds:
                    if q is None:
                        continue
                    if q.value < 0:
                        errs.append(f_invalid(child(rp, name), q.canonical(),
                                              "must be greater than or equal to 0"))
                        unsafe = True
                    elif q.value > INT64_MAX:
                        errs.append(f_invalid(child(rp, name), q.canonical(),
                                              "must not be larger than %d" % INT64_MAX))
                        unsafe = True
                if not unsafe:
                    # Integer arithmetic (DRAFractionalCapacityRange off): Value() rounds up.
                    s, m = step.as_int(), lo.as_int()
                    for q in (d, hi):
                        if q is not None and (q.as_int() - m) % s != 0:
                            errs.append(f_invalid(sp, q.canonical(),
                                                  "value is not a multiple of a given step "
                                                  "(%s) from (%s)" % (valid_range["step"],
                                                                      valid_range["min"])))
    return errs


def validate_counters(counters, path, limit):
    if len(counters) > limit:
        return [f_too_many(path, len(counters), limit)]
    errs = []
    for name in counters:
        errs.extend(f_invalid(path, name, m) for m in is_dns1123_label(name))
    return errs


def validate_attributes(attributes, path):
    errs = []
    for name, attr in attributes.items():
        errs.extend(validate_qualified_key(name, path))
        if len(attr) == 1 and next(iter(attr)) in _SCALAR_NO_CHECKS:
            continue  # what validate_attribute would find: nothing (and no path to spell out)
        errs.extend(validate_attribute(attr, key(path, name)))
    return errs
