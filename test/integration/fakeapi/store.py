"""The object store behind every resource: all objects of all types under one resourceVersion
counter (a restarted server starts above any earlier one) and the last N change events, from
which watches resume; a resourceVersion older than the window is 410 Expired.

Source: k8s-api-cdi.md §3.3 (watch semantics: ADDED/MODIFIED/DELETED/BOOKMARK/ERROR, opaque
resourceVersions, 410 Expired then relist), §3.2 (list returns metadata.resourceVersion to
watch from)."""

import collections
import json
import threading


class Event:
    __slots__ = ("rv", "type_key", "etype", "obj", "old", "texts")

    def __init__(self, rv, type_key, etype, obj, old):
        self.rv = rv
        self.type_key = type_key
        self.etype = etype
        self.obj = obj
        self.old = old
        self.texts = {}  # API version -> the object as JSON text, shared by every watch

    def text(self, rt, version):
        """The event's object as rendered in `version`, encoded once for all watches (stored
        objects are never mutated; two watches racing here both store the same text)."""
        t = self.texts.get(version)
        if t is None:
            t = json.dumps(rt.render(self.obj, version), separators=(",", ":"))
            self.texts[version] = t
        return t


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
