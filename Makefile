# rtslice — set-up, build, test and demo. Every target installs what it is missing, and is idempotent.
SHELL := /bin/bash

# System packages: the BPF toolchain, the interference generators and runtimes the loop drives,
# curl (the node service's API tests drive its unix socket with it), Prometheus (scrapes `rtslice
# metrics serve` in the metrics test) and libbpf-tools (runqlat, the tracer-overhead benchmark's
# reference), chromium (the daemon's dashboard test loads the page headless and takes screenshots),
# and what the real-cluster test (`make test-k8s`) runs besides what it builds: the CNI
# plugins, openssl (the cluster's certificates), iptables (its teardown check reads the rules) and
# binutils (objcopy strips the emulator for its image); etcd comes from Debian's etcd-server, only
# extracted (k8s/build/build.sh: installing it would start a system etcd). mold links every Rust
# binary (.cargo/config.toml).
APT_PACKAGES := clang llvm libelf-dev zlib1g-dev pkg-config make bpftool stress-ng rt-app runc \
                iperf3 busybox-static socat curl netcat-openbsd iproute2 iputils-ping procps rt-tests \
                bpftrace util-linux qemu-system-x86 xz-utils prometheus libbpf-tools chromium \
                containernetworking-plugins openssl iptables binutils podman mold python3

# Find cargo also when `sudo` dropped ~/.cargo/bin from PATH.
CARGO ?= $(firstword $(shell command -v cargo 2>/dev/null) \
           $(wildcard $(HOME)/.cargo/bin/cargo) \
           $(wildcard /root/.cargo/bin/cargo) \
           $(if $(SUDO_USER),$(wildcard /home/$(SUDO_USER)/.cargo/bin/cargo)))
export PATH := $(dir $(CARGO)):$(PATH)
# A rustup cargo found in the invoking user's home must also use that user's toolchains.
ifneq ($(SUDO_USER),)
ifeq ($(CARGO),/home/$(SUDO_USER)/.cargo/bin/cargo)
export RUSTUP_HOME ?= /home/$(SUDO_USER)/.rustup
export CARGO_HOME ?= /home/$(SUDO_USER)/.cargo
endif
endif

.PHONY: all deps apt-deps rust-deps build release install uninstall test k8s-binaries test-kernels test-k8s bench-k8s test-deb test-install deb cargo-deb demo clean nri dra

all: build

deps: apt-deps rust-deps

apt-deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" -ne 0 ]; then echo "make: missing system packages: $$missing"; echo "make: run as root (sudo make ...) or: sudo apt-get install -y $$missing"; exit 1; fi; \
	  echo "make: installing $$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $$missing >/dev/null; \
	fi

rust-deps:
	@if [ -z "$(CARGO)" ]; then \
	  if command -v rustup >/dev/null; then rustup default stable; \
	  else echo "make: no cargo found; install Rust with rustup (https://rustup.rs) and run make again"; exit 1; fi; \
	fi
	@$(CARGO) --version

build: deps
	$(CARGO) build --workspace

release: deps
	$(CARGO) build --release -p rtslice

# Without dpkg: the release binary into $(PREFIX)/bin and the systemd unit (its ExecStart on that
# binary) into $(PREFIX)/lib/systemd/system, which systemd searches for /usr/local and /usr alike;
# DESTDIR stages the tree elsewhere. `systemctl daemon-reload` runs only on a live systemd host with
# no DESTDIR. `make uninstall` (same PREFIX/DESTDIR) removes exactly those two files. packaging/install.sh.
PREFIX ?= /usr/local
INSTALL_ENV = PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) $(if $(BINDIR),BINDIR=$(BINDIR)) $(if $(UNITDIR),UNITDIR=$(UNITDIR))
# RTSLICE_BIN installs that binary instead of building release (what `make test` does).
install: $(if $(RTSLICE_BIN),,release)
	$(INSTALL_ENV) packaging/install.sh install $(or $(RTSLICE_BIN),$(TARGET_DIR)/release/rtslice)

uninstall:
	$(INSTALL_ENV) packaging/install.sh uninstall

# The NRI plugin (k8s/nri, Go, docs/kubernetes.md): Go from /usr/local/go (else PATH), modules from the
# Go proxy, a static binary in target/rtslice-nri.
GO ?= $(shell test -x /usr/local/go/bin/go && echo /usr/local/go/bin/go || command -v go)
nri:
	@if [ -z "$(GO)" ]; then echo "make: no Go toolchain found; install Go (https://go.dev/dl) into /usr/local/go"; exit 1; fi
	cd k8s/nri && CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/target/rtslice-nri .

# The DRA kubelet plugin (k8s/dra, Go, docs/dra.md): a static binary in target/rtslice-dra.
dra:
	@if [ -z "$(GO)" ]; then echo "make: no Go toolchain found; install Go (https://go.dev/dl) into /usr/local/go"; exit 1; fi
	cd k8s/dra && CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/target/rtslice-dra .

# `make test`: the Kubernetes cluster's binaries first (k8s-binaries: disk), the workspace's tests
# natively, the Debian package installed, run and purged, `make install`/`uninstall` into a staging
# DESTDIR, the real-kernel matrix's guests, then the real Kubernetes cluster; fails if any of them
# failed, and runs each even when an earlier one failed. docs/testing.md says what each proves.
# One build: the package, the install test, the bench's experiments, the matrix and the cluster all
# use the `rtslice` binary `cargo test --workspace` built (dev profile, its hot crates optimised):
# a second, release build of the same code cost ~9 of a cold run's minutes and tested nothing the
# package test needs a release build for. `make deb` and `make install` still build release.
# The kernel matrix's guests (TCG: CPU-bound, apart from this host's kernel state) run beside the
# package, install and cluster tests, which touch only this host and take ~2 minutes of mostly
# waiting; its wall time is counted from when it starts.
# Skips: every test skips through rtslice-testkit's one helper, which names the capability it lacks
# and appends it to $(SKIP_LEDGER); the run ends with the count per capability. Under CI (CI=true)
# the tests are told what CI's machine has ($(CI_HAS)): a test that skips for one of those fails.
# Each phase's wall time is printed as it ends and all of them again at the end (the last lines CI
# shows), so a run over budget says where its time went.
# Native tests that mostly wait (the daemon with Prometheus and Chromium; Prometheus against trace
# and the emulator: scrape intervals, the emulator's windows) run after the cluster test, beside the
# kernel matrix. Only waiting moves usefully there: the matrix's guests keep both CPUs busy, and
# CPU-bound tests beside them slowed every guest (docs/results.md). `cargo test --workspace`
# skips these by exact name; a test renamed here runs in the first phase instead (none is lost).
SIDE_TESTS := daemon_serves_metrics_prometheus_agrees_and_the_dashboard_shows_the_api_numbers \
              prometheus_scrapes_metrics_that_agree_with_trace_and_the_emulator
SKIP_LEDGER := $(abspath $(or $(CARGO_TARGET_DIR),target))/skips.tsv
CI_HAS := root cpus>=2 rt-groups deadline cgroup-v1 bpf pci runc podman chromium rt-app prometheus containerd
TEST_BIN := $(abspath $(or $(CARGO_TARGET_DIR),target))/debug/rtslice
test: deps
	@t0=$$(date +%s); t=$$t0; times=""; \
	lap() { now=$$(date +%s); times="$$times$$1 $$((now - t))s, "; echo "make test: $$1 took $$((now - t)) s"; t=$$now; }; \
	$(MAKE) --no-print-directory k8s-binaries; lap k8s-binaries; \
	mkdir -p $(dir $(SKIP_LEDGER)); : >$(SKIP_LEDGER); \
	ctest() { RTSLICE_SKIP_LEDGER=$(SKIP_LEDGER) $(if $(filter true,$(CI)),RTSLICE_TEST_EXPECT="$(CI_HAS)") $(CARGO) test --workspace --no-fail-fast "$$@"; }; \
	rc=0; ctest --timings -- --exact $(addprefix --skip ,$(SIDE_TESTS)) || rc=$$?; lap "cargo test"; \
	tk=$$(date +%s); krc=$(TARGET_DIR)/test-kernels.rc; rm -f $$krc; \
	{ RTSLICE_KERNELS_GUESTS="$$(awk '$$1 == "guest" {print $$2}' kernels/matrix.conf | xargs)" \
	  $(MAKE) --no-print-directory test-kernels; echo $$? >$$krc; } & kpid=$$!; \
	$(MAKE) --no-print-directory test-deb PROFILE=dev || rc=1; lap test-deb; \
	$(MAKE) --no-print-directory test-install RTSLICE_BIN=$(TEST_BIN) || rc=1; lap test-install; \
	$(MAKE) --no-print-directory test-k8s || rc=1; lap test-k8s; \
	ctest --tests -- --exact $(SIDE_TESTS) || rc=1; lap "side tests"; \
	wait $$kpid; [ "$$(cat $$krc 2>/dev/null)" = 0 ] || rc=1; \
	now=$$(date +%s); times="$$times""test-kernels $$((now - tk))s (from test-deb on, beside them), "; \
	echo "make test: test-kernels took $$((now - tk)) s, beside test-deb, test-install, test-k8s and the side tests"; \
	skips=$$(cut -f1 $(SKIP_LEDGER) | sort | uniq -c | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $$1, $$2}'); \
	echo "make test: native skips by missing capability: $${skips:-none} (each: $(SKIP_LEDGER))"; \
	echo "make test: $${times}total $$(( $$(date +%s) - t0 )) s (exit $$rc)"; exit $$rc

# The cluster's binaries (k8s/build/build.sh, cached), built before anything else in `make test`: the
# Go build's caches and work directory hold ~4 GB until it ends, which on top of the 5.7 GB of Rust
# test and release binaries made a cold run's peak (12.5 GB more than the fresh machine used). A CI
# machine's disk is shared and a run ran out of it. A failure here is reported by test-k8s, which
# runs the same build again. The NRI plugin too (target/rtslice-nri, `make nri`): the CRI-driven
# pod test (crates/cli/tests/cri_pod.rs) runs it with containerd and crictl from the cache, natively
# and in the kernel matrix's guests, which see this host's root (target/ included) over 9p; a failed
# build makes that test fail where the machine is declared to have them (CI_HAS: containerd).
k8s-binaries:
	@mkdir -p $(TARGET_DIR); \
	$(MAKE) --no-print-directory nri >$(TARGET_DIR)/nri-build.log 2>&1 \
	  || echo "k8s: the NRI plugin's build failed ($$(tail -1 $(TARGET_DIR)/nri-build.log)); the CRI pod test reports it"; \
	if [ "$$(id -u)" != 0 ]; then exit 0; fi; \
	echo "k8s: building the cluster's binaries first (log: $(TARGET_DIR)/k8s-binaries.log)"; \
	k8s/build/build.sh >$(TARGET_DIR)/k8s-binaries.log 2>&1 \
	  || echo "k8s: the build failed ($$(tail -1 $(TARGET_DIR)/k8s-binaries.log)); test-k8s tries again and reports it"

# A real one-node Kubernetes cluster (etcd, kube-apiserver, kube-scheduler with the rtslice extender,
# containerd with NRI, kubelet) built from the Go proxy and Debian, cached in /var/cache/rtslice/k8s,
# started here, the end-to-end checks run, then torn down and checked for leftovers. Root; see
# k8s/README.md for times. RTSLICE_K8S_TIMEOUT bounds the whole (default 3000 s: a cold build of
# kube-apiserver on a loaded 2-CPU machine is the long part).
test-k8s: deps
	CARGO=$(CARGO) timeout -k 120 $${RTSLICE_K8S_TIMEOUT:-3000} k8s/e2e/run.sh

# Scheduling latency per pod through the extender and through DRA on a real control plane with 100
# inventory-only nodes (docs/kubernetes.md); a benchmark, not part of `make test`. Root; ~10 min.
bench-k8s: release
	RTSLICE_K8S_RTSLICE=$${RTSLICE_K8S_RTSLICE:-$(abspath $(or $(CARGO_TARGET_DIR),target))/release/rtslice} k8s/e2e/bench.sh

# Real-kernel matrix: Debian's 6.12 PREEMPT_RT and 6.1 kernels in qemu (cgroup v2, 4 and 8 vCPUs)
# plus this host, running the exact test binaries `cargo test` built. Root; about 10-15 min.
test-kernels: deps
	CARGO=$(CARGO) kernels/matrix.sh

# The Debian package: the stripped binary of $(PROFILE) (release unless told; `make test` packages
# the dev binary its tests ran), debug info split into a -dbgsym package, man pages and shell
# completions generated by the binary itself, the examples. See packaging/README.md.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
DEB_GENERATED := packaging/generated
PROFILE ?= release
PROFILE_DIR := $(TARGET_DIR)/$(if $(filter dev test,$(PROFILE)),debug,$(PROFILE))

cargo-deb: rust-deps
	@$(CARGO) deb --version >/dev/null 2>&1 || $(CARGO) install --locked cargo-deb

# Under `make test` (PROFILE=dev) the binary `cargo test --workspace` built is packaged as it is: a
# `cargo build -p rtslice` here would resolve features without the workspace's dev-dependencies and
# could rebuild it.
deb: deps cargo-deb
	$(if $(filter dev test,$(PROFILE)),@test -x $(PROFILE_DIR)/rtslice || { echo "make deb: no $(PROFILE_DIR)/rtslice; run cargo test --workspace --no-run first"; exit 1; },$(CARGO) build --profile $(PROFILE) -p rtslice)
	rm -rf $(DEB_GENERATED)
	$(PROFILE_DIR)/rtslice generate man $(DEB_GENERATED)/man
	$(PROFILE_DIR)/rtslice generate completions $(DEB_GENERATED)/completions
	$(PROFILE_DIR)/rtslice generate schema $(DEB_GENERATED)/rtslice-spec.schema.json
	$(CARGO) deb -p rtslice --no-build --dbgsym --profile $(PROFILE)
	@ls -l $(TARGET_DIR)/debian/*.deb

test-deb: deb
	packaging/test-deb.sh "$$(ls -t $(TARGET_DIR)/debian/rtslice_*.deb | head -1)"

# make install / uninstall into a staging DESTDIR (no root needed); `make test` hands it the binary
# its tests ran (RTSLICE_BIN), so nothing is built again.
test-install:
	MAKE="$(MAKE)" packaging/test-install.sh

demo: release
	./target/release/rtslice demo

clean:
	$(CARGO) clean
