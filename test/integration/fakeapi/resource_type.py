"""ResourceType: the description of one served resource (group, versions, plural/kind names,
scope, verbs, schema of known fields, field selectors, validation and defaulting hooks, /status
subresource, printer columns) that the generic store and verbs in api.py work from; the
resource.k8s.io group and the versions served; and apimachinery's version priority (GA before
beta before alpha) used for discovery order.

Source: k8s-api-cdi.md §1.1 (API versions and serving: v1 and v1beta2 share one JSON shape,
v1beta1 differs and is not served), §3.1 (paths, cluster-scoped and namespaced resources,
the /status subresource)."""

import re

from .decode import Decoder
from .errors import ApiError
from .kubectl import DEFAULT_TABLE


RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSIONS = ("v1", "v1beta2")  # v1beta1 has a different JSON shape; not served


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
        obj = decoder.decode(value, self.schema, "")  # prunes None values itself
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


def version_priority(version):
    """Kube-aware version order: GA before beta before alpha, higher numbers first."""
    m = re.fullmatch(r"v([1-9][0-9]*)(?:(alpha|beta)([1-9][0-9]*))?", version)
    if not m:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0), "")
