"""Name and value formats of apimachinery: DNS-1123 labels and subdomains, qualified names,
label values, C identifiers, driver and pool names and qualified attribute/capacity keys (with
the real validation messages); and resource.Quantity, parsed and rendered in the canonical form
the server stores (so "1000m" comes back as "1").

Source: k8s-api-cdi.md §1.7 (names and formats of the resource.k8s.io fields), §1.6 (capacity
values are Quantities); code read: k8s.io/apimachinery/pkg/util/validation and
pkg/api/resource/quantity.go."""

import fractions
import re

from .errors import f_invalid, f_required, f_too_long


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = _DNS_LABEL + r"(\." + _DNS_LABEL + r")*"
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_DNS_SUBDOMAIN_RE = re.compile(_DNS_SUBDOMAIN)
_QUALIFIED_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_C_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SEMVER_RE = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?")

_MSG_DNS_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                  "or '-', and must start and end with an alphanumeric character (e.g. 'my-name',"
                  "  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_MSG_DNS_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                      "characters, '-' or '.', and must start and end with an alphanumeric "
                      "character (e.g. 'example.com', regex used for validation is "
                      "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_MSG_QUALIFIED = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                  "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
                  "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?"
                  "[A-Za-z0-9]')")
_MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
                    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
_MSG_C_IDENTIFIER = ("a valid C identifier must start with alphabetic character or '_', followed "
                     "by a string of alphanumeric characters or '_' (e.g. 'my_name',  or "
                     "'MY_NAME',  or 'MyName', regex used for validation is "
                     "'[A-Za-z_][A-Za-z0-9_]*')")


def is_dns1123_label(v):
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS_LABEL_RE.fullmatch(v):
        errs.append(_MSG_DNS_LABEL)
    return errs


def is_dns1123_subdomain(v):
    errs = []
    if len(v) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS_SUBDOMAIN_RE.fullmatch(v):
        errs.append(_MSG_DNS_SUBDOMAIN)
    return errs


def is_qualified_name(v):
    errs = []
    parts = v.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return ["a qualified name " + _MSG_QUALIFIED + " with an optional DNS subdomain prefix "
                "and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append("name part " + _MSG_QUALIFIED)
    return errs


def is_label_value(v):
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.fullmatch(v):
        errs.append(_MSG_LABEL_VALUE)
    return errs


def validate_driver_name(v, path):
    """corevalidation.ValidateCSIDriverName: <=63, a DNS subdomain after lower-casing."""
    errs = []
    if not v:
        errs.append(f_required(path))
    if len(v) > 63:
        errs.append(f_too_long(path, 63))
    errs.extend(f_invalid(path, v, m) for m in is_dns1123_subdomain(v.lower()))
    return errs


def validate_pool_name(v, path):
    if not v:
        return [f_required(path)]
    errs = []
    if len(v) > 253:
        errs.append(f_too_long(path, 253))
    for part in v.split("/"):
        errs.extend(f_invalid(path, part, m) for m in is_dns1123_subdomain(part))
    return errs


def validate_c_identifier(v, path):
    errs = []
    if len(v) > 32:
        errs.append(f_too_long(path, 32))
    if not _C_IDENTIFIER_RE.fullmatch(v):
        errs.append(f_invalid(path, v, _MSG_C_IDENTIFIER))
    return errs


# Names validate_qualified_key found valid: a pool repeats the same few keys on every device, and
# the answer depends on the name alone (the path only appears in errors). Bounded, so a client
# sending endless distinct names cannot grow it without limit.
_VALID_QUALIFIED_KEYS = set()
_MAX_REMEMBERED_KEYS = 4096


def validate_qualified_key(name, path):
    """A device attribute/capacity name: C identifier or <driver-like domain>/<C identifier>.
    Like validateQualifiedName of 1.36, a name with a second '/' is not checked at all
    (k8s-api-cdi.md §1.7)."""
    if name in _VALID_QUALIFIED_KEYS:
        return []
    errs = _qualified_key_errors(name, path)
    if not errs and len(_VALID_QUALIFIED_KEYS) < _MAX_REMEMBERED_KEYS:
        _VALID_QUALIFIED_KEYS.add(name)
    return errs


def _qualified_key_errors(name, path):
    if not name:
        return [f_required(path, "name required")]
    parts = name.split("/")
    if len(parts) == 1:
        return validate_c_identifier(parts[0], path)
    if len(parts) == 2:
        errs = []
        if not parts[0]:
            errs.append(f_required(path, "the domain must not be empty"))
        else:
            errs.extend(validate_driver_name(parts[0], path))
        if not parts[1]:
            errs.append(f_required(path, "the name must not be empty"))
        else:
            errs.extend(validate_c_identifier(parts[1], path))
        return errs
    return []


# ---------------------------------------------------------------------------------------------
# Quantities (apimachinery api/resource): parse, then render in canonical form like the server
# ---------------------------------------------------------------------------------------------

_QUANTITY_RE = re.compile(r"([+-]?)([0-9]+\.?[0-9]*|\.[0-9]+)(.*)", re.S)
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
                     "E": 18}
_BINARY_NAMES = {0: "", **{v: k for k, v in _BINARY_SUFFIXES.items()}}
_DECIMAL_NAMES = {v: k for k, v in _DECIMAL_SUFFIXES.items()}
_MSG_QUANTITY_FORMAT = ("quantities must match the regular expression "
                        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")


class Quantity:
    __slots__ = ("value", "fmt")

    def __init__(self, value, fmt):
        self.value = value  # fractions.Fraction, rounded up to nano precision
        self.fmt = fmt  # "BinarySI", "DecimalSI" or "DecimalExponent"

    def canonical(self):
        v, fmt = self.value, self.fmt
        if v == 0:
            return "0"
        if fmt == "BinarySI":
            if -1024 < v < 1024 or v.denominator != 1:
                fmt = "DecimalSI"
            else:
                n = abs(v.numerator)
                exp = 0
                while n % 1024 == 0 and exp < 6:
                    n //= 1024
                    exp += 1
                return ("-" if v < 0 else "") + str(n) + _BINARY_NAMES[exp]
        mantissa = int(v * 10**9)  # exact: values are rounded to nano precision when parsed
        exp = -9
        while mantissa % 10 == 0:
            mantissa //= 10
            exp += 1
        shift = exp % 3
        mantissa *= 10**shift
        exp -= shift
        if fmt == "DecimalExponent":
            return str(mantissa) + ("e%d" % exp if exp else "")
        if exp > 18:
            mantissa *= 10**(exp - 18)
            exp = 18
        return str(mantissa) + _DECIMAL_NAMES[exp]

    def as_int(self):
        """Quantity.Value(): rounded up to an integer."""
        v = self.value
        return -((-v.numerator) // v.denominator)


def parse_quantity(text):
    """resource.ParseQuantity; raises ValueError with the apimachinery message."""
    text = text.strip()
    if not text or len(text) > 1024:
        raise ValueError(_MSG_QUANTITY_FORMAT)
    m = _QUANTITY_RE.fullmatch(text)
    if not m:
        raise ValueError(_MSG_QUANTITY_FORMAT)
    sign, number, suffix = m.groups()
    try:
        value = fractions.Fraction(number if not number.endswith(".") else number[:-1])
    except (ValueError, ZeroDivisionError):
        raise ValueError("unable to parse numeric part of quantity")
    if suffix in _BINARY_SUFFIXES:
        fmt = "BinarySI"
        value *= 1024**_BINARY_SUFFIXES[suffix]
    elif suffix in _DECIMAL_SUFFIXES:
        fmt = "DecimalSI"
        value *= fractions.Fraction(10)**_DECIMAL_SUFFIXES[suffix]
    elif suffix[:1] in ("e", "E") and re.fullmatch(r"[eE][+-]?[0-9]+", suffix):
        exp = int(suffix[1:])
        if abs(exp) > 1000:
            raise ValueError("unable to parse quantity's suffix")
        fmt = "DecimalExponent"
        value *= fractions.Fraction(10)**exp
    else:
        raise ValueError("unable to parse quantity's suffix")
    if sign == "-":
        value = -value
    nanos = value * 10**9
    if nanos.denominator != 1:  # round away from zero to nano precision, like the server
        whole = abs(nanos.numerator) // nanos.denominator + 1
        value = fractions.Fraction(whole if nanos > 0 else -whole, 10**9)
    return Quantity(value, fmt)
