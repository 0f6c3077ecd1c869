"""List and watch selectors: fieldSelector (=, ==, != over the fields a resource supports, with
apimachinery's escaping; an unsupported field is a 400) and labelSelector (equality, set-based
in/notin, exists and !exists), with the real parse errors.

Source: k8s-api-cdi.md §3.2 (list/watch take fieldSelector= and labelSelector=; ResourceClaims
support only metadata.name and metadata.namespace), §1.11 (a driver lists its slices with
fieldSelector=spec.driver=<d>,spec.nodeName=<n>); grammar from
k8s.io/apimachinery/pkg/fields/selector.go and pkg/labels/selector.go."""

import re

from .errors import bad_request
from .formats import is_label_value, is_qualified_name


def _split_unescaped(text, sep):
    parts, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape_field_value(text):
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in "\\,=":
                raise ValueError("invalid escape sequence in field selector value: %s" % text)
            out.append(text[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_field_selector(text, supported):
    """fields.ParseSelector plus the per-resource label conversion (unknown fields -> 400)."""
    reqs = []
    if not text.strip():
        return reqs
    for term in _split_unescaped(text, ","):
        op_at, op = -1, None
        i = 0
        while i < len(term):
            if term[i] == "\\":
                i += 2
                continue
            for candidate in ("!=", "==", "="):
                if term.startswith(candidate, i):
                    op_at, op = i, candidate
                    break
            if op:
                break
            i += 1
        if not op:
            raise bad_request("invalid selector: '%s'; can't understand '%s'" % (text, term))
        try:
            field = _unescape_field_value(term[:op_at])
            value = _unescape_field_value(term[op_at + len(op):])
        except ValueError as e:
            raise bad_request("invalid selector: '%s'; %s" % (text, e))
        if field not in supported:
            raise bad_request("field label not supported: %s" % field)
        reqs.append((field, op, value))
    return reqs


def match_fields(reqs, fields):
    for field, op, value in reqs:
        equal = fields.get(field, "") == value
        if (op == "!=") == equal:
            return False
    return True


_LABEL_KEY = r"[^\s=!(),]+"
_LABEL_TERM_RES = [
    ("exists", re.compile(r"\s*(!?)\s*(" + _LABEL_KEY + r")\s*")),
    ("compare", re.compile(r"\s*(" + _LABEL_KEY + r")\s*(==|=|!=)\s*([^\s,()=!]*)\s*")),
    ("set", re.compile(r"\s*(" + _LABEL_KEY + r")\s+(in|notin)\s*\(([^()]*)\)\s*")),
]


def parse_label_selector(text):
    reqs = []
    if not text.strip():
        return reqs
    terms, depth, cur = [], 0, []
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if c == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    terms.append("".join(cur))
    for term in terms:
        req = None
        for kind, rx in _LABEL_TERM_RES:
            m = rx.fullmatch(term)
            if not m:
                continue
            if kind == "exists":
                req = (m.group(2), "!" if m.group(1) else "exists", ())
            elif kind == "compare":
                req = (m.group(1), "!=" if m.group(2) == "!=" else "=", (m.group(3),))
            else:
                values = tuple(v.strip() for v in m.group(3).split(",")) if m.group(3).strip() \
                    else ()
                req = (m.group(1), m.group(2), values)
            break
        if req is None:
            raise bad_request("unable to parse requirement: found '%s', expected a label "
                              "selector requirement" % term.strip())
        msgs = is_qualified_name(req[0])
        for v in req[2]:
            msgs += is_label_value(v)
        if msgs:
            raise bad_request("unable to parse requirement: %s: %s" % (term.strip(), msgs[0]))
        reqs.append(req)
    return reqs


def match_labels(reqs, labels):
    for k, op, values in reqs:
        has = k in labels
        v = labels.get(k)
        if op == "exists" and not has:
            return False
        if op == "!" and has:
            return False
        if op == "=" and not (has and v == values[0]):
            return False
        if op == "!=" and has and v == values[0]:
            return False
        if op == "in" and not (has and v in values):
            return False
        if op == "notin" and has and v in values:
            return False
    return True
