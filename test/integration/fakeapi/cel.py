"""The CEL subset of x-kubernetes-validations rules the fake evaluates, compiled and
type-checked against the schema when a CRD is loaded:

  expr  := and ("||" and)*          and   := rel ("&&" rel)*
  rel   := unary (("==" | "!=") unary)*
  unary := "!" unary | "(" expr ")" | "has(" path ")" | path
  path  := ("self" | "oldSelf") ("." field)*

Paths are type-checked against the schema at load (an undeclared field is an error, as with the
real CEL compiler); == needs both sides of one type and compares like CEL (deep, typed: true is
not 1, lists in order unless list-type set or map). Errors at run time (a missing field: "no
such key") follow CEL: false && error is false, true || error is true. A rule's message,
reason and fieldPath are honoured; anything outside the subset is a CrdError at start.

Source: not in /work/shared/spec; the apiextensions-apiserver (pkg/apiserver/schema/cel) and
cel-go semantics for the operators above. Topodra's Reservation CRD
(charts/topodra/crds) uses only this subset."""

import json
import re

from .errors import child, CrdError, f_duplicate, f_forbidden, f_invalid, f_required


_RULE_KEYS = frozenset(("rule", "message", "reason", "fieldPath"))
_RULE_REASONS = {"FieldValueInvalid": "Invalid", "FieldValueForbidden": "Forbidden",
                 "FieldValueRequired": "Required", "FieldValueDuplicate": "Duplicate"}


def json_equal(a, b, node=None):
    """Equality of JSON values as in CEL: typed (true is not 1), numbers by value, lists in
    order unless their schema says x-kubernetes-list-type set or map."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, list) and isinstance(b, list):
        items = node.items if node is not None else None
        if len(a) != len(b):
            return False
        if node is not None and node.list_type in ("set", "map"):
            rest = list(b)
            for x in a:
                for j, y in enumerate(rest):
                    if json_equal(x, y, items):
                        del rest[j]
                        break
                else:
                    return False
            return True
        return all(json_equal(x, y, items) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return False
        return all(json_equal(v, b[k], node.child(k) if node is not None else None)
                   for k, v in a.items())
    return a is None and b is None


_CEL_TOKEN_RE = re.compile(r"\s*(?:(&&|\|\||==|!=|[!().])|([A-Za-z_][A-Za-z0-9_]*))")
_CEL_SCALAR_TYPES = {"string": "string", "integer": "int", "number": "double",
                     "boolean": "bool"}


class CelEvalError(Exception):
    pass


class CelRule:
    def __init__(self, rule, message, reason, field_path, ast):
        self.rule = rule
        self.message = message
        self.reason = reason  # a FieldError kind
        self.field_path = field_path  # tuple of field names below the node
        self.ast = ast
        self.transition = "oldSelf" in _cel_roots(ast)

    def error_string(self):
        return (self.message or self.rule).strip()

    def error(self, path, schema_type):
        """The field error of a rule that evaluated to false."""
        for f in self.field_path:
            path = child(path, f)
        detail = self.message.strip() if self.message else "failed rule: " + self.error_string()
        if self.reason == "Forbidden":
            return f_forbidden(path, detail)
        if self.reason == "Required":
            return f_required(path, detail)
        if self.reason == "Duplicate":
            return f_duplicate(path, schema_type)
        return f_invalid(path, schema_type, detail)


def _cel_roots(ast):
    if ast[0] in ("path", "has"):
        return {ast[1]}
    roots = set()
    for operand in ast[1:]:
        if isinstance(operand, tuple):
            roots |= _cel_roots(operand)
    return roots


def _cel_type(node):
    if node is None or node.type is None:
        return "dyn"
    if node.type == "object":
        if node.additional is not None:
            return ("map", _cel_type(node.additional))
        if node.preserve_unknown and not node.properties:
            return "dyn"
        return ("object", id(node))
    if node.type == "array":
        return ("list", _cel_type(node.items))
    return _CEL_SCALAR_TYPES[node.type]


def _cel_type_name(t):
    if isinstance(t, tuple):
        if t[0] == "object":
            return "object"
        return "%s(%s)" % (t[0], ", ".join(_cel_type_name(x) for x in t[1:]))
    return t


class _CelParser:
    SUPPORTED = ("the fake API server evaluates only has(self.f), !, &&, ||, ==, != and "
                 "parentheses on self/oldSelf field paths")

    def __init__(self, text, node, where):
        self.text = text
        self.node = node
        self.where = where
        self.tokens = []
        i = 0
        while True:
            m = _CEL_TOKEN_RE.match(text, i)
            if not m:
                rest = text[i:].lstrip()
                if rest:
                    self.fail("cannot parse %s at offset %d"
                              % (json.dumps(rest[:20]), len(text) - len(rest)))
                break
            self.tokens.append(m.group(1) or m.group(2))
            i = m.end()
        self.pos = 0

    def fail(self, why):
        raise CrdError("%s: rule %s: %s; %s" % (self.where, json.dumps(self.text), why,
                                                self.SUPPORTED))

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected=None):
        tok = self.peek()
        if tok is None:
            self.fail("unexpected end of the rule")
        if expected is not None and tok != expected:
            self.fail("expected %s, found %s" % (expected, tok))
        self.pos += 1
        return tok

    def need_bool(self, t, op):
        if t not in ("bool", "dyn"):
            self.fail("%s needs bool operands, not %s" % (op, _cel_type_name(t)))

    def parse(self):
        ast, t, _ = self.expr()
        if self.peek() is not None:
            self.fail("unexpected %s" % self.peek())
        if t not in ("bool", "dyn"):
            self.fail("a rule must evaluate to a bool, not %s" % _cel_type_name(t))
        return ast

    def expr(self):
        left, lt, ln = self.conjunction()
        while self.peek() == "||":
            self.take()
            right, rt, _ = self.conjunction()
            self.need_bool(lt, "||")
            self.need_bool(rt, "||")
            left, lt, ln = ("or", left, right), "bool", None
        return left, lt, ln

    def conjunction(self):
        left, lt, ln = self.relation()
        while self.peek() == "&&":
            self.take()
            right, rt, _ = self.relation()
            self.need_bool(lt, "&&")
            self.need_bool(rt, "&&")
            left, lt, ln = ("and", left, right), "bool", None
        return left, lt, ln

    def relation(self):
        left, lt, ln = self.unary()
        while self.peek() in ("==", "!="):
            op = self.take()
            right, rt, rn = self.unary()
            if lt != rt and "dyn" not in (lt, rt):
                self.fail("no matching overload for %s on %s and %s"
                          % (op, _cel_type_name(lt), _cel_type_name(rt)))
            left, lt, ln = (op, left, right, ln or rn), "bool", None
        return left, lt, ln

    def unary(self):
        tok = self.peek()
        if tok == "!":
            self.take()
            operand, t, _ = self.unary()
            self.need_bool(t, "!")
            return ("not", operand), "bool", None
        if tok == "(":
            self.take()
            inner = self.expr()
            self.take(")")
            return inner
        if tok == "has":
            self.take()
            self.take("(")
            root, fields, _ = self.path()
            if not fields:
                self.fail("has() needs a field selection such as has(self.x)")
            self.take(")")
            return ("has", root, fields), "bool", None
        if tok in ("self", "oldSelf"):
            root, fields, node = self.path()
            return ("path", root, fields), _cel_type(node), node
        self.fail("unexpected %s" % (tok if tok is not None else "end of the rule"))

    def path(self):
        root = self.take()
        if root not in ("self", "oldSelf"):
            self.fail("expected self or oldSelf, found %s" % root)
        node, fields = self.node, []
        while self.peek() == ".":
            self.take()
            name = self.take()
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                self.fail("expected a field name after '.', found %s" % name)
            node = self.field(node, name, fields)
            fields.append(name)
        return root, tuple(fields), node

    def field(self, node, name, fields):
        if node is None or node.type is None:
            return None  # dyn
        if node.type != "object":
            self.fail("%s has no fields" % ".".join(["self"] + fields))
        sub = node.child(name)
        if sub is None:
            if node.preserve_unknown:
                return None
            self.fail("undefined field '%s'" % name)
        return sub


def compile_rule(raw, node, where):
    if not isinstance(raw, dict):
        raise CrdError("%s: must be an object" % where)
    for k in raw:
        if k not in _RULE_KEYS:
            raise CrdError("%s: %s is not supported by the fake API server" % (where, k))
    text = raw.get("rule")
    if not isinstance(text, str) or not text.strip():
        raise CrdError("%s.rule: Required value" % where)
    message = raw.get("message", "")
    if not isinstance(message, str):
        raise CrdError("%s.message: must be a string" % where)
    reason = raw.get("reason", "FieldValueInvalid")
    if reason not in _RULE_REASONS:
        raise CrdError("%s.reason: Unsupported value: %s: supported values: %s"
                       % (where, json.dumps(reason), ", ".join(_RULE_REASONS)))
    field_path = ()
    if "fieldPath" in raw:
        fp = raw["fieldPath"]
        if not isinstance(fp, str) or not re.fullmatch(r"(\.[A-Za-z_][A-Za-z0-9_]*)+", fp):
            raise CrdError("%s.fieldPath: only .field.field paths are supported by the fake API "
                           "server, got %s" % (where, json.dumps(fp)))
        field_path = tuple(fp[1:].split("."))
        parser = _CelParser("self" + fp, node, where + ".fieldPath")
        parser.path()
    ast = _CelParser(text, node, where).parse()
    return CelRule(text, message, _RULE_REASONS[reason], field_path, ast)


def _cel_select(value, fields):
    for f in fields:
        if not isinstance(value, dict) or f not in value:
            raise CelEvalError("no such key: %s" % f)
        value = value[f]
    return value


def cel_eval(ast, self_value, old_value):
    """Evaluates a compiled rule; raises CelEvalError like CEL's runtime errors."""
    op = ast[0]
    if op == "path":
        return _cel_select(self_value if ast[1] == "self" else old_value, ast[2])
    if op == "has":
        parent = _cel_select(self_value if ast[1] == "self" else old_value, ast[2][:-1])
        if not isinstance(parent, dict):
            raise CelEvalError("no such key: %s" % ast[2][-1])
        return ast[2][-1] in parent
    if op == "not":
        v = cel_eval(ast[1], self_value, old_value)
        if not isinstance(v, bool):
            raise CelEvalError("no such overload: !_")
        return not v
    if op in ("and", "or"):
        decisive = op == "or"  # true decides ||, false decides &&
        results = []
        for operand in ast[1:]:
            try:
                results.append(cel_eval(operand, self_value, old_value))
            except CelEvalError as e:
                results.append(e)
        if any(r is decisive for r in results):
            return decisive
        for r in results:
            if isinstance(r, CelEvalError):
                raise r
            if not isinstance(r, bool):
                raise CelEvalError("no such overload: _%s_" % ("||" if decisive else "&&"))
        return not decisive
    left = cel_eval(ast[1], self_value, old_value)
    right = cel_eval(ast[2], self_value, old_value)
    equal = json_equal(left, right, ast[3])
    return equal if op == "==" else not equal
