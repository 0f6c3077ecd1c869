"""CustomResourceDefinitions (--crd FILE, apiextensions.k8s.io/v1 in YAML) turned into served
ResourceTypes, like a 1.36 server: every served version, Cluster or Namespaced, names,
shortNames and categories for discovery, a status subresource (create drops status, /status
writes change only status, generation grows outside metadata and status),
selectableFields, additionalPrinterColumns as Table columns, and the checks that refuse any
CRD feature the fake does not implement (conversion webhooks, scale, messageExpression, ...).

Source: not in /work/shared/spec; apiextensions-apiserver (pkg/registry/customresource,
pkg/apis/apiextensions/validation) and client-go's JSONPath printer for printer columns.
Topodra's own CRD is charts/topodra/crds (Reservations)."""

import json
import re

from .crd_schema import (compile_schema, CRD_API_VERSION, crd_default, crd_prune,
                         crd_validate_rules, crd_validate_value, MAX_SELECTABLE_FIELDS,
                         SCHEMA_DOC_KEYWORDS)
from .decode import Decoder, parse_time, validate_object_meta
from .errors import CrdError, f_invalid
from .formats import is_dns1123_label, is_dns1123_subdomain
from .kubectl import age_of, meta_field, NAME_COLUMN, table_column
from .resource_type import RESOURCE_GROUP, ResourceType, version_priority


_CRD_VERSION_KEYS = frozenset(("name", "served", "storage", "deprecated", "deprecationWarning",
                               "schema", "subresources", "additionalPrinterColumns",
                               "selectableFields"))

# Schema errors after which the server does not evaluate x-kubernetes-validations.
_BLOCKING_KINDS = ("NotSupported", "Required", "TooLong", "TooMany", "TypeInvalid")
_MSG_RULES_NOT_CHECKED = ("some validation rules were not checked because the object was "
                          "invalid; correct the existing errors to complete validation")

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
        cells = [meta_field(obj, "name")]
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
    types.sort(key=lambda rt: version_priority(rt.versions[0]))
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
        extra = set(meta_raw) - {"type", "properties"} - SCHEMA_DOC_KEYWORDS
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
