"""Decoding a request body as the API server does: a JSON object with duplicate-field and
unknown-field detection against a schema of the known fields (Obj, MapOf, ListOf of the Scalar
types), strict type checks (a mismatch is a 400 decode error, not a 422), Quantity
canonicalisation, RFC 3339 times; fields behind a disabled feature gate are known but dropped.
Also ObjectMeta: its schema and validate_object_meta (name or generateName, namespace, labels,
annotations).

Source: k8s-api-cdi.md §1.8 ("Unknown fields": fieldValidation Warn drops them with a Warning
header, Strict makes them 400; gated fields are silently dropped), §1.2 (the object envelope),
§1.7 (name formats)."""

import datetime
import json
import re

from .errors import child, f_duplicate, f_invalid, f_required, f_too_long, index, key
from .formats import (is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name,
                      parse_quantity)


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


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
    # Most objects have no duplicate key: a plain dict built in C, and the slow path only when
    # it came out smaller than the pairs.
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
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


def json_type(v):
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
                          % (json_type(value), path_text(path), go_type))

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
            # A zero field of a kind without a zero value (list, map, time) is left out, as
            # the decoder leaves out every None.
            zeros = ((f, self.zero_of(schema.fields[f])) for f in schema.zero)
            return {f: z for f, z in zeros if z is not None}
        return None

    def decode(self, value, schema, path):
        """The decoded value, with None-valued object fields left out (an empty time is like an
        absent one). `path` is a text or a lazy path (see path_text): it is spelt out only for
        an error, since a slice of 128 devices has thousands of fields and none of them wrong."""
        if value is None:
            return self.zero_of(schema)
        if isinstance(schema, Obj):
            if not isinstance(value, dict):
                self._type_error(value, schema, path)
            for d in getattr(value, "dups", ()):
                self.duplicates.append(child(path_text(path), d))
            out = {}
            fields = schema.fields
            dropped = schema.dropped
            for k, v in value.items():
                sub = fields.get(k)
                if sub is None:
                    self.unknown.append(child(path_text(path), k))
                    continue
                if v is None or k in dropped:
                    continue
                # The common scalars inline: the same checks as below, without a call.
                t = type(v)
                if (sub is STR and t is str) or (sub is BOOL and t is bool) or (
                        sub is INT and t is int and INT64_MIN <= v <= INT64_MAX):
                    out[k] = v
                    continue
                d = self.decode(v, sub, (path, ".", k))
                if d is not None:
                    out[k] = d
            for k in schema.zero:
                if k not in out:
                    z = self.zero_of(fields[k])
                    if z is not None:
                        out[k] = z
            return out
        if isinstance(schema, MapOf):
            if not isinstance(value, dict):
                self._type_error(value, schema, path)
            for d in getattr(value, "dups", ()):
                self.duplicates.append(key(path_text(path), d))
            out = {}
            sub = schema.value
            one_field = isinstance(sub, Obj) and not sub.zero
            for k, v in value.items():
                if one_field and type(v) is dict and len(v) == 1:
                    # A one-field object of a common scalar (a device attribute): what the Obj
                    # branch would return, without the call. type() is dict: no duplicate keys.
                    (f, fv), = v.items()
                    fs = sub.fields.get(f)
                    t = type(fv)
                    if f not in sub.dropped and ((fs is STR and t is str) or (
                            fs is BOOL and t is bool) or (
                            fs is INT and t is int and INT64_MIN <= fv <= INT64_MAX)):
                        out[k] = {f: fv}
                        continue
                d = (self.decode(v, sub, (path, "[]", k)) if v is not None
                     else self.zero_of(sub))
                if d is not None:
                    out[k] = d
            return out
        if isinstance(schema, ListOf):
            if not isinstance(value, list):
                self._type_error(value, schema, path)
            return [self.decode(v, schema.item, (path, "[i]", i)) for i, v in enumerate(value)]
        if schema is ANY:
            return prune_none(value)
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
                                  "type int64" % (value, path_text(path)))
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


def path_text(path):
    """A decoder path as text: a string, or (parent, ".", field), (parent, "[]", map key) or
    (parent, "[i]", list index) spelt out as child(), key() and index() do."""
    if isinstance(path, str):
        return path
    parent, kind, name = path
    base = path_text(parent)
    if kind == ".":
        return child(base, name)
    if kind == "[]":
        return key(base, name)
    return index(base, name)


def prune_none(obj):
    """Removes keys whose decoded value is None (an empty time is like an absent one)."""
    if isinstance(obj, dict):
        return {k: prune_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [prune_none(v) for v in obj]
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
