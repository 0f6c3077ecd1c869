"""What kubectl reads besides objects: meta.k8s.io Tables (Accept: application/json;as=Table;
v=v1|v1beta1;g=meta.k8s.io, includeObject None/Metadata/Object) with the real printers' columns
for ResourceSlices, ResourceClaims, DeviceClasses, ResourceClaimTemplates, Nodes, Pods and
Events, ages as apimachinery's HumanDuration; and the /openapi/v3 path documents (every
operation with x-kubernetes-group-version-kind and its query parameters, fieldValidation among
them, so that kubectl leaves validation to the server).

Source: not in /work/shared/spec (it covers what a driver does, not kubectl); read from
k8s.io/kubernetes pkg/printers/internalversion/printers.go, apimachinery
pkg/util/duration/duration.go and kubectl's openapi v3 field-validation check. The package
docstring (fakeapi/__init__.py, "For kubectl") lists what is left out."""

import datetime

from .decode import parse_time
from .errors import ApiError, bad_request


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


def meta_field(obj, field):
    return (obj.get("metadata") or {}).get(field, "")


# rest.NewDefaultTableConvertor: what the real server answers for types without printers.
DEFAULT_TABLE = (
    [NAME_COLUMN, table_column("Created At", "date",
                               description=_OBJECT_META_DOCS["creationTimestamp"])],
    lambda obj: [meta_field(obj, "name"), meta_field(obj, "creationTimestamp") or None])

# pkg/printers/internalversion/printers.go (AddHandlers) of Kubernetes 1.36.
RESOURCESLICE_TABLE = (
    [NAME_COLUMN,
     table_column("Node", description="NodeName identifies the node which provides the "
                  "resources in this pool."),
     table_column("Driver", description="Driver identifies the DRA driver providing the "
                  "capacity information."),
     table_column("Pool", description="Name is used to identify the pool."),
     AGE_COLUMN],
    lambda obj: [meta_field(obj, "name"), obj.get("spec", {}).get("nodeName", ""),
                 obj.get("spec", {}).get("driver", ""),
                 obj.get("spec", {}).get("pool", {}).get("name", ""),
                 age_of(meta_field(obj, "creationTimestamp"))])


def _claim_state(obj):
    """resourceClaimState of the real printer: deleted, pending, allocated, reserved."""
    states = []
    deleted = bool(meta_field(obj, "deletionTimestamp"))
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
    lambda obj: [meta_field(obj, "name"), _claim_state(obj), age_of(meta_field(obj, "creationTimestamp"))])

NAME_AGE_TABLE = ([NAME_COLUMN, AGE_COLUMN],
                  lambda obj: [meta_field(obj, "name"), age_of(meta_field(obj, "creationTimestamp"))])


def _pod_row(obj):
    """A simplified printPod: no init containers, sidecars, or readiness gates."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    reason = status.get("reason") or status.get("phase") or "Pending"
    if meta_field(obj, "deletionTimestamp"):
        reason = "Terminating"
    ips = status.get("podIP") or "<none>"
    return [meta_field(obj, "name"), "%d/%d" % (ready, len(spec.get("containers") or [])), reason,
            str(restarts), age_of(meta_field(obj, "creationTimestamp")), ips,
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
    lambda obj: [meta_field(obj, "name"), _node_status(obj), "<none>",
                 age_of(meta_field(obj, "creationTimestamp")),
                 ((obj.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")])


def _event_row(obj):
    io = obj.get("involvedObject") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or meta_field(obj, "creationTimestamp")
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
