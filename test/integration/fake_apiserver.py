#!/usr/bin/python3
"""A fake Kubernetes API server for topodra's tests: the script that runs the fakeapi package.

Callers know this path: the C++ harness (fake_apiserver.cc), test/kubectl, test/runtime and
scripts/demo.py run it; test/schema/schema_test.py imports it for the KEP-5234 mixin model and
the CRD code, re-exported below. What the server models and where each fact came from is in
fakeapi/__init__.py and the docstring of each fakeapi/*.py.

Run with /usr/bin/python3 fake_apiserver.py --help.
"""

import sys

# The harness runs this script from the source tree: no __pycache__ may appear there.
sys.dont_write_bytecode = True

from fakeapi.cel import CelEvalError, cel_eval, compile_rule  # noqa: E402
from fakeapi.cli import main, parse_args  # noqa: E402
from fakeapi.crd import crd_table, load_crds, make_crd_types  # noqa: E402
from fakeapi.crd_schema import compile_schema  # noqa: E402
from fakeapi.decode import DecodeError, ListOf, MapOf, Obj  # noqa: E402
from fakeapi.errors import CrdError  # noqa: E402
from fakeapi.kubectl import human_duration  # noqa: E402
from fakeapi.patch import smp_directive  # noqa: E402
from fakeapi.slices import resourceslice_schema  # noqa: E402

__all__ = ["CelEvalError", "CrdError", "DecodeError", "ListOf", "MapOf", "Obj", "cel_eval",
           "compile_rule", "compile_schema", "crd_table", "human_duration", "load_crds", "main",
           "make_crd_types", "parse_args", "resourceslice_schema", "smp_directive"]

if __name__ == "__main__":
    sys.exit(main())
