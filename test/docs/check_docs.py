#!/usr/bin/python3
"""Checks that the documentation stays true to the code and to itself.

  check_docs.py flags TOPODRA CONFIGURATION_MD
      Every flag that `TOPODRA <subcommand> --help` lists is a row of the configuration reference,
      in a section whose `## ` heading names `topodra <subcommand>`, and every flag row there is
      a flag of that subcommand (a removed flag must leave the reference too). Subcommands whose
      help lists no flag but -h/--help need no section.

  check_docs.py links SOURCE_DIR
      Every relative link of README.md and docs/**/*.md points at a file or directory that exists
      and, with a #fragment into a Markdown file, at one of its headings (GitHub's anchors); every
      repository path they name in a code span (`driver/state/store.h`) exists, except in a
      section marked <!-- updated at merge -->. Every docs/.../*.md path named anywhere else in
      the sources (comments, charts, scripts) exists.

Exit status 0 when all holds, 1 with one line per problem otherwise.
"""

import os
import re
import subprocess
import sys

# ---------------------------------------------------------------- flags


def help_text(topodra, *args):
    p = subprocess.run([topodra, *args, "--help"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        sys.exit(f"{topodra} {' '.join(args)} --help: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def subcommands(root_help):
    """Names under `Subcommands:` of `topodra --help`."""
    names, inside = [], False
    for line in root_help.splitlines():
        if line.strip() == "Subcommands:":
            inside = True
        elif inside and re.match(r"^\s{2}(\w[\w-]*)\s", line):
            names.append(line.split()[0])
        elif inside and line.strip() and not line.startswith(" "):
            inside = False
    return names


def help_flags(text):
    """Option names of a CLI11 help page (`-o,--output TEXT` gives -o and --output); no -h/--help."""
    flags, inside = set(), False
    for line in text.splitlines():
        if line.strip() == "Options:":
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            inside = False
        m = re.match(r"^\s{2}((?:-\w,)?--?[\w-]+)", line) if inside else None
        if m:
            flags.update(m.group(1).split(","))
    return flags - {"-h", "--help"}


def doc_flags(markdown):
    """{subcommand: flags} from the table rows of each `## ` section naming `topodra <sub>`."""
    sections, current = {}, []
    for line in markdown.splitlines():
        if line.startswith("## "):
            current = re.findall(r"topodra (\w[\w-]*)", line)
            for sub in current:
                sections.setdefault(sub, set())
        elif line.startswith("|") and current:
            first = line.strip("|").split("|")[0]
            # `-vv` is `-v` given twice (CLI11 counts it); it is not an option of its own.
            names = {re.sub(r"^-(\w)\1+$", r"-\1", f) for f in re.findall(r"`(--?[\w-]+)`", first)}
            for sub in current:
                sections[sub] |= names
    return sections


def check_flags(topodra, config_md):
    with open(config_md) as f:
        documented = doc_flags(f.read())
    problems, checked = [], 0
    for sub in subcommands(help_text(topodra)):
        flags = help_flags(help_text(topodra, sub))
        if not flags and sub not in documented:
            continue
        rows = documented.get(sub)
        if rows is None:
            problems.append(f"{config_md}: no `## ` section names `topodra {sub}` "
                            f"(its flags: {', '.join(sorted(flags))})")
            continue
        for flag in sorted(flags - rows):
            problems.append(f"{config_md}: `topodra {sub} --help` has {flag}, "
                            "but no table row of its sections names it")
        for flag in sorted(rows - flags):
            problems.append(f"{config_md}: a section of `topodra {sub}` documents {flag}, "
                            f"which `topodra {sub} --help` does not list")
        checked += len(flags)
    return problems, f"{checked} flags checked"


# ---------------------------------------------------------------- links

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def strip_code(markdown):
    """The text outside fenced code blocks and inline code spans, line numbers kept."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return out


def slug(heading):
    """GitHub's anchor of a heading: lower case, markup and punctuation gone, spaces to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown):
    seen, out = {}, set()
    fenced = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    # Explicit anchors: <a id="..."> or <a name="...">.
    out |= set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", markdown))
    return out


def markdown_files(source_dir):
    files = [os.path.join(source_dir, "README.md")]
    for root, dirs, names in os.walk(os.path.join(source_dir, "docs")):
        dirs.sort()
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return files


REPO_PATH = re.compile(r"`((?:cmd|common|cdi|driver|topology|test|charts|scripts|proto|docs|\.ci)/"
                       r"[\w./-]*|Makefile|Dockerfile|CMakePresets\.json|STYLE\.md)`")


def named_paths(markdown):
    """(line, path) of every `repo/path` in code spans, outside sections that say their names
    are updated when pieces in flight are merged (<!-- updated at merge ... --> up to the next
    heading)."""
    out, exempt, fenced = [], False, False
    for number, line in enumerate(markdown.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        if not fenced and line.startswith("#"):
            exempt = False
        if "<!-- updated at merge" in line:
            exempt = True
        if not exempt:
            out += [(number, m) for m in REPO_PATH.findall(line)]
    return out


def check_links(source_dir):
    problems, count, cache = [], 0, {}

    def anchors_of(path):
        if path not in cache:
            with open(path) as f:
                cache[path] = anchors(f.read())
        return cache[path]

    for md in markdown_files(source_dir):
        with open(md) as f:
            lines = strip_code(f.read())
        rel_md = os.path.relpath(md, source_dir)
        for number, line in enumerate(lines, 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                count += 1
                path, _, fragment = target.partition("#")
                full = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
                where = f"{rel_md}:{number}: link {target!r}"
                if os.path.relpath(full, source_dir).split(os.sep)[0] == "..":
                    problems.append(f"{where} leaves the repository")
                elif not os.path.exists(full):
                    problems.append(f"{where}: {os.path.relpath(full, source_dir)} does not exist")
                elif fragment and full.endswith(".md") and fragment not in anchors_of(full):
                    problems.append(f"{where}: {os.path.relpath(full, source_dir)} has no "
                                    f"heading with anchor #{fragment}")
        # Files named in code spans: a renamed source file must not leave the docs behind. A
        # name without an extension may be a build target of a .cc file (test/bench/x_bench).
        with open(md) as f:
            for number, path in named_paths(f.read()):
                full = os.path.join(source_dir, path)
                count += 1
                if not os.path.exists(full) and not os.path.exists(full + ".cc"):
                    problems.append(f"{rel_md}:{number}: names `{path}`, which does not exist")
    # docs/... paths named by sources outside the docs.
    named = 0
    skip = {".git", "build", "node_modules", "docs"}
    for root, dirs, names in os.walk(source_dir):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("build"))
        for n in sorted(names):
            if n == "README.md" and root == source_dir:
                continue
            path = os.path.join(root, n)
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (UnicodeDecodeError, OSError):
                continue
            for m in re.finditer(r"\bdocs/(?:user|dev)/[\w./-]*?\.md\b", text):
                named += 1
                if not os.path.exists(os.path.join(source_dir, m.group(0))):
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"{os.path.relpath(path, source_dir)}:{line}: names "
                                    f"{m.group(0)}, which does not exist")
    return problems, (f"{count} relative links and file names in docs, {named} docs paths named "
                      "in sources checked")


def main(argv):
    if len(argv) == 4 and argv[1] == "flags":
        problems, summary = check_flags(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "links":
        problems, summary = check_links(argv[2])
    else:
        sys.exit(__doc__)
    for p in problems:
        print(p)
    print(f"{summary}; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
