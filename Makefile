# rtslice — set-up, build, test and demo. Every target installs what it is missing, and is idempotent.
SHELL := /bin/bash

# System packages: the BPF toolchain, the interference generators and runtimes the loop drives.
APT_PACKAGES := clang llvm libelf-dev zlib1g-dev pkg-config make bpftool stress-ng rt-app runc \
                iperf3 busybox-static socat netcat-openbsd iproute2 iputils-ping procps rt-tests \
                bpftrace util-linux qemu-system-x86 xz-utils

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

.PHONY: all deps apt-deps rust-deps build release test test-kernels demo clean

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

# The workspace's tests natively, then the real-kernel matrix (kernels/README.md) even when some
# native test failed, so one run reports both; fails if either failed.
test: deps
	@rc=0; $(CARGO) test --workspace --no-fail-fast || rc=$$?; \
	$(MAKE) --no-print-directory test-kernels || rc=1; exit $$rc

# Real-kernel matrix: Debian's 6.12 PREEMPT_RT and 6.1 kernels in qemu (cgroup v2, 4 and 8 vCPUs)
# plus this host, running the exact test binaries `cargo test` built. Root; about 10-15 min.
test-kernels: deps
	CARGO=$(CARGO) kernels/matrix.sh

demo: release
	./target/release/rtslice demo

clean:
	$(CARGO) clean
