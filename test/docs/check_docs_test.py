#!/usr/bin/python3
"""Table tests of check_docs.py's parsers: GitHub anchors, CLI11 help pages, the configuration
reference's sections and rows, and links (including the ones it must not see)."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_docs  # noqa: E402


class SlugTest(unittest.TestCase):
    def test_table(self):
        for heading, want in [
            ("Text output", "text-output"),
            ("JSON output (`-o json`)", "json-output--o-json"),
            ("Mixins (KEP-5234) and flattening", "mixins-kep-5234-and-flattening"),
            ("Publishing (`topodra slices`, `topodra run`)", "publishing-topodra-slices-topodra-run"),
            ("`topodra reservations`", "topodra-reservations"),
            ("Output: CDI specs", "output-cdi-specs"),
            ("A [linked](x.md) heading", "a-linked-heading"),
        ]:
            self.assertEqual(check_docs.slug(heading), want, heading)

    def test_duplicates_are_numbered_and_code_is_not_a_heading(self):
        text = "# A\n\n## Known limits\n\n```\n# not a heading\n```\n\n## Known limits\n"
        self.assertEqual(check_docs.anchors(text), {"a", "known-limits", "known-limits-1"})


HELP = """Run the node daemon
Usage: topodra run [OPTIONS]

Options:
  -h,--help                   Print this help message and exit
  --topology-file TEXT:FILE Excludes: --topology-synthetic
                              Read the machine from an hwloc XML export
  -o,--output TEXT:{json,yaml}=json
                              Output format
  -v                          More detail: -v debug, -vv trace
  --strict-cpu-reservation    Keep --reserved-cpus out of the shared pool too
"""

ROOT_HELP = """topodra: topology-aware Kubernetes DRA driver for CPUs and GPUs
Usage: topodra [OPTIONS] SUBCOMMAND

Options:
  -h,--help                   Print this help message and exit

Subcommands:
  topology                    Print the machine's topology
  run                         Run the node daemon: publish this node's devices
"""


class HelpTest(unittest.TestCase):
    def test_flags(self):
        # Flags named in a description (--topology-synthetic, --reserved-cpus) are not options.
        self.assertEqual(check_docs.help_flags(HELP),
                         {"--topology-file", "-o", "--output", "-v", "--strict-cpu-reservation"})

    def test_subcommands(self):
        self.assertEqual(check_docs.subcommands(ROOT_HELP), ["topology", "run"])


class DocFlagsTest(unittest.TestCase):
    def test_sections_and_rows(self):
        doc = "\n".join([
            "# Configuration reference",
            "| `--ignored` | before any section |",
            "## Machine source (`topodra topology`, `topodra run`)",
            "| flag | default | meaning |",
            "|---|---|---|",
            "| `--topology-file` | live | names `--topology-synthetic` in its meaning |",
            "## `topodra run`",
            "### Logging",
            "| `-v`, `-vv` | | debug, trace |",
            "| `-o`, `--output` | `json` | |",
            "## Notes",
            "| `--not-a-flag-row` | |",
        ])
        self.assertEqual(check_docs.doc_flags(doc), {
            "topology": {"--topology-file"},
            "run": {"--topology-file", "-v", "-o", "--output"},
        })


class NamedPathsTest(unittest.TestCase):
    def test_code_spans_outside_merge_sections(self):
        doc = "\n".join([
            "# Doc",
            "`driver/state/store.h` and `Makefile`, not driver/plain.h nor `/dev/dri/card0`",
            "## Target",
            "<!-- updated at merge: names may change -->",
            "`driver/node/node.h`",
            "## After",
            "`test/bench/topology_bench`",
        ])
        self.assertEqual(check_docs.named_paths(doc), [
            (2, "driver/state/store.h"), (2, "Makefile"), (7, "test/bench/topology_bench")])


class LinksTest(unittest.TestCase):
    def test_good_and_bad_links(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "docs", "user"))
            with open(os.path.join(root, "README.md"), "w") as f:
                f.write("\n".join([
                    "# Top",
                    "[ok](docs/user/a.md#section-one) [ok](#top) [web](https://example.com)",
                    "[missing file](docs/user/b.md) [missing anchor](docs/user/a.md#nope)",
                    "`[in code](nowhere.md)`",
                    "```",
                    "[in a block](nowhere.md)",
                    "```",
                    "[outside](../elsewhere.md)",
                ]))
            with open(os.path.join(root, "docs", "user", "a.md"), "w") as f:
                f.write("# A\n\n## Section one\n\n[back](../../README.md#top)\n"
                        "`docs/user/a.md` `docs/dev/b.md`\n")
            os.makedirs(os.path.join(root, "src"))
            with open(os.path.join(root, "src", "x.h"), "w") as f:
                f.write("// see docs/user/a.md and docs/dev/gone.md\n")
            problems, _ = check_docs.check_links(root)
        self.assertEqual(len(problems), 5, problems)
        self.assertIn("README.md:3: link 'docs/user/b.md'", problems[0])
        self.assertIn("has no heading with anchor #nope", problems[1])
        self.assertIn("README.md:8: link '../elsewhere.md' leaves the repository", problems[2])
        self.assertIn("docs/user/a.md:6: names `docs/dev/b.md`, which does not exist", problems[3])
        self.assertIn("src/x.h:1: names docs/dev/gone.md", problems[4])


if __name__ == "__main__":
    unittest.main()
