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
    nodeAllocatableResourceMappings, partitionTypeAttribute and skipNodeOperations are known
    but silently dropped; device taints are accepted unless --device-taints drop
    (DRADeviceTaints off); list attributes with --list-attributes accept; one release's
    node-allocatable field with --node-allocatable v1.36 or v1.37 (validated; the other
    release's field is then unknown, as each release prunes the other's).
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

The package, lowest layer first (each module imports only modules above it in this list;
each docstring says what of the real API server it models and where that was read):
  errors         v1 Status, field errors (Status.details.causes), CrdError
  formats        name formats and resource.Quantity
  decode         JSON decoding against schemas of known fields; ObjectMeta
  selectors      field and label selectors
  kubectl        meta.k8s.io Tables and the /openapi/v3 path documents
  resource_type  ResourceType, the description of a served resource
  slice_fields   ResourceSlice building blocks: per-device limits, attributes, capacity
  mixins         the KEP-5234 mixin model (--mixins accept)
  slices         ResourceSlice schema and validation
  claims         ResourceClaims, DeviceClasses, ResourceClaimTemplates
  core           Nodes, Pods, Events
  cel            the CEL subset of x-kubernetes-validations
  crd_schema     structural schemas: pruning, defaulting, validation
  crd            CustomResourceDefinitions (--crd) as served types
  store          objects, one resourceVersion counter, the event history of watches
  patch          merge patch, JSON patch, strategic-merge-patch directives
  api            the verbs, discovery, /__control state; no HTTP
  server         HTTP(S): routing, authentication, bodies, watch streams
  cli            flags and main()
test/integration/fake_apiserver.py is the script that runs cli.main(); the tests are in
test/integration/fakeapi_tests/, one module per concern, collected by fake_apiserver_test.py.

Run with /usr/bin/python3 fake_apiserver.py --help.
"""
