#!/bin/bash
# Builds (or finds cached) every binary the real-cluster harness runs, from registries only:
#   Kubernetes (kube-apiserver, kube-scheduler, kubelet, kubectl), containerd (containerd,
#   containerd-shim-runc-v2, ctr) and cri-tools (crictl) from the Go proxy through the go.mod files
#   next to this script;
#   etcd (etcd, etcdctl) from Debian's etcd-server package, extracted with dpkg-deb -x (installing
#   it would start a system etcd); runc and the CNI plugins come from Debian (make deps).
# Prints the cache directory's bin/ on its last line. Everything lands in
#   $RTSLICE_K8S_CACHE (default /var/cache/rtslice/k8s)/<component>-<version>/bin
# and a directory is reused as soon as its .complete marker exists, so a warm run builds nothing.
# Environment: RTSLICE_K8S_CACHE, GOFLAGS/GOPROXY as usual; RTSLICE_K8S_BUILD_TIMEOUT (s, default
# 3600: kube-apiserver alone takes ~4.5 min on 2 idle CPUs, much longer on a loaded machine).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/versions.env"
CACHE=${RTSLICE_K8S_CACHE:-/var/cache/rtslice/k8s}
TIMEOUT=${RTSLICE_K8S_BUILD_TIMEOUT:-3600}
say() { echo "k8s-build: $*" >&2; }
die() { echo "k8s-build: error: $*" >&2; exit 1; }
# Go: the machine's toolchain in /usr/local/go when `sudo` or make left it off PATH.
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || die "no go toolchain on PATH (Go >= 1.24 is needed; https://go.dev/dl)"
mkdir -p "$CACHE"
# versions.env names the versions; the go.mod files pin them: they must agree.
grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$HERE/kubernetes/go.mod" && ! grep '=> k8s.io/' "$HERE/kubernetes/go.mod" | grep -vq " $K8S_STAGING_VERSION\$" \
  || die "kubernetes/go.mod does not pin k8s.io/kubernetes $K8S_VERSION with every replace at $K8S_STAGING_VERSION (versions.env)"
grep -q "github.com/containerd/containerd/v2 $CONTAINERD_VERSION\$" "$HERE/containerd/go.mod" \
  || die "containerd/go.mod does not require containerd $CONTAINERD_VERSION (versions.env)"
grep -q "sigs.k8s.io/cri-tools $CRI_TOOLS_VERSION\$" "$HERE/cri-tools/go.mod" \
  || die "cri-tools/go.mod does not require cri-tools $CRI_TOOLS_VERSION (versions.env)"
# Every file of ours that decides the result keys the directory too, so an edited go.mod rebuilds.
key() { cat "$@" | sha256sum | cut -c1-12; }

# build_go DIR NAME VERSION LDFLAGS PKG... : go build each PKG from the module in DIR into
# $CACHE/NAME-VERSION-KEY/bin, static (CGO off). Sets OUT_DIR.
build_go() {
  local mod=$1 name=$2 version=$3 ldflags=$4 dir pkg bin log t0; shift 4
  dir="$CACHE/$name-$version-$(key "$mod/go.mod" "$mod/go.sum")"
  OUT_DIR=$dir/bin
  [ -f "$dir/.complete" ] && return 0
  rm -rf "$dir"; mkdir -p "$dir/bin"
  log="$dir/build.log"
  # A build cache and module cache of the build's own, deleted once the binaries are in place: a
  # complete directory is never built again, and Kubernetes' caches (~4.5 GB) were dead weight on
  # CI's shared disk, which a run filled. No DWARF in the compiled packages either (the linker drops
  # it, -w): measured, it changed the build's peak little (its cache 3.3 GB against 3.7, go's work
  # directory in /tmp 1.8 GB against 1.5), which is why `make test` runs this build first.
  local gocache="$dir.gocache" gomodcache="$dir.gomodcache"
  for pkg in "$@"; do
    bin=$(basename "$pkg")
    say "building $bin $version (log: $log)"
    t0=$(date +%s)
    (cd "$mod" && GOCACHE="$gocache" GOMODCACHE="$gomodcache" CGO_ENABLED=0 timeout "$TIMEOUT" \
      go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w $ldflags" -o "$dir/bin/$bin" "$pkg") >>"$log" 2>&1 \
      || die "go build $pkg failed or timed out after ${TIMEOUT}s (see $log)"
    say "built $bin in $(( $(date +%s) - t0 ))s"
  done
  touch "$dir/.complete"
  # The module cache is read-only by design: go clean removes it.
  GOMODCACHE="$gomodcache" go clean -modcache >/dev/null 2>&1 || true
  rm -rf "$gocache" "$gomodcache"
}

# Kubernetes reports the version it was stamped with (kubectl version, the Node's kubeletVersion);
# unstamped it says v0.0.0-master, which skew checks read as ancient.
stamp() {
  local minor=${1#v1.} p
  minor=${minor%%.*}
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf ' -X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean' "$p" "$1" "$p" "$p" "$minor" "$p"
  done
}
# `build.sh control-plane`: only the newer kube-apiserver and kube-scheduler `make bench-k8s` runs
# (control-plane/go.mod pins the version: 1.34's DRA allocator checks consumable capacity against
# the wrong device, docs/dra.md "Kubernetes versions"); prints their directory.
if [ "${1:-}" = control-plane ]; then
  cpv=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$HERE/control-plane/go.mod")
  [ -n "$cpv" ] || die "control-plane/go.mod requires no k8s.io/kubernetes version"
  build_go "$HERE/control-plane" kubernetes-control-plane "$cpv" "$(stamp "$cpv")" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler
  echo "$OUT_DIR"
  exit 0
fi
# containerd first: minutes, where kube-apiserver alone takes ~4.5.
cv="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
build_go "$HERE/containerd" containerd "$CONTAINERD_VERSION" "$cv" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr
CTD_BIN=$OUT_DIR

# crictl: the CRI client of the pod test (crates/cli/tests/cri_pod.rs); seconds beside the others.
build_go "$HERE/cri-tools" cri-tools "$CRI_TOOLS_VERSION" "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" \
  sigs.k8s.io/cri-tools/cmd/crictl
CRI_BIN=$OUT_DIR

build_go "$HERE/kubernetes" kubernetes "$K8S_VERSION" "$(stamp "$K8S_VERSION")" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
K8S_BIN=$OUT_DIR

# etcd from Debian, by the version apt offers (cached per version, like the kernels).
ver=$(apt-cache show --no-all-versions etcd-server 2>/dev/null | awk '/^Version:/{print $2; exit}')
if [ -z "$ver" ]; then
  say "apt knows no etcd-server; apt-get update"; apt-get update -q >/dev/null || true
  ver=$(apt-cache show --no-all-versions etcd-server 2>/dev/null | awk '/^Version:/{print $2; exit}')
fi
if [ -n "$ver" ]; then
  edir="$CACHE/etcd-server_$ver"
  if [ ! -f "$edir/.complete" ]; then
    say "downloading etcd-server $ver (apt-get download, dpkg-deb -x)"
    rm -rf "$edir"; mkdir -p "$edir/deb" "$edir/bin"
    (cd "$edir/deb" && apt-get download "etcd-server=$ver" >/dev/null 2>&1) || die "apt-get download etcd-server=$ver failed"
    dpkg-deb -x "$edir"/deb/*.deb "$edir/root"
    ln -s ../root/usr/bin/etcd "$edir/bin/etcd"
    rm -rf "$edir/deb"; touch "$edir/.complete"
  fi
else
  edir=$(ls -d "$CACHE"/etcd-server_*/.complete 2>/dev/null | xargs -r -n1 dirname | sort -V | tail -1)
  [ -n "$edir" ] || die "apt offers no etcd-server and none is cached (run apt-get update)"
  say "apt offers no etcd-server; using the cached $(basename "$edir")"
fi

# One directory of links the harness puts first on PATH.
# The pod test (crates/cli/tests/cri_pod.rs) finds this directory by the same key: keep the files
# and their order in step with it.
all="$CACHE/bin-$(key "$HERE/versions.env" "$HERE/kubernetes/go.sum" "$HERE/containerd/go.sum" "$HERE/cri-tools/go.sum")-$(basename "$edir")"
if [ ! -f "$all/.complete" ]; then
  rm -rf "$all"; mkdir -p "$all"
  for b in "$K8S_BIN"/* "$CTD_BIN"/* "$CRI_BIN"/* "$edir/bin/etcd"; do ln -sf "$b" "$all/$(basename "$b")"; done
  touch "$all/.complete"
fi
for b in kube-apiserver kube-scheduler kubelet kubectl containerd containerd-shim-runc-v2 ctr crictl etcd; do
  [ -x "$all/$b" ] || die "$b missing from $all (remove that directory to rebuild)"
done
echo "$all"
