# Two commands for a fresh Debian bookworm machine (see README, "Try it on one machine"):
#   make test   install missing packages, build the release binary (catches -O3-only warnings),
#               build the libFuzzer targets with clang and run each one, then build with
#               ASan+UBSan and run every test
#   make demo   install missing packages, build, show this machine and the ResourceSlices it
#               would publish, then run a whole node locally (fake API server, topodra run,
#               kubelet simulator) and prepare claims on it
# Other targets: make build (release), make bench, make format, make tidy, make clean,
# make image (the Dockerfile's image, built with debootstrap and podman: scripts/build-image.sh).

.PHONY: all deps test test-unit test-fuzz test-image demo build bench format tidy clean image
all: build

deps:
	@scripts/install-deps.sh

test: build test-fuzz test-unit

test-unit: deps image
	cmake --preset asan
	cmake --build --preset asan
	ctest --preset asan

test-fuzz: deps
	cmake --preset fuzz
	cmake --build --preset fuzz
	ctest --preset fuzz

build: deps
	cmake --preset release
	cmake --build --preset release

demo: deps
	cmake --preset bench
	cmake --build --preset bench --target topodra kubelet_sim
	@echo "== topodra topology (this machine)"
	./build/bench/cmd/topodra topology
	@echo "== topodra slices (what this node would publish, grouped by NUMA node)"
	./build/bench/cmd/topodra slices -o yaml
	/usr/bin/python3 scripts/demo.py build/bench

bench: deps
	cmake --preset bench
	cmake --build --preset bench
	./build/bench/test/bench/topology_bench test/fixtures/topologies
	./build/bench/test/bench/allocator_bench test/fixtures/topologies
	./build/bench/test/bench/slices_bench test/fixtures/topologies
	./build/bench/test/bench/heal_bench test/fixtures/topologies
	./build/bench/test/bench/prepare_bench test/fixtures/topologies
	./build/bench/test/bench/restart_bench
	./build/bench/test/bench/device_plugin_bench test/fixtures/topologies
	./build/bench/test/bench/cgroup_bench
	./build/bench/test/bench/reservation_bench test/fixtures/topologies
	./build/bench/test/bench/churn_bench test/fixtures/topologies
	./build/bench/test/bench/shutdown_bench test/fixtures/topologies
	./build/bench/test/bench/health_bench test/fixtures/topologies
	./build/bench/test/bench/memory_bench test/fixtures/topologies

# As root; needs debootstrap, podman and runc (scripts/build-deps.txt). The image test
# (ctest -L image) runs it as the chart's DaemonSet does; make test-unit builds it first.
image:
	scripts/build-image.sh

test-image: deps image
	cmake --preset asan
	cmake --build --preset asan --target kubelet_sim
	ctest --preset asan -L image

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

tidy: deps
	cmake --preset debug
	git ls-files 'topology/*.cc' 'cmd/*.cc' | xargs clang-tidy -p build/debug --quiet

# Keeps build/tools (the npm test tools), so the next make test needs no network.
clean:
	find build -mindepth 1 -maxdepth 1 ! -name tools -exec rm -rf {} + 2>/dev/null || true
