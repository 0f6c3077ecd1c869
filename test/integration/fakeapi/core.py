"""The core v1 kinds the fake serves for kubectl and the daemon: Nodes (read-only, from --node
flags; the daemon reads its Node's uid), and Pods and Events (namespaced, schemaless: stored as
sent with only metadata validated; Events with the real field selectors involvedObject.*,
reason, reportingComponent, source, type) so that `kubectl apply` of the chart's examples and
`kubectl describe` work.

Source: k8s-api-cdi.md §3.1 (/api/v1/nodes/{name}), §1.2 (a slice's ownerReference names its
Node by uid, so a driver needs get nodes); the Event field set from k8s.io/kubernetes
pkg/registry/core/event/strategy.go."""

from .decode import ANY, METADATA_SCHEMA, Obj, STR, validate_object_meta
from .kubectl import EVENT_TABLE, NODE_TABLE, POD_TABLE
from .resource_type import ResourceType


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


def make_node_type():
    return ResourceType(
        "", ("v1",), "nodes", "node", "Node", namespaced=False, verbs=("get", "list", "watch"),
        schema=Obj({"apiVersion": STR, "kind": STR, "metadata": METADATA_SCHEMA, "spec": ANY,
                    "status": ANY}),
        table=NODE_TABLE)
