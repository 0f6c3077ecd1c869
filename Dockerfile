# The topodra node daemon image (docs/dev/building.md, "Container image"):
#   docker build -t topodra .
#
# Two stages: a Debian bookworm build stage with exactly the packages CI installs, and a slim
# runtime stage with only the shared libraries the binaries load. test/docker/check_dockerfile.py
# (ctest -R docker) checks this file against the built binaries: every library `ldd` lists must
# come from a package installed here, so keep the runtime list in one `apt-get install`.

# ---- build -------------------------------------------------------------------------------------
FROM debian:bookworm AS build
# One package list for CI, `make`, and this image: scripts/build-deps.txt, installed by the same
# script `.ci/run` (make test → make deps) runs; --build-only takes the part above its "tests"
# marker (no clang, Go, podman, test tools: 1 GB less to download). Copied alone first so the
# layer is cached.
COPY scripts/install-deps.sh scripts/build-deps.txt /src/scripts/
RUN bash /src/scripts/install-deps.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . /src
WORKDIR /src
# The release preset (tests off; gRPC, abseil, protobuf, re2 linked statically into the daemon,
# TOPODRA_STATIC_DEPS). Only the three installed artefacts are built: the benchmarks that the
# preset also configures are not shipped.
RUN cmake --preset release -DTOPODRA_BUILD_BENCH=OFF \
 && cmake --build --preset release --target topodra topodra-daemon topodra-cpuset-hook

# ---- runtime -----------------------------------------------------------------------------------
FROM debian:bookworm-slim
ARG TOPODRA_VERSION=0.1.0
LABEL org.opencontainers.image.title="topodra" \
      org.opencontainers.image.description="Topology-aware Kubernetes DRA driver for CPUs and GPUs (node daemon)" \
      org.opencontainers.image.version="${TOPODRA_VERSION}" \
      org.opencontainers.image.base.name="debian:bookworm-slim"

# The runtime libraries of topodra and topodra-daemon (their direct dependencies, gRPC's
# c-ares, re2, OpenSSL and zlib included as some builds link them directly; apt brings in the
# rest). The release build links abseil, gRPC, c-ares, protobuf, re2 and yaml-cpp statically, so
# their packages are unused there; they stay listed because test/docker checks this list against
# every build, shared ones too (libssl3: the daemon's API client, linked statically in the
# release build). libprometheus-cpp-core1.0: the daemon's /metrics (served by its own HTTP loop,
# no civetweb).
# libc6, libgcc-s1 and libstdc++6 are not listed: bookworm-slim always has them (apt needs them).
# apt-get clean: the downloaded packages and apt's package caches (about 85 MB) must not stay in
# the layer. Docker Hub's debian images drop them by an apt hook (docker-clean); a base image
# made otherwise (debootstrap, as `make image` does) has no such hook.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libabsl20220623 \
      libc-ares2 \
      libfmt9 \
      libgrpc++1.51 \
      libgrpc29 \
      libhwloc15 \
      libprometheus-cpp-core1.0 \
      libprotobuf32 \
      libre2-9 \
      libspdlog1.10 \
      libssl3 \
      libyaml-cpp0.7 \
      zlib1g \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*

# `topodra run` execs topodra-daemon from its own directory (cmd/run_loader.cc), which copies the
# CPU pinning hook to the host from its own directory too (InstallHook in driver/node/startup.cc).
# The hook is static: it runs on the host.
COPY --from=build /src/build/release/cmd/topodra /src/build/release/cmd/topodra-daemon \
     /src/build/release/cmd/topodra-cpuset-hook /usr/bin/
# Fail the image build, not the pod, when a library is missing.
RUN ! ldd /usr/bin/topodra /usr/bin/topodra-daemon | grep 'not found' \
 && /usr/bin/topodra version && /usr/bin/topodra run --help >/dev/null

# No USER: the daemon must run as root. It creates the kubelet's plugin and device-plugin sockets
# under /var/lib/kubelet (root-owned host directories), writes CDI specs to /var/run/cdi, and with
# --enforce=cgroup writes cpuset files in the host's cgroup tree and installs its hook in
# --hook-dir (/opt/topodra/bin); a non-root user can do none of that. Root needs no capability for
# it (all are root-owned): the chart runs the container as uid 0, not privileged, with every
# capability dropped and a read-only root filesystem, those host paths mounted (charts/topodra).
ENTRYPOINT ["/usr/bin/topodra"]
CMD ["run"]
