#!/usr/bin/python3
"""A fake Kubernetes API server for topodra's tests (standard library only; --crd needs PyYAML).

It serves on 127.0.0.1, in every configured resource.k8s.io version (v1 and v1beta2 share one
JSON shape):
  * ResourceSlices (cluster-scoped; all verbs),
  * ResourceClaims (namespaced; all verbs, plus GET/PUT/PATCH of the /status subresource;
    also listed and watched across namespaces at /apis/resource.k8s.io/<v>/resourceclaims),
  * DeviceClasses (cluster-scoped; create, get, list, watch, update, delete),
  * ResourceClaimTemplates (namespaced; all verbs; spec.spec validated and defaulted as a
    claim spec, spec immutable),
  * Nodes (read-only, from --node flags),
  * Pods and Events (core v1, namespaced, all verbs; schemaless: stored as sent, only metadata
    validated; there so that `kubectl apply` of the chart's examples and `kubectl describe`
    work; Events take the real field selectors involvedObject.*, reason, source, type, ...),
  * custom resources of the CustomResourceDefinitions in --crd files (all verbs, see below),
and enforces the rules of the real API that a node driver runs into: the schemas and validation
limits of Kubernetes 1.36, resourceVersion conflicts, delete preconditions, watch with bookmarks
and 410 Expired, field and label selectors, dry-run, strict field validation, quantity
canonicalisation, TLS with a bearer token. Tests talk to it over HTTP(S) and steer it through
/__control/* endpoints (request log, reset, error injection, closing watches).

ResourceClaims behave like a 1.34+ server: create assigns uid, resourceVersion,
creationTimestamp and generation 1, defaults allocationMode (ExactCount), count (1) and toleration
operators (Equal), and drops any status; spec is immutable (422 "field is immutable"); an update
of the main resource keeps the stored status; PUT/PATCH of /status changes only the status
(spec/metadata changes in the body are ignored; a stale resourceVersion is a 409 Conflict).
status.allocation may be set when absent, never changed once set, and removed only together
with reservedFor. Limits checked (422 Invalid with field paths): requests <=32 with unique
DNS-label names and exactly one of exactly/firstAvailable, deviceClassName, allocationMode and
count, selectors <=32, tolerations <=16, firstAvailable <=8 with unique names (no adminAccess
field), constraints <=32, config <=32 whose requests name existing requests (`<main>` or
`<main>/<sub>`), opaque.driver a driver name and opaque.parameters a JSON object of at most
10 KiB; in status: results <=32 naming existing requests/subrequests with valid driver, pool and
device names, allocation config <=64 with source FromClass|FromClaim, reservedFor <=256 unique by
uid, status.devices entries matching an allocation result by (driver, pool, device, shareID),
with data a JSON object <=10 KiB, conditions <=8 and valid networkData. Field selectors:
metadata.name and metadata.namespace. Namespaces are implicit: any DNS-label namespace exists
(no Namespace objects), any other name in a namespaced path is 404.

The object store is generic: a ResourceType describes a resource (paths, schema of known fields,
field selectors, validation, an optional /status subresource), and all types share one
resourceVersion counter and event history.

For kubectl (`get`, `describe`, `apply`, `explain`, as an operator uses them):
  * GET of a list or object with Accept application/json;as=Table;v=v1 (or v1beta1);
    g=meta.k8s.io answers a meta.k8s.io Table (includeObject None, Metadata (default) or
    Object): ResourceSlices with the real printer's NAME, NODE, DRIVER, POOL, AGE,
    ResourceClaims NAME, STATE, AGE, ResourceClaimTemplates and DeviceClasses NAME, AGE, Nodes
    NAME, STATUS, ROLES, AGE, VERSION, Pods NAME, READY, STATUS, RESTARTS, AGE (+ IP, NODE,
    NOMINATED NODE, READINESS GATES at priority 1), Events LAST SEEN, TYPE, REASON, OBJECT,
    MESSAGE, custom resources Name plus their additionalPrinterColumns (simple JSONPaths such
    as .status.phase or .spec.items[0].name; type string cells print maps and lists as JSON,
    date cells are ages; no columns: Age), ages as apimachinery's HumanDuration. An Accept
    naming only other representations (PartialObjectMetadata, protobuf, YAML) is 406.
  * /openapi/v3 lists a document per served group version (serverRelativeURL with a content
    hash); each document has every path and operation with x-kubernetes-group-version-kind and
    its query parameters, fieldValidation among them: kubectl then leaves validation to the
    server (fieldValidation=Strict) instead of downloading /openapi/v2. Schemas: custom
    resources only (their openAPIV3Schema); built-in kinds have none, so kubectl computes
    strategic merge patches from its compiled-in types, with the real patch strategies.

Custom resources (--crd FILE, repeatable; apiextensions.k8s.io/v1 CustomResourceDefinitions in
YAML) are served in every served version of their group, Cluster or Namespaced, with discovery
(/apis, /apis/<group>, /apis/<group>/<version>, shortNames, categories) and every verb
(create, get, list, watch, update, patch, delete, deletecollection), like a 1.36 server:
  * decoding prunes unknown fields (Warning header with fieldValidation Warn, the default; 400
    with Strict; silently with Ignore) and non-nullable nulls, then applies `default`s, then
    validates the structural openAPIV3Schema of the request's version: type, properties,
    required, additionalProperties (a schema), items, enum, pattern (RE2 subset), min/maxLength,
    minimum/maximum (exclusive too), multipleOf, min/maxItems, min/maxProperties, nullable,
    format date-time, x-kubernetes-preserve-unknown-fields, x-kubernetes-list-type set/map
    (unique items/keys) and the metadata.name/generateName restrictions; errors are 422 Invalid
    with kube-openapi's messages (type errors are 422 here, not 400);
  * x-kubernetes-validations rules in a CEL subset: has(self.f), !, &&, ||, ==, != and
    parentheses over self/oldSelf field paths (deep, typed equality such as self == oldSelf),
    type-checked against the schema at start; transition rules (oldSelf) run on updates when
    the old object has the node (object fields and map values correlate by name, list items
    only in list-type map lists); message, reason and a .a.b fieldPath are honoured; after a
    blocking schema error (type, required, enum, too long, too many) rules are not evaluated;
  * with a status subresource, create drops status (absent, not {}), updates of the main
    resource keep the stored status and /status writes change only status; metadata.generation
    is 1 on create and grows with every change outside metadata (and status, when that is a
    subresource); stale resourceVersions are 409; watch, bookmarks and 410 as for all types;
  * field selectors: metadata.name, metadata.namespace (namespaced only) and the version's
    selectableFields; anything else is a 400.
A CRD using anything not listed here (another schema keyword or format, a rule outside the CEL
subset, messageExpression, optionalOldSelf, conversion webhooks, the scale subresource,
deprecated versions) fails the start with an error naming the place, so nothing in it is
silently ignored.

Control endpoints (no auth; also on the --control-port-file listener):
  GET    /__control/requests       [{method, path, query, code}] of API requests since start
  DELETE /__control/requests       forget that list
  GET    /__control/state          {resourceVersion, oldestWatchableResourceVersion,
                                    openWatches, objects}
  POST   /__control/reset          forget all objects (flag-configured Nodes come back), bump the
                                   resourceVersion; open and resumed watches get 410 Expired
  POST   /__control/fail?count=N&code=503[&method=PUT][&path=SUBSTRING][&retryAfter=S]
                                   answer the next N matching API requests with that code
  POST   /__control/close-watches  end every open watch stream
  POST   /__control/hang?path=SUBSTRING[&method=GET][&seconds=S][&count=N]
                                   hold the API requests whose path contains SUBSTRING for S
                                   seconds (default 3600) before serving them as usual, the first
                                   N of them (default all); a held request whose client goes
                                   away is dropped. Rules are tried in the order added.
  GET    /__control/hang           the rules: [{method, path, seconds, count (left, -1 for all),
                                   matched (requests held so far), waiting (held now)}]
  DELETE /__control/hang           forget the rules; held requests are served at once
  GET    /healthz (/readyz, /livez) "ok"

Where it differs from a real 1.36 API server on purpose or by omission:
  * PUT without metadata.resourceVersion is a 409 Conflict unless --unconditional-update allow
    (the real server accepts it for ResourceSlices, ResourceClaims and DeviceClasses).
  * Malformed quantities and JSON type mismatches are 400 BadRequest (decode errors), as on the
    real server, not 422.
  * No server-side apply (415); strategic merge patch is handled as a JSON merge patch, and one
    carrying a directive ($setElementOrder/..., $patch, $retainKeys, $deleteFromPrimitiveList/
    ...; kubectl apply sends them for a changed Pod container) is a 415 naming the directive
    rather than stored as a field. Client-side `kubectl apply` works (create, unchanged,
    configured through merge patches, the last-applied annotation).
  * kubectl support left out: aggregated discovery (clients fall back to /api, /apis and one
    request per group version), /openapi/v2 (406/404), schemas of built-in kinds in
    /openapi/v3 (`kubectl explain` works for custom resources only), Tables on watch (a watch
    streams plain objects even when a Table is asked for: `kubectl get -w` prints no rows),
    Namespace objects (namespaces are implicit; kubectl's GET of one after a 404 is 404 and
    harmless), the real printers' details for Pods (init containers, sidecars, readiness
    gates) and Nodes (roles from labels), the aggregated Event series.
  * list ignores resourceVersion/resourceVersionMatch (always the current state; a future
    resourceVersion is 504); continue tokens are snapshots kept in memory.
  * No protobuf, no YAML bodies, no managedFields, no admission (RBAC, ValidatingAdmissionPolicy).
  * Each ResourceSlice is validated alone, as by the real server, which stores a device (or
    shared counter set) name that another slice of the same pool and generation already uses;
    the scheduler then ignores the whole pool. --pool-checks reject refuses such a write with
    422 Invalid naming the other slice.
  * Gated fields at their 1.36 defaults: list attributes, nodeAllocatableResources,
    partitionTypeAttribute and skipNodeOperations are known but silently dropped; device
    taints are accepted unless --device-taints drop (DRADeviceTaints off).
  * Custom resources: no conversion between versions other than apiVersion (strategy None), no
    validation ratcheting (the schema never changes here, so stored objects are valid), no CEL
    cost limits, no scale subresource;
    map values are reported as .key in schema errors and [key] in rule errors.
  * ResourceClaims/DeviceClasses: CEL selectors are checked for presence and length only (not
    compiled, no cost limit); adminAccess is allowed in every namespace (the real server wants
    the namespace label resource.kubernetes.io/admin-access=true); no admission (no
    DeviceClass lookup, no node or driver authorization of status writes, no
    resourceclaims/binding); status.allocation is compared as stored JSON; no
    server-side-apply list-map merging of status.devices. DeviceClasses have no patch and no
    deletecollection here. Empty lists are kept instead of omitted.

Run with /usr/bin/python3 fake_apiserver.py --help.
"""

import argparse
import base64
import collections
import datetime
import fractions
import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import select
import socket
import ssl
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY_BYTES = 3 * 1024 * 1024
MAX_DRAINED_BYTES = 64 * 1024 * 1024  # an oversized body is read and dropped up to this size
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSIONS = ("v1", "v1beta2")  # v1beta1 has a different JSON shape; not served

# ---------------------------------------------------------------------------------------------
# Errors (v1 Status) and field errors (Status.details.causes)
# ---------------------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answered with a v1 Status body."""

    def __init__(self, code, reason, message, details=None, headers=()):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self.headers = list(headers)

    def body(self):
        return status_object(self.code, self.reason, self.message, self.details)


def status_object(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message}
    if reason:
        body["reason"] = reason
    body["code"] = code
    body["details"] = details or {}
    return body


def bad_request(message, causes=None):
    details = {"causes": causes} if causes else None
    return ApiError(400, "BadRequest", message, details)


def not_found_path():
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource")


def _value_repr(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, str)):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True)


class FieldError:
    """One field.Error of apimachinery: a path, a type and a detail."""

    REASONS = {
        "Invalid": "FieldValueInvalid", "Required": "FieldValueRequired",
        "Duplicate": "FieldValueDuplicate", "TooMany": "FieldValueTooMany",
        "TooLong": "FieldValueTooLong", "Forbidden": "FieldValueForbidden",
        "NotSupported": "FieldValueNotSupported", "NotFound": "FieldValueNotFound",
        "TypeInvalid": "FieldValueTypeInvalid",
    }

    def __init__(self, kind, field, value=None, detail="", limit=None, supported=()):
        self.kind = kind
        self.field = field
        self.value = value
        self.detail = detail
        self.limit = limit
        self.supported = supported

    def body(self):
        k = self.kind
        if k in ("Invalid", "TypeInvalid"):
            text = "Invalid value: " + _value_repr(self.value)
            return text + (": " + self.detail if self.detail else "")
        if k == "Required":
            return "Required value" + (": " + self.detail if self.detail else "")
        if k == "Duplicate":
            return "Duplicate value: " + _value_repr(self.value)
        if k == "NotFound":
            return "Not found: " + _value_repr(self.value)
        if k == "NotSupported":
            text = "Unsupported value: " + _value_repr(self.value)
            if self.supported:
                text += ": supported values: " + ", ".join(json.dumps(s) for s in self.supported)
            return text
        if k == "Forbidden":
            return "Forbidden: " + self.detail
        if k == "TooLong":
            return "Too long: may not be more than %d bytes" % self.limit
        if k == "TooMany":
            return "Too many: %d: must have at most %d items" % (self.value, self.limit)
        return self.detail

    def cause(self):
        return {"reason": self.REASONS[self.kind], "message": self.body(), "field": self.field}

    def __str__(self):
        return "%s: %s" % (self.field, self.body())


def f_invalid(path, value, detail):
    return FieldError("Invalid", path, value, detail)


def f_type_invalid(path, value, detail):
    return FieldError("TypeInvalid", path, value, detail)


def f_required(path, detail=""):
    return FieldError("Required", path, detail=detail)


def f_forbidden(path, detail):
    return FieldError("Forbidden", path, detail=detail)


def f_too_many(path, actual, limit):
    return FieldError("TooMany", path, actual, limit=limit)


def f_too_long(path, limit):
    return FieldError("TooLong", path, limit=limit)


def f_duplicate(path, value):
    return FieldError("Duplicate", path, value)


def f_not_found(path, value):
    return FieldError("NotFound", path, value)


def f_not_supported(path, value, supported):
    return FieldError("NotSupported", path, value, supported=supported)


def child(path, name):
    return path + "." + name if path else name


def index(path, i):
    return "%s[%d]" % (path, i)


def key(path, k):
    return "%s[%s]" % (path, k)


# ---------------------------------------------------------------------------------------------
# Name formats (apimachinery util/validation)
# ---------------------------------------------------------------------------------------------

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = _DNS_LABEL + r"(\." + _DNS_LABEL + r")*"
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_DNS_SUBDOMAIN_RE = re.compile(_DNS_SUBDOMAIN)
_QUALIFIED_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_C_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SEMVER_RE = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?")

_MSG_DNS_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                  "or '-', and must start and end with an alphanumeric character (e.g. 'my-name',"
                  "  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_MSG_DNS_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                      "characters, '-' or '.', and must start and end with an alphanumeric "
                      "character (e.g. 'example.com', regex used for validation is "
                      "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_MSG_QUALIFIED = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                  "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
                  "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?"
                  "[A-Za-z0-9]')")
_MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
                    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
_MSG_C_IDENTIFIER = ("a valid C identifier must start with alphabetic character or '_', followed "
                     "by a string of alphanumeric characters or '_' (e.g. 'my_name',  or "
                     "'MY_NAME',  or 'MyName', regex used for validation is "
                     "'[A-Za-z_][A-Za-z0-9_]*')")


def is_dns1123_label(v):
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS_LABEL_RE.fullmatch(v):
        errs.append(_MSG_DNS_LABEL)
    return errs


def is_dns1123_subdomain(v):
    errs = []
    if len(v) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS_SUBDOMAIN_RE.fullmatch(v):
        errs.append(_MSG_DNS_SUBDOMAIN)
    return errs


def is_qualified_name(v):
    errs = []
    parts = v.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return ["a qualified name " + _MSG_QUALIFIED + " with an optional DNS subdomain prefix "
                "and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append("name part " + _MSG_QUALIFIED)
    return errs


def is_label_value(v):
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.fullmatch(v):
        errs.append(_MSG_LABEL_VALUE)
    return errs


def validate_driver_name(v, path):
    """corevalidation.ValidateCSIDriverName: <=63, a DNS subdomain after lower-casing."""
    errs = []
    if not v:
        errs.append(f_required(path))
    if len(v) > 63:
        errs.append(f_too_long(path, 63))
    errs.extend(f_invalid(path, v, m) for m in is_dns1123_subdomain(v.lower()))
    return errs


def validate_pool_name(v, path):
    if not v:
        return [f_required(path)]
    errs = []
    if len(v) > 253:
        errs.append(f_too_long(path, 253))
    for part in v.split("/"):
        errs.extend(f_invalid(path, part, m) for m in is_dns1123_subdomain(part))
    return errs


def validate_c_identifier(v, path):
    errs = []
    if len(v) > 32:
        errs.append(f_too_long(path, 32))
    if not _C_IDENTIFIER_RE.fullmatch(v):
        errs.append(f_invalid(path, v, _MSG_C_IDENTIFIER))
    return errs


def validate_qualified_key(name, path):
    """A device attribute/capacity name: C identifier or <driver-like domain>/<C identifier>.
    Like validateQualifiedName of 1.36, a name with a second '/' is not checked at all
    (k8s-api-cdi.md §1.7)."""
    if not name:
        return [f_required(path, "name required")]
    parts = name.split("/")
    if len(parts) == 1:
        return validate_c_identifier(parts[0], path)
    if len(parts) == 2:
        errs = []
        if not parts[0]:
            errs.append(f_required(path, "the domain must not be empty"))
        else:
            errs.extend(validate_driver_name(parts[0], path))
        if not parts[1]:
            errs.append(f_required(path, "the name must not be empty"))
        else:
            errs.extend(validate_c_identifier(parts[1], path))
        return errs
    return []


# ---------------------------------------------------------------------------------------------
# Quantities (apimachinery api/resource): parse, then render in canonical form like the server
# ---------------------------------------------------------------------------------------------

_QUANTITY_RE = re.compile(r"([+-]?)([0-9]+\.?[0-9]*|\.[0-9]+)(.*)", re.S)
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
                     "E": 18}
_BINARY_NAMES = {0: "", **{v: k for k, v in _BINARY_SUFFIXES.items()}}
_DECIMAL_NAMES = {v: k for k, v in _DECIMAL_SUFFIXES.items()}
_MSG_QUANTITY_FORMAT = ("quantities must match the regular expression "
                        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")


class Quantity:
    __slots__ = ("value", "fmt")

    def __init__(self, value, fmt):
        self.value = value  # fractions.Fraction, rounded up to nano precision
        self.fmt = fmt  # "BinarySI", "DecimalSI" or "DecimalExponent"

    def canonical(self):
        v, fmt = self.value, self.fmt
        if v == 0:
            return "0"
        if fmt == "BinarySI":
            if -1024 < v < 1024 or v.denominator != 1:
                fmt = "DecimalSI"
            else:
                n = abs(v.numerator)
                exp = 0
                while n % 1024 == 0 and exp < 6:
                    n //= 1024
                    exp += 1
                return ("-" if v < 0 else "") + str(n) + _BINARY_NAMES[exp]
        mantissa = int(v * 10**9)  # exact: values are rounded to nano precision when parsed
        exp = -9
        while mantissa % 10 == 0:
            mantissa //= 10
            exp += 1
        shift = exp % 3
        mantissa *= 10**shift
        exp -= shift
        if fmt == "DecimalExponent":
            return str(mantissa) + ("e%d" % exp if exp else "")
        if exp > 18:
            mantissa *= 10**(exp - 18)
            exp = 18
        return str(mantissa) + _DECIMAL_NAMES[exp]

    def as_int(self):
        """Quantity.Value(): rounded up to an integer."""
        v = self.value
        return -((-v.numerator) // v.denominator)


def parse_quantity(text):
    """resource.ParseQuantity; raises ValueError with the apimachinery message."""
    text = text.strip()
    if not text or len(text) > 1024:
        raise ValueError(_MSG_QUANTITY_FORMAT)
    m = _QUANTITY_RE.fullmatch(text)
    if not m:
        raise ValueError(_MSG_QUANTITY_FORMAT)
    sign, number, suffix = m.groups()
    try:
        value = fractions.Fraction(number if not number.endswith(".") else number[:-1])
    except (ValueError, ZeroDivisionError):
        raise ValueError("unable to parse numeric part of quantity")
    if suffix in _BINARY_SUFFIXES:
        fmt = "BinarySI"
        value *= 1024**_BINARY_SUFFIXES[suffix]
    elif suffix in _DECIMAL_SUFFIXES:
        fmt = "DecimalSI"
        value *= fractions.Fraction(10)**_DECIMAL_SUFFIXES[suffix]
    elif suffix[:1] in ("e", "E") and re.fullmatch(r"[eE][+-]?[0-9]+", suffix):
        exp = int(suffix[1:])
        if abs(exp) > 1000:
            raise ValueError("unable to parse quantity's suffix")
        fmt = "DecimalExponent"
        value *= fractions.Fraction(10)**exp
    else:
        raise ValueError("unable to parse quantity's suffix")
    if sign == "-":
        value = -value
    nanos = value * 10**9
    if nanos.denominator != 1:  # round away from zero to nano precision, like the server
        whole = abs(nanos.numerator) // nanos.denominator + 1
        value = fractions.Fraction(whole if nanos > 0 else -whole, 10**9)
    return Quantity(value, fmt)


# ---------------------------------------------------------------------------------------------
# Schemas of known fields; decoding with unknown/duplicate field detection and type checks
# ---------------------------------------------------------------------------------------------


class Scalar:
    def __init__(self, name, go_type):
        self.name = name
        self.go_type = go_type


STR = Scalar("string", "string")
INT = Scalar("int", "int64")
BOOL = Scalar("bool", "bool")
QTY = Scalar("quantity", "resource.Quantity")
TIME = Scalar("time", "v1.Time")
ANY = Scalar("any", "interface {}")


class Obj:
    """A struct: known fields; `dropped` are known but behind a disabled feature gate (silently
    removed, as the server's dropDisabledFields does); `zero` are fields without omitempty that
    the server always renders (filled with their zero value when absent)."""

    def __init__(self, fields, dropped=(), zero=(), go_type="struct"):
        self.fields = dict(fields)
        self.dropped = frozenset(dropped)
        self.zero = tuple(zero)
        self.go_type = go_type


class MapOf:
    def __init__(self, value):
        self.value = value
        self.go_type = "map[string]"


class ListOf:
    def __init__(self, item):
        self.item = item
        self.go_type = "[]"


class _JsonObject(dict):
    """A JSON object that remembers keys which occurred more than once."""
    __slots__ = ("dups",)


def _pairs_hook(pairs):
    obj = _JsonObject()
    dups = []
    for k, v in pairs:
        if k in obj:
            dups.append(k)
        obj[k] = v  # the last occurrence wins, as in Go
    obj.dups = dups
    return obj


def _reject_constant(name):
    raise ValueError("invalid JSON literal %s" % name)


def parse_json(data):
    """Parses a request body; raises ValueError on malformed JSON."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError("invalid UTF-8: %s" % e)
    try:
        return json.loads(text, object_pairs_hook=_pairs_hook, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply")


def _json_type(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


class DecodeError(Exception):
    pass


_TIME_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
                      r"([Zz]|[+-]\d{2}:\d{2})")


def format_time(dt):
    return dt.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339():
    return format_time(datetime.datetime.now(datetime.timezone.utc))


def parse_time(text):
    m = _TIME_RE.fullmatch(text)
    if not m:
        raise ValueError("parsing time %s as \"2006-01-02T15:04:05Z07:00\"" % json.dumps(text))
    try:
        tz = m.group(8)
        if tz in ("Z", "z"):
            tzinfo = datetime.timezone.utc
        else:
            sign = 1 if tz[0] == "+" else -1
            tzinfo = datetime.timezone(sign * datetime.timedelta(hours=int(tz[1:3]),
                                                                 minutes=int(tz[4:6])))
        return datetime.datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)),
                                 int(m.group(4)), int(m.group(5)), int(m.group(6)),
                                 tzinfo=tzinfo)
    except ValueError as e:
        raise ValueError("parsing time %s: %s" % (json.dumps(text), e))


class Decoder:
    """Walks a JSON value along a schema: drops unknown and gated fields, checks JSON types like
    Go's decoder (type mismatches are errors), canonicalises quantities and times."""

    def __init__(self):
        self.unknown = []
        self.duplicates = []

    def _type_error(self, value, schema, path):
        go_type = schema.go_type
        raise DecodeError("json: cannot unmarshal %s into Go struct field .%s of type %s"
                          % (_json_type(value), path, go_type))

    def zero_of(self, schema):
        if schema is STR:
            return ""
        if schema is INT:
            return 0
        if schema is BOOL:
            return False
        if schema is QTY:
            return "0"
        if isinstance(schema, Obj):
            return {f: self.zero_of(schema.fields[f]) for f in schema.zero}
        return None

    def decode(self, value, schema, path):
        if value is None:
            return self.zero_of(schema)
        if isinstance(schema, Obj):
            if not isinstance(value, dict):
                self._type_error(value, schema, path)
            for d in getattr(value, "dups", ()):
                self.duplicates.append(child(path, d))
            out = {}
            for k, v in value.items():
                sub = schema.fields.get(k)
                if sub is None:
                    self.unknown.append(child(path, k))
                    continue
                if k in schema.dropped or v is None:
                    continue
                out[k] = self.decode(v, sub, child(path, k))
            for k in schema.zero:
                if k not in out:
                    out[k] = self.zero_of(schema.fields[k])
            return out
        if isinstance(schema, MapOf):
            if not isinstance(value, dict):
                self._type_error(value, schema, path)
            for d in getattr(value, "dups", ()):
                self.duplicates.append(key(path, d))
            return {k: (self.decode(v, schema.value, key(path, k)) if v is not None
                        else self.zero_of(schema.value)) for k, v in value.items()}
        if isinstance(schema, ListOf):
            if not isinstance(value, list):
                self._type_error(value, schema, path)
            return [self.decode(v, schema.item, index(path, i)) for i, v in enumerate(value)]
        if schema is ANY:
            return value
        if schema is STR:
            if not isinstance(value, str):
                self._type_error(value, schema, path)
            return value
        if schema is BOOL:
            if not isinstance(value, bool):
                self._type_error(value, schema, path)
            return value
        if schema is INT:
            if isinstance(value, bool) or not isinstance(value, int):
                self._type_error(value, schema, path)
            if not INT64_MIN <= value <= INT64_MAX:
                raise DecodeError("json: cannot unmarshal number %d into Go struct field .%s of "
                                  "type int64" % (value, path))
            return value
        if schema is QTY:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                self._type_error(value, schema, path)
            text = value if isinstance(value, str) else json.dumps(value)
            try:
                return parse_quantity(text).canonical()
            except ValueError as e:
                raise DecodeError(str(e))
        if schema is TIME:
            if not isinstance(value, str):
                self._type_error(value, schema, path)
            if value == "":
                return None
            try:
                return format_time(parse_time(value))
            except ValueError as e:
                raise DecodeError(str(e))
        raise AssertionError("unknown schema")


def _prune_none(obj):
    """Removes keys whose decoded value is None (an empty time is like an absent one)."""
    if isinstance(obj, dict):
        return {k: _prune_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_prune_none(v) for v in obj]
    return obj


METADATA_SCHEMA = Obj({
    "name": STR, "generateName": STR, "namespace": STR, "selfLink": STR, "uid": STR,
    "resourceVersion": STR, "generation": INT, "creationTimestamp": TIME,
    "deletionTimestamp": TIME, "deletionGracePeriodSeconds": INT,
    "labels": MapOf(STR), "annotations": MapOf(STR),
    "ownerReferences": ListOf(Obj({"apiVersion": STR, "kind": STR, "name": STR, "uid": STR,
                                   "controller": BOOL, "blockOwnerDeletion": BOOL},
                                  zero=("apiVersion", "kind", "name", "uid"))),
    "finalizers": ListOf(STR), "managedFields": ListOf(ANY),
})

# ---------------------------------------------------------------------------------------------
# Selectors
# ---------------------------------------------------------------------------------------------


def _split_unescaped(text, sep):
    parts, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape_field_value(text):
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in "\\,=":
                raise ValueError("invalid escape sequence in field selector value: %s" % text)
            out.append(text[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_field_selector(text, supported):
    """fields.ParseSelector plus the per-resource label conversion (unknown fields -> 400)."""
    reqs = []
    if not text.strip():
        return reqs
    for term in _split_unescaped(text, ","):
        op_at, op = -1, None
        i = 0
        while i < len(term):
            if term[i] == "\\":
                i += 2
                continue
            for candidate in ("!=", "==", "="):
                if term.startswith(candidate, i):
                    op_at, op = i, candidate
                    break
            if op:
                break
            i += 1
        if not op:
            raise bad_request("invalid selector: '%s'; can't understand '%s'" % (text, term))
        try:
            field = _unescape_field_value(term[:op_at])
            value = _unescape_field_value(term[op_at + len(op):])
        except ValueError as e:
            raise bad_request("invalid selector: '%s'; %s" % (text, e))
        if field not in supported:
            raise bad_request("field label not supported: %s" % field)
        reqs.append((field, op, value))
    return reqs


def match_fields(reqs, fields):
    for field, op, value in reqs:
        equal = fields.get(field, "") == value
        if (op == "!=") == equal:
            return False
    return True


_LABEL_KEY = r"[^\s=!(),]+"
_LABEL_TERM_RES = [
    ("exists", re.compile(r"\s*(!?)\s*(" + _LABEL_KEY + r")\s*")),
    ("compare", re.compile(r"\s*(" + _LABEL_KEY + r")\s*(==|=|!=)\s*([^\s,()=!]*)\s*")),
    ("set", re.compile(r"\s*(" + _LABEL_KEY + r")\s+(in|notin)\s*\(([^()]*)\)\s*")),
]


def parse_label_selector(text):
    reqs = []
    if not text.strip():
        return reqs
    terms, depth, cur = [], 0, []
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if c == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    terms.append("".join(cur))
    for term in terms:
        req = None
        for kind, rx in _LABEL_TERM_RES:
            m = rx.fullmatch(term)
            if not m:
                continue
            if kind == "exists":
                req = (m.group(2), "!" if m.group(1) else "exists", ())
            elif kind == "compare":
                req = (m.group(1), "!=" if m.group(2) == "!=" else "=", (m.group(3),))
            else:
                values = tuple(v.strip() for v in m.group(3).split(",")) if m.group(3).strip() \
                    else ()
                req = (m.group(1), m.group(2), values)
            break
        if req is None:
            raise bad_request("unable to parse requirement: found '%s', expected a label "
                              "selector requirement" % term.strip())
        msgs = is_qualified_name(req[0])
        for v in req[2]:
            msgs += is_label_value(v)
        if msgs:
            raise bad_request("unable to parse requirement: %s: %s" % (term.strip(), msgs[0]))
        reqs.append(req)
    return reqs


def match_labels(reqs, labels):
    for k, op, values in reqs:
        has = k in labels
        v = labels.get(k)
        if op == "exists" and not has:
            return False
        if op == "!" and has:
            return False
        if op == "=" and not (has and v == values[0]):
            return False
        if op == "!=" and has and v == values[0]:
            return False
        if op == "in" and not (has and v in values):
            return False
        if op == "notin" and has and v in values:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Resource types
# ---------------------------------------------------------------------------------------------


class ResourceType:
    """Describes one resource: where it is served, what its objects look like and how they are
    validated. Hooks take and return plain JSON values."""

    def __init__(self, group, versions, plural, singular, kind, namespaced, verbs, schema,
                 field_labels=None, validate_create=None, validate_update=None,
                 prepare=None, warnings=None, typed_list_items=False,
                 status_subresource=False, validate_status_update=None, decode=None,
                 list_kind=None, short_names=(), categories=(), empty_status=True,
                 table=None, openapi_schema=None):
        self.group = group
        self.versions = tuple(versions)
        self.plural = plural
        self.singular = singular
        self.kind = kind
        self.namespaced = namespaced
        self.verbs = frozenset(verbs)
        self.schema = schema
        self.field_labels = dict(field_labels or {})  # selector name -> fn(obj) -> str
        self.validate_create = validate_create  # fn(obj) -> [FieldError]
        self.validate_update = validate_update  # fn(obj, old) -> [FieldError]
        self.prepare = prepare  # fn(obj, old) after decoding: defaults, gated fields
        self.warnings = warnings  # fn(obj) -> [str]
        self.typed_list_items = typed_list_items  # CRD lists carry kind/apiVersion per item
        # With a /status subresource: `status` is emptied on create and kept on updates of the
        # main resource; it only changes through /status, which changes nothing else.
        self.status_subresource = status_subresource
        self.validate_status_update = validate_status_update  # fn(obj, old) -> [FieldError]
        # fn(JSON value) -> (object, unknown field paths, duplicate field paths); raises
        # DecodeError (400). Default: the Decoder along `schema`.
        self.decode = decode or self._decode_with_schema
        self.list_kind = list_kind or kind + "List"
        self.short_names = tuple(short_names)
        self.categories = tuple(categories)
        # True: an object without status has `status: {}` (typed resources render the empty
        # struct); False: it has no status field (custom resources).
        self.empty_status = empty_status
        # (column definitions, fn(obj) -> cells) of the meta.k8s.io Table answer; default: the
        # real server's default table convertor (Name, Created At).
        self.table = table or DEFAULT_TABLE
        # The OpenAPI v3 schema of an object (a CRD's openAPIV3Schema), or None: a free-form
        # object in /openapi/v3 (the fake's typed schemas are not exported).
        self.openapi_schema = openapi_schema
        self.type_key = (group, plural)

    def _decode_with_schema(self, value):
        decoder = Decoder()
        obj = _prune_none(decoder.decode(value, self.schema, ""))
        return obj, decoder.unknown, decoder.duplicates

    def set_status(self, obj, status):
        """obj["status"] = status; None means no status (`{}` or absent, see empty_status)."""
        if status is not None:
            obj["status"] = status
        elif self.empty_status:
            obj["status"] = {}
        else:
            obj.pop("status", None)

    def qualified(self):
        return self.plural + ("." + self.group if self.group else "")

    def group_version(self, version):
        return self.group + "/" + version if self.group else version

    def field_set(self, obj):
        meta = obj.get("metadata", {})
        fields = {"metadata.name": meta.get("name", "")}
        if self.namespaced:
            fields["metadata.namespace"] = meta.get("namespace", "")
        for name, fn in self.field_labels.items():
            fields[name] = fn(obj)
        return fields

    def supported_field_selectors(self):
        return set(self.field_set({"metadata": {}, "spec": {}}).keys())

    def render(self, obj, version):
        out = {"kind": self.kind, "apiVersion": self.group_version(version)}
        out.update(obj)
        return out

    def not_found(self, name):
        return ApiError(404, "NotFound", '%s "%s" not found' % (self.qualified(), name),
                        {"name": name, "group": self.group, "kind": self.plural})

    def already_exists(self, name):
        return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (self.qualified(), name),
                        {"name": name, "group": self.group, "kind": self.plural})

    def conflict(self, name, why):
        return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                        % (self.qualified(), name, why),
                        {"name": name, "group": self.group, "kind": self.plural})

    def invalid(self, name, errs):
        causes = [e.cause() for e in errs]
        text = str(errs[0]) if len(errs) == 1 else "[" + ", ".join(str(e) for e in errs) + "]"
        qualified_kind = self.kind + ("." + self.group if self.group else "")
        return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (qualified_kind, name, text),
                        {"name": name, "group": self.group, "kind": self.kind, "causes": causes})


# --- Table output (Accept: application/json;as=Table;v=v1;g=meta.k8s.io) -----------------------

_OBJECT_META_DOCS = {  # metav1.ObjectMeta{}.SwaggerDoc(), as the real printers describe columns
    "name": "Name must be unique within a namespace. Is required when creating resources, "
            "although some resources may allow a client to request the generation of an "
            "appropriate name automatically. Name is primarily intended for creation "
            "idempotence and configuration definition. Cannot be updated. More info: "
            "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "creationTimestamp": "CreationTimestamp is a timestamp representing the server time when "
                         "this object was created. It is not guaranteed to be set in "
                         "happens-before order across separate operations. Clients may not set "
                         "this value. It is represented in RFC3339 form and is in UTC.",
}


def table_column(name, typ="string", fmt="", description="", priority=0):
    return {"name": name, "type": typ, "format": fmt, "description": description,
            "priority": priority}


NAME_COLUMN = table_column("Name", fmt="name", description=_OBJECT_META_DOCS["name"])
AGE_COLUMN = table_column("Age", description=_OBJECT_META_DOCS["creationTimestamp"])


def human_duration(seconds):
    """apimachinery's duration.HumanDuration of a number of seconds."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    minutes = s // 60
    if minutes < 10:
        return "%dm%ds" % (minutes, s % 60) if s % 60 else "%dm" % minutes
    if minutes < 180:
        return "%dm" % minutes
    hours = s // 3600
    if hours < 8:
        return "%dh%dm" % (hours, minutes % 60) if minutes % 60 else "%dh" % hours
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 8:
        return "%dd%dh" % (hours // 24, hours % 24) if hours % 24 else "%dd" % (hours // 24)
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return "%dy%dd" % (years, days) if days else "%dy" % years
    return "%dy" % (hours // 24 // 365)


def age_of(timestamp):
    """The Age cell of a creationTimestamp (translateTimestampSince): <unknown> when unset."""
    if not timestamp:
        return "<unknown>"
    try:
        then = parse_time(timestamp)
    except ValueError:
        return "<invalid>"
    return human_duration((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds())


def _meta(obj, field):
    return (obj.get("metadata") or {}).get(field, "")


# rest.NewDefaultTableConvertor: what the real server answers for types without printers.
DEFAULT_TABLE = (
    [NAME_COLUMN, table_column("Created At", "date",
                               description=_OBJECT_META_DOCS["creationTimestamp"])],
    lambda obj: [_meta(obj, "name"), _meta(obj, "creationTimestamp") or None])

# pkg/printers/internalversion/printers.go (AddHandlers) of Kubernetes 1.36.
RESOURCESLICE_TABLE = (
    [NAME_COLUMN,
     table_column("Node", description="NodeName identifies the node which provides the "
                  "resources in this pool."),
     table_column("Driver", description="Driver identifies the DRA driver providing the "
                  "capacity information."),
     table_column("Pool", description="Name is used to identify the pool."),
     AGE_COLUMN],
    lambda obj: [_meta(obj, "name"), obj.get("spec", {}).get("nodeName", ""),
                 obj.get("spec", {}).get("driver", ""),
                 obj.get("spec", {}).get("pool", {}).get("name", ""),
                 age_of(_meta(obj, "creationTimestamp"))])


def _claim_state(obj):
    """resourceClaimState of the real printer: deleted, pending, allocated, reserved."""
    states = []
    deleted = bool(_meta(obj, "deletionTimestamp"))
    if deleted:
        states.append("deleted")
    status = obj.get("status") or {}
    if not status.get("allocation"):
        if not deleted:
            states.append("pending")
    else:
        states.append("allocated")
        if status.get("reservedFor"):
            states.append("reserved")
    return ",".join(states)


RESOURCECLAIM_TABLE = (
    [NAME_COLUMN,
     table_column("State", description="A summary of the current state (allocated, pending, "
                  "reserved, etc.)."),
     AGE_COLUMN],
    lambda obj: [_meta(obj, "name"), _claim_state(obj), age_of(_meta(obj, "creationTimestamp"))])

NAME_AGE_TABLE = ([NAME_COLUMN, AGE_COLUMN],
                  lambda obj: [_meta(obj, "name"), age_of(_meta(obj, "creationTimestamp"))])


def _pod_row(obj):
    """A simplified printPod: no init containers, sidecars, or readiness gates."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    reason = status.get("reason") or status.get("phase") or "Pending"
    if _meta(obj, "deletionTimestamp"):
        reason = "Terminating"
    ips = status.get("podIP") or "<none>"
    return [_meta(obj, "name"), "%d/%d" % (ready, len(spec.get("containers") or [])), reason,
            str(restarts), age_of(_meta(obj, "creationTimestamp")), ips,
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
            "<none>"]


POD_TABLE = (
    [NAME_COLUMN,
     table_column("Ready", description="The aggregate readiness state of this pod for "
                  "accepting traffic."),
     table_column("Status", description="The aggregate status of the containers in this pod."),
     table_column("Restarts", description="The number of times the containers in this pod "
                  "have been restarted and when the last container in this pod has restarted."),
     AGE_COLUMN,
     table_column("IP", priority=1, description="podIP address allocated to the pod."),
     table_column("Node", priority=1, description="NodeName indicates in which node this pod "
                  "is scheduled."),
     table_column("Nominated Node", priority=1, description="nominatedNodeName is set only "
                  "when this pod preempts other pods on the node."),
     table_column("Readiness Gates", priority=1, description="If specified, all readiness "
                  "gates will be evaluated for pod readiness.")],
    _pod_row)


def _node_status(obj):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return {"True": "Ready", "False": "NotReady"}.get(c.get("status"), "Unknown")
    return "Unknown"


NODE_TABLE = (
    [NAME_COLUMN, table_column("Status", description="The status of the node"),
     table_column("Roles", description="The roles of the node"), AGE_COLUMN,
     table_column("Version", description="Kubelet Version reported by the node.")],
    lambda obj: [_meta(obj, "name"), _node_status(obj), "<none>",
                 age_of(_meta(obj, "creationTimestamp")),
                 ((obj.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")])


def _event_row(obj):
    io = obj.get("involvedObject") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or _meta(obj, "creationTimestamp")
    return [age_of(last), obj.get("type", ""), obj.get("reason", ""),
            "%s/%s" % ((io.get("kind") or "").lower(), io.get("name", "")),
            obj.get("message", "")]


EVENT_TABLE = (
    [table_column("Last Seen", description="The time of the last occurrence of the event."),
     table_column("Type", description="Type of this event (Normal, Warning)."),
     table_column("Reason", description="The reason for the transition into the object's "
                  "current status."),
     table_column("Object", description="The object that this event is about."),
     table_column("Message", description="A human-readable description of the status of this "
                  "operation.")],
    _event_row)

_TABLE_COLUMN_TYPES = ("integer", "number", "string", "boolean", "date")
_TABLE_COLUMN_FORMATS = ("int32", "int64", "float", "double", "byte", "date", "date-time",
                         "password")
_SIMPLE_JSON_PATH_RE = re.compile(r"(\.[A-Za-z_][-A-Za-z0-9_]*(\[[0-9]+\])?)+")


def _column_text(value):
    """How the client-go JSONPath printer writes one value into a string column."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _column_cell(typ, value):
    """cellForJSONValue of the apiextensions table convertor."""
    if value is None:
        return None
    if typ == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if typ == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if typ == "boolean" and isinstance(value, bool):
        return value
    if typ == "string" and isinstance(value, str):
        return value
    if typ == "date" and isinstance(value, str):
        try:
            parse_time(value)
        except ValueError:
            return "<invalid>"
        return age_of(value)
    return None


def crd_table(columns, where):
    """The Table of a CRD version's additionalPrinterColumns (Name first, as the real
    tableconvertor does; a version without columns gets Age from creationTimestamp)."""
    if not isinstance(columns, list):
        raise CrdError("%s: must be a list" % where)
    if not columns:
        columns = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    defs, paths = [NAME_COLUMN], []
    for i, c in enumerate(columns):
        cw = "%s[%d]" % (where, i)
        if not isinstance(c, dict):
            raise CrdError("%s: must be a mapping" % cw)
        for k in c:
            if k not in ("name", "type", "format", "description", "priority", "jsonPath"):
                raise CrdError("%s.%s: not a field of a printer column" % (cw, k))
        name = _crd_get(c, "name", str, cw)
        typ = _crd_get(c, "type", str, cw)
        if typ not in _TABLE_COLUMN_TYPES:
            raise CrdError("%s.type: Unsupported value: %s: supported values: %s"
                           % (cw, json.dumps(typ), ", ".join(_TABLE_COLUMN_TYPES)))
        fmt = c.get("format", "")
        if fmt and fmt not in _TABLE_COLUMN_FORMATS:
            raise CrdError("%s.format: Unsupported value: %s" % (cw, json.dumps(fmt)))
        priority = c.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool) or priority < 0:
            raise CrdError("%s.priority: must be a non-negative integer" % cw)
        path = _crd_get(c, "jsonPath", str, cw)
        if not _SIMPLE_JSON_PATH_RE.fullmatch(path):
            raise CrdError("%s.jsonPath: the fake API server takes only simple paths such as "
                           ".status.phase or .spec.items[0].name, got %s" % (cw, json.dumps(path)))
        steps = []
        for part in path[1:].split("."):
            field, _, idx = part.partition("[")
            steps.append(field)
            if idx:
                steps.append(int(idx[:-1]))
        defs.append(table_column(
            name, typ, fmt, c.get("description") or
            "Custom resource definition column (in JSONPath format): %s" % path, priority))
        paths.append((typ, steps))

    def row(obj):
        cells = [_meta(obj, "name")]
        for typ, steps in paths:
            v = obj
            for s in steps:
                if isinstance(s, int):
                    v = v[s] if isinstance(v, list) and s < len(v) else None
                else:
                    v = v.get(s) if isinstance(v, dict) else None
                if v is None:
                    break
            if v is not None and typ == "string":
                cells.append(_column_text(v))
            else:
                cells.append(_column_cell(typ, v))
        return cells
    return defs, row


def wants_table(accept):
    """The meta.k8s.io version of the Table the Accept header asks for first, or None when a
    plain object comes first (or the header names no Table); 406 when it only names
    representations the fake does not produce (PartialObjectMetadata, protobuf, YAML, CBOR)."""
    if not accept:
        return None
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        params = {}
        for f in fields[1:]:
            k, _, v = f.partition("=")
            params[k.strip().lower()] = v.strip()
        if media not in ("application/json", "*/*", "application/*"):
            continue
        if "as" not in params:
            return None
        if (params.get("as") == "Table" and params.get("g") == "meta.k8s.io"
                and params.get("v") in ("v1", "v1beta1")):
            return params["v"]
    raise ApiError(406, "NotAcceptable", "only the following media types are accepted: "
                   "application/json, application/json;as=Table;v=v1;g=meta.k8s.io")


def to_table(rt, version, body, table_version, params, is_list):
    """A meta.k8s.io Table of a list (is_list: the request was a list) or single object answer
    (of the resource version). The request decides, not the body: a custom resource may have a
    top-level field named items."""
    include = params.get("includeObject", "") or "Metadata"
    if include not in ("None", "Metadata", "Object"):
        raise bad_request("includeObject: Unsupported value: \"%s\": supported values: "
                          "\"None\", \"Metadata\", \"Object\"" % include)
    columns, row_of = rt.table
    items = body["items"] if is_list else [body]
    rows = []
    for obj in items:
        row = {"cells": row_of(obj)}
        if include == "Object":
            row["object"] = obj if "kind" in obj else rt.render(obj, version)
        elif include == "Metadata":
            row["object"] = {"kind": "PartialObjectMetadata",
                             "apiVersion": "meta.k8s.io/" + table_version,
                             "metadata": obj.get("metadata", {})}
        rows.append(row)
    meta = {"resourceVersion": body.get("metadata", {}).get("resourceVersion", "")}
    for k in ("continue", "remainingItemCount"):
        if k in body.get("metadata", {}):
            meta[k] = body["metadata"][k]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/" + table_version, "metadata": meta,
            "columnDefinitions": columns, "rows": rows}


# --- object metadata --------------------------------------------------------------------------


def validate_object_meta(meta, namespaced):
    errs = []
    name = meta.get("name", "")
    generate = meta.get("generateName", "")
    if generate:
        masked = generate[:-1] + "a" if generate.endswith("-") else generate
        errs.extend(f_invalid("metadata.generateName", generate, m)
                    for m in is_dns1123_subdomain(masked))
    if not name:
        if not generate:
            errs.append(f_required("metadata.name", "name or generateName is required"))
    else:
        errs.extend(f_invalid("metadata.name", name, m) for m in is_dns1123_subdomain(name))
    if namespaced:
        ns = meta.get("namespace", "")
        if not ns:
            errs.append(f_required("metadata.namespace"))
        else:
            errs.extend(f_invalid("metadata.namespace", ns, m) for m in is_dns1123_label(ns))
    if meta.get("generation", 0) < 0:
        errs.append(f_invalid("metadata.generation", meta["generation"],
                              "must be greater than or equal to 0"))
    for k, v in meta.get("labels", {}).items():
        errs.extend(f_invalid("metadata.labels", k, m) for m in is_qualified_name(k))
        errs.extend(f_invalid("metadata.labels", v, m) for m in is_label_value(v))
    total = 0
    for k, v in meta.get("annotations", {}).items():
        errs.extend(f_invalid("metadata.annotations", k, m) for m in is_qualified_name(k.lower()))
        total += len(k) + len(v)
    if total > 256 * 1024:
        errs.append(f_too_long("metadata.annotations", 256 * 1024))
    controllers = 0
    for i, ref in enumerate(meta.get("ownerReferences", [])):
        p = index("metadata.ownerReferences", i)
        for field in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(field):
                errs.append(f_invalid(child(p, field), ref.get(field, ""),
                                      "%s must not be empty" % field))
        if ref.get("controller"):
            controllers += 1
    if controllers > 1:
        errs.append(f_invalid("metadata.ownerReferences", None,
                              "Only one reference can have Controller set to true"))
    seen = set()
    for i, fin in enumerate(meta.get("finalizers", [])):
        p = index("metadata.finalizers", i)
        errs.extend(f_invalid(p, fin, m) for m in is_qualified_name(fin))
        if fin in seen:
            errs.append(f_duplicate(p, fin))
        seen.add(fin)
    return errs


# --- ResourceSlice ------------------------------------------------------------------------------

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
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")
LIST_ATTRIBUTE_FIELDS = ("ints", "bools", "strings", "versions")


def node_selector_schema():
    requirement = Obj({"key": STR, "operator": STR, "values": ListOf(STR)},
                      zero=("key", "operator"))
    return Obj({"nodeSelectorTerms": ListOf(Obj({"matchExpressions": ListOf(requirement),
                                                 "matchFields": ListOf(requirement)}))},
               zero=("nodeSelectorTerms",))


def resourceslice_schema(accept_mixins, accept_list_attributes, accept_device_taints=True):
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
    node_allocatable = Obj({
        "mapping": Obj({"capacityKey": STR, "capacityMultiplier": QTY, "deviceMultiplier": QTY}),
        "overhead": Obj({"perPod": QTY, "perContainer": QTY})})
    device = {
        "name": STR, "attributes": MapOf(attribute), "capacity": MapOf(capacity),
        "nodeName": STR, "nodeSelector": node_selector, "allNodes": BOOL,
        "taints": ListOf(taint), "bindsToNode": BOOL, "bindingConditions": ListOf(STR),
        "bindingFailureConditions": ListOf(STR), "allowMultipleAllocations": BOOL,
        # DRANodeAllocatableResources is alpha (off): known, silently dropped.
        "nodeAllocatableResources": MapOf(node_allocatable),
    }
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
    device["consumesCounters"] = ListOf(Obj(consumption, zero=("counterSet",)))
    # DRADeviceTaints off (--device-taints drop): taints are known but silently dropped.
    device_dropped = ("nodeAllocatableResources",) + (() if accept_device_taints else ("taints",))
    spec["devices"] = ListOf(Obj(device, dropped=device_dropped, zero=("name",)))
    spec["sharedCounters"] = ListOf(Obj(counter_set, zero=("name",)))
    return Obj({"apiVersion": STR, "kind": STR, "metadata": METADATA_SCHEMA,
                "spec": Obj(spec, dropped=("partitionTypeAttribute", "skipNodeOperations"),
                            zero=("driver", "pool"))},
               zero=("spec",))


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


def _has_list_values(attr):
    return any(f in attr for f in LIST_ATTRIBUTE_FIELDS)


def validate_attribute(attr, path):
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
    if is_version and not _SEMVER_RE.fullmatch(value):
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


class SliceValidator:
    """validation.ValidateResourceSlice(Update) of Kubernetes 1.36 (gates at their 1.36
    defaults), plus KEP-5234 mixins when configured to accept them, plus (with --pool-checks
    reject) the rules that span the slices of a pool."""

    def __init__(self, accept_mixins, pool_checks=False):
        self.accept_mixins = accept_mixins
        self.pool_checks = pool_checks
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
                       or any(_has_list_values(a) for a in d.get("attributes", {}).values())
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
                errs.extend(self.validate_includes(includes, set_mixins, child(p, "includes"),
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
            errs.extend(self.validate_mixins(spec))
        return errs

    def validate_includes(self, includes, known, path, limit):
        if not includes:
            return []
        if len(includes) > limit:
            return [f_too_many(path, len(includes), limit)]
        errs = []
        for i, name in enumerate(includes):
            if name not in known:
                errs.append(f_not_found(index(path, i), name))
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
        values = sum(len(a.get("bools", [])) + len(a.get("ints", [])) + len(a.get("strings", []))
                     + len(a.get("versions", [])) or 1 for a in attributes.values())
        if values > MAX_ATTRIBUTE_VALUES:
            errs.append(f_invalid(path, values, "the total number of attribute values must not "
                                  "exceed %d" % MAX_ATTRIBUTE_VALUES))
        errs.extend(self.validate_attributes(attributes, child(path, "attributes")))
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
                errs.extend(self.validate_includes(includes, consumption_mixins,
                                                   child(p, "includes"),
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

        if self.accept_mixins:
            includes = device.get("includes", [])
            errs.extend(self.validate_includes(includes, device_mixins, child(path, "includes"),
                                               MAX_INCLUDES_PER_DEVICE))
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

    def validate_attributes(self, attributes, path):
        errs = []
        for name, attr in attributes.items():
            errs.extend(validate_qualified_key(name, path))
            errs.extend(validate_attribute(attr, key(path, name)))
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

    def validate_mixins(self, spec):
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
                    errs.extend(self.validate_attributes(attributes, child(p, "attributes")))
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
    validator = SliceValidator(cfg.accept_mixins, cfg.pool_checks)
    rt = ResourceType(
        RESOURCE_GROUP, cfg.versions, "resourceslices", "resourceslice", "ResourceSlice",
        namespaced=False,
        verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update",
               "watch"),
        schema=resourceslice_schema(cfg.accept_mixins, cfg.accept_list_attributes,
                                    cfg.accept_device_taints),
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


# --- ResourceClaim and DeviceClass -----------------------------------------------------------

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
        verbs=("create", "delete", "get", "list", "update", "watch"),
        schema=deviceclass_schema(),
        validate_create=validator.validate_create,
        validate_update=validator.validate_update,
        table=NAME_AGE_TABLE)


_EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                 "involvedObject.uid", "involvedObject.apiVersion",
                 "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
                 "reportingComponent", "source", "type")


def _event_field(obj, name):
    if name == "source":  # the real field set uses the component (or reportingController)
        return (obj.get("source") or {}).get("component") or obj.get("reportingComponent", "")
    head, _, rest = name.partition(".")
    v = obj.get(head) or ({} if rest else "")
    return str(v.get(rest, "") if rest else v)


def make_event_type():
    """core/v1 Events, schemaless: what kubectl describe lists (fieldSelector on
    involvedObject.*) and what a component may post; no validation beyond metadata."""
    return ResourceType(
        "", ("v1",), "events", "event", "Event", namespaced=True,
        verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update",
               "watch"),
        schema=Obj({"apiVersion": STR, "kind": STR, "metadata": METADATA_SCHEMA,
                    **{f: ANY for f in ("involvedObject", "reason", "message", "source",
                                        "firstTimestamp", "lastTimestamp", "count", "type",
                                        "eventTime", "series", "action", "related",
                                        "reportingComponent", "reportingInstance")}}),
        field_labels={f: (lambda o, f=f: _event_field(o, f)) for f in _EVENT_FIELDS},
        validate_create=lambda o: validate_object_meta(o.get("metadata", {}), True),
        validate_update=lambda o, old: validate_object_meta(o.get("metadata", {}), True),
        short_names=("ev",), table=EVENT_TABLE, empty_status=False)


def make_pod_type():
    """core/v1 Pods, schemaless (spec and status kept as sent, nothing validated beyond
    metadata, no defaults, no scheduling, no kubelet): enough to kubectl apply the chart's
    examples, which put a Pod next to its claim."""
    return ResourceType(
        "", ("v1",), "pods", "pod", "Pod", namespaced=True,
        verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update",
               "watch"),
        schema=Obj({"apiVersion": STR, "kind": STR, "metadata": METADATA_SCHEMA, "spec": ANY,
                    "status": ANY}),
        field_labels={"spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName", ""),
                      "status.phase": lambda o: (o.get("status") or {}).get("phase", "")},
        validate_create=lambda o: validate_object_meta(o.get("metadata", {}), True),
        validate_update=lambda o, old: validate_object_meta(o.get("metadata", {}), True),
        short_names=("po",), categories=("all",), table=POD_TABLE, status_subresource=True,
        validate_status_update=lambda o, old: [])


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


def make_node_type():
    return ResourceType(
        "", ("v1",), "nodes", "node", "Node", namespaced=False, verbs=("get", "list", "watch"),
        schema=Obj({"apiVersion": STR, "kind": STR, "metadata": METADATA_SCHEMA, "spec": ANY,
                    "status": ANY}),
        table=NODE_TABLE)


# --- CustomResourceDefinitions (--crd) ----------------------------------------------------------

CRD_API_VERSION = "apiextensions.k8s.io/v1"
MAX_SELECTABLE_FIELDS = 8
MAX_JSON_SAFE_INTEGER = 1 << 53  # integral floats up to this count as integers (as in swag)
_SCHEMA_TYPES = ("object", "array", "string", "integer", "number", "boolean")
_SCHEMA_DOC_KEYWORDS = frozenset(("description", "title", "example", "externalDocs"))
_SCHEMA_KEYWORDS = frozenset((
    "type", "properties", "required", "additionalProperties", "items", "enum", "pattern",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minItems", "maxItems", "minProperties", "maxProperties", "format", "default",
    "nullable", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-validations",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
)) | _SCHEMA_DOC_KEYWORDS
_SCHEMA_COUNT_KEYWORDS = {  # keyword -> (attribute, the type it applies to)
    "minLength": ("min_length", "string"), "maxLength": ("max_length", "string"),
    "minItems": ("min_items", "array"), "maxItems": ("max_items", "array"),
    "minProperties": ("min_properties", "object"), "maxProperties": ("max_properties", "object"),
}
_DATE_TIME_FORMATS = ("date-time", "datetime")
_NUMERIC_FORMATS = ("int32", "int64", "float", "double")  # type hints, nothing to check
_CRD_VERSION_KEYS = frozenset(("name", "served", "storage", "deprecated", "deprecationWarning",
                               "schema", "subresources", "additionalPrinterColumns",
                               "selectableFields"))
_RULE_KEYS = frozenset(("rule", "message", "reason", "fieldPath"))
_RULE_REASONS = {"FieldValueInvalid": "Invalid", "FieldValueForbidden": "Forbidden",
                 "FieldValueRequired": "Required", "FieldValueDuplicate": "Duplicate"}
# Schema errors after which the server does not evaluate x-kubernetes-validations.
_BLOCKING_KINDS = ("NotSupported", "Required", "TooLong", "TooMany", "TypeInvalid")
_MSG_RULES_NOT_CHECKED = ("some validation rules were not checked because the object was "
                          "invalid; correct the existing errors to complete validation")


class CrdError(Exception):
    """A CRD the fake cannot serve: invalid, or using something the fake does not implement.
    Raised at start, so that nothing in a CRD is silently ignored."""


def compile_re2(pattern, where):
    """A Go RE2 pattern as a Python regex with the same meaning for the subset both share:
    ASCII classes, `$` and `\\z` only at the very end of the text. Lookarounds and
    backreferences (not RE2) and anything Python cannot compile are load errors."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1:i + 2]
            if nxt.isdigit() and nxt != "0" and not in_class:
                raise CrdError("%s: pattern %s: backreferences are not RE2 syntax"
                               % (where, json.dumps(pattern)))
            out.append(r"\Z" if nxt == "z" and not in_class else pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
        elif c == "[":
            in_class = True
            out.append(c)
            if pattern[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if pattern[i + 1:i + 2] == "]":  # a leading ] is a literal
                out.append("]")
                i += 1
        elif c == "$":
            out.append(r"\Z")  # Python's $ also matches before a final newline
        elif c == "(" and pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
            raise CrdError("%s: pattern %s: lookarounds are not RE2 syntax"
                           % (where, json.dumps(pattern)))
        else:
            out.append(c)
        i += 1
    try:
        return re.compile("".join(out), re.ASCII)
    except re.error as e:
        raise CrdError("%s: pattern %s does not compile: %s" % (where, json.dumps(pattern), e))


_DATE_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_DATE_TIME_CLOCK_RE = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?"
                                 r"(z|([+-][0-9]{2}:[0-9]{2}))")


def is_date_time(text):
    """strfmt.IsDateTime of kube-openapi: the check behind `format: date-time`."""
    if len(text) < 4:
        return False
    parts = text.lower().split("t")
    if len(parts) < 2:
        return False
    m = _DATE_RE.fullmatch(parts[0])
    if not m:
        return False
    try:
        datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return False
    m = _DATE_TIME_CLOCK_RE.fullmatch(parts[1])
    return bool(m) and m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _json_kind(v):
    """The OpenAPI type name of a decoded JSON value (numbers beyond int64 are floats in Go)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer" if INT64_MIN <= v <= INT64_MAX else "number"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _kind_fits(kind, value, want):
    if kind == want or (want == "number" and kind == "integer"):
        return True
    return (want == "integer" and isinstance(value, float) and value.is_integer()
            and abs(value) <= MAX_JSON_SAFE_INTEGER)


def _num(v):
    """A schema bound as Go's %v prints a float64."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    return repr(v)


def json_equal(a, b, node=None):
    """Equality of JSON values as in CEL: typed (true is not 1), numbers by value, lists in
    order unless their schema says x-kubernetes-list-type set or map."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, list) and isinstance(b, list):
        items = node.items if node is not None else None
        if len(a) != len(b):
            return False
        if node is not None and node.list_type in ("set", "map"):
            rest = list(b)
            for x in a:
                for j, y in enumerate(rest):
                    if json_equal(x, y, items):
                        del rest[j]
                        break
                else:
                    return False
            return True
        return all(json_equal(x, y, items) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return False
        return all(json_equal(v, b[k], node.child(k) if node is not None else None)
                   for k, v in a.items())
    return a is None and b is None


class SchemaNode:
    """One node of a structural openAPIV3Schema, checked and compiled at start."""

    def __init__(self):
        self.type = None  # None only with x-kubernetes-preserve-unknown-fields
        self.properties = {}
        self.required = ()
        self.additional = None  # the SchemaNode of additionalProperties
        self.items = None
        self.enum = None
        self.pattern = None
        self.pattern_text = ""
        self.min_length = self.max_length = None
        self.min_items = self.max_items = None
        self.min_properties = self.max_properties = None
        self.minimum = self.maximum = self.multiple_of = None
        self.exclusive_minimum = self.exclusive_maximum = False
        self.format = None
        self.has_default = False
        self.default = None
        self.nullable = False
        self.preserve_unknown = False
        self.list_type = None
        self.list_map_keys = ()
        self.rules = []  # CelRule

    def child(self, name):
        """The schema of field `name` of an object, or None (unknown field)."""
        return self.properties.get(name) or self.additional

    def has_rules(self):
        return bool(self.rules) or any(
            n.has_rules() for n in list(self.properties.values()) + [self.additional, self.items]
            if n is not None)


def _schema_bool(raw, name, where):
    v = raw.get(name, False)
    if not isinstance(v, bool):
        raise CrdError("%s.%s: must be a boolean" % (where, name))
    return v


def compile_schema(raw, where):
    """The SchemaNode of an openAPIV3Schema (sub)tree; CrdError for what is not structural or
    not implemented here."""
    if not isinstance(raw, dict):
        raise CrdError("%s: must be an object" % where)
    for k in raw:
        if k not in _SCHEMA_KEYWORDS:
            raise CrdError("%s: %s is not supported by the fake API server" % (where, k))
    n = SchemaNode()
    n.preserve_unknown = _schema_bool(raw, "x-kubernetes-preserve-unknown-fields", where)
    n.nullable = _schema_bool(raw, "nullable", where)
    t = raw.get("type")
    if t is None:
        if not n.preserve_unknown:
            raise CrdError("%s.type: Required value: must not be empty in a structural schema"
                           % where)
    elif t not in _SCHEMA_TYPES:
        raise CrdError("%s.type: Unsupported value: %s: supported values: %s"
                       % (where, json.dumps(t), ", ".join(_SCHEMA_TYPES)))
    n.type = t

    def only_for(keyword, *types):
        if keyword in raw and t not in types:
            raise CrdError("%s.%s: only allowed with type %s" % (where, keyword,
                                                                 " or ".join(types)))

    for kw in ("properties", "additionalProperties", "required", "x-kubernetes-map-type"):
        only_for(kw, "object")
    for kw in ("items", "x-kubernetes-list-type", "x-kubernetes-list-map-keys"):
        only_for(kw, "array")
    for kw in ("pattern",):
        only_for(kw, "string")
    for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        only_for(kw, "integer", "number")
    props = raw.get("properties", {})
    if not isinstance(props, dict):
        raise CrdError("%s.properties: must be an object" % where)
    n.properties = {name: compile_schema(sub, "%s.properties[%s]" % (where, name))
                    for name, sub in props.items()}
    if "additionalProperties" in raw:
        addl = raw["additionalProperties"]
        if isinstance(addl, bool):
            raise CrdError("%s.additionalProperties: a boolean is not supported by the fake API "
                           "server (false is not structural)" % where)
        if n.properties:
            raise CrdError("%s: additionalProperties and properties are mutually exclusive"
                           % where)
        n.additional = compile_schema(addl, where + ".additionalProperties")
    if t == "array":
        if "items" not in raw:
            raise CrdError("%s.items: Required value: must be specified for type: array" % where)
        n.items = compile_schema(raw["items"], where + ".items")
    required = raw.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise CrdError("%s.required: must be a list of field names" % where)
    n.required = tuple(required)
    for kw, (attr, typ) in _SCHEMA_COUNT_KEYWORDS.items():
        if kw in raw:
            only_for(kw, typ)
            v = raw[kw]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise CrdError("%s.%s: must be a non-negative integer" % (where, kw))
            setattr(n, attr, v)
    for kw, attr in (("minimum", "minimum"), ("maximum", "maximum"),
                     ("multipleOf", "multiple_of")):
        if kw in raw:
            v = raw[kw]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise CrdError("%s.%s: must be a number" % (where, kw))
            setattr(n, attr, v)
    if n.multiple_of is not None and n.multiple_of <= 0:
        raise CrdError("%s.multipleOf: must be greater than zero" % where)
    n.exclusive_minimum = _schema_bool(raw, "exclusiveMinimum", where)
    n.exclusive_maximum = _schema_bool(raw, "exclusiveMaximum", where)
    if "pattern" in raw:
        if not isinstance(raw["pattern"], str):
            raise CrdError("%s.pattern: must be a string" % where)
        n.pattern_text = raw["pattern"]
        n.pattern = compile_re2(raw["pattern"], where + ".pattern")
    if "format" in raw:
        fmt = raw["format"]
        if fmt in _DATE_TIME_FORMATS:
            only_for("format", "string")
        elif fmt in _NUMERIC_FORMATS:
            only_for("format", "integer", "number")
        else:
            raise CrdError("%s.format: %s is not supported by the fake API server (supported: "
                           "date-time, %s)" % (where, json.dumps(fmt), ", ".join(_NUMERIC_FORMATS)))
        n.format = fmt
    list_type = raw.get("x-kubernetes-list-type")
    if list_type is not None:
        if list_type not in ("atomic", "set", "map"):
            raise CrdError("%s.x-kubernetes-list-type: must be atomic, set or map" % where)
        n.list_type = list_type
    keys = raw.get("x-kubernetes-list-map-keys")
    if list_type == "map":
        if not keys or not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise CrdError("%s.x-kubernetes-list-map-keys: Required value: a list of field "
                           "names for x-kubernetes-list-type: map" % where)
        items = n.items
        for k in keys:
            sub = items.properties.get(k) if items.type == "object" else None
            if sub is None or sub.type not in ("string", "integer", "number", "boolean"):
                raise CrdError("%s.x-kubernetes-list-map-keys: %s must be a scalar property of "
                               "the items" % (where, k))
            if k not in items.required and not sub.has_default:
                raise CrdError("%s.x-kubernetes-list-map-keys: %s must be required or have a "
                               "default" % (where, k))
        n.list_map_keys = tuple(keys)
    elif keys is not None:
        raise CrdError("%s.x-kubernetes-list-map-keys: only with x-kubernetes-list-type: map"
                       % where)
    if list_type == "set" and n.items.type not in ("string", "integer", "number", "boolean"):
        raise CrdError("%s.x-kubernetes-list-type: set needs scalar items" % where)
    if raw.get("x-kubernetes-map-type", "granular") not in ("granular", "atomic"):
        raise CrdError("%s.x-kubernetes-map-type: must be granular or atomic" % where)
    if "enum" in raw:
        if not isinstance(raw["enum"], list) or not raw["enum"]:
            raise CrdError("%s.enum: must be a non-empty list" % where)
        for i, v in enumerate(raw["enum"]):
            if not (v is None and n.nullable) and t is not None \
                    and not _kind_fits(_json_kind(v), v, t):
                raise CrdError("%s.enum[%d]: %s is not of type %s" % (where, i, json.dumps(v), t))
        n.enum = list(raw["enum"])
    if "default" in raw:
        n.has_default = True
        n.default = raw["default"]
        unknown = []
        pruned = crd_prune(n.default, n, "", unknown, [])
        if unknown:
            raise CrdError("%s.default: must not have unknown fields: %s"
                           % (where, ", ".join(unknown)))
        errs = []
        crd_validate_value(pruned, n, "default", errs)
        if errs:
            raise CrdError("%s.default: %s" % (where, errs[0]))
        n.default = pruned
    rules = raw.get("x-kubernetes-validations", [])
    if not isinstance(rules, list):
        raise CrdError("%s.x-kubernetes-validations: must be a list" % where)
    n.rules = [compile_rule(r, n, "%s.x-kubernetes-validations[%d]" % (where, i))
               for i, r in enumerate(rules)]
    return n


# --- x-kubernetes-validations: a tiny CEL subset --------------------------------------------------
#
#   expr := and ("||" and)*          and   := rel ("&&" rel)*
#   rel  := unary (("==" | "!=") unary)*
#   unary := "!" unary | "(" expr ")" | "has(" path ")" | path
#   path := ("self" | "oldSelf") ("." field)*
#
# Paths are type-checked against the schema at load (an undeclared field is an error, as with the
# real CEL compiler); == needs both sides of one type and compares like CEL (deep, typed). Errors
# at run time (a missing field: "no such key") follow CEL: false && error is false, true || error
# is true.

_CEL_TOKEN_RE = re.compile(r"\s*(?:(&&|\|\||==|!=|[!().])|([A-Za-z_][A-Za-z0-9_]*))")
_CEL_SCALAR_TYPES = {"string": "string", "integer": "int", "number": "double",
                     "boolean": "bool"}


class CelEvalError(Exception):
    pass


class CelRule:
    def __init__(self, rule, message, reason, field_path, ast):
        self.rule = rule
        self.message = message
        self.reason = reason  # a FieldError kind
        self.field_path = field_path  # tuple of field names below the node
        self.ast = ast
        self.transition = "oldSelf" in _cel_roots(ast)

    def error_string(self):
        return (self.message or self.rule).strip()

    def error(self, path, schema_type):
        """The field error of a rule that evaluated to false."""
        for f in self.field_path:
            path = child(path, f)
        detail = self.message.strip() if self.message else "failed rule: " + self.error_string()
        if self.reason == "Forbidden":
            return f_forbidden(path, detail)
        if self.reason == "Required":
            return f_required(path, detail)
        if self.reason == "Duplicate":
            return f_duplicate(path, schema_type)
        return f_invalid(path, schema_type, detail)


def _cel_roots(ast):
    if ast[0] in ("path", "has"):
        return {ast[1]}
    roots = set()
    for operand in ast[1:]:
        if isinstance(operand, tuple):
            roots |= _cel_roots(operand)
    return roots


def _cel_type(node):
    if node is None or node.type is None:
        return "dyn"
    if node.type == "object":
        if node.additional is not None:
            return ("map", _cel_type(node.additional))
        if node.preserve_unknown and not node.properties:
            return "dyn"
        return ("object", id(node))
    if node.type == "array":
        return ("list", _cel_type(node.items))
    return _CEL_SCALAR_TYPES[node.type]


def _cel_type_name(t):
    if isinstance(t, tuple):
        if t[0] == "object":
            return "object"
        return "%s(%s)" % (t[0], ", ".join(_cel_type_name(x) for x in t[1:]))
    return t


class _CelParser:
    SUPPORTED = ("the fake API server evaluates only has(self.f), !, &&, ||, ==, != and "
                 "parentheses on self/oldSelf field paths")

    def __init__(self, text, node, where):
        self.text = text
        self.node = node
        self.where = where
        self.tokens = []
        i = 0
        while True:
            m = _CEL_TOKEN_RE.match(text, i)
            if not m:
                rest = text[i:].lstrip()
                if rest:
                    self.fail("cannot parse %s at offset %d"
                              % (json.dumps(rest[:20]), len(text) - len(rest)))
                break
            self.tokens.append(m.group(1) or m.group(2))
            i = m.end()
        self.pos = 0

    def fail(self, why):
        raise CrdError("%s: rule %s: %s; %s" % (self.where, json.dumps(self.text), why,
                                                self.SUPPORTED))

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected=None):
        tok = self.peek()
        if tok is None:
            self.fail("unexpected end of the rule")
        if expected is not None and tok != expected:
            self.fail("expected %s, found %s" % (expected, tok))
        self.pos += 1
        return tok

    def need_bool(self, t, op):
        if t not in ("bool", "dyn"):
            self.fail("%s needs bool operands, not %s" % (op, _cel_type_name(t)))

    def parse(self):
        ast, t, _ = self.expr()
        if self.peek() is not None:
            self.fail("unexpected %s" % self.peek())
        if t not in ("bool", "dyn"):
            self.fail("a rule must evaluate to a bool, not %s" % _cel_type_name(t))
        return ast

    def expr(self):
        left, lt, ln = self.conjunction()
        while self.peek() == "||":
            self.take()
            right, rt, _ = self.conjunction()
            self.need_bool(lt, "||")
            self.need_bool(rt, "||")
            left, lt, ln = ("or", left, right), "bool", None
        return left, lt, ln

    def conjunction(self):
        left, lt, ln = self.relation()
        while self.peek() == "&&":
            self.take()
            right, rt, _ = self.relation()
            self.need_bool(lt, "&&")
            self.need_bool(rt, "&&")
            left, lt, ln = ("and", left, right), "bool", None
        return left, lt, ln

    def relation(self):
        left, lt, ln = self.unary()
        while self.peek() in ("==", "!="):
            op = self.take()
            right, rt, rn = self.unary()
            if lt != rt and "dyn" not in (lt, rt):
                self.fail("no matching overload for %s on %s and %s"
                          % (op, _cel_type_name(lt), _cel_type_name(rt)))
            left, lt, ln = (op, left, right, ln or rn), "bool", None
        return left, lt, ln

    def unary(self):
        tok = self.peek()
        if tok == "!":
            self.take()
            operand, t, _ = self.unary()
            self.need_bool(t, "!")
            return ("not", operand), "bool", None
        if tok == "(":
            self.take()
            inner = self.expr()
            self.take(")")
            return inner
        if tok == "has":
            self.take()
            self.take("(")
            root, fields, _ = self.path()
            if not fields:
                self.fail("has() needs a field selection such as has(self.x)")
            self.take(")")
            return ("has", root, fields), "bool", None
        if tok in ("self", "oldSelf"):
            root, fields, node = self.path()
            return ("path", root, fields), _cel_type(node), node
        self.fail("unexpected %s" % (tok if tok is not None else "end of the rule"))

    def path(self):
        root = self.take()
        if root not in ("self", "oldSelf"):
            self.fail("expected self or oldSelf, found %s" % root)
        node, fields = self.node, []
        while self.peek() == ".":
            self.take()
            name = self.take()
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                self.fail("expected a field name after '.', found %s" % name)
            node = self.field(node, name, fields)
            fields.append(name)
        return root, tuple(fields), node

    def field(self, node, name, fields):
        if node is None or node.type is None:
            return None  # dyn
        if node.type != "object":
            self.fail("%s has no fields" % ".".join(["self"] + fields))
        sub = node.child(name)
        if sub is None:
            if node.preserve_unknown:
                return None
            self.fail("undefined field '%s'" % name)
        return sub


def compile_rule(raw, node, where):
    if not isinstance(raw, dict):
        raise CrdError("%s: must be an object" % where)
    for k in raw:
        if k not in _RULE_KEYS:
            raise CrdError("%s: %s is not supported by the fake API server" % (where, k))
    text = raw.get("rule")
    if not isinstance(text, str) or not text.strip():
        raise CrdError("%s.rule: Required value" % where)
    message = raw.get("message", "")
    if not isinstance(message, str):
        raise CrdError("%s.message: must be a string" % where)
    reason = raw.get("reason", "FieldValueInvalid")
    if reason not in _RULE_REASONS:
        raise CrdError("%s.reason: Unsupported value: %s: supported values: %s"
                       % (where, json.dumps(reason), ", ".join(_RULE_REASONS)))
    field_path = ()
    if "fieldPath" in raw:
        fp = raw["fieldPath"]
        if not isinstance(fp, str) or not re.fullmatch(r"(\.[A-Za-z_][A-Za-z0-9_]*)+", fp):
            raise CrdError("%s.fieldPath: only .field.field paths are supported by the fake API "
                           "server, got %s" % (where, json.dumps(fp)))
        field_path = tuple(fp[1:].split("."))
        parser = _CelParser("self" + fp, node, where + ".fieldPath")
        parser.path()
    ast = _CelParser(text, node, where).parse()
    return CelRule(text, message, _RULE_REASONS[reason], field_path, ast)


def _cel_select(value, fields):
    for f in fields:
        if not isinstance(value, dict) or f not in value:
            raise CelEvalError("no such key: %s" % f)
        value = value[f]
    return value


def cel_eval(ast, self_value, old_value):
    """Evaluates a compiled rule; raises CelEvalError like CEL's runtime errors."""
    op = ast[0]
    if op == "path":
        return _cel_select(self_value if ast[1] == "self" else old_value, ast[2])
    if op == "has":
        parent = _cel_select(self_value if ast[1] == "self" else old_value, ast[2][:-1])
        if not isinstance(parent, dict):
            raise CelEvalError("no such key: %s" % ast[2][-1])
        return ast[2][-1] in parent
    if op == "not":
        v = cel_eval(ast[1], self_value, old_value)
        if not isinstance(v, bool):
            raise CelEvalError("no such overload: !_")
        return not v
    if op in ("and", "or"):
        decisive = op == "or"  # true decides ||, false decides &&
        results = []
        for operand in ast[1:]:
            try:
                results.append(cel_eval(operand, self_value, old_value))
            except CelEvalError as e:
                results.append(e)
        if any(r is decisive for r in results):
            return decisive
        for r in results:
            if isinstance(r, CelEvalError):
                raise r
            if not isinstance(r, bool):
                raise CelEvalError("no such overload: _%s_" % ("||" if decisive else "&&"))
        return not decisive
    left = cel_eval(ast[1], self_value, old_value)
    right = cel_eval(ast[2], self_value, old_value)
    equal = json_equal(left, right, ast[3])
    return equal if op == "==" else not equal


# --- pruning, defaulting and validation of custom resources -------------------------------------


def crd_prune(value, node, path, unknown, duplicates, decoder=None):
    """Structural pruning: a copy of value without unknown fields (their paths are appended to
    `unknown`) and without null fields that are not nullable. Values of the wrong type are kept
    for validation to reject. At the root (decoder given) metadata is decoded as ObjectMeta."""
    if isinstance(value, dict):
        duplicates.extend(child(path, d) for d in getattr(value, "dups", ()))
    if node is None:
        return value
    if isinstance(value, dict) and (node.type == "object" or node.type is None):
        out = {}
        for k, v in value.items():
            if decoder is not None and k == "metadata":
                if v is not None:
                    out[k] = _prune_none(decoder.decode(v, METADATA_SCHEMA, "metadata"))
                continue
            if decoder is not None and k in ("apiVersion", "kind"):
                out[k] = v
                continue
            sub = node.child(k)
            if sub is None:
                if node.preserve_unknown:
                    out[k] = v
                else:
                    unknown.append(child(path, k))
                continue
            if v is None and not sub.nullable:
                continue
            out[k] = crd_prune(v, sub, child(path, k), unknown, duplicates)
        return out
    if isinstance(value, list) and node.type == "array":
        return [crd_prune(v, node.items, index(path, i), unknown, duplicates)
                for i, v in enumerate(value)]
    if (node.type in ("integer", "number") and isinstance(value, float) and value.is_integer()
            and abs(value) <= MAX_JSON_SAFE_INTEGER):
        return int(value)  # Go renders an integral float64 without a fraction
    return value


def crd_default(value, node, root=False):
    """Applies `default`s in place (after pruning, before validation, like the server)."""
    if node is None:
        return
    if isinstance(value, dict):
        for k, sub in node.properties.items():
            if k not in value and sub.has_default:
                value[k] = json.loads(json.dumps(sub.default))
        for k, v in value.items():
            if not (root and k == "metadata"):
                crd_default(v, node.child(k))
    elif isinstance(value, list) and node.items is not None:
        for v in value:
            crd_default(v, node.items)


def crd_validate_value(value, node, path, errs):
    """OpenAPI v3 validation of the structural schema (kube-openapi's messages)."""
    if node is None:
        return
    if value is None:
        if not node.nullable and node.type is not None:
            errs.append(f_type_invalid(path, "null", '%s in body must be of type %s: "null"'
                                       % (path, node.type)))
        return
    kind = _json_kind(value)
    if node.type is not None and not _kind_fits(kind, value, node.type):
        errs.append(f_type_invalid(path, kind, '%s in body must be of type %s: "%s"'
                                   % (path, node.type, kind)))
        return
    if node.enum is not None and not any(json_equal(value, e) for e in node.enum):
        errs.append(f_not_supported(path, value, node.enum))
    if isinstance(value, str):
        if node.format in _DATE_TIME_FORMATS and not is_date_time(value):
            errs.append(f_type_invalid(path, value, "%s in body must be of type %s: %s"
                                       % (path, node.format, json.dumps(value))))
        if node.max_length is not None and len(value) > node.max_length:
            errs.append(f_too_long(path, node.max_length))
        if node.min_length is not None and len(value) < node.min_length:
            errs.append(f_invalid(path, value, "%s in body should be at least %d chars long"
                                  % (path, node.min_length)))
        if node.pattern is not None and not node.pattern.search(value):
            errs.append(f_invalid(path, value, "%s in body should match '%s'"
                                  % (path, node.pattern_text)))
    elif kind in ("integer", "number"):
        if node.maximum is not None and (value > node.maximum or (
                node.exclusive_maximum and value == node.maximum)):
            errs.append(f_invalid(path, value, "%s in body should be less than %s%s"
                                  % (path, "" if node.exclusive_maximum else "or equal to ",
                                     _num(node.maximum))))
        if node.minimum is not None and (value < node.minimum or (
                node.exclusive_minimum and value == node.minimum)):
            errs.append(f_invalid(path, value, "%s in body should be greater than %s%s"
                                  % (path, "" if node.exclusive_minimum else "or equal to ",
                                     _num(node.minimum))))
        if node.multiple_of is not None and not (float(value) / node.multiple_of).is_integer():
            errs.append(f_invalid(path, value, "%s in body should be a multiple of %s"
                                  % (path, _num(node.multiple_of))))
    elif isinstance(value, list):
        n = len(value)
        if node.max_items is not None and n > node.max_items:
            errs.append(f_too_many(path, n, node.max_items))
        if node.min_items is not None and n < node.min_items:
            errs.append(f_invalid(path, n, "%s in body should have at least %d items"
                                  % (path, node.min_items)))
        if node.list_type in ("set", "map"):
            seen = []
            for i, item in enumerate(value):
                ident = item if node.list_type == "set" else (
                    {k: item.get(k) for k in node.list_map_keys} if isinstance(item, dict)
                    else None)
                if ident is None:
                    continue
                if any(json_equal(ident, s) for s in seen):
                    errs.append(f_duplicate(index(path, i), ident))
                seen.append(ident)
        for i, item in enumerate(value):
            crd_validate_value(item, node.items, index(path, i), errs)
    elif isinstance(value, dict):
        for r in node.required:
            if r not in value:
                errs.append(f_required(child(path, r)))
        n = len(value)
        if node.max_properties is not None and n > node.max_properties:
            errs.append(f_too_many(path, n, node.max_properties))
        if node.min_properties is not None and n < node.min_properties:
            errs.append(f_invalid(path, n, "%s in body should have at least %d properties"
                                  % (path, node.min_properties)))
        for k, v in value.items():
            crd_validate_value(v, node.child(k), child(path, k), errs)


def crd_validate_rules(value, old, has_old, node, path, errs):
    """Evaluates x-kubernetes-validations on every node present in value. Transition rules
    (oldSelf) only run when the old object has the node too: object fields and map values
    correlate by name, list items only in x-kubernetes-list-type: map lists (by key)."""
    if value is None or node is None:
        return
    for rule in node.rules:
        if rule.transition and not has_old:
            continue
        where = path or "<nil>"
        try:
            ok = cel_eval(rule.ast, value, old)
            if not isinstance(ok, bool):
                raise CelEvalError("no such overload")
        except CelEvalError as e:
            errs.append(f_invalid(where, node.type, "%s evaluating rule: %s"
                                  % (e, rule.error_string())))
            continue
        if not ok:
            errs.append(rule.error(where if not rule.field_path else path, node.type))
    if isinstance(value, dict) and node.type in ("object", None):
        for k, v in value.items():
            sub = node.child(k)
            if sub is None:
                continue
            old_has = has_old and isinstance(old, dict) and k in old
            p = child(path, k) if k in node.properties else key(path, k)
            crd_validate_rules(v, old[k] if old_has else None, old_has, sub, p, errs)
    elif isinstance(value, list) and node.items is not None:
        olds = {}
        if has_old and node.list_type == "map" and isinstance(old, list):
            for item in old:
                if isinstance(item, dict):
                    olds[json.dumps([item.get(k) for k in node.list_map_keys])] = item
        for i, item in enumerate(value):
            ident = (json.dumps([item.get(k) for k in node.list_map_keys])
                     if isinstance(item, dict) and node.list_type == "map" else None)
            old_item = olds.get(ident) if ident is not None else None
            crd_validate_rules(item, old_item, old_item is not None, node.items,
                               index(path, i), errs)


class CrdVersion:
    """What a custom resource of one served version needs: the schema and the hooks of its
    ResourceType."""

    def __init__(self, root, namespaced):
        self.root = root
        self.namespaced = namespaced
        self.has_rules = root.has_rules()

    def decode(self, value):
        decoder = Decoder()
        unknown, duplicates = [], []
        obj = crd_prune(value, self.root, "", unknown, duplicates, decoder)
        crd_default(obj, self.root, root=True)
        # Document order: metadata's problems were found by the decoder while pruning.
        return obj, decoder.unknown + unknown, decoder.duplicates + duplicates

    def validate(self, obj, old):
        errs = validate_object_meta(obj.get("metadata", {}), self.namespaced)
        schema_errs = []
        crd_validate_value(obj, self.root, "", schema_errs)
        errs.extend(schema_errs)
        if self.has_rules:
            if any(e.kind in _BLOCKING_KINDS for e in schema_errs):
                errs.append(f_invalid("<nil>", "null", _MSG_RULES_NOT_CHECKED))
            else:
                crd_validate_rules(obj, old, old is not None, self.root, "", errs)
        return errs

    def validate_create(self, obj):
        return self.validate(obj, None)


def _version_priority(version):
    """Kube-aware version order: GA before beta before alpha, higher numbers first."""
    m = re.fullmatch(r"v([1-9][0-9]*)(?:(alpha|beta)([1-9][0-9]*))?", version)
    if not m:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0), "")


def _selectable_field(node, json_path, where):
    """fn(obj) -> str of a selectableFields[].jsonPath (a string, integer or boolean field)."""
    if not isinstance(json_path, str) or not re.fullmatch(r"(\.[A-Za-z_][A-Za-z0-9_]*)+",
                                                          json_path):
        raise CrdError("%s: jsonPath must be a simple path such as .spec.nodeName, got %s"
                       % (where, json.dumps(json_path)))
    fields = json_path[1:].split(".")
    if fields[0] in ("metadata", "apiVersion", "kind"):
        raise CrdError("%s: %s is not selectable (metadata.name and metadata.namespace always "
                       "are)" % (where, json_path))
    for f in fields:
        node = node.properties.get(f) if node is not None and node.type == "object" else None
        if node is None:
            raise CrdError("%s: %s is not a field of the schema" % (where, json_path))
    if node.type not in ("string", "integer", "boolean"):
        raise CrdError("%s: %s must be a string, integer or boolean field, not %s"
                       % (where, json_path, node.type))

    def value(obj):
        v = obj
        for f in fields:
            if not isinstance(v, dict) or f not in v:
                return ""
            v = v[f]
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v) if v is not None else ""
    return value


def _crd_get(obj, name, typ, where, required=True):
    v = obj.get(name)
    if v is None:
        if required:
            raise CrdError("%s.%s: Required value" % (where, name))
        return typ()
    if not isinstance(v, typ):
        what = {dict: "mapping", list: "list", str: "string", bool: "boolean"}[typ]
        raise CrdError("%s.%s: must be a %s" % (where, name, what))
    return v


def make_crd_types(crd, where):
    """The ResourceTypes of a CustomResourceDefinition (one per served version, in the order
    of version priority)."""
    if not isinstance(crd, dict):
        raise CrdError("%s: not a mapping" % where)
    if crd.get("apiVersion") != CRD_API_VERSION or crd.get("kind") != "CustomResourceDefinition":
        raise CrdError("%s: expected apiVersion %s and kind CustomResourceDefinition, got %s %s"
                       % (where, CRD_API_VERSION, crd.get("apiVersion"), crd.get("kind")))
    spec = _crd_get(crd, "spec", dict, where)
    group = _crd_get(spec, "group", str, where + ".spec")
    if is_dns1123_subdomain(group) or "." not in group:
        raise CrdError("%s.spec.group: %s must be a DNS subdomain with at least one dot"
                       % (where, json.dumps(group)))
    names = _crd_get(spec, "names", dict, where + ".spec")
    nw = where + ".spec.names"
    plural = _crd_get(names, "plural", str, nw)
    kind = _crd_get(names, "kind", str, nw)
    singular = _crd_get(names, "singular", str, nw, required=False) or kind.lower()
    list_kind = _crd_get(names, "listKind", str, nw, required=False) or kind + "List"
    short_names = _crd_get(names, "shortNames", list, nw, required=False)
    categories = _crd_get(names, "categories", list, nw, required=False)
    for label, v in [("plural", plural), ("singular", singular)] + [
            ("shortNames", s) for s in short_names] + [("categories", c) for c in categories]:
        if not isinstance(v, str) or is_dns1123_label(v):
            raise CrdError("%s.%s: %s must be a lowercase DNS label"
                           % (nw, label, json.dumps(v)))
    for label, v in (("kind", kind), ("listKind", list_kind)):
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", v):
            raise CrdError("%s.%s: %s must be an identifier" % (nw, label, json.dumps(v)))
    name = (crd.get("metadata") or {}).get("name")
    if name != plural + "." + group:
        raise CrdError('%s.metadata.name: must be spec.names.plural+"."+spec.group (%s), got %s'
                       % (where, plural + "." + group, json.dumps(name)))
    scope = spec.get("scope")
    if scope not in ("Cluster", "Namespaced"):
        raise CrdError("%s.spec.scope: must be Cluster or Namespaced, got %s"
                       % (where, json.dumps(scope)))
    namespaced = scope == "Namespaced"
    strategy = (spec.get("conversion") or {}).get("strategy", "None")
    if strategy != "None":
        raise CrdError("%s.spec.conversion: strategy %s is not supported by the fake API server"
                       % (where, json.dumps(strategy)))
    versions = _crd_get(spec, "versions", list, where + ".spec")
    if not versions:
        raise CrdError("%s.spec.versions: must have at least one version" % where)
    seen, storage, types = set(), 0, []
    for i, v in enumerate(versions):
        vw = "%s.spec.versions[%d]" % (where, i)
        if not isinstance(v, dict):
            raise CrdError("%s: must be a mapping" % vw)
        for k in v:
            if k not in _CRD_VERSION_KEYS:
                raise CrdError("%s: %s is not supported by the fake API server" % (vw, k))
        vname = _crd_get(v, "name", str, vw)
        if is_dns1123_label(vname) or vname in seen:
            raise CrdError("%s.name: %s must be a unique DNS label" % (vw, json.dumps(vname)))
        seen.add(vname)
        served = _crd_get(v, "served", bool, vw)
        storage += _crd_get(v, "storage", bool, vw)
        if _crd_get(v, "deprecated", bool, vw, required=False):
            raise CrdError("%s.deprecated: deprecation warnings are not supported by the fake API "
                           "server" % vw)
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            raise CrdError("%s.schema.openAPIV3Schema: Required value" % vw)
        root = compile_root_schema(schema, vw + ".schema.openAPIV3Schema")
        subresources = _crd_get(v, "subresources", dict, vw, required=False)
        for k, sub in subresources.items():
            if k != "status":
                raise CrdError("%s.subresources.%s: not supported by the fake API server" % (vw, k))
            if sub not in (None, {}):
                raise CrdError("%s.subresources.status: must be {}" % vw)
        status_subresource = "status" in subresources
        field_labels = {}
        selectable = _crd_get(v, "selectableFields", list, vw, required=False)
        if len(selectable) > MAX_SELECTABLE_FIELDS:
            raise CrdError("%s.selectableFields: Too many: %d: must have at most %d items"
                           % (vw, len(selectable), MAX_SELECTABLE_FIELDS))
        for j, sf in enumerate(selectable):
            sw = "%s.selectableFields[%d]" % (vw, j)
            if not isinstance(sf, dict) or set(sf) != {"jsonPath"}:
                raise CrdError("%s: must be a mapping with only jsonPath" % sw)
            label = sf["jsonPath"][1:] if isinstance(sf["jsonPath"], str) else ""
            if label in field_labels:
                raise CrdError("%s.jsonPath: Duplicate value: %s" % (sw, sf["jsonPath"]))
            field_labels[label] = _selectable_field(root, sf["jsonPath"], sw + ".jsonPath")
        table = crd_table(v.get("additionalPrinterColumns", []),
                          vw + ".additionalPrinterColumns")
        if not served:
            continue
        hooks = CrdVersion(root, namespaced)
        types.append(ResourceType(
            group, (vname,), plural, singular, kind, namespaced=namespaced,
            verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update",
                   "watch"),
            schema=None, field_labels=field_labels, decode=hooks.decode,
            validate_create=hooks.validate_create, validate_update=hooks.validate,
            status_subresource=status_subresource,
            validate_status_update=hooks.validate if status_subresource else None,
            typed_list_items=True, list_kind=list_kind, short_names=short_names,
            categories=categories, empty_status=False, table=table, openapi_schema=schema))
    if storage != 1:
        raise CrdError("%s.spec.versions: exactly one version must be the storage version, got %d"
                       % (where, storage))
    types.sort(key=lambda rt: _version_priority(rt.versions[0]))
    return types


def compile_root_schema(raw, where):
    root = compile_schema(raw, where)
    if root.type != "object":
        raise CrdError("%s.type: must be object at the root" % where)
    if root.has_default or root.nullable:
        raise CrdError("%s: default and nullable are not allowed at the root" % where)
    for k in ("apiVersion", "kind"):
        sub = root.properties.get(k)
        if sub is not None and sub.type != "string":
            raise CrdError("%s.properties[%s]: must be type: string" % (where, k))
    meta_raw = (raw.get("properties") or {}).get("metadata")
    if meta_raw is not None:
        mw = where + ".properties[metadata]"
        meta = root.properties["metadata"]
        extra = set(meta_raw) - {"type", "properties"} - _SCHEMA_DOC_KEYWORDS
        if meta.type != "object" or extra:
            raise CrdError("%s: must not specify anything other than type: object and the "
                           "properties name and generateName" % mw)
        for name, sub in meta.properties.items():
            if name not in ("name", "generateName") or sub.type != "string" or sub.has_default \
                    or sub.rules or sub.nullable:
                raise CrdError("%s.properties[%s]: only name and generateName, of type string "
                               "without default or rules, may be restricted" % (mw, name))
    return root


def _yaml_loader():
    """PyYAML's SafeLoader without YAML 1.1 timestamps (sigs.k8s.io/yaml keeps them strings)."""
    try:
        import yaml
    except ImportError:
        raise CrdError("reading CRDs needs PyYAML (Debian package python3-yaml)")

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when there

    class Loader(base):
        pass
    Loader.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for ch, resolvers in base.yaml_implicit_resolvers.items()}
    return yaml, Loader


def load_crds(paths):
    """The ResourceTypes of the CRDs in these YAML files (each may hold several documents)."""
    types = []
    if not paths:
        return types
    yaml, loader = _yaml_loader()
    taken = {(RESOURCE_GROUP, p) for p in ("resourceslices", "resourceclaims", "deviceclasses")}
    kinds = set()
    for path in paths:
        try:
            with open(path) as f:
                docs = [d for d in yaml.load_all(f, Loader=loader) if d is not None]
        except OSError as e:
            raise CrdError("%s: %s" % (path, e.strerror or e))
        except yaml.YAMLError as e:
            raise CrdError("%s: not valid YAML: %s" % (path, e))
        if not docs:
            raise CrdError("%s: no CustomResourceDefinition in the file" % path)
        for i, doc in enumerate(docs):
            where = path if len(docs) == 1 else "%s (document %d)" % (path, i + 1)
            found = make_crd_types(doc, where)
            if not found:
                continue
            group, plural, kind = found[0].group, found[0].plural, found[0].kind
            if group in (RESOURCE_GROUP, "") or (group, plural) in taken \
                    or (group, kind) in kinds:
                raise CrdError("%s: %s.%s (kind %s) is already served"
                               % (where, plural, group, kind))
            taken.add((group, plural))
            kinds.add((group, kind))
            types.extend(found)
    return types


# ---------------------------------------------------------------------------------------------
# Store with event history
# ---------------------------------------------------------------------------------------------


class Event:
    __slots__ = ("rv", "type_key", "etype", "obj", "old")

    def __init__(self, rv, type_key, etype, obj, old):
        self.rv = rv
        self.type_key = type_key
        self.etype = etype
        self.obj = obj
        self.old = old


def with_rv(obj, rv):
    out = dict(obj)
    meta = dict(out.get("metadata", {}))
    meta["resourceVersion"] = str(rv)
    out["metadata"] = meta
    return out


class Store:
    """All objects of all types, one global resourceVersion counter, the last N events.

    Stored objects are never mutated; every write stores a new dict. `floor` is the oldest
    resourceVersion a watch may start from: every event after it is still in the history."""

    def __init__(self, history_limit, initial_rv):
        self.lock = threading.RLock()  # re-entrant: patch = read + update under one lock
        self.cond = threading.Condition(self.lock)
        self.rv = initial_rv
        self.floor = initial_rv
        self.tables = collections.defaultdict(dict)  # type_key -> {(ns, name): obj}
        self.history = collections.deque()
        self.history_limit = history_limit
        self.reset_epoch = 0
        self.close_epoch = 0
        self.open_watches = 0

    def commit(self, type_key, etype, ns_name, obj, old):
        """Caller holds the lock. Returns the stored object (with its new resourceVersion)."""
        self.rv += 1
        stored = with_rv(obj, self.rv)
        if etype == "DELETED":
            self.tables[type_key].pop(ns_name, None)
        else:
            self.tables[type_key][ns_name] = stored
        self.history.append(Event(self.rv, type_key, etype, stored, old))
        while len(self.history) > self.history_limit:
            self.floor = self.history.popleft().rv
        self.cond.notify_all()
        return stored

    def seed(self, type_key, ns_name, obj):
        """Adds an object without an event (initial state); caller holds the lock."""
        self.rv += 1
        self.tables[type_key][ns_name] = with_rv(obj, self.rv)
        self.floor = self.rv

    def events_after(self, rv):
        out = []
        for ev in reversed(self.history):
            if ev.rv <= rv:
                break
            out.append(ev)
        out.reverse()
        return out

    def wipe(self):
        """Forgets everything, as if etcd were wiped; open watches end with 410."""
        for table in self.tables.values():
            table.clear()
        self.history.clear()
        self.rv += 1
        self.floor = self.rv
        self.reset_epoch += 1
        self.cond.notify_all()


# ---------------------------------------------------------------------------------------------
# JSON patches
# ---------------------------------------------------------------------------------------------


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# The keys strategic merge patch gives a meaning (k8s.io/apimachinery strategicpatch: "$patch",
# "$retainKeys", and keys starting "$setElementOrder" or "$deleteFromPrimitiveList", which are
# followed by "/<field>"); any other key, "$schema" in a claim's opaque parameters too, is an
# ordinary field.
SMP_DIRECTIVES = ("$patch", "$retainKeys")
SMP_DIRECTIVE_PREFIXES = ("$setElementOrder", "$deleteFromPrimitiveList")


def is_smp_directive(key):
    return key in SMP_DIRECTIVES or key.startswith(SMP_DIRECTIVE_PREFIXES)


def smp_directive(patch, path=""):
    """The first strategic merge patch directive ($patch, $setElementOrder/..., $retainKeys,
    $deleteFromPrimitiveList/...) in a patch, as "<key> at <path>", or None. The fake applies
    strategic merge patches as JSON merge patches, which would store a directive as a field."""
    if isinstance(patch, dict):
        for k, v in patch.items():
            if is_smp_directive(k):
                return "%s at %s" % (k, path or ".")
            found = smp_directive(v, child(path, k))
            if found:
                return found
    elif isinstance(patch, list):
        for i, v in enumerate(patch):
            found = smp_directive(v, index(path, i))
            if found:
                return found
    return None


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError("invalid JSON pointer %s" % json.dumps(path))
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc, tokens):
    cur = doc
    for t in tokens:
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list) and t.isdigit() and int(t) < len(cur):
            cur = cur[int(t)]
        else:
            raise ValueError("path not found: /%s" % "/".join(tokens))
    return cur


def json_patch(doc, ops):
    """RFC 6902 on a deep copy of doc."""
    doc = json.loads(json.dumps(doc))
    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be an array of operations")
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ValueError("invalid JSON patch operation %s" % json.dumps(op))
        kind = op["op"]
        tokens = _pointer(op["path"])
        if kind == "copy" or kind == "move":
            value = json.loads(json.dumps(_resolve(doc, _pointer(op.get("from", "")))))
            if kind == "move":
                doc = json_patch(doc, [{"op": "remove", "path": op["from"]}])
            kind = "add"
        elif kind in ("add", "replace", "test"):
            if "value" not in op:
                raise ValueError("missing value in %s operation" % kind)
            value = op["value"]
        elif kind != "remove":
            raise ValueError("unknown JSON patch operation %s" % json.dumps(kind))
        if kind == "test":
            if _resolve(doc, tokens) != value:
                raise ValueError("testing value %s failed" % op["path"])
            continue
        if not tokens:
            if kind == "remove":
                raise ValueError("cannot remove the root")
            doc = value
            continue
        parent = _resolve(doc, tokens[:-1])
        last = tokens[-1]
        if isinstance(parent, dict):
            if kind in ("replace", "remove") and last not in parent:
                raise ValueError("path not found: %s" % op["path"])
            if kind == "remove":
                del parent[last]
            else:
                parent[last] = value
        elif isinstance(parent, list):
            if last == "-" and kind == "add":
                parent.append(value)
                continue
            if not last.isdigit():
                raise ValueError("invalid array index %s" % last)
            i = int(last)
            if kind == "add":
                if i > len(parent):
                    raise ValueError("array index out of range: %s" % op["path"])
                parent.insert(i, value)
            else:
                if i >= len(parent):
                    raise ValueError("array index out of range: %s" % op["path"])
                if kind == "remove":
                    del parent[i]
                else:
                    parent[i] = value
        else:
            raise ValueError("path not found: %s" % op["path"])
    return doc


# ---------------------------------------------------------------------------------------------
# The API
# ---------------------------------------------------------------------------------------------

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand
_BOOL_TRUE = ("1", "t", "T", "true", "TRUE", "True")
_BOOL_FALSE = ("0", "f", "F", "false", "FALSE", "False")


def parse_bool(params, name):
    v = params.get(name)
    if v is None or v == "":
        return False
    if v in _BOOL_TRUE:
        return True
    if v in _BOOL_FALSE:
        return False
    raise bad_request('invalid value for %s: %s: strconv.ParseBool: parsing "%s": invalid syntax'
                      % (name, v, v))


def parse_dry_run(params, options=None):
    values = []
    if "dryRun" in params:
        values.append(params["dryRun"])
    if options and isinstance(options.get("dryRun"), list):
        values.extend(options["dryRun"])
    for v in values:
        if v != "All":
            raise ApiError(400, "BadRequest", 'dryRun: Unsupported value: "%s": supported '
                           'values: "All"' % v)
    return bool(values)


def parse_field_validation(params):
    v = params.get("fieldValidation", "")
    if v == "":
        return "Warn"
    if v not in ("Strict", "Warn", "Ignore"):
        raise bad_request("fieldValidation: Unsupported value: \"%s\": supported values: "
                          "\"Ignore\", \"Strict\", \"Warn\"" % v)
    return v


class Config:
    def __init__(self, args):
        self.versions = tuple(args.versions)
        self.accept_mixins = args.mixins == "accept"
        self.accept_list_attributes = args.list_attributes == "accept"
        self.accept_device_taints = args.device_taints == "accept"
        self.pool_checks = getattr(args, "pool_checks", "accept") == "reject"
        self.crd_types = list(args.crd_types)  # ResourceTypes of the --crd files
        self.token = args.token
        self.nodes = args.nodes
        self.watch_history = args.watch_history
        self.bookmark_interval = args.bookmark_interval
        self.unconditional_update = args.unconditional_update == "allow"
        self.initial_rv = args.initial_resource_version


class Api:
    """Everything except HTTP: resource types, the store, control state."""

    def __init__(self, cfg, log_file=None):
        self.cfg = cfg
        initial = cfg.initial_rv if cfg.initial_rv is not None else time.time_ns() // 1000
        self.store = Store(cfg.watch_history, initial)
        self.types = {}  # (group, version, plural) -> ResourceType
        self.type_list = []
        slices = make_resourceslice_type(cfg)
        slices.slice_validator.stored = lambda: self.store.tables[slices.type_key]
        self.register(slices)
        self.register(make_resourceclaim_type(cfg))
        self.register(make_deviceclass_type(cfg))
        self.register(make_node_type())
        self.node_type = self.type_list[-1]
        self.register(make_resourceclaimtemplate_type(cfg))
        self.register(make_event_type())
        self.register(make_pod_type())
        for rt in cfg.crd_types:
            self.register(rt)
        self.requests = []
        self.requests_lock = threading.Lock()
        self.log_file = log_file
        self.fail_lock = threading.Lock()
        self.fail = None  # dict(count, code, method, path, retry_after)
        self.hang_cond = threading.Condition()
        self.hangs = []  # dict(method, path, seconds, count, matched, waiting), in order added
        self.hang_epoch = 0  # bumped by DELETE /__control/hang: held requests go on at once
        self.snapshots = collections.OrderedDict()  # continue token id -> (rv, remaining)
        with self.store.lock:
            self.seed_nodes()

    def register(self, rt):
        self.type_list.append(rt)
        for v in rt.versions:
            self.types[(rt.group, v, rt.plural)] = rt

    def seed_nodes(self):
        for name, uid in self.cfg.nodes:
            node = {"metadata": {"name": name, "uid": uid, "creationTimestamp": now_rfc3339(),
                                 "labels": {"kubernetes.io/hostname": name}},
                    "spec": {}, "status": {}}
            self.store.seed(self.node_type.type_key, ("", name), node)

    # --- request log and error injection ------------------------------------------------------

    def record(self, method, path, query, code):
        entry = {"method": method, "path": path, "query": query, "code": code}
        with self.requests_lock:
            self.requests.append(entry)
            if self.log_file:
                self.log_file.write("%s %s%s %d\n" % (method, path, "?" + query if query else "",
                                                      code))
                self.log_file.flush()

    def take_injected_failure(self, method, path):
        with self.fail_lock:
            f = self.fail
            if not f or f["count"] <= 0:
                return None
            if f["method"] and f["method"] != method:
                return None
            if f["path"] and f["path"] not in path:
                return None
            f["count"] -= 1
            code = f["code"]
        reasons = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
                   409: "Conflict", 410: "Expired", 422: "Invalid", 429: "TooManyRequests",
                   500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}
        headers = []
        if code == 429 or code == 503:
            headers.append(("Retry-After", str(f["retry_after"])))
        return ApiError(code, reasons.get(code, "InternalError"),
                        "injected failure (HTTP %d) by /__control/fail" % code, headers=headers)

    def take_hang(self, method, path):
        """The first hang rule matching the request, counted; None when none matches."""
        with self.hang_cond:
            for h in self.hangs:
                if h["method"] and h["method"] != method:
                    continue
                if h["path"] not in path:
                    continue
                if h["count"] == 0:
                    continue
                if h["count"] > 0:
                    h["count"] -= 1
                h["matched"] += 1
                return h
        return None

    def hold(self, rule, client_closed):
        """Holds a request for the rule's seconds, until DELETE /__control/hang, or until the
        client goes away (ClientGone: nobody is left to answer)."""
        deadline = time.monotonic() + rule["seconds"]
        with self.hang_cond:
            epoch = self.hang_epoch
            rule["waiting"] += 1
            try:
                while self.hang_epoch == epoch:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self.hang_cond.wait(min(left, 0.05))
                    if client_closed():
                        raise ClientGone()
            finally:
                rule["waiting"] -= 1

    # --- decoding -------------------------------------------------------------------------------

    def decode(self, rt, version, body, field_validation, what="object"):
        """Body bytes (or an already parsed value) -> (object, warnings). 400 on bad input."""
        if isinstance(body, (bytes, bytearray)):
            if not body:
                raise bad_request("the body of the request was empty")
            try:
                value = parse_json(body)
            except ValueError as e:
                raise bad_request("couldn't get version/kind; json parse error: %s" % e)
        else:
            value = body
        if not isinstance(value, dict):
            raise bad_request("couldn't get version/kind; json parse error: json: cannot "
                              "unmarshal %s into Go value of type struct { APIVersion string "
                              "\"json:\\\"apiVersion,omitempty\\\"\"; Kind string "
                              "\"json:\\\"kind,omitempty\\\"\" }" % _json_type(value))
        gv = rt.group_version(version)
        api_version = value.get("apiVersion")
        if api_version not in (None, "") and api_version != gv:
            raise bad_request("the API version in the data (%s) does not match the expected API "
                              "version (%s)" % (api_version, gv))
        kind = value.get("kind")
        if kind not in (None, "") and kind != rt.kind:
            raise bad_request("the kind in the data (%s) does not match the expected kind (%s)"
                              % (kind, rt.kind))
        try:
            obj, unknown, duplicates = rt.decode(value)
        except DecodeError as e:
            raise bad_request('%s in version "%s" cannot be handled as a %s: %s'
                              % (rt.kind, version, rt.kind, e))
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
        obj.setdefault("metadata", {})
        problems = (['unknown field "%s"' % p for p in unknown]
                    + ['duplicate field "%s"' % p for p in duplicates])
        fields = unknown + duplicates
        warnings = []
        if problems:
            if field_validation == "Strict":
                causes = [{"reason": "FieldValueInvalid" if i < len(unknown)
                           else "FieldValueDuplicate", "message": problems[i],
                           "field": "." + fields[i]} for i in range(len(problems))]
                raise bad_request("strict decoding error: " + ", ".join(problems), causes)
            if field_validation == "Warn":
                warnings.extend(problems)
        return obj, warnings

    # --- helpers --------------------------------------------------------------------------------

    def _ns_name(self, rt, ns, name):
        return (ns if rt.namespaced else "", name)

    def _selectors(self, rt, params):
        fsel = parse_field_selector(params.get("fieldSelector", ""),
                                    rt.supported_field_selectors())
        lsel = parse_label_selector(params.get("labelSelector", ""))
        return fsel, lsel

    def _matches(self, rt, obj, ns, fsel, lsel):
        if rt.namespaced and ns and obj["metadata"].get("namespace") != ns:
            return False
        return (match_fields(fsel, rt.field_set(obj))
                and match_labels(lsel, obj["metadata"].get("labels", {})))

    def _check_rv_param(self, params):
        rv = params.get("resourceVersion", "")
        if rv in ("", "0"):
            if params.get("resourceVersionMatch") and rv == "":
                raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is "
                                  "provided")
            return None
        try:
            n = int(rv)
        except ValueError:
            raise bad_request("invalid resource version: %s" % json.dumps(rv))
        if n > self.store.rv:
            raise ApiError(504, "Timeout", "Too large resource version: %d, current: %d"
                           % (n, self.store.rv),
                           {"causes": [{"reason": "ResourceVersionTooLarge",
                                        "message": "Too large resource version"}],
                            "retryAfterSeconds": 1})
        return n

    # --- verbs ----------------------------------------------------------------------------------

    def list(self, rt, version, ns, params):
        fsel, lsel = self._selectors(rt, params)
        limit = params.get("limit", "")
        try:
            limit = int(limit) if limit else 0
        except ValueError:
            raise bad_request("invalid limit: %s" % limit)
        token = params.get("continue", "")
        with self.store.lock:
            self._check_rv_param(params)
            if token:
                items, rv = self._resume(token)
            else:
                table = self.store.tables[rt.type_key]
                items = [table[k] for k in sorted(table)
                         if self._matches(rt, table[k], ns, fsel, lsel)]
                rv = self.store.rv
            meta = {"resourceVersion": str(rv)}
            if limit > 0 and len(items) > limit:
                rest = items[limit:]
                items = items[:limit]
                meta["continue"] = self._snapshot(rv, rest)
                meta["remainingItemCount"] = len(rest)
        if rt.typed_list_items:
            items = [rt.render(o, version) for o in items]
        return {"kind": rt.list_kind, "apiVersion": rt.group_version(version),
                "metadata": meta, "items": items}

    def _snapshot(self, rv, rest):
        token_id = secrets.token_hex(8)
        self.snapshots[token_id] = (rv, rest)
        while len(self.snapshots) > 64:
            self.snapshots.popitem(last=False)
        raw = json.dumps({"rv": rv, "id": token_id}).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _resume(self, token):
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            decoded = json.loads(raw)
            token_id, rv = decoded["id"], decoded["rv"]
        except (ValueError, KeyError, TypeError):
            raise bad_request("continue key is not valid: incorrect encoded start "
                              "resourceVersion (version meta.k8s.io/v1)")
        snap = self.snapshots.pop(token_id, None)
        if snap is None or rv < self.store.floor:
            raise ApiError(410, "Expired", "The provided continue parameter is too old to "
                           "display a consistent list result. You can start a new list without "
                           "the continue parameter.")
        return snap[1], snap[0]

    def get(self, rt, version, ns, name):
        with self.store.lock:
            obj = self.store.tables[rt.type_key].get(self._ns_name(rt, ns, name))
        if obj is None:
            raise rt.not_found(name)
        return rt.render(obj, version)

    def _prepare_meta_for_create(self, rt, obj, ns):
        meta = obj["metadata"]
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        for f in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
                  "selfLink"):
            meta.pop(f, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1

    def create(self, rt, version, ns, body, params):
        field_validation = parse_field_validation(params)
        dry_run = parse_dry_run(params)
        obj, warnings = self.decode(rt, version, body, field_validation)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise ApiError(500, "", "resourceVersion should not be set on objects to be created")
        self._prepare_meta_for_create(rt, obj, ns)
        if rt.status_subresource:
            rt.set_status(obj, None)  # status is only written through /status
        if rt.prepare:
            rt.prepare(obj, None)
        if rt.warnings:
            warnings.extend(rt.warnings(obj))
        with self.store.lock:
            table = self.store.tables[rt.type_key]
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(8):
                    candidate = meta["generateName"][:58] + "".join(
                        secrets.choice(_NAME_ALPHABET) for _ in range(5))
                    if self._ns_name(rt, ns, candidate) not in table:
                        break
                meta["name"] = candidate
            errs = rt.validate_create(obj) if rt.validate_create else []
            if errs:
                raise rt.invalid(meta.get("name", ""), errs)
            k = self._ns_name(rt, ns, meta["name"])
            if k in table:
                raise rt.already_exists(meta["name"])
            if dry_run:
                return 201, rt.render(obj, version), warnings
            stored = self.store.commit(rt.type_key, "ADDED", k, obj, None)
        return 201, rt.render(stored, version), warnings

    def update(self, rt, version, ns, name, body, params, is_patch=False, subresource=""):
        """PUT of the object, or of its /status (subresource "status"): then only the status
        of the stored object is replaced; spec and metadata changes in the body are ignored,
        except that a resourceVersion or uid in it must match."""
        field_validation = parse_field_validation(params)
        dry_run = parse_dry_run(params)
        obj, warnings = self.decode(rt, version, body, field_validation)
        meta = obj["metadata"]
        if meta.get("name", "") != name:
            raise bad_request("the name of the object (%s) does not match the name on the URL "
                              "(%s)" % (meta.get("name", ""), name))
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        rv = meta.get("resourceVersion", "")
        if rv:
            try:
                int(rv)
            except ValueError:
                raise bad_request("invalid resource version: %s" % json.dumps(rv))
        if rt.warnings:
            warnings.extend(rt.warnings(obj))
        with self.store.lock:
            k = self._ns_name(rt, ns, name)
            old = self.store.tables[rt.type_key].get(k)
            if old is None:
                raise rt.not_found(name)
            old_meta = old["metadata"]
            if not rv:
                if not self.cfg.unconditional_update and not is_patch:
                    raise rt.conflict(name, "metadata.resourceVersion must be specified for an "
                                      "update")
            elif rv != old_meta["resourceVersion"]:
                raise rt.conflict(name, "the object has been modified; please apply your "
                                  "changes to the latest version and try again")
            if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
                raise rt.conflict(name, "Precondition failed: UID in precondition: %s, UID in "
                                  "object meta: %s" % (old_meta.get("uid"), meta["uid"]))
            if subresource == "status":
                status = obj.get("status")
                obj = dict(old)
                rt.set_status(obj, status)
                meta = obj["metadata"] = dict(old_meta)
            else:
                for f in ("uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds"):
                    if f in old_meta:
                        meta[f] = old_meta[f]
                    else:
                        meta.pop(f, None)
                meta.pop("managedFields", None)
                meta.pop("selfLink", None)
                meta["resourceVersion"] = old_meta["resourceVersion"]
                if rt.status_subresource:
                    rt.set_status(obj, old.get("status"))
                if rt.prepare:
                    rt.prepare(obj, old)
            # The generation counts changes of everything but metadata (and status, when that
            # is a subresource).
            unversioned = ("metadata", "status") if rt.status_subresource else ("metadata",)
            spec_changed = any(obj.get(f) != old.get(f) for f in set(obj) | set(old)
                               if f not in unversioned)
            meta["generation"] = old_meta.get("generation", 1) + (1 if spec_changed else 0)
            if (old_meta.get("deletionTimestamp")
                    and set(meta.get("finalizers", [])) - set(old_meta.get("finalizers", []))):
                errs = [f_forbidden("metadata.finalizers", "no new finalizers can be added if "
                                    "the object is being deleted")]
                raise rt.invalid(name, errs)
            validate = rt.validate_status_update if subresource else rt.validate_update
            errs = validate(obj, old) if validate else []
            if errs:
                raise rt.invalid(name, errs)
            if obj == old:  # a no-op update writes nothing and sends no event
                return 200, rt.render(old, version), warnings
            if dry_run:
                return 200, rt.render(obj, version), warnings
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                stored = self.store.commit(rt.type_key, "DELETED", k, obj, old)
                return 200, rt.render(stored, version), warnings
            stored = self.store.commit(rt.type_key, "MODIFIED", k, obj, old)
        return 200, rt.render(stored, version), warnings

    def patch(self, rt, version, ns, name, body, params, content_type, subresource=""):
        """Merge patch (RFC 7386; strategic merge patch is treated alike, which is what it
        amounts to for ResourceSlices) or JSON patch (RFC 6902), then an update. The patched
        object keeps the stored resourceVersion unless the patch sets one, so a patch is
        unconditional unless it names a resourceVersion, which must then match."""
        try:
            patch = parse_json(body)
        except ValueError as e:
            raise bad_request("error decoding patch: %s" % e)
        if content_type == "application/strategic-merge-patch+json":
            directive = smp_directive(patch)
            if directive:
                raise ApiError(415, "UnsupportedMediaType", "strategic merge patch directive %s: "
                               "not supported by the fake API server, which applies strategic "
                               "merge patches as JSON merge patches" % directive)
        with self.store.lock:  # re-entrant: read, patch and update atomically
            old = self.store.tables[rt.type_key].get(self._ns_name(rt, ns, name))
            if old is None:
                raise rt.not_found(name)
            current = rt.render(old, version)
            try:
                if content_type == "application/json-patch+json":
                    result = json_patch(current, patch)
                else:
                    if not isinstance(patch, dict):
                        raise ValueError("a merge patch must be a JSON object")
                    result = merge_patch(current, patch)
            except ValueError as e:
                raise ApiError(422, "Invalid", "the server rejected our request due to an error "
                               "in our request: %s" % e)
            return self.update(rt, version, ns, name, result, params, is_patch=True,
                               subresource=subresource)

    def delete(self, rt, version, ns, name, body, params):
        options = {}
        if body and body.strip():
            try:
                options = parse_json(body)
            except ValueError as e:
                raise bad_request("couldn't decode DeleteOptions: %s" % e)
            if not isinstance(options, dict):
                raise bad_request("DeleteOptions must be a JSON object")
        dry_run = parse_dry_run(params, options)
        pre = options.get("preconditions") or {}
        if not isinstance(pre, dict):
            raise bad_request("preconditions must be an object")
        policy = options.get("propagationPolicy")
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise ApiError(422, "Invalid", 'DeleteOptions.meta.k8s.io "" is invalid: '
                           'propagationPolicy: Unsupported value: %s' % json.dumps(policy))
        with self.store.lock:
            k = self._ns_name(rt, ns, name)
            old = self.store.tables[rt.type_key].get(k)
            if old is None:
                raise rt.not_found(name)
            self._check_preconditions(rt, name, old, pre)
            meta = old["metadata"]
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return 200, rt.render(old, version)
                obj = dict(old)
                obj["metadata"] = dict(meta, deletionTimestamp=now_rfc3339(),
                                       deletionGracePeriodSeconds=0)
                if dry_run:
                    return 200, rt.render(obj, version)
                stored = self.store.commit(rt.type_key, "MODIFIED", k, obj, old)
                return 200, rt.render(stored, version)
            if not dry_run:
                self.store.commit(rt.type_key, "DELETED", k, old, old)
        details = {"name": name, "group": rt.group, "kind": rt.plural, "uid": meta.get("uid", "")}
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                     "details": details}

    def _check_preconditions(self, rt, name, old, pre):
        meta = old["metadata"]
        uid = pre.get("uid")
        if uid is not None and uid != meta.get("uid"):
            raise rt.conflict(name, "Precondition failed: UID in precondition: %s, UID in object "
                              "meta: %s" % (uid, meta.get("uid")))
        rv = pre.get("resourceVersion")
        if rv is not None and rv != meta.get("resourceVersion"):
            raise rt.conflict(name, "Precondition failed: ResourceVersion in precondition: %s, "
                              "ResourceVersion in object meta: %s"
                              % (rv, meta.get("resourceVersion")))

    def delete_collection(self, rt, version, ns, params, body):
        options = {}
        if body and body.strip():
            try:
                options = parse_json(body)
            except ValueError as e:
                raise bad_request("couldn't decode DeleteOptions: %s" % e)
            if not isinstance(options, dict):
                raise bad_request("DeleteOptions must be a JSON object")
        dry_run = parse_dry_run(params, options)
        fsel, lsel = self._selectors(rt, params)
        # As the real registry does: list, then delete each listed object as a single DELETE
        # would (one DELETED event each; an object with finalizers only gets its
        # deletionTimestamp, a MODIFIED event), and answer with the list as it was listed.
        deleted = []
        with self.store.lock:
            table = self.store.tables[rt.type_key]
            rv = self.store.rv
            for k in sorted(table):
                obj = table[k]
                if not self._matches(rt, obj, ns, fsel, lsel):
                    continue
                deleted.append(obj)
                if dry_run:
                    continue
                meta = obj["metadata"]
                if not meta.get("finalizers"):
                    self.store.commit(rt.type_key, "DELETED", k, obj, obj)
                elif not meta.get("deletionTimestamp"):
                    marked = dict(obj)
                    marked["metadata"] = dict(meta, deletionTimestamp=now_rfc3339(),
                                              deletionGracePeriodSeconds=0)
                    self.store.commit(rt.type_key, "MODIFIED", k, marked, obj)
        if rt.typed_list_items:
            deleted = [rt.render(o, version) for o in deleted]
        return 200, {"kind": rt.list_kind, "apiVersion": rt.group_version(version),
                     "metadata": {"resourceVersion": str(rv)}, "items": deleted}

    # --- discovery -----------------------------------------------------------------------------

    def served_versions(self, group):
        versions = []
        for rt in self.type_list:
            if rt.group == group:
                for v in rt.versions:
                    if v not in versions:
                        versions.append(v)
        return versions

    def api_group(self, group):
        versions = self.served_versions(group)
        preferred = min(versions, key=_version_priority)  # GA, then beta, then alpha
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group,
                "versions": [{"groupVersion": group + "/" + v, "version": v} for v in versions],
                "preferredVersion": {"groupVersion": group + "/" + preferred,
                                     "version": preferred}}

    def resource_list(self, group, version):
        resources = []
        for rt in self.type_list:
            if rt.group == group and version in rt.versions:
                entry = {"name": rt.plural, "singularName": rt.singular,
                         "namespaced": rt.namespaced, "kind": rt.kind, "verbs": sorted(rt.verbs)}
                if rt.short_names:
                    entry["shortNames"] = list(rt.short_names)
                if rt.categories:
                    entry["categories"] = list(rt.categories)
                resources.append(entry)
                if rt.status_subresource:
                    resources.append({"name": rt.plural + "/status", "singularName": "",
                                      "namespaced": rt.namespaced, "kind": rt.kind,
                                      "verbs": ["get", "patch", "update"]})
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": group + "/" + version if group else version,
                "resources": resources}

    def group_versions(self):
        """[(group, version)] of every served group version, core first."""
        out = [("", v) for v in self.served_versions("")]
        for g in sorted({rt.group for rt in self.type_list if rt.group}):
            out.extend((g, v) for v in self.served_versions(g))
        return out

    def openapi_document(self, group, version):
        """The OpenAPI v3 document of one group version (/openapi/v3/apis/<g>/<v>): every
        operation with its parameters (kubectl looks for fieldValidation on PATCH to leave
        validation to the server), and the schemas of custom resources only. Built-in types
        have none: kubectl then computes strategic merge patches from its compiled-in types,
        which carry the real patch strategies and list types."""
        paths, schemas = {}, {}
        for rt in self.type_list:
            if rt.group != group or version not in rt.versions:
                continue
            ref = None
            if rt.openapi_schema is not None:
                name = openapi_schema_name(rt, version)
                schema = json.loads(json.dumps(rt.openapi_schema))
                schema["x-kubernetes-group-version-kind"] = [
                    {"group": rt.group, "version": version, "kind": rt.kind}]
                schemas[name] = schema
                ref = "#/components/schemas/" + name
            paths.update(openapi_paths(rt, version, ref))
        return {"openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": "v1.36.0-fake"},
                "paths": paths, "components": {"schemas": schemas}}

    def openapi_root(self):
        """/openapi/v3: where each group version's document is, with a hash of its content (the
        client caches documents by that URL)."""
        paths = {}
        for group, version in self.group_versions():
            key = "apis/%s/%s" % (group, version) if group else "api/" + version
            doc = json.dumps(self.openapi_document(group, version), sort_keys=True)
            digest = hashlib.sha512(doc.encode()).hexdigest().upper()
            paths[key] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (key, digest)}
        return {"paths": paths}


# ---------------------------------------------------------------------------------------------
# OpenAPI v3 (/openapi/v3): what kubectl reads to find out that the server validates fields
# ---------------------------------------------------------------------------------------------

def openapi_schema_name(rt, version):
    """A CRD's schema name: its group reversed, then version and kind (as the real server)."""
    return ".".join(reversed(rt.group.split("."))) + "." + version + "." + rt.kind


def _openapi_param(name, where="query", typ="string", required=False):
    return {"name": name, "in": where, "required": required, "schema": {"type": typ},
            "uniqueItems": True}


def openapi_paths(rt, version, ref):
    """The paths of one resource: list/create/deletecollection on the collection, get/update/
    patch/delete on an object, with the query parameters the fake understands (no apply
    patch, no force: server-side apply is not served). ref: the object's schema, or None."""
    gvk = {"group": rt.group, "version": version, "kind": rt.kind}
    base = "/apis/%s/%s" % (rt.group, version) if rt.group else "/api/" + version
    content = {"application/json": {"schema": {"$ref": ref} if ref else {"type": "object"}}}
    listed = {"application/json": {"schema": {"type": "object"}}}

    def op(action, params, ok=content, body=None):
        o = {"operationId": "%s%s" % (action, rt.kind), "parameters": params,
             "responses": {"200": {"description": "OK", "content": ok}},
             "x-kubernetes-action": action, "x-kubernetes-group-version-kind": dict(gvk)}
        if body:
            o["requestBody"] = {"content": body, "required": True}
        return o

    write = [_openapi_param("dryRun"), _openapi_param("fieldManager"),
             _openapi_param("fieldValidation")]
    selectors = [_openapi_param(n) for n in ("fieldSelector", "labelSelector", "continue",
                                              "resourceVersion", "resourceVersionMatch")] + [
        _openapi_param("limit", typ="integer"), _openapi_param("watch", typ="boolean"),
        _openapi_param("allowWatchBookmarks", typ="boolean")]
    patch_types = ["application/json-patch+json", "application/merge-patch+json"]
    if rt.openapi_schema is None:
        patch_types.append("application/strategic-merge-patch+json")
    path_params = [_openapi_param("name", "path", required=True)]
    coll = base
    if rt.namespaced:
        path_params.append(_openapi_param("namespace", "path", required=True))
        coll += "/namespaces/{namespace}"
    coll += "/" + rt.plural
    item = coll + "/{name}"
    paths = {}
    c, i = {}, {}
    if "list" in rt.verbs:
        c["get"] = op("list", selectors, listed)
    if "create" in rt.verbs:
        c["post"] = op("post", write, body=content)
    if "deletecollection" in rt.verbs:
        c["delete"] = op("deletecollection", selectors + [_openapi_param("dryRun")], listed)
    if "get" in rt.verbs:
        i["get"] = op("get", [])
    if "update" in rt.verbs:
        i["put"] = op("put", write, body=content)
    if "patch" in rt.verbs:
        i["patch"] = op("patch", write, body={t: {"schema": {"type": "object"}}
                                              for t in patch_types})
    if "delete" in rt.verbs:
        i["delete"] = op("delete", [_openapi_param("dryRun")])
    if rt.namespaced:
        c["parameters"] = [_openapi_param("namespace", "path", required=True)]
        if "list" in rt.verbs:
            paths[base + "/" + rt.plural] = {"get": op("list", selectors, listed)}
    i["parameters"] = path_params
    paths[coll] = c
    paths[item] = i
    return paths


# ---------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------


class ClientGone(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-apiserver"
    sys_version = ""
    disable_nagle_algorithm = True
    timeout = 300  # idle keep-alive connections

    api = None  # set on the subclass made by make_server
    control_only = False  # the plain-HTTP control listener serves /__control/* and /healthz

    def setup(self):
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
        super().setup()

    def version_string(self):
        return self.server_version

    def log_message(self, fmt, *args):
        pass

    def log_request(self, code="-", size="-"):
        path, _, query = (getattr(self, "path", None) or "").partition("?")
        if path.startswith("/__control/") or path in ("/healthz", "/readyz", "/livez"):
            return
        try:
            code = int(code)
        except (TypeError, ValueError):
            code = 0
        self.api.record(self.command or "", path, query, code)

    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    # --- plumbing --------------------------------------------------------------------------------

    def dispatch(self):
        self.headers_sent = False
        self.undrained = 0
        try:
            self.route()
        except ApiError as e:
            if self.headers_sent:
                self.close_connection = True
            else:
                self.send_json(e.code, e.body(), e.headers)
                self.drain()
        except (ClientGone, BrokenPipeError, ConnectionResetError, socket.timeout, ssl.SSLError):
            self.close_connection = True
        except Exception as e:  # never let bad input kill the thread without an answer
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            if not self.headers_sent:
                try:
                    self.send_json(500, status_object(500, "InternalError",
                                                      "Internal error occurred: %s" % e))
                except OSError:
                    pass

    def send_json(self, code, body, headers=(), content_type="application/json"):
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.headers_sent = True
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_text(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.headers_sent = True
        if self.command != "HEAD":
            self.wfile.write(data)

    def drain(self):
        """After answering 413: reads and drops the rest of the body (bounded), so that a client
        still sending it gets to read the answer instead of a reset connection."""
        left = min(self.undrained, MAX_DRAINED_BYTES)
        self.undrained = 0
        try:
            self.connection.settimeout(5)
            while left > 0:
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    break
                left -= len(chunk)
        except (OSError, ValueError):
            pass

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if te.lower() == "chunked":
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise ClientGone()
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    raise bad_request("malformed chunked request body")
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY_BYTES:
                    self.close_connection = True
                    raise ApiError(413, "RequestEntityTooLarge",
                                   "Request entity too large: limit is %d" % MAX_BODY_BYTES)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
            return b"".join(chunks)
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            n = int(length)
            if n < 0:
                raise ValueError()
        except ValueError:
            self.close_connection = True
            raise bad_request("invalid Content-Length: %s" % length)
        if n > MAX_BODY_BYTES:
            self.close_connection = True
            self.undrained = n
            raise ApiError(413, "RequestEntityTooLarge",
                           "Request entity too large: limit is %d" % MAX_BODY_BYTES)
        data = self.rfile.read(n)
        if len(data) < n:
            raise ClientGone()
        return data

    # --- routing ----------------------------------------------------------------------------------

    def route(self):
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        params = {k: v[0] for k, v in
                  urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        body = self.read_body()
        method = self.command
        api = self.api

        if path in ("/healthz", "/readyz", "/livez"):
            return self.send_text(200, "ok")
        if path.startswith("/__control/"):
            return self.control(path[len("/__control/"):], method, params)
        if self.control_only:
            raise not_found_path()

        if api.cfg.token:
            expected = ("Bearer " + api.cfg.token).encode()
            given = self.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                raise ApiError(401, "Unauthorized", "Unauthorized")
        hang = api.take_hang(method, path)
        if hang:
            api.hold(hang, self.client_closed)
        failure = api.take_injected_failure(method, path)
        if failure:
            raise failure
        self.table_version = wants_table(self.headers.get("Accept", ""))

        segs = [urllib.parse.unquote(s) for s in path.split("/") if s]
        discovery = self.discovery(segs)
        if discovery is not None:
            if method not in ("GET", "HEAD"):
                raise method_not_allowed()
            return self.send_json(200, discovery)
        if len(segs) < 3 or segs[0] not in ("api", "apis"):
            raise not_found_path()
        if segs[0] == "api":
            group, version, rest = "", segs[1], segs[2:]
        else:
            if len(segs) < 4:
                raise not_found_path()
            group, version, rest = segs[1], segs[2], segs[3:]
        if version not in api.served_versions(group):
            raise not_found_path()
        ns = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise not_found_path()
        rt = api.types.get((group, version, rest[0]))
        if rt is None or (ns and not rt.namespaced):
            raise not_found_path()
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and (sub != "status" or not rt.status_subresource):
            raise not_found_path()
        if rt.namespaced and not ns and name:
            raise not_found_path()
        if ns and is_dns1123_label(ns):
            # Namespaces are implicit: every valid name exists, no other does.
            raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns,
                           {"name": ns, "kind": "namespaces"})
        if sub:
            return self.status_subresource(rt, version, ns, name, method, params, body)
        self.resource(rt, version, ns, name, method, params, body)

    def status_subresource(self, rt, version, ns, name, method, params, body):
        """GET, PUT and PATCH of <object>/status."""
        api = self.api
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if method in ("GET", "HEAD") and "get" in rt.verbs:
            return self.send_json(200, api.get(rt, version, ns, name))
        if method == "PUT" and "update" in rt.verbs:
            if content_type not in ("", "application/json"):
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                               "unknown format - accepted media types include: "
                               "application/json")
            code, obj, warnings = api.update(rt, version, ns, name, body, params,
                                             subresource="status")
            return self.send_json(code, obj, self.warning_headers(warnings))
        if method == "PATCH" and "patch" in rt.verbs:
            self.check_patch_type(content_type)
            code, obj, warnings = api.patch(rt, version, ns, name, body, params, content_type,
                                            subresource="status")
            return self.send_json(code, obj, self.warning_headers(warnings))
        raise method_not_allowed()

    @staticmethod
    def check_patch_type(content_type):
        if content_type == "application/apply-patch+yaml":
            raise ApiError(415, "UnsupportedMediaType", "server-side apply is not supported "
                           "by the fake API server")
        if content_type not in ("application/merge-patch+json", "application/json-patch+json",
                                "application/strategic-merge-patch+json"):
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                           "unknown format - accepted media types include: "
                           "application/json-patch+json, application/merge-patch+json, "
                           "application/strategic-merge-patch+json")

    def discovery(self, segs):
        """The discovery document at segs, or None when segs is not a discovery path."""
        api = self.api
        if segs[:2] == ["openapi", "v3"]:
            if len(segs) == 2:
                return api.openapi_root()
            rest = segs[2:]
            if len(rest) == 2 and rest[0] == "api" and rest[1] in api.served_versions(""):
                return api.openapi_document("", rest[1])
            if (len(rest) == 3 and rest[0] == "apis"
                    and rest[2] in api.served_versions(rest[1])):
                return api.openapi_document(rest[1], rest[2])
            raise not_found_path()
        if segs == ["version"]:
            return {"major": "1", "minor": "36", "gitVersion": "v1.36.0-fake",
                    "platform": "linux/amd64"}
        if segs == ["api"]:
            return {"kind": "APIVersions", "versions": api.served_versions("")}
        if segs == ["apis"]:
            groups = []
            for g in sorted({rt.group for rt in api.type_list if rt.group}):
                doc = api.api_group(g)
                del doc["kind"], doc["apiVersion"]
                groups.append(doc)
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if len(segs) == 2 and segs[0] == "api" and segs[1] in api.served_versions(""):
            return api.resource_list("", segs[1])
        if len(segs) == 2 and segs[0] == "apis" and api.served_versions(segs[1]):
            return api.api_group(segs[1])
        if (len(segs) == 3 and segs[0] == "apis"
                and segs[2] in api.served_versions(segs[1])):
            return api.resource_list(segs[1], segs[2])
        return None

    def resource(self, rt, version, ns, name, method, params, body):
        api = self.api

        def need(verb):
            if verb not in rt.verbs:
                raise method_not_allowed()

        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if method in ("POST", "PUT") and content_type not in ("", "application/json"):
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                           "unknown format - accepted media types include: application/json")
        if not name:
            if method in ("GET", "HEAD"):
                if parse_bool(params, "watch"):
                    need("watch")
                    return self.watch(rt, version, ns, params)
                need("list")
                return self.send_object(rt, version, api.list(rt, version, ns, params), params,
                                        is_list=True)
            if method == "POST":
                need("create")
                if rt.namespaced and not ns:
                    raise method_not_allowed()
                code, obj, warnings = api.create(rt, version, ns, body, params)
                return self.send_json(code, obj, self.warning_headers(warnings))
            if method == "DELETE":
                need("deletecollection")
                if rt.namespaced and not ns:
                    raise method_not_allowed()
                code, obj = api.delete_collection(rt, version, ns, params, body)
                return self.send_json(code, obj)
            raise method_not_allowed()
        if method in ("GET", "HEAD"):
            if parse_bool(params, "watch"):
                need("watch")
                params = dict(params)
                extra = "metadata.name=" + name.replace("\\", "\\\\").replace(",", "\\,")
                params["fieldSelector"] = ",".join(
                    s for s in (params.get("fieldSelector", ""), extra) if s)
                return self.watch(rt, version, ns, params)
            need("get")
            return self.send_object(rt, version, api.get(rt, version, ns, name), params,
                                    is_list=False)
        if method == "PUT":
            need("update")
            code, obj, warnings = api.update(rt, version, ns, name, body, params)
            return self.send_json(code, obj, self.warning_headers(warnings))
        if method == "PATCH":
            need("patch")
            self.check_patch_type(content_type)
            code, obj, warnings = api.patch(rt, version, ns, name, body, params, content_type)
            return self.send_json(code, obj, self.warning_headers(warnings))
        if method == "DELETE":
            need("delete")
            code, obj = api.delete(rt, version, ns, name, body, params)
            return self.send_json(code, obj)
        raise method_not_allowed()

    def send_object(self, rt, version, body, params, is_list):
        """A GET answer: the object or list, or its Table when the client asked for one."""
        if self.table_version is None:
            return self.send_json(200, body)
        table = to_table(rt, version, body, self.table_version, params, is_list)
        return self.send_json(200, table, content_type="application/json;as=Table;v=%s;"
                              "g=meta.k8s.io" % self.table_version)

    @staticmethod
    def warning_headers(warnings):
        return [("Warning", '299 - %s' % json.dumps(w)) for w in warnings]

    # --- watch ------------------------------------------------------------------------------------

    def write_chunk(self, data):
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except (OSError, ValueError):
            raise ClientGone()

    def write_event(self, etype, obj):
        line = json.dumps({"type": etype, "object": obj}, separators=(",", ":")) + "\n"
        self.write_chunk(line.encode())

    def client_closed(self):
        """True when the peer has closed its side (EOF), checked without consuming data."""
        sock = self.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        if not readable:
            return False
        try:
            if isinstance(sock, ssl.SSLSocket):
                raw = socket.socket(fileno=os.dup(sock.fileno()))
                try:
                    return raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
                finally:
                    raw.close()
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def watch(self, rt, version, ns, params):
        api = self.api
        store = api.store
        fsel, lsel = api._selectors(rt, params)
        bookmarks = parse_bool(params, "allowWatchBookmarks")
        send_initial = parse_bool(params, "sendInitialEvents")
        timeout = params.get("timeoutSeconds", "")
        try:
            timeout = int(timeout) if timeout else 0
            if timeout < 0:
                raise ValueError()
        except ValueError:
            raise bad_request("invalid timeoutSeconds: %s" % params.get("timeoutSeconds"))
        if send_initial and (params.get("resourceVersionMatch") != "NotOlderThan"
                             or not bookmarks):
            raise ApiError(422, "Invalid", 'ListOptions.meta.k8s.io "" is invalid: '
                           'sendInitialEvents: Forbidden: sendInitialEvents is forbidden for '
                           'watch unless resourceVersionMatch is set to NotOlderThan and '
                           'allowWatchBookmarks is set to true')
        rv_text = params.get("resourceVersion", "")
        expired = None
        with store.lock:
            reset_epoch, close_epoch = store.reset_epoch, store.close_epoch
            if rv_text in ("", "0") or send_initial:
                if rv_text not in ("", "0"):
                    api._check_rv_param(params)
                table = store.tables[rt.type_key]
                initial = [table[k] for k in sorted(table)
                           if api._matches(rt, table[k], ns, fsel, lsel)]
                last = store.rv
            else:
                try:
                    start = int(rv_text)
                except ValueError:
                    raise bad_request("invalid resource version: %s" % json.dumps(rv_text))
                if start > store.rv:
                    api._check_rv_param(params)
                initial = []
                last = start
                if start < store.floor:
                    expired = "too old resource version: %d (%d)" % (start, store.floor)
            store.open_watches += 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            self.headers_sent = True
            self.close_connection = True
            if expired:
                self.write_event("ERROR", status_object(410, "Expired", expired))
            else:
                self.stream(rt, version, ns, fsel, lsel, initial, last, bookmarks,
                            send_initial, timeout, reset_epoch, close_epoch)
            self.write_chunk(b"")
        except ClientGone:
            pass
        finally:
            with store.lock:
                store.open_watches -= 1

    def stream(self, rt, version, ns, fsel, lsel, initial, last, bookmarks, send_initial,
               timeout, reset_epoch, close_epoch):
        api = self.api
        store = api.store
        for obj in initial:
            self.write_event("ADDED", rt.render(obj, version))
        if send_initial:
            self.write_event("BOOKMARK", {
                "kind": rt.kind, "apiVersion": rt.group_version(version),
                "metadata": {"resourceVersion": str(last),
                             "annotations": {"k8s.io/initial-events-end": "true"}}})
        now = time.monotonic()
        deadline = now + timeout if timeout else None
        interval = api.cfg.bookmark_interval
        next_bookmark = now + interval if bookmarks else None
        while True:
            with store.lock:
                while True:
                    if store.reset_epoch != reset_epoch or store.floor > last:
                        error = "too old resource version: %d (%d)" % (last, store.floor)
                        events = None
                        break
                    if store.close_epoch != close_epoch:
                        return
                    events = store.events_after(last)
                    now = time.monotonic()
                    if events or (deadline is not None and now >= deadline) or (
                            next_bookmark is not None and now >= next_bookmark):
                        break
                    wait = 0.5
                    if deadline is not None:
                        wait = min(wait, deadline - now)
                    if next_bookmark is not None:
                        wait = min(wait, next_bookmark - now)
                    store.cond.wait(max(wait, 0.001))
                    if time.monotonic() - now >= 0.4 and not events:
                        break  # periodically look at the socket outside the lock
            if events is None:
                self.write_event("ERROR", status_object(410, "Expired", error))
                return
            for ev in events:
                last = ev.rv
                if ev.type_key != rt.type_key:
                    continue
                etype = ev.etype
                new_match = api._matches(rt, ev.obj, ns, fsel, lsel)
                if etype == "MODIFIED":
                    old_match = api._matches(rt, ev.old, ns, fsel, lsel)
                    if not old_match and not new_match:
                        continue
                    if not old_match:
                        etype = "ADDED"
                    elif not new_match:
                        etype = "DELETED"
                elif not new_match:
                    continue
                self.write_event(etype, rt.render(ev.obj, version))
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            if next_bookmark is not None and now >= next_bookmark:
                self.write_event("BOOKMARK", {"kind": rt.kind,
                                              "apiVersion": rt.group_version(version),
                                              "metadata": {"resourceVersion": str(last)}})
                next_bookmark = now + interval
            if not events and self.client_closed():
                raise ClientGone()

    # --- control ----------------------------------------------------------------------------------

    def control(self, what, method, params):
        api = self.api
        store = api.store
        if what == "requests":
            if method == "GET":
                with api.requests_lock:
                    return self.send_json(200, list(api.requests))
            if method == "DELETE":
                with api.requests_lock:
                    api.requests.clear()
                return self.send_json(200, [])
            raise method_not_allowed()
        if what == "hang":
            return self.control_hang(method, params)
        if what == "state" and method == "GET":
            with store.lock:
                count = sum(len(t) for t in store.tables.values())
                return self.send_json(200, {"resourceVersion": str(store.rv),
                                            "oldestWatchableResourceVersion": str(store.floor),
                                            "openWatches": store.open_watches,
                                            "objects": count})
        if method != "POST":
            raise method_not_allowed() if what in ("reset", "fail", "close-watches") \
                else not_found_path()
        if what == "reset":
            with store.lock:
                store.wipe()
                api.seed_nodes()
                api.snapshots.clear()
                return self.send_json(200, {"resourceVersion": str(store.rv)})
        if what == "fail":
            try:
                count = int(params.get("count", "1"))
                code = int(params.get("code", "503"))
                retry_after = int(params.get("retryAfter", "1"))
                if count < 0 or not 400 <= code <= 599:
                    raise ValueError()
            except ValueError:
                raise bad_request("usage: POST /__control/fail?count=N&code=4xx|5xx"
                                  "[&method=M][&path=SUBSTRING][&retryAfter=S]")
            with api.fail_lock:
                api.fail = {"count": count, "code": code, "method": params.get("method", ""),
                            "path": params.get("path", ""), "retry_after": retry_after}
            return self.send_json(200, {"count": count, "code": code})
        if what == "close-watches":
            with store.lock:
                n = store.open_watches
                store.close_epoch += 1
                store.cond.notify_all()
            return self.send_json(200, {"closed": n})
        raise not_found_path()


    def control_hang(self, method, params):
        api = self.api
        if method == "GET":
            with api.hang_cond:
                return self.send_json(200, [dict(h) for h in api.hangs])
        if method == "DELETE":
            with api.hang_cond:
                released = sum(h["waiting"] for h in api.hangs)
                api.hangs = []
                api.hang_epoch += 1
                api.hang_cond.notify_all()
            return self.send_json(200, {"released": released})
        if method != "POST":
            raise method_not_allowed()
        try:
            seconds = float(params.get("seconds", "3600"))
            count = int(params.get("count", "-1"))
            if not params.get("path") or not 0 <= seconds <= 3600 or count < -1:
                raise ValueError()
        except ValueError:
            raise bad_request("usage: POST /__control/hang?path=SUBSTRING[&method=M]"
                              "[&seconds=S (0-3600, default 3600)][&count=N]")
        rule = {"method": params.get("method", ""), "path": params["path"], "seconds": seconds,
                "count": count, "matched": 0, "waiting": 0}
        with api.hang_cond:
            api.hangs.append(rule)
            return self.send_json(200, {"rule": len(api.hangs) - 1})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (OSError, ssl.SSLError, ClientGone)):
            return  # failed handshakes, resets: the client's problem
        traceback.print_exc(file=sys.stderr)


def make_server(api, port, tls_cert=None, tls_key=None, client_ca=None, control_only=False):
    handler = type("BoundHandler", (Handler,), {"api": api, "control_only": control_only})
    deadline = time.monotonic() + 5
    while True:
        try:
            server = Server(("127.0.0.1", port), handler)
            break
        except OSError as e:
            # A restart on the same port may race the old process' socket going away.
            if port == 0 or time.monotonic() > deadline or e.errno not in (98, 99):
                raise
            time.sleep(0.05)
    if tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(tls_cert, tls_key)
        if client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(client_ca)
        server.socket = ctx.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    return server


def write_port_file(path, port):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(
                                    para for para in __doc__.split("\n\n")
                                    if para.startswith(("For kubectl", "Custom resources",
                                                        "Control endpoints",
                                                        "Where it differs"))),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: ephemeral)")
    p.add_argument("--port-file", help="write the port here (atomically) once listening")
    p.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (chain)")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument("--client-ca", help="require client certificates signed by this CA (mTLS)")
    p.add_argument("--token", default="", help="require 'Authorization: Bearer TOKEN'")
    p.add_argument("--versions", default="v1,v1beta2",
                   help="resource.k8s.io versions to serve (of v1, v1beta2)")
    p.add_argument("--mixins", choices=("reject", "accept"), default="reject",
                   help="reject: spec.mixins/includes are unknown fields (the real API); "
                        "accept: KEP-5234 fields are part of the schema and validated")
    p.add_argument("--list-attributes", choices=("drop", "accept"), default="drop",
                   help="ints/bools/strings/versions attributes: drop (gate "
                        "DRAListTypeAttributes off, as in 1.36) or accept")
    p.add_argument("--device-taints", choices=("drop", "accept"), default="accept",
                   help="spec.devices[].taints of ResourceSlices: accept (validated, timeAdded "
                        "defaulted) or drop (silently, like a server with DRADeviceTaints off)")
    p.add_argument("--pool-checks", choices=("accept", "reject"), default="accept",
                   help="a device or shared counter set name used in two slices of one pool "
                        "(same driver, pool name and generation): accept (default; the real "
                        "API server stores it and the scheduler ignores the pool) or reject "
                        "(422 Invalid naming the other slice)")
    p.add_argument("--crd", action="append", default=[], metavar="FILE",
                   help="serve the CustomResourceDefinition(s) in this YAML file (repeatable; "
                        "needs PyYAML)")
    p.add_argument("--unconditional-update", choices=("reject", "allow"), default="reject",
                   help="PUT without metadata.resourceVersion: reject with 409 (default) or "
                        "allow (what the real server does for ResourceSlices)")
    p.add_argument("--node", action="append", default=[], metavar="NAME=UID",
                   help="serve a Node object at /api/v1/nodes/NAME (repeatable)")
    p.add_argument("--watch-history", type=int, default=1000,
                   help="events kept for watches; older resourceVersions get 410 Expired")
    p.add_argument("--bookmark-interval", type=float, default=1.0,
                   help="seconds between BOOKMARK events (allowWatchBookmarks=true)")
    p.add_argument("--initial-resource-version", type=int, default=None,
                   help="first resourceVersion (default: microseconds since the epoch, so a "
                        "restarted server never reuses the resourceVersions of an earlier one)")
    p.add_argument("--control-port-file",
                   help="also serve /__control/* and /healthz over plain HTTP on another "
                        "ephemeral port (also when the API port is TLS) and write that port here")
    p.add_argument("--log", help="append one line per API request to this file")
    args = p.parse_args(argv)
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    if not versions or any(v not in RESOURCE_VERSIONS for v in versions):
        p.error("--versions: expected a comma-separated subset of %s, got %r"
                % (",".join(RESOURCE_VERSIONS), args.versions))
    args.versions = list(dict.fromkeys(versions))
    nodes = []
    for spec in args.node:
        name, sep, uid = spec.partition("=")
        if not sep or not name or not uid or is_dns1123_subdomain(name):
            p.error("--node: expected NAME=UID with NAME a DNS subdomain, got %r" % spec)
        nodes.append((name, uid))
    args.nodes = nodes
    if args.watch_history < 1:
        p.error("--watch-history must be at least 1")
    if args.bookmark_interval <= 0:
        p.error("--bookmark-interval must be positive")
    if bool(args.tls_cert) != bool(args.tls_key):
        p.error("--tls-cert and --tls-key go together")
    if args.client_ca and not args.tls_cert:
        p.error("--client-ca needs --tls-cert/--tls-key")
    if not 0 <= args.port <= 65535:
        p.error("--port must be in 0..65535")
    try:
        args.crd_types = load_crds(args.crd)
    except CrdError as e:
        p.error("--crd: %s" % e)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log_file = open(args.log, "a") if args.log else None
    api = Api(Config(args), log_file)
    try:
        server = make_server(api, args.port, args.tls_cert, args.tls_key, args.client_ca)
    except (OSError, ssl.SSLError) as e:
        print("fake_apiserver: cannot listen on 127.0.0.1:%d: %s" % (args.port, e),
              file=sys.stderr)
        return 1
    port = server.server_address[1]
    if args.control_port_file:
        control = make_server(api, 0, control_only=True)
        threading.Thread(target=control.serve_forever, kwargs={"poll_interval": 0.2},
                         daemon=True).start()
        write_port_file(args.control_port_file, control.server_address[1])
    if args.port_file:
        write_port_file(args.port_file, port)
    scheme = "https" if args.tls_cert else "http"
    print("listening on %s://127.0.0.1:%d" % (scheme, port), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
