"""Structural openAPIV3Schemas of CustomResourceDefinitions as apiextensions-apiserver applies
them to custom resources: compiled at start (type, properties, required, additionalProperties,
items, enum, pattern in an RE2 subset, length/number/item/property bounds, nullable, format
date-time, x-kubernetes-preserve-unknown-fields, x-kubernetes-list-type set/map), then per
request pruning of unknown and non-nullable null fields, `default`s, validation with
kube-openapi's messages, and the x-kubernetes-validations rules (cel.py), with transition
rules on updates.

Source: not in /work/shared/spec; apiextensions-apiserver pkg/apiserver/schema (pruning,
defaulting, structural validation) and k8s.io/kube-openapi pkg/validation/validate for the
messages. What is not implemented fails the start (CrdError), see the package docstring."""

import datetime
import json
import re

from .cel import cel_eval, CelEvalError, compile_rule, json_equal
from .decode import INT64_MAX, INT64_MIN, METADATA_SCHEMA, prune_none
from .errors import (child, CrdError, f_duplicate, f_invalid, f_not_supported, f_required,
                     f_too_long, f_too_many, f_type_invalid, index, key)


CRD_API_VERSION = "apiextensions.k8s.io/v1"
MAX_SELECTABLE_FIELDS = 8
MAX_JSON_SAFE_INTEGER = 1 << 53  # integral floats up to this count as integers (as in swag)
_SCHEMA_TYPES = ("object", "array", "string", "integer", "number", "boolean")
SCHEMA_DOC_KEYWORDS = frozenset(("description", "title", "example", "externalDocs"))
_SCHEMA_KEYWORDS = frozenset((
    "type", "properties", "required", "additionalProperties", "items", "enum", "pattern",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minItems", "maxItems", "minProperties", "maxProperties", "format", "default",
    "nullable", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-validations",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
)) | SCHEMA_DOC_KEYWORDS
_SCHEMA_COUNT_KEYWORDS = {  # keyword -> (attribute, the type it applies to)
    "minLength": ("min_length", "string"), "maxLength": ("max_length", "string"),
    "minItems": ("min_items", "array"), "maxItems": ("max_items", "array"),
    "minProperties": ("min_properties", "object"), "maxProperties": ("max_properties", "object"),
}
_DATE_TIME_FORMATS = ("date-time", "datetime")
_NUMERIC_FORMATS = ("int32", "int64", "float", "double")  # type hints, nothing to check


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
                    out[k] = prune_none(decoder.decode(v, METADATA_SCHEMA, "metadata"))
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
