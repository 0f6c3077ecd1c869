"""Errors as the API server reports them: a v1 Status ({kind: Status, status: Failure, reason,
message, code, details{name, kind, causes[]}}) raised as ApiError, and the field errors of
apimachinery's field.ErrorList (Invalid, Required, Forbidden, TooMany, TooLong, Duplicate,
NotFound, NotSupported) that become Status.details.causes of a 422 Invalid, with the real
messages. Also CrdError, for a CRD the fake cannot serve exactly (a start-up error, not a
Status).

Source: k8s-api-cdi.md §3.2 (the Status object, 422 with details.causes {reason, message,
field}); message texts from k8s.io/apimachinery/pkg/util/validation/field/errors.go."""

import json


class ApiError(Exception):
    """An error answered with a v1 Status body."""

    def __init__(self, code, reason, message, details=None, headers=()):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self.headers = list(headers)

    def body(self):
        return status_object(self.code, self.reason, self.message, self.details)


def status_object(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message}
    if reason:
        body["reason"] = reason
    body["code"] = code
    body["details"] = details or {}
    return body


def bad_request(message, causes=None):
    details = {"causes": causes} if causes else None
    return ApiError(400, "BadRequest", message, details)


def not_found_path():
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource")


def _value_repr(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, str)):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True)


class FieldError:
    """One field.Error of apimachinery: a path, a type and a detail."""

    REASONS = {
        "Invalid": "FieldValueInvalid", "Required": "FieldValueRequired",
        "Duplicate": "FieldValueDuplicate", "TooMany": "FieldValueTooMany",
        "TooLong": "FieldValueTooLong", "Forbidden": "FieldValueForbidden",
        "NotSupported": "FieldValueNotSupported", "NotFound": "FieldValueNotFound",
        "TypeInvalid": "FieldValueTypeInvalid",
    }

    def __init__(self, kind, field, value=None, detail="", limit=None, supported=()):
        self.kind = kind
        self.field = field
        self.value = value
        self.detail = detail
        self.limit = limit
        self.supported = supported

    def body(self):
        k = self.kind
        if k in ("Invalid", "TypeInvalid"):
            text = "Invalid value: " + _value_repr(self.value)
            return text + (": " + self.detail if self.detail else "")
        if k == "Required":
            return "Required value" + (": " + self.detail if self.detail else "")
        if k == "Duplicate":
            return "Duplicate value: " + _value_repr(self.value)
        if k == "NotFound":
            return "Not found: " + _value_repr(self.value)
        if k == "NotSupported":
            text = "Unsupported value: " + _value_repr(self.value)
            if self.supported:
                text += ": supported values: " + ", ".join(json.dumps(s) for s in self.supported)
            return text
        if k == "Forbidden":
            return "Forbidden: " + self.detail
        if k == "TooLong":
            return "Too long: may not be more than %d bytes" % self.limit
        if k == "TooMany":
            return "Too many: %d: must have at most %d items" % (self.value, self.limit)
        return self.detail

    def cause(self):
        return {"reason": self.REASONS[self.kind], "message": self.body(), "field": self.field}

    def __str__(self):
        return "%s: %s" % (self.field, self.body())


def f_invalid(path, value, detail):
    return FieldError("Invalid", path, value, detail)


def f_type_invalid(path, value, detail):
    return FieldError("TypeInvalid", path, value, detail)


def f_required(path, detail=""):
    return FieldError("Required", path, detail=detail)


def f_forbidden(path, detail):
    return FieldError("Forbidden", path, detail=detail)


def f_too_many(path, actual, limit):
    return FieldError("TooMany", path, actual, limit=limit)


def f_too_long(path, limit):
    return FieldError("TooLong", path, limit=limit)


def f_duplicate(path, value):
    return FieldError("Duplicate", path, value)


def f_not_found(path, value):
    return FieldError("NotFound", path, value)


def f_not_supported(path, value, supported):
    return FieldError("NotSupported", path, value, supported=supported)


def child(path, name):
    return path + "." + name if path else name


def index(path, i):
    return "%s[%d]" % (path, i)


def key(path, k):
    return "%s[%s]" % (path, k)


class CrdError(Exception):
    """A CRD the fake cannot serve: invalid, or using something the fake does not implement.
    Raised at start, so that nothing in a CRD is silently ignored."""
