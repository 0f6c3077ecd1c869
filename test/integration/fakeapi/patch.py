"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902: add, remove, replace, move,
copy, test), and the keys a strategic merge patch gives a meaning ($patch, $retainKeys,
$setElementOrder/..., $deleteFromPrimitiveList/...), which the fake refuses (415) instead of
storing as fields, since it applies a strategic merge patch as a merge patch.

Source: k8s-api-cdi.md §3.2 (patch content types; strategic merge patch for built-ins only);
the directive keys from k8s.io/apimachinery/pkg/util/strategicpatch."""

import json

from .errors import child, index, key


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
