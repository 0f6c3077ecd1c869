#!/usr/bin/python3
"""Table tests of folder_deps.py's pure parts: folder mapping, edges, cycles, order."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import folder_deps  # noqa: E402


class FolderOfTest(unittest.TestCase):
    def test_table(self):
        cases = [
            ("common/status.h", "common"),
            ("topology/cpuset.h", "topology"),
            ("cdi/spec.cc", "cdi"),
            ("proto/dra/v1/api.pb.h", "proto"),
            ("cmd/main.cc", "cmd"),
            ("driver/prepare/planner.cc", "driver/prepare"),
            ("driver/kube/quantity.h", "driver/kube"),
            ("driver/CMakeLists.txt", None),
            ("nlohmann/json.hpp", None),
            ("absl/status/status.h", None),
            ("test/testing/fixtures.h", None),
            ("common", None),
        ]
        for path, want in cases:
            with self.subTest(path=path):
                self.assertEqual(folder_deps.folder_of(path), want)


class EdgesTest(unittest.TestCase):
    def test_first_include_names_the_edge_and_same_folder_is_no_edge(self):
        edges = folder_deps.edges_of([
            ("driver/a/x.cc", "driver/a/x.h"),
            ("driver/a/x.cc", "common/s.h"),
            ("driver/a/y.cc", "common/t.h"),
            ("driver/a/y.cc", "absl/status/status.h"),
        ])
        self.assertEqual(edges, {("driver/a", "common"): ("driver/a/x.cc", "common/s.h")})


class CyclesTest(unittest.TestCase):
    def cycles(self, pairs):
        edges = {e: ("f", "g") for e in pairs}
        nodes = {n for e in pairs for n in e}
        return folder_deps.find_cycles(nodes, edges)

    def test_table(self):
        cases = [
            ("none", [], []),
            ("chain", [("a", "b"), ("b", "c"), ("a", "c")], []),
            ("two", [("a", "b"), ("b", "a")], [["a", "b", "a"]]),
            ("three", [("b", "c"), ("c", "a"), ("a", "b"), ("c", "d")], [["a", "b", "c", "a"]]),
            ("shortest way back", [("a", "b"), ("b", "c"), ("c", "a"), ("b", "a")],
             [["a", "b", "a"]]),
            ("two components", [("a", "b"), ("b", "a"), ("c", "d"), ("d", "c"), ("b", "c")],
             [["a", "b", "a"], ["c", "d", "c"]]),
        ]
        for name, pairs, want in cases:
            with self.subTest(name):
                self.assertEqual(self.cycles(pairs), want)


class StaleAllowancesTest(unittest.TestCase):
    def test_table(self):
        allowed = {("r", "p"): "why"}
        cases = [
            ("still a cycle", {("r", "p"): 0, ("p", "r"): 0}, []),
            ("longer cycle", {("r", "p"): 0, ("p", "s"): 0, ("s", "r"): 0}, []),
            ("edge gone", {("p", "r"): 0}, [("r", "p")]),
            ("no way back", {("r", "p"): 0, ("p", "s"): 0}, [("r", "p")]),
        ]
        for name, edges, want in cases:
            with self.subTest(name):
                got = [e for e, _ in folder_deps.stale_allowances(edges, allowed)]
                self.assertEqual(got, want)


class OrderTest(unittest.TestCase):
    def test_leaves_first(self):
        edges = {("cmd", "driver/x"): None, ("driver/x", "common"): None, ("cdi", "common"): None}
        nodes = {"cmd", "driver/x", "common", "cdi"}
        self.assertEqual(folder_deps.order(nodes, edges), ["common", "cdi", "driver/x", "cmd"])

    def test_cycle_member_waiting_for_fewest_first(self):
        edges = {("a", "b"): None, ("b", "a"): None, ("b", "c"): None, ("d", "a"): None}
        self.assertEqual(folder_deps.order({"a", "b", "c", "d"}, edges), ["c", "a", "b", "d"])

    def test_table_rows(self):
        edges = {("b", "a"): None}
        self.assertEqual(folder_deps.table({"a", "b"}, edges), [("a", [], ["b"]), ("b", ["a"], [])])


if __name__ == "__main__":
    unittest.main()
