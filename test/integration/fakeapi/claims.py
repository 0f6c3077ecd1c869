"""ResourceClaims, DeviceClasses and ResourceClaimTemplates of resource.k8s.io as a 1.34+ server
handles them: the claim spec (requests with exactly/firstAvailable, selectors, tolerations,
constraints, config; defaults allocationMode ExactCount, count 1, toleration operator Equal;
immutable after create), the status written by the scheduler and the driver (allocation set
once, reservedFor, devices[] with conditions and networkData) and their limits; DeviceClass
spec (selectors, config, extendedResourceName); a template's spec.spec validated as a claim
spec.

Source: k8s-api-cdi.md §2.1 (spec.devices, immutable), §2.2 (status.allocation, set once),
§2.3 (reservedFor), §2.4 (status.devices, written by the driver), §2.5 (config entries),
§3.1-§3.2 (paths, the /status subresource, metadata.name/namespace field selectors);
k8s-1.35-1.37-addendum.md §2.2 (DeviceClass.spec.extendedResourceName). Limit names are
upstream's (pkg/apis/resource/types.go)."""

import ipaddress
import json
import re

from .decode import (ANY, BOOL, INT, ListOf, MapOf, METADATA_SCHEMA, Obj, QTY, STR, TIME,
                     validate_object_meta)
from .errors import (child, f_duplicate, f_forbidden, f_invalid, f_not_supported, f_required,
                     f_too_long, f_too_many, index)
from .formats import (is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name,
                      validate_driver_name, validate_pool_name, validate_qualified_key)
from .kubectl import NAME_AGE_TABLE, RESOURCECLAIM_TABLE
from .resource_type import RESOURCE_GROUP, ResourceType
from .slice_fields import (MAX_BINDING_CONDITIONS, node_selector_schema, TAINT_EFFECTS,
                           validate_node_selector)


MAX_REQUESTS = 32  # DeviceRequestsMaxSize (also the limit of requests[] in constraints/config)
MAX_SUBREQUESTS = 8  # FirstAvailableDeviceRequestMaxSize
MAX_SELECTORS = 32  # DeviceSelectorsMaxSize
MAX_CEL_LENGTH = 10 * 1024  # CELSelectorExpressionMaxLength
MAX_TOLERATIONS = 16  # DeviceTolerationsMaxLength
MAX_CONSTRAINTS = 32  # DeviceConstraintsMaxSize
MAX_CONFIGS = 32  # DeviceConfigMaxSize (claim spec and DeviceClass spec)
MAX_ALLOCATION_CONFIGS = 64  # AllocationConfigMaxSize (class + claim configs)
MAX_RESULTS = 32  # AllocationResultsMaxSize
MAX_RESERVED_FOR = 256  # ResourceClaimReservedForMaxSize
MAX_OPAQUE_PARAMETERS = 10 * 1024  # OpaqueParametersMaxLength
MAX_DEVICE_STATUS_DATA = 10 * 1024  # AllocatedDeviceStatusDataMaxLength
MAX_DEVICE_CONDITIONS = 8  # AllocatedDeviceStatusMaxConditions
MAX_NETWORK_IPS = 16  # NetworkDeviceDataMaxIPs
MAX_INTERFACE_NAME = 256  # NetworkDeviceDataInterfaceNameMaxLength
MAX_HARDWARE_ADDRESS = 128  # NetworkDeviceDataHardwareAddressMaxLength
ALLOCATION_MODES = ("All", "ExactCount")
TOLERATION_OPERATORS = ("Equal", "Exists")
CONFIG_SOURCES = ("FromClaim", "FromClass")
CONDITION_STATUSES = ("False", "True", "Unknown")
_CONDITION_REASON_RE = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                      r"[0-9a-fA-F]{12}")
_MSG_REQUEST_REF = ("must be the name of a request in the claim or the name of a request and a "
                    "subrequest separated by '/'")


def _device_claim_schemas():
    """The pieces of the resource.k8s.io v1 (= v1beta2) DRA schema shared by claims and
    classes."""
    selector = Obj({"cel": Obj({"expression": STR}, zero=("expression",))})
    opaque = Obj({"driver": STR, "parameters": ANY}, zero=("driver",))
    toleration = Obj({"key": STR, "operator": STR, "value": STR, "effect": STR,
                      "tolerationSeconds": INT})
    return selector, opaque, toleration


def resourceclaim_schema():
    selector, opaque, toleration = _device_claim_schemas()
    capacity = Obj({"requests": MapOf(QTY)})
    exactly = Obj({"deviceClassName": STR, "selectors": ListOf(selector), "allocationMode": STR,
                   "count": INT, "adminAccess": BOOL, "tolerations": ListOf(toleration),
                   "capacity": capacity}, zero=("deviceClassName",))
    # DeviceSubRequest has no adminAccess: it is an unknown field there.
    subrequest = Obj({"name": STR, "deviceClassName": STR, "selectors": ListOf(selector),
                      "allocationMode": STR, "count": INT, "tolerations": ListOf(toleration),
                      "capacity": capacity}, zero=("name", "deviceClassName"))
    request = Obj({"name": STR, "exactly": exactly, "firstAvailable": ListOf(subrequest)},
                  zero=("name",))
    constraint = Obj({"requests": ListOf(STR), "matchAttribute": STR,
                      "distinctAttribute": STR})
    claim_config = Obj({"requests": ListOf(STR), "opaque": opaque})
    spec = Obj({"devices": Obj({"requests": ListOf(request), "constraints": ListOf(constraint),
                                "config": ListOf(claim_config)})},
               zero=("devices",))
    result = Obj({"request": STR, "driver": STR, "pool": STR, "device": STR,
                  "adminAccess": BOOL, "tolerations": ListOf(toleration),
                  "bindingConditions": ListOf(STR), "bindingFailureConditions": ListOf(STR),
                  "shareID": STR, "consumedCapacity": MapOf(QTY)},
                 zero=("request", "driver", "pool", "device"))
    allocation_config = Obj({"source": STR, "requests": ListOf(STR), "opaque": opaque},
                            zero=("source",))
    allocation = Obj({"devices": Obj({"results": ListOf(result),
                                      "config": ListOf(allocation_config)}),
                      "nodeSelector": node_selector_schema(), "allocationTimestamp": TIME},
                     zero=("devices",))
    consumer = Obj({"apiGroup": STR, "resource": STR, "name": STR, "uid": STR},
                   zero=("resource", "name", "uid"))
    condition = Obj({"type": STR, "status": STR, "observedGeneration": INT,
                     "lastTransitionTime": TIME, "reason": STR, "message": STR},
                    zero=("type", "status", "reason", "message"))
    device_status = Obj({"driver": STR, "pool": STR, "device": STR, "shareID": STR,
                         "conditions": ListOf(condition), "data": ANY,
                         "networkData": Obj({"interfaceName": STR, "ips": ListOf(STR),
                                             "hardwareAddress": STR})},
                        zero=("driver", "pool", "device"))
    status = Obj({"allocation": allocation, "reservedFor": ListOf(consumer),
                  "devices": ListOf(device_status)})
    return Obj({"apiVersion": STR, "kind": STR, "metadata": METADATA_SCHEMA, "spec": spec,
                "status": status}, zero=("spec", "status"))


def deviceclass_schema():
    selector, opaque, _ = _device_claim_schemas()
    spec = Obj({"selectors": ListOf(selector), "config": ListOf(Obj({"opaque": opaque})),
                "extendedResourceName": STR})
    return Obj({"apiVersion": STR, "kind": STR, "metadata": METADATA_SCHEMA, "spec": spec},
               zero=("spec",))


def _compact_json_size(value):
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def validate_raw_object(obj, field, path, limit, required):
    """validateRawExtension: a JSON object of at most `limit` bytes (serialized)."""
    if obj.get(field) is None:
        return [f_required(path)] if required else []
    value = obj[field]
    if _compact_json_size(value) > limit:
        return [f_too_long(path, limit)]
    if not isinstance(value, dict):
        return [f_invalid(path, "<value omitted>", "must be valid JSON object")]
    return []


def validate_dns_label(v, path):
    if not v:
        return [f_required(path)]
    return [f_invalid(path, v, m) for m in is_dns1123_label(v)]


def validate_opaque(opaque, path):
    errs = validate_driver_name(opaque.get("driver", ""), child(path, "driver"))
    errs.extend(validate_raw_object(opaque, "parameters", child(path, "parameters"),
                                    MAX_OPAQUE_PARAMETERS, required=True))
    return errs


def validate_config_entry(entry, path):
    """DeviceConfiguration: exactly one kind of configuration, and opaque is the only one."""
    if "opaque" not in entry:
        return [f_required(path, "exactly one of `opaque` is required")]
    return validate_opaque(entry["opaque"], child(path, "opaque"))


def validate_selectors(selectors, path):
    if len(selectors) > MAX_SELECTORS:
        return [f_too_many(path, len(selectors), MAX_SELECTORS)]
    errs = []
    for i, sel in enumerate(selectors):
        p = index(path, i)
        if "cel" not in sel:
            errs.append(f_required(child(p, "cel")))
            continue
        expression = sel["cel"].get("expression", "")
        ep = child(child(p, "cel"), "expression")
        if not expression:
            errs.append(f_required(ep))
        elif len(expression.encode("utf-8")) > MAX_CEL_LENGTH:
            errs.append(f_too_long(ep, MAX_CEL_LENGTH))
    return errs


def validate_tolerations(tolerations, path):
    if len(tolerations) > MAX_TOLERATIONS:
        return [f_too_many(path, len(tolerations), MAX_TOLERATIONS)]
    errs = []
    for i, t in enumerate(tolerations):
        p = index(path, i)
        k = t.get("key", "")
        if k:
            errs.extend(f_invalid(child(p, "key"), k, m) for m in is_qualified_name(k))
        op = t.get("operator", "Equal")
        if op == "Exists":
            if t.get("value"):
                errs.append(f_invalid(child(p, "value"), t["value"],
                                      "value must be empty when `operator` is 'Exists'"))
        elif op == "Equal":
            if not k:
                errs.append(f_invalid(child(p, "operator"), op,
                                      "operator must be Exists when `key` is empty, which means "
                                      "\"match all values and all keys\""))
            errs.extend(f_invalid(child(p, "value"), t.get("value", ""), m)
                        for m in is_label_value(t.get("value", "")))
        else:
            errs.append(f_not_supported(child(p, "operator"), op, TOLERATION_OPERATORS))
        effect = t.get("effect", "")
        if effect and effect not in TAINT_EFFECTS:
            errs.append(f_not_supported(child(p, "effect"), effect, TAINT_EFFECTS))
        if "tolerationSeconds" in t and effect != "NoExecute":
            errs.append(f_invalid(child(p, "effect"), effect,
                                  "effect must be 'NoExecute' when `tolerationSeconds` is set"))
    return errs


def validate_fully_qualified_name(name, path):
    errs = validate_qualified_key(name, path)
    if len(name.split("/")) != 2:
        errs.append(f_invalid(path, name, "must include a domain"))
    return errs


def validate_request_ref(ref, path, names):
    """`<request>` or `<request>/<subrequest>` naming a request (subrequest) of the claim."""
    parts = ref.split("/")
    if (len(parts) > 2 or parts[0] not in names
            or (len(parts) == 2 and parts[1] not in names[parts[0]])):
        return [f_invalid(path, ref, _MSG_REQUEST_REF)]
    return []


def validate_request_refs(refs, path, names):
    if len(refs) > MAX_REQUESTS:
        return [f_too_many(path, len(refs), MAX_REQUESTS)]
    errs = []
    seen = set()
    for i, ref in enumerate(refs):
        errs.extend(validate_request_ref(ref, index(path, i), names))
        if ref in seen:
            errs.append(f_duplicate(index(path, i), ref))
        seen.add(ref)
    return errs


def validate_capacity_requests(capacity, path):
    errs = []
    for name in capacity.get("requests", {}):
        errs.extend(validate_qualified_key(name, child(path, "requests")))
    return errs


def validate_uuid(v, path):
    if not _UUID_RE.fullmatch(v):
        return [f_invalid(path, v, "must be a valid UUID in RFC 4122 normalized form, "
                          "`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with lowercase hexadecimal "
                          "characters")]
    return []


def validate_conditions(conditions, path):
    """metav1validation.ValidateConditions plus the list limit of AllocatedDeviceStatus."""
    if len(conditions) > MAX_DEVICE_CONDITIONS:
        return [f_too_many(path, len(conditions), MAX_DEVICE_CONDITIONS)]
    errs = []
    seen = set()
    for i, c in enumerate(conditions):
        p = index(path, i)
        t = c.get("type", "")
        if not t:
            errs.append(f_required(child(p, "type")))
        else:
            errs.extend(f_invalid(child(p, "type"), t, m) for m in is_qualified_name(t))
        if t in seen:
            errs.append(f_duplicate(child(p, "type"), t))
        seen.add(t)
        if c.get("status", "") not in CONDITION_STATUSES:
            errs.append(f_not_supported(child(p, "status"), c.get("status", ""),
                                        CONDITION_STATUSES))
        if c.get("observedGeneration", 0) < 0:
            errs.append(f_invalid(child(p, "observedGeneration"), c["observedGeneration"],
                                  "must be greater than or equal to zero"))
        if not c.get("lastTransitionTime"):
            errs.append(f_required(child(p, "lastTransitionTime"), "must be set"))
        reason = c.get("reason", "")
        if not reason:
            errs.append(f_required(child(p, "reason"), "must be set"))
        else:
            if len(reason) > 1024:
                errs.append(f_too_long(child(p, "reason"), 1024))
            if not _CONDITION_REASON_RE.fullmatch(reason):
                errs.append(f_invalid(child(p, "reason"), reason,
                                      "a condition reason must start with alphabetic character, "
                                      "optionally followed by a string of alphanumeric "
                                      "characters or '_,:', and must end with an alphanumeric "
                                      "character or '_' (e.g. 'my_name',  or 'MY_NAME',  or "
                                      "'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', "
                                      "regex used for validation is "
                                      "'[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')"))
        if len(c.get("message", "")) > 32768:
            errs.append(f_too_long(child(p, "message"), 32768))
    return errs


def validate_network_data(data, path):
    errs = []
    if len(data.get("interfaceName", "")) > MAX_INTERFACE_NAME:
        errs.append(f_too_long(child(path, "interfaceName"), MAX_INTERFACE_NAME))
    if len(data.get("hardwareAddress", "")) > MAX_HARDWARE_ADDRESS:
        errs.append(f_too_long(child(path, "hardwareAddress"), MAX_HARDWARE_ADDRESS))
    ips = data.get("ips", [])
    ip_path = child(path, "ips")
    if len(ips) > MAX_NETWORK_IPS:
        errs.append(f_too_many(ip_path, len(ips), MAX_NETWORK_IPS))
        return errs
    seen = set()
    for i, ip in enumerate(ips):
        p = index(ip_path, i)
        try:
            if "/" not in ip:
                raise ValueError()
            ipaddress.ip_interface(ip)
        except ValueError:
            errs.append(f_invalid(p, ip, "must be a valid address in CIDR form, (e.g. "
                                  "10.9.8.7/24 or 2001:db8::1/64)"))
        if ip in seen:
            errs.append(f_duplicate(p, ip))
        seen.add(ip)
    return errs


def prepare_resourceclaim(obj, old):
    """The defaults of the v1 API: allocationMode ExactCount, count 1, toleration operator
    Equal (for the exactly request and every firstAvailable subrequest)."""
    for request in obj.get("spec", {}).get("devices", {}).get("requests", []):
        targets = list(request.get("firstAvailable", []))
        if "exactly" in request:
            targets.append(request["exactly"])
        for r in targets:
            if not r.get("allocationMode"):
                r["allocationMode"] = "ExactCount"
            if r["allocationMode"] == "ExactCount" and not r.get("count"):
                r["count"] = 1
            for t in r.get("tolerations", []):
                if not t.get("operator"):
                    t["operator"] = "Equal"


class ClaimValidator:
    """validation.ValidateResourceClaim / ...Update / ...StatusUpdate of Kubernetes 1.36, minus
    CEL compilation and the admin-access namespace label check."""

    @staticmethod
    def request_names(spec):
        """{request name: {subrequest names}} of a claim spec."""
        names = {}
        for r in spec.get("devices", {}).get("requests", []):
            names.setdefault(r.get("name", ""), set()).update(
                s.get("name", "") for s in r.get("firstAvailable", []))
        return names

    def validate_create(self, obj):
        errs = validate_object_meta(obj.get("metadata", {}), namespaced=True)
        return errs + self.validate_spec(obj["spec"], "spec")

    def validate_update(self, obj, old):
        errs = validate_object_meta(obj.get("metadata", {}), namespaced=True)
        if obj["spec"] != old["spec"]:
            errs.append(f_invalid("spec", obj["spec"], "field is immutable"))
        return errs

    def validate_request_common(self, r, path):
        """deviceClassName, selectors, allocationMode/count, tolerations, capacity."""
        errs = []
        cls = r.get("deviceClassName", "")
        if not cls:
            errs.append(f_required(child(path, "deviceClassName")))
        else:
            errs.extend(f_invalid(child(path, "deviceClassName"), cls, m)
                        for m in is_dns1123_subdomain(cls))
        errs.extend(validate_selectors(r.get("selectors", []), child(path, "selectors")))
        mode = r.get("allocationMode", "")
        count = r.get("count", 0)
        if mode == "ExactCount":
            if count <= 0:
                errs.append(f_invalid(child(path, "count"), count, "must be greater than zero"))
        elif mode == "All":
            if count != 0:
                errs.append(f_invalid(child(path, "count"), count,
                                      "must not be specified when allocationMode is 'All'"))
        else:
            errs.append(f_not_supported(child(path, "allocationMode"), mode, ALLOCATION_MODES))
        errs.extend(validate_tolerations(r.get("tolerations", []), child(path, "tolerations")))
        if "capacity" in r:
            errs.extend(validate_capacity_requests(r["capacity"], child(path, "capacity")))
        return errs

    def validate_spec(self, spec, path):
        errs = []
        devices = spec.get("devices", {})
        dp = child(path, "devices")
        requests = devices.get("requests", [])
        rp = child(dp, "requests")
        names = self.request_names(spec)
        if len(requests) > MAX_REQUESTS:
            errs.append(f_too_many(rp, len(requests), MAX_REQUESTS))
        else:
            seen = set()
            for i, req in enumerate(requests):
                p = index(rp, i)
                name = req.get("name", "")
                errs.extend(validate_dns_label(name, child(p, "name")))
                if name in seen:
                    errs.append(f_duplicate(child(p, "name"), name))
                seen.add(name)
                exactly = req.get("exactly")
                first = req.get("firstAvailable")
                if exactly is None and not first:
                    errs.append(f_required(p, "exactly one of `exactly` or `firstAvailable` is "
                                           "required"))
                elif exactly is not None and first:
                    errs.append(f_invalid(p, None, "exactly one of `exactly` or "
                                          "`firstAvailable` is required, but multiple fields "
                                          "are set"))
                elif exactly is not None:
                    errs.extend(self.validate_request_common(exactly, child(p, "exactly")))
                else:
                    fp = child(p, "firstAvailable")
                    if len(first) > MAX_SUBREQUESTS:
                        errs.append(f_too_many(fp, len(first), MAX_SUBREQUESTS))
                        continue
                    sub_seen = set()
                    for j, sub in enumerate(first):
                        sp = index(fp, j)
                        sub_name = sub.get("name", "")
                        errs.extend(validate_dns_label(sub_name, child(sp, "name")))
                        if sub_name in sub_seen:
                            errs.append(f_duplicate(child(sp, "name"), sub_name))
                        sub_seen.add(sub_name)
                        errs.extend(self.validate_request_common(sub, sp))

        constraints = devices.get("constraints", [])
        cp = child(dp, "constraints")
        if len(constraints) > MAX_CONSTRAINTS:
            errs.append(f_too_many(cp, len(constraints), MAX_CONSTRAINTS))
        else:
            for i, c in enumerate(constraints):
                p = index(cp, i)
                errs.extend(validate_request_refs(c.get("requests", []), child(p, "requests"),
                                                  names))
                match, distinct = c.get("matchAttribute"), c.get("distinctAttribute")
                if match is None and distinct is None:
                    errs.append(f_required(p, "exactly one of `matchAttribute` or "
                                           "`distinctAttribute` is required"))
                elif match is not None and distinct is not None:
                    errs.append(f_invalid(p, None, "exactly one of `matchAttribute` or "
                                          "`distinctAttribute` is required, but multiple fields "
                                          "are set"))
                elif match is not None:
                    errs.extend(validate_fully_qualified_name(match, child(p, "matchAttribute")))
                else:
                    errs.extend(validate_fully_qualified_name(distinct,
                                                              child(p, "distinctAttribute")))

        configs = devices.get("config", [])
        gp = child(dp, "config")
        if len(configs) > MAX_CONFIGS:
            errs.append(f_too_many(gp, len(configs), MAX_CONFIGS))
        else:
            for i, c in enumerate(configs):
                p = index(gp, i)
                errs.extend(validate_request_refs(c.get("requests", []), child(p, "requests"),
                                                  names))
                errs.extend(validate_config_entry(c, p))
        return errs

    def validate_status_update(self, obj, old):
        errs = validate_object_meta(obj.get("metadata", {}), namespaced=True)
        status = obj.get("status", {})
        old_status = old.get("status", {})
        names = self.request_names(obj["spec"])
        allocation = status.get("allocation")
        old_allocation = old_status.get("allocation")
        if allocation is not None:
            if old_allocation is not None:
                if allocation != old_allocation:
                    errs.append(f_invalid("status.allocation", allocation, "field is immutable"))
            else:
                errs.extend(self.validate_allocation(allocation, "status.allocation", names))
        reserved = status.get("reservedFor", [])
        rp = "status.reservedFor"
        if reserved and allocation is None:
            errs.append(f_forbidden(rp, "may not be specified when `allocated` is not set"))
        if len(reserved) > MAX_RESERVED_FOR:
            errs.append(f_too_many(rp, len(reserved), MAX_RESERVED_FOR))
        else:
            seen = set()
            for i, ref in enumerate(reserved):
                p = index(rp, i)
                if ref.get("apiGroup"):
                    errs.extend(f_invalid(child(p, "apiGroup"), ref["apiGroup"], m)
                                for m in is_dns1123_subdomain(ref["apiGroup"]))
                for f in ("resource", "name", "uid"):
                    if not ref.get(f):
                        errs.append(f_required(child(p, f)))
                uid = ref.get("uid", "")
                if uid in seen:
                    errs.append(f_duplicate(p, uid))
                seen.add(uid)
        errs.extend(self.validate_device_statuses(status.get("devices", []), allocation))
        return errs

    def validate_allocation(self, allocation, path, names):
        errs = []
        devices = allocation.get("devices", {})
        dp = child(path, "devices")
        results = devices.get("results", [])
        rp = child(dp, "results")
        if len(results) > MAX_RESULTS:
            errs.append(f_too_many(rp, len(results), MAX_RESULTS))
        else:
            for i, r in enumerate(results):
                errs.extend(self.validate_result(r, index(rp, i), names))
        configs = devices.get("config", [])
        cp = child(dp, "config")
        if len(configs) > MAX_ALLOCATION_CONFIGS:
            errs.append(f_too_many(cp, len(configs), MAX_ALLOCATION_CONFIGS))
        else:
            for i, c in enumerate(configs):
                p = index(cp, i)
                source = c.get("source", "")
                if not source:
                    errs.append(f_required(child(p, "source")))
                elif source not in CONFIG_SOURCES:
                    errs.append(f_not_supported(child(p, "source"), source, CONFIG_SOURCES))
                errs.extend(validate_request_refs(c.get("requests", []), child(p, "requests"),
                                                  names))
                errs.extend(validate_config_entry(c, p))
        if "nodeSelector" in allocation:
            errs.extend(validate_node_selector(allocation["nodeSelector"],
                                               child(path, "nodeSelector")))
        return errs

    def validate_result(self, r, path, names):
        errs = []
        request = r.get("request", "")
        if not request:
            errs.append(f_required(child(path, "request")))
        else:
            errs.extend(validate_request_ref(request, child(path, "request"), names))
        errs.extend(validate_driver_name(r.get("driver", ""), child(path, "driver")))
        errs.extend(validate_pool_name(r.get("pool", ""), child(path, "pool")))
        errs.extend(validate_dns_label(r.get("device", ""), child(path, "device")))
        if "shareID" in r:
            errs.extend(validate_uuid(r["shareID"], child(path, "shareID")))
        errs.extend(validate_tolerations(r.get("tolerations", []), child(path, "tolerations")))
        for field in ("bindingConditions", "bindingFailureConditions"):
            items = r.get(field, [])
            p = child(path, field)
            if len(items) > MAX_BINDING_CONDITIONS:
                errs.append(f_too_many(p, len(items), MAX_BINDING_CONDITIONS))
                continue
            for i, c in enumerate(items):
                errs.extend(f_invalid(index(p, i), c, m) for m in is_qualified_name(c))
        for name in r.get("consumedCapacity", {}):
            errs.extend(validate_qualified_key(name, child(path, "consumedCapacity")))
        return errs

    def validate_device_statuses(self, statuses, allocation):
        errs = []
        allocated = set()
        if allocation is not None:
            for r in allocation.get("devices", {}).get("results", []):
                allocated.add((r.get("driver", ""), r.get("pool", ""), r.get("device", ""),
                               r.get("shareID", "")))
        seen = set()
        for i, d in enumerate(statuses):
            p = index("status.devices", i)
            errs.extend(validate_driver_name(d.get("driver", ""), child(p, "driver")))
            errs.extend(validate_pool_name(d.get("pool", ""), child(p, "pool")))
            errs.extend(validate_dns_label(d.get("device", ""), child(p, "device")))
            if "shareID" in d:
                errs.extend(validate_uuid(d["shareID"], child(p, "shareID")))
            k = (d.get("driver", ""), d.get("pool", ""), d.get("device", ""),
                 d.get("shareID", ""))
            if k in seen:
                errs.append(f_duplicate(p, "/".join(x for x in k if x)))
            elif k not in allocated:
                errs.append(f_invalid(p, "/".join(x for x in k if x),
                                      "must be an allocated device in the claim"))
            seen.add(k)
            errs.extend(validate_conditions(d.get("conditions", []), child(p, "conditions")))
            errs.extend(validate_raw_object(d, "data", child(p, "data"), MAX_DEVICE_STATUS_DATA,
                                            required=False))
            if "networkData" in d:
                errs.extend(validate_network_data(d["networkData"], child(p, "networkData")))
        return errs


def validate_extended_resource_name(name, path):
    """v1helper.IsExtendedResourceName: domain-prefixed, not kubernetes.io, and valid as a
    quota key `requests.<name>`."""
    native = "/" not in name or "kubernetes.io/" in name
    if native or name.startswith("requests.") or is_qualified_name("requests." + name):
        return [f_invalid(path, name, "must be a valid extended resource name")]
    return []


class DeviceClassValidator:
    def validate_create(self, obj):
        errs = validate_object_meta(obj.get("metadata", {}), namespaced=False)
        return errs + self.validate_spec(obj["spec"])

    def validate_update(self, obj, old):
        return self.validate_create(obj)  # a DeviceClass spec is mutable

    @staticmethod
    def validate_spec(spec):
        errs = validate_selectors(spec.get("selectors", []), "spec.selectors")
        configs = spec.get("config", [])
        if len(configs) > MAX_CONFIGS:
            errs.append(f_too_many("spec.config", len(configs), MAX_CONFIGS))
        else:
            for i, c in enumerate(configs):
                errs.extend(validate_config_entry(c, index("spec.config", i)))
        if "extendedResourceName" in spec:
            errs.extend(validate_extended_resource_name(spec["extendedResourceName"],
                                                        "spec.extendedResourceName"))
        return errs


def make_resourceclaim_type(cfg):
    validator = ClaimValidator()
    return ResourceType(
        RESOURCE_GROUP, cfg.versions, "resourceclaims", "resourceclaim", "ResourceClaim",
        namespaced=True,
        verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update",
               "watch"),
        schema=resourceclaim_schema(),
        validate_create=validator.validate_create,
        validate_update=validator.validate_update,
        prepare=prepare_resourceclaim,
        table=RESOURCECLAIM_TABLE,
        status_subresource=True,
        validate_status_update=validator.validate_status_update)


def make_deviceclass_type(cfg):
    validator = DeviceClassValidator()
    return ResourceType(
        RESOURCE_GROUP, cfg.versions, "deviceclasses", "deviceclass", "DeviceClass",
        namespaced=False,
        # The real server's verbs: `kubectl apply` of a changed class patches it.
        verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update",
               "watch"),
        schema=deviceclass_schema(),
        validate_create=validator.validate_create,
        validate_update=validator.validate_update,
        table=NAME_AGE_TABLE)


def make_resourceclaimtemplate_type(cfg):
    """ResourceClaimTemplates: spec.spec is a ResourceClaim spec (same defaults and
    validation), spec.metadata the generated claim's labels and annotations; spec is
    immutable."""
    claim = resourceclaim_schema()
    schema = Obj({"apiVersion": STR, "kind": STR, "metadata": METADATA_SCHEMA,
                  "spec": Obj({"metadata": METADATA_SCHEMA, "spec": claim.fields["spec"]},
                              zero=("spec",))},
                 zero=("spec",))
    validator = ClaimValidator()

    def validate_create(obj):
        errs = validate_object_meta(obj.get("metadata", {}), namespaced=True)
        return errs + validator.validate_spec(obj["spec"].get("spec", {}), "spec.spec")

    def validate_update(obj, old):
        errs = validate_object_meta(obj.get("metadata", {}), namespaced=True)
        if obj["spec"] != old["spec"]:
            errs.append(f_invalid("spec", obj["spec"], "field is immutable"))
        return errs

    def prepare(obj, old):
        prepare_resourceclaim({"spec": obj.get("spec", {}).get("spec", {})}, None)

    return ResourceType(
        RESOURCE_GROUP, cfg.versions, "resourceclaimtemplates", "resourceclaimtemplate",
        "ResourceClaimTemplate", namespaced=True,
        verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update",
               "watch"),
        schema=schema, validate_create=validate_create, validate_update=validate_update,
        prepare=prepare, table=NAME_AGE_TABLE, empty_status=False)
