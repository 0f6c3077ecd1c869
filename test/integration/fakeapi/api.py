"""The API verbs over the store, independent of HTTP: list (selectors, limit/continue
snapshots), get, create (uid, resourceVersion, creationTimestamp, generation, generateName with
apimachinery's alphabet, 409 AlreadyExists), update and patch (409 Conflict on a stale or
missing resourceVersion, /status subresources, immutable fields), delete and deletecollection
(preconditions, 404), dry-run and fieldValidation (Strict/Warn/Ignore); the request log, error
injection and held requests behind /__control; discovery documents and the /openapi/v3 index.

Source: k8s-api-cdi.md §3.2 (operations, query parameters, success codes and typical errors
404/409/410/422), §3.3 (resourceVersion and 410), §1.8 (fieldValidation Warn/Strict);
k8s-1.35-1.37-addendum.md §8 (when the kubelet deletes a driver's slices: deletecollection by
field selector)."""

import base64
import collections
import hashlib
import json
import secrets
import threading
import time
import uuid

from .claims import make_deviceclass_type, make_resourceclaim_type, make_resourceclaimtemplate_type
from .core import make_event_type, make_node_type, make_pod_type
from .decode import DecodeError, json_type, now_rfc3339, parse_json
from .errors import ApiError, bad_request, f_forbidden, key
from .kubectl import openapi_paths, openapi_schema_name
from .patch import json_patch, merge_patch, smp_directive
from .resource_type import version_priority
from .selectors import match_fields, match_labels, parse_field_selector, parse_label_selector
from .slices import make_resourceslice_type
from .store import Store


class ClientGone(Exception):
    pass


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
        self.node_allocatable = getattr(args, "node_allocatable", "drop")
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
                              "\"json:\\\"kind,omitempty\\\"\" }" % json_type(value))
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
        preferred = min(versions, key=version_priority)  # GA, then beta, then alpha
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
