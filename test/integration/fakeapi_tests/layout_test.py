"""The shape of the fakeapi package, as fakeapi/__init__.py describes it: every module is in its
list of layers, imports only modules listed before it (so there are no import cycles), stays
small enough to read whole, and says in its docstring where its facts came from."""

import ast
import os
import re
import unittest

from fakeapi_tests.harness import HERE

PACKAGE = os.path.join(HERE, "fakeapi")
MAX_LINES = 1200


def listed_layers():
    """The module names of the package docstring's list, lowest layer first."""
    with open(os.path.join(PACKAGE, "__init__.py")) as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    start = doc.index("The package, lowest layer first")
    block = doc[start:].split("\n\n")[0].split("\n")[2:]
    return [m.group(1) for m in (re.match(r"  ([a-z_]+) +\S", line) for line in block) if m]


def package_imports(path):
    with open(path) as f:
        tree = ast.parse(f.read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            out.add(node.module.split(".")[0])
    return out


class PackageLayoutTest(unittest.TestCase):
    def test_modules_layers_sizes_and_sources(self):
        layers = listed_layers()
        modules = sorted(f[:-3] for f in os.listdir(PACKAGE)
                         if f.endswith(".py") and f != "__init__.py")
        self.assertEqual(sorted(layers), modules)
        for i, name in enumerate(layers):
            path = os.path.join(PACKAGE, name + ".py")
            with self.subTest(module=name):
                for imported in package_imports(path):
                    self.assertIn(imported, layers[:i],
                                  "%s imports %s, which is not a lower layer" % (name, imported))
                with open(path) as f:
                    text = f.read()
                self.assertLessEqual(text.count("\n"), MAX_LINES)
                self.assertIn("Source:", ast.get_docstring(ast.parse(text)) or "")
