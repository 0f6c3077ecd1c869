#!/usr/bin/env bash
# Builds the node daemon image from the Dockerfile as written (`make image`), with Debian's
# packages only: no Docker engine and no image registry.
#   1. The base images the Dockerfile names, made locally: `debootstrap --variant=minbase
#      bookworm` (once) is imported as debian:bookworm, and a trimmed copy (no documentation, man
#      pages, locales, apt lists or caches, as Docker Hub's slim image) as debian:bookworm-slim.
#   2. `podman build --network host` of the Dockerfile (apt-get inside the build uses the host's
#      network), tagged topodra:<project version>, the chart's default image.
# Idempotent: the root directory and the base images are made once, podman's layer cache keeps
# a rebuild to seconds. Everything is under build/image: podman's storage, run and temporary
# directories, its network configuration (podman 4.3 would write /etc/containers/networks) and
# runc's state, so the host's containers storage is untouched. Only podman's blob-info cache
# (/var/lib/containers/cache, root's fixed path) is shared. build/image/podman runs podman on this
# storage (`build/image/podman images`, `build/image/podman run --rm topodra:0.1.0 topology`).
# Needs root (debootstrap, rootful podman) and the packages debootstrap, podman and runc.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
out=${TOPODRA_IMAGE_DIR:-$repo/build/image}
mirror=${TOPODRA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Small VMs refuse podman's default limits (1M open files); these fit the build and the daemon.
ulimits=(--ulimit nofile=20000:20000 --ulimit nproc=1000:1000)

if [[ $(id -u) -ne 0 ]]; then
  echo "build-image: must run as root (debootstrap and rootful podman)" >&2
  exit 1
fi
for tool in debootstrap podman runc; do
  if ! command -v "$tool" >/dev/null; then
    echo "build-image: $tool is missing: apt-get install debootstrap podman runc" >&2
    exit 1
  fi
done
version=$(sed -n 's/^project(topodra VERSION \([0-9.]*\) .*/\1/p' "$repo/CMakeLists.txt")
if [[ -z "$version" ]]; then
  echo "build-image: no project version in $repo/CMakeLists.txt" >&2
  exit 1
fi
tag=${TOPODRA_IMAGE_TAG:-topodra:$version}

mkdir -p "$out"
cat >"$out/podman" <<EOF
#!/bin/sh
# podman on the private storage of scripts/build-image.sh.
exec podman --root "$out/storage" --runroot "$out/run" --network-config-dir "$out/net" \\
  --tmpdir "$out/tmp" --runtime runc --runtime-flag "root=$out/runc" "\$@"
EOF
chmod 755 "$out/podman"
podman=("$out/podman")

start=$SECONDS
# A root directory is complete only once debootstrap succeeded: an interrupted one is redone.
if [[ ! -f "$out/rootfs.done" ]]; then
  # debootstrap mounts /proc and /sys inside while it runs: never delete through a mount.
  if grep -q " $out/rootfs/" /proc/mounts; then
    echo "build-image: something is still mounted under $out/rootfs; unmount it first" >&2
    exit 1
  fi
  rm -rf "$out/rootfs"
  echo "build-image: debootstrap --variant=minbase bookworm ($mirror)"
  debootstrap --variant=minbase bookworm "$out/rootfs" "$mirror" >"$out/debootstrap.log" 2>&1 || {
    tail -20 "$out/debootstrap.log" >&2
    echo "build-image: debootstrap failed (log: $out/debootstrap.log)" >&2
    exit 1
  }
  touch "$out/rootfs.done"
  echo "build-image: debootstrap took $((SECONDS - start)) s"
fi

if ! "${podman[@]}" image exists debian:bookworm; then
  tar -C "$out/rootfs" -c . | "${podman[@]}" import -q - debian:bookworm >/dev/null
fi
if ! "${podman[@]}" image exists debian:bookworm-slim; then
  # As Docker Hub's slim: fewer files, and later apt installs skip the same paths (dpkg
  # path-exclude). Its docker-clean apt hook is left out: the Dockerfile cleans up by itself.
  slim=$(mktemp -d "$out/slim.XXXXXX")
  trap 'rm -rf "$slim"' EXIT
  tar -C "$out/rootfs" -c \
    --exclude='./var/cache/apt/*.bin' --exclude='./var/cache/apt/archives/*.deb' \
    --exclude='./var/lib/apt/lists/*' \
    --exclude='./usr/share/doc/*' --exclude='./usr/share/man/*' \
    --exclude='./usr/share/info/*' --exclude='./usr/share/locale/*' . | tar -C "$slim" -x
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
    'path-exclude /usr/share/locale/*' 'path-include /usr/share/locale/locale.alias' \
    >"$slim/etc/dpkg/dpkg.cfg.d/slim-excludes"
  tar -C "$slim" -c . | "${podman[@]}" import -q - debian:bookworm-slim >/dev/null
  rm -rf "$slim"
  trap - EXIT
fi

build_start=$SECONDS
echo "build-image: podman build -t $tag (Dockerfile)"
"${podman[@]}" build --network host "${ulimits[@]}" --build-arg "TOPODRA_VERSION=$version" \
  -t "$tag" -f "$repo/Dockerfile" "$repo"
echo "build-image: $tag built in $((SECONDS - build_start)) s ($((SECONDS - start)) s in all)"
"${podman[@]}" images --filter "reference=$tag"
