#!/usr/bin/python3
"""Checks the repository's Dockerfile against the binaries this build produced (no Docker needed).

Runtime stage (the last FROM):
  - every library the built `topodra` and `topodra-daemon` load (ldd) comes from a Debian
    package the stage installs: the packages of the direct dependencies (readelf NEEDED) must be
    listed in its `apt-get install`; the indirect ones must be listed or pulled in by the Depends of a
    listed package (apt installs those), so the list stays short but complete;
  - it is debian:bookworm-slim, installs with --no-install-recommends, removes the apt lists,
    copies the three artefacts where the binary looks for them (one directory: `topodra run`
    execs topodra-daemon from its own), runs /usr/bin/topodra run.
  - `topodra-cpuset-hook` is statically linked (it runs on the host, outside the image).
Build stage: debian:bookworm, installs from CI's own list by running scripts/install-deps.sh
on scripts/build-deps.txt (--build-only: the part above its "tests" marker) and nothing else,
and builds the release preset. `make image` builds it for real (test/image).

Prints one line per problem and exits 1 if there is any.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

# Always in debian:bookworm-slim: apt itself depends on them (Depends: libc6, libgcc-s1,
# libstdc++6), so an image that can run apt-get has them. They need not be listed.
IN_BASE_IMAGE = {"libc6", "libgcc-s1", "libstdc++6"}

# Sanitizer runtimes that only the ASan/UBSan test builds link; the release build in the image
# does not, so they are not runtime dependencies of the image.
BUILD_ONLY_LIBRARIES = re.compile(r"^lib(asan|ubsan|lsan|tsan|hwasan)\.so")

problems = []


def problem(text):
    problems.append(text)
    print("FAIL: " + text)


def run(argv):
    return subprocess.run(argv, check=False, capture_output=True, text=True)


# ---- the Dockerfile -----------------------------------------------------------------------------


def instructions(path):
    """(KEYWORD, arguments) pairs of a Dockerfile, continuation lines joined, comments dropped."""
    result, current = [], ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if current and line.lstrip().startswith("#"):
                continue  # a comment inside a continued instruction
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            current += line
            keyword, _, args = current.strip().partition(" ")
            result.append((keyword.upper(), args.strip()))
            current = ""
    if current.strip():
        keyword, _, args = current.strip().partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def stages(instrs):
    """Lists of instructions, one per FROM."""
    out = []
    for keyword, args in instrs:
        if keyword == "FROM":
            out.append([(keyword, args)])
        elif out:
            out[-1].append((keyword, args))
    return out


def shell_commands(run_args):
    """The simple commands of a RUN's shell line (split on &&, ||, ;, |)."""
    words = shlex.split(run_args, posix=True)
    commands, current = [], []
    for w in words:
        if w in ("&&", "||", ";", "|", "!"):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(w)
    if current:
        commands.append(current)
    return commands


def apt_get_installs(stage):
    """Packages of every `apt-get install` in a stage, and the option words used."""
    packages, options = [], set()
    for keyword, args in stage:
        if keyword != "RUN":
            continue
        for cmd in shell_commands(args):
            # Drop leading VAR=value assignments (DEBIAN_FRONTEND=noninteractive apt-get ...).
            while cmd and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[0]):
                cmd = cmd[1:]
            if len(cmd) >= 2 and os.path.basename(cmd[0]) in ("apt-get", "apt") and "install" in cmd:
                for w in cmd[cmd.index("install") + 1:]:
                    (options.add(w) if w.startswith("-") else packages.append(w))
    return packages, options


def check_build_stage(stage, source_dir):
    base = stage[0][1].split()[0]
    if base != "debian:bookworm":
        problem(f"the build stage is FROM {base}, not debian:bookworm (what CI runs on)")
    runs = " ".join(args for k, args in stage if k == "RUN")
    copies = " ".join(args for k, args in stage if k in ("COPY", "ADD"))
    # CI installs through the same script: .ci/run -> make test -> make deps -> install-deps.sh.
    with open(os.path.join(source_dir, ".ci/run"), encoding="utf-8") as f:
        if not re.search(r"^\s*make test\s*$", f.read(), re.M):
            problem(".ci/run no longer runs `make test`: check what CI installs")
    with open(os.path.join(source_dir, "Makefile"), encoding="utf-8") as f:
        if not re.search(r"^deps:\s*\n\t@?scripts/install-deps\.sh\s*$", f.read(), re.M):
            problem("Makefile's deps target no longer runs scripts/install-deps.sh")
    if "scripts/install-deps.sh" not in runs:
        problem("the build stage does not run scripts/install-deps.sh (the packages CI installs)")
    for needed in ("scripts/install-deps.sh", "scripts/build-deps.txt"):
        if needed not in copies and not re.search(r"COPY \. ", "COPY " + copies):
            problem(f"the build stage does not copy {needed} before installing")
    extra, _ = apt_get_installs(stage)
    if extra:
        problem("the build stage installs packages besides scripts/build-deps.txt: " + " ".join(extra))
    if "cmake --preset release" not in runs or "cmake --build --preset release" not in runs:
        problem("the build stage does not build the release preset")


def check_runtime_stage(stage, required, direct, pulled_in, source_dir):
    base = stage[0][1].split()[0]
    if base != "debian:bookworm-slim":
        problem(f"the runtime stage is FROM {base}, not debian:bookworm-slim")
    listed, options = apt_get_installs(stage)
    if not listed:
        problem("the runtime stage has no `apt-get install`")
    if "--no-install-recommends" not in options:
        problem("the runtime stage's apt-get install lacks --no-install-recommends")
    runs = " ".join(args for k, args in stage if k == "RUN")
    if "rm -rf /var/lib/apt/lists" not in runs:
        problem("the runtime stage does not remove /var/lib/apt/lists")
    listed = set(listed)

    for pkg, why in sorted(direct.items()):
        if pkg not in listed:
            problem(f"runtime stage: package {pkg} is not installed (needed for {why})")
    for pkg, why in sorted(required.items()):
        if pkg in direct or pkg in listed:
            continue
        if pkg not in pulled_in(listed):
            problem(f"runtime stage: package {pkg} is not installed, nor pulled in by a listed "
                    f"package (needed for {why})")
    unused = sorted(listed - set(required) - set(direct))
    if unused:
        print("note: listed in the runtime stage but not loaded by this build: " + " ".join(unused))

    copies = [args.split() for k, args in stage if k == "COPY"]
    dests = {}
    for words in copies:
        words = [w for w in words if not w.startswith("--")]
        for src in words[:-1]:
            dests[os.path.basename(src)] = words[-1]
    for name, want in (("topodra", "/usr/bin/"), ("topodra-cpuset-hook", "/usr/bin/"),
                       ("topodra-daemon", "/usr/bin/")):
        if dests.get(name) != want:
            problem(f"the runtime stage copies {name} to {dests.get(name)}, not {want}")
    with open(os.path.join(source_dir, "CMakeLists.txt"), encoding="utf-8") as f:
        version = re.search(r"project\(topodra VERSION (\S+)", f.read())
    arg = [a for k, a in stage if k == "ARG" and a.startswith("TOPODRA_VERSION=")]
    if version and arg != [f"TOPODRA_VERSION={version.group(1)}"]:
        problem(f"the runtime stage's ARG {arg} is not TOPODRA_VERSION={version.group(1)} "
                "(project VERSION in CMakeLists.txt)")
    entry = [args for k, args in stage if k == "ENTRYPOINT"]
    if entry[-1:] != ['["/usr/bin/topodra"]']:
        problem(f"ENTRYPOINT is {entry[-1:] or 'missing'}, not [\"/usr/bin/topodra\"]")
    cmd = [args for k, args in stage if k == "CMD"]
    if cmd[-1:] != ['["run"]']:
        problem(f"CMD is {cmd[-1:] or 'missing'}, not [\"run\"]")


# ---- the binaries -------------------------------------------------------------------------------


def ldd(path):
    """soname -> resolved path of every library ldd lists for `path` (transitively)."""
    out = run(["ldd", path])
    if out.returncode != 0:
        problem(f"ldd {path} failed: {out.stderr.strip() or out.stdout.strip()}")
        return {}
    libs = {}
    for line in out.stdout.splitlines():
        line = line.strip()
        m = re.match(r"^(\S+) => (\S+|not found)", line)
        if m:
            if m.group(2) == "not found":
                problem(f"{path}: ldd cannot find {m.group(1)}")
            else:
                libs[m.group(1)] = m.group(2)
        elif line.startswith("/"):  # the dynamic loader, /lib64/ld-linux-x86-64.so.2
            p = line.split()[0]
            libs[os.path.basename(p)] = p
        # linux-vdso.so.1 has no file: the kernel provides it.
    return libs


def needed(path):
    out = run(["readelf", "-d", "-W", path])
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)


def package_of(path):
    """The Debian package that ships `path` (tries the /usr-merged spellings and the target)."""
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        candidates.append(p[4:] if p.startswith("/usr/") else "/usr" + p)
    for p in candidates:
        out = run(["dpkg", "-S", p])
        for line in out.stdout.splitlines():
            if line.startswith("diversion by"):
                continue
            pkg = line.split(": ", 1)[0].split(",")[0].strip()
            return pkg.split(":")[0]
    return None


def make_closure():
    """A function: packages -> the packages apt installs with them (Depends, Pre-Depends)."""
    cache = {}

    def depends(pkg):
        if pkg not in cache:
            out = run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", pkg])
            deps = set()
            for clause in out.stdout.split(","):
                alternatives = [a.strip().split(" ")[0].split(":")[0] for a in clause.split("|")]
                alternatives = [a for a in alternatives if a]
                if not alternatives:
                    continue
                # apt takes the first alternative it can; here, the one this machine has.
                chosen = alternatives[0]
                for a in alternatives:
                    status = run(["dpkg-query", "-W", "-f=${Status}", a]).stdout
                    if status == "install ok installed":
                        chosen = a
                        break
                deps.add(chosen)
            cache[pkg] = deps
        return cache[pkg]

    def closure(packages):
        seen, todo = set(), list(packages) + list(IN_BASE_IMAGE)
        while todo:
            p = todo.pop()
            if p in seen:
                continue
            seen.add(p)
            todo.extend(depends(p))
        return seen

    return closure


def check_hook_static(hook, sanitize):
    if sanitize:
        # Sanitized builds cannot link statically (cmd/CMakeLists.txt): check instead that the
        # hook uses the standard library only, which is what lets the release build be static.
        libs = [n for n in needed(hook) if not BUILD_ONLY_LIBRARIES.match(n)]
        allowed = re.compile(r"^(libc|libm|libstdc\+\+|libgcc_s|ld-linux[-\w]*)\.so")
        others = [n for n in libs if not allowed.match(n)]
        if others:
            problem(f"{hook} links libraries besides the standard library: {' '.join(others)}")
        print(f"note: sanitized build ({sanitize}): the hook is not static here; checked it needs "
              "the standard library only")
        return
    out = run(["ldd", hook])
    text = (out.stdout + out.stderr).strip()
    if "not a dynamic executable" not in text and "statically linked" not in text:
        problem(f"{hook} is not statically linked (ldd: {text.splitlines()[0] if text else ''})")
    if needed(hook):
        problem(f"{hook} has NEEDED entries: {' '.join(needed(hook))}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--dockerfile")
    ap.add_argument("--topodra", required=True)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--hook", required=True)
    ap.add_argument("--sanitize", default="")
    args = ap.parse_args()
    dockerfile = args.dockerfile or os.path.join(args.source_dir, "Dockerfile")

    # IN_BASE_IMAGE holds because apt (in every debian image) depends on those packages.
    apt_depends = run(["dpkg-query", "-W", "-f=${Depends} ${Pre-Depends}", "apt"]).stdout
    for pkg in sorted(IN_BASE_IMAGE):
        if not re.search(r"(^|[ ,|])" + re.escape(pkg) + r"([ ,(]|$)", apt_depends):
            problem(f"apt no longer depends on {pkg}: list it in the runtime stage, and here")

    # Every package the image needs: why[pkg] = the library that needs it.
    required, direct = {}, {}
    for binary in (args.topodra, args.daemon):
        name = os.path.basename(binary)
        libs = ldd(binary)
        direct_sonames = set(needed(binary))
        for soname, path in sorted(libs.items()):
            if BUILD_ONLY_LIBRARIES.match(soname):
                continue
            pkg = package_of(path)
            if pkg is None:
                problem(f"{name}: no Debian package ships {path} ({soname})")
                continue
            why = f"{soname} of {name}"
            required.setdefault(pkg, why)
            if soname in direct_sonames and pkg not in IN_BASE_IMAGE:
                direct.setdefault(pkg, why)
    print("runtime packages (direct, must be listed): " + " ".join(sorted(direct)))
    print("runtime packages (all, ldd): " + " ".join(sorted(required)))

    check_hook_static(args.hook, args.sanitize)

    all_stages = stages(instructions(dockerfile))
    if len(all_stages) < 2:
        problem(f"{dockerfile}: expected a build stage and a runtime stage, found {len(all_stages)}")
    else:
        closure = make_closure()
        check_runtime_stage(all_stages[-1], required, direct, closure, args.source_dir)
        check_build_stage(all_stages[0], args.source_dir)

    if problems:
        print(f"{len(problems)} problem(s) in {dockerfile}")
        return 1
    print(f"OK: {dockerfile} installs every runtime library of this build")
    return 0


if __name__ == "__main__":
    sys.exit(main())
