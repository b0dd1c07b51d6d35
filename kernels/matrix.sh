#!/bin/bash
# rtslice's real-kernel test matrix (issue 11): boots Debian's kernels in qemu (TCG) with the host's
# root shared read-only over virtio-9p and runs the exact test binaries `cargo test` built, then
# the same set natively on this host. Prints one line per guest and, last,
# `kernels: N passed, M failed`; exits non-zero on any failure. See kernels/README.md.
#
# Environment: CARGO (default: cargo on PATH), CARGO_TARGET_DIR, RTSLICE_KERNELS_CACHE (default
# /var/cache/rtslice-kernels), RTSLICE_KERNELS_GUESTS (space-separated subset of guest names, "host"
# included), RTSLICE_KERNELS_PARALLEL (guests booted at once, default 3),
# RTSLICE_KERNELS_GUEST_TIMEOUT (seconds per guest, default 2400), RTSLICE_KERNELS_BOOT_TIMEOUT
# (seconds for a guest to reach its tests, default 600; booted once more past it), RTSLICE_KERNELS_NATIVE_TIMEOUT
# (row host, default 3600: it may queue for the KernelLock), RTSLICE_KERNELS_MEM (default 2G),
# RTSLICE_KERNELS_SCRIPT (a shell script each guest runs instead of the tests, to investigate;
# its output lands in <target>/kernels/<guest>/script.log), RTSLICE_KERNELS_TESTS (an extended
# regex on `<crate>/<binary>::<test>`: only the matching tests run, to verify a fix in minutes; it
# replaces a guest's own `tests` subset from matrix.conf).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CARGO=${CARGO:-cargo}
CACHE=${RTSLICE_KERNELS_CACHE:-/var/cache/rtslice-kernels}
# Three at once: the HCBS row (listed last, a subset of the tests) starts when the first Debian guest
# ends; run as a fourth at once it would slow all three on a 2-CPU machine by about a third.
PARALLEL=${RTSLICE_KERNELS_PARALLEL:-3}
# A bound for a hung guest, with a loaded machine's margin over the rows' times (kernels/README.md);
# 2,400 s still ends a run within CI's 90 minutes.
GUEST_TIMEOUT=${RTSLICE_KERNELS_GUEST_TIMEOUT:-2400}
# A bound for a guest to reach its tests (the doctor line guest.sh prints first), far above a boot's
# seconds even beside two other guests: a guest stuck before its tests would otherwise hold its slot
# for the whole GUEST_TIMEOUT. Past it the guest is killed and booted once more (printed on its
# result line, the first console kept); a second such boot fails the row (docs/testing.md).
BOOT_TIMEOUT=${RTSLICE_KERNELS_BOOT_TIMEOUT:-600}
MEM=${RTSLICE_KERNELS_MEM:-2G}
NATIVE_TIMEOUT=${RTSLICE_KERNELS_NATIVE_TIMEOUT:-3600}
T0=$(date +%s)
say() { echo "kernels: $*"; }
die() { echo "kernels: error: $*" >&2; echo "kernels: 0 passed, 1 failed"; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
  # Like the kernel tests and the package test: without root, skip and say why (CI runs as root).
  say "skipped: the matrix needs root (qemu exports / over 9p, row host changes kernel state); run: sudo make test-kernels"
  exit 0
fi
# What the matrix itself runs (`make deps` installs them too); a fresh machine's apt lists may be
# empty, so update them once when something is missing.
apt_updated=""
apt_update() { [ -n "$apt_updated" ] || { apt_updated=1; say "apt-get update"; apt-get update -q >/dev/null; }; }
missing=""
for p in qemu-system-x86 busybox-static xz-utils python3; do
  dpkg-query -W -f='${Status}\n' $p 2>/dev/null | grep -q '^install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  say "installing$missing"
  apt_update
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >/dev/null \
    || die "cannot install$missing (see apt-get's output: sudo apt-get install$missing)"
fi

# ---- the matrix definition -------------------------------------------------------------------------
declare -A KPATTERN KFILE
GUESTS=()
declare -A GKERNEL GCPUS GEXTRA GHAS GTESTS
DEFAULT_TESTS=""
while read -r kind a b c rest; do
  case $kind in
    # `kernel <alias> file <dir>`: a kernel image of our own (a test fixture), relative to the repository.
    kernel) if [ "$b" = file ]; then KFILE[$a]=$c; else KPATTERN[$a]=$b; fi ;;
    guest) GUESTS+=("$a"); GKERNEL[$a]=$b; GCPUS[$a]=$c; GEXTRA[$a]=$rest ;;
    has) GHAS[$a]="$b $c $rest" ;;
    # `tests * <regex>`: every guest without a `tests` line of its own, and row host.
    tests) if [ "$a" = "*" ]; then DEFAULT_TESTS=$b; else GTESTS[$a]=$b; fi ;;
  esac
done < <(grep -v '^\s*#' "$HERE/matrix.conf")
SELECTED=${RTSLICE_KERNELS_GUESTS:-"${GUESTS[*]} host"}
TCG_THREADS=${RTSLICE_KERNELS_TCG:-single}
selected() { [[ " $SELECTED " == *" $1 "* ]]; }

# ---- kernels: apt-get download, cached by package version -----------------------------------------
# KDIR: a writable directory per kernel (the initramfs is built there); KIMAGE: the image qemu boots;
# KNAME: how the result lines name it; KSKIP: why its guests do not run (a fixture this machine lacks).
declare -A KDIR KIMAGE KNAME KSKIP
fetch_kernel() {  # alias -> sets KDIR[alias] to the extracted package (boot/, lib/modules/)
  [ -n "${KFILE[$1]:-}" ] && { local_kernel "$1"; return; }
  local alias=$1 pattern=${KPATTERN[$1]} pkg ver dir
  pkg=$(apt-cache search --names-only "$pattern" 2>/dev/null | awk '{print $1}' | sort -V | tail -1)
  if [ -z "$pkg" ]; then
    # apt knows no such package: a fresh machine's empty lists, or old ones; update once and retry.
    apt_update || say "apt-get update failed"
    pkg=$(apt-cache search --names-only "$pattern" 2>/dev/null | awk '{print $1}' | sort -V | tail -1)
  fi
  if [ -n "$pkg" ]; then
    ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null | awk '/^Version:/{print $2; exit}')
    dir="$CACHE/${pkg}_${ver}"
    if [ ! -f "$dir/.complete" ]; then
      say "downloading $pkg $ver into $dir"
      rm -rf "$dir" && mkdir -p "$dir/deb" || return 1
      (cd "$dir/deb" && apt-get download "$pkg=$ver" >/dev/null 2>&1) || { echo "kernels: apt-get download $pkg=$ver failed"; return 1; }
      dpkg-deb -x "$dir"/deb/*.deb "$dir/root" || return 1
      rm -rf "$dir/deb"
      touch "$dir/.complete"
    fi
  else
    # apt has no such package (no network, old lists): use the newest cached one.
    dir=$(ls -d "$CACHE"/*/.complete 2>/dev/null | xargs -r -n1 dirname | while read -r d; do
      [[ $(basename "$d" | sed 's/_.*//') =~ $pattern ]] && echo "$d"; done | sort -V | tail -1)
    [ -n "$dir" ] || { echo "kernels: apt offers no package matching $pattern and none is cached (run apt-get update)"; return 1; }
    say "apt offers no $pattern; using the cached $(basename "$dir")"
  fi
  KDIR[$alias]=$dir
  KIMAGE[$alias]=$(ls "$dir"/root/boot/vmlinuz-* 2>/dev/null | head -1)
  KNAME[$alias]=$(basename "$dir" | sed 's/^linux-image-//; s/-unsigned_.*//')
}

# A kernel built outside Debian (kernels/README.md: the HCBS kernel): <dir>/bzImage with everything
# built in (no modules), checked against <dir>/bzImage.sha256. A machine without the directory skips
# the guests that boot it, saying so on their result lines; a wrong checksum fails them.
local_kernel() {
  local alias=$1 src=${KFILE[$1]} release
  case $src in /*) ;; *) src="$REPO/$src" ;; esac
  KDIR[$alias]="$CACHE/file-$alias"
  KNAME[$alias]="$alias"
  if [ ! -d "$src" ]; then
    KSKIP[$alias]="its kernel directory ${KFILE[$1]} ($src) is not on this machine (a test fixture: see kernels/README.md, \"Kernels of our own\")"
    return 0
  fi
  [ -f "$src/bzImage" ] && [ -f "$src/bzImage.sha256" ] || { echo "kernels: $src lacks bzImage or bzImage.sha256"; return 1; }
  (cd "$src" && sha256sum --quiet -c bzImage.sha256) >/dev/null 2>&1 \
    || { echo "kernels: $src/bzImage does not match its bzImage.sha256 (a damaged or replaced fixture)"; return 1; }
  mkdir -p "${KDIR[$alias]}" || return 1
  KIMAGE[$alias]="$src/bzImage"
  # The release from the image's header (the string at 0x200 + the 16-bit offset at 0x20e).
  release=$(python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(); o=struct.unpack_from("<H",d,0x20e)[0]+0x200; print(d[o:d.index(b" ",o)].decode())' "$src/bzImage" 2>/dev/null)
  KNAME[$alias]="$alias${release:+ $release}, ${KFILE[$1]}"
}

build_initramfs() {  # kernel dir -> $dir/initramfs.cpio.gz (rebuilt every run: < 1 s)
  local dir=$1 w mods m f
  w=$(mktemp -d)
  mkdir -p "$w"/{bin,dev,proc,sys,modules,newroot}
  cp /bin/busybox "$w/bin/busybox"
  cp "$HERE/init" "$w/init" && chmod +x "$w/init"
  mods=$(ls -d "$dir"/root/lib/modules/*/ 2>/dev/null | head -1)
  if [ -z "$mods" ]; then
    # A kernel of our own: 9p and virtio are built in, nothing to load.
    : >"$w/modules/order"
    (cd "$w" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 >"$dir/initramfs.cpio.gz")
    rm -rf "$w"
    return
  fi
  # 9p over virtio and what it needs, dependencies first, from each module's own "depends=" (the
  # package ships no modules.dep): netfs, 9pnet, 9pnet_virtio, 9p on 6.12; 6.1 adds fscache. And
  # overlayfs, which containerd needs for the CRI pod test.
  python3 - "$mods" "$w/modules" <<'PY' || return 1
import lzma, os, subprocess, sys
mods, out = sys.argv[1], sys.argv[2]
paths = {}
for d, _, files in os.walk(mods):
    for f in files:
        name = f.split(".ko")[0]
        paths.setdefault(name.replace("-", "_"), os.path.join(d, f))
def load(name):
    p = paths[name.replace("-", "_")]
    if p.endswith(".xz"):
        return lzma.open(p).read()
    if p.endswith(".zst"):
        return subprocess.run(["zstd", "-dcq", p], capture_output=True, check=True).stdout
    return open(p, "rb").read()
order = []
def visit(name):
    name = name.replace("-", "_")
    if name in order or name not in paths:
        return  # built in
    data = load(name)
    i = data.find(b"depends=")
    deps = data[i + 8:data.index(b"\0", i)].decode().split(",") if i >= 0 else []
    for dep in filter(None, deps):
        visit(dep)
    order.append(name)
    open(os.path.join(out, name + ".ko"), "wb").write(data)
# virtio_pci: the transport, a module on 6.1; overlay: containerd's snapshotter, for the CRI pod
# test (cli/cri_pod) — a module in Debian's kernels, built in on the HCBS kernel.
for m in ("virtio_pci", "9pnet_virtio", "9p", "overlay"):
    visit(m)
open(os.path.join(out, "order"), "w").write(" ".join(order) + "\n")
PY
  (cd "$w" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 >"$dir/initramfs.cpio.gz")
  rm -rf "$w"
}

# ---- the exact test binaries `cargo test` builds ---------------------------------------------------
OUT=${RTSLICE_KERNELS_OUT:-"${CARGO_TARGET_DIR:-$REPO/target}/kernels"}
# The guests see the host's root over 9p but mount a tmpfs on /tmp, /run and /var/lib/rtslice
# (kernels/init): a checkout or target directory there is invisible to them, and every guest would
# stop at once with "cannot open …/guest.sh".
for p in "$REPO" "${CARGO_TARGET_DIR:-$REPO/target}"; do
  case "$(realpath -m "$p")/" in
    /tmp/*|/run/*|/var/lib/rtslice/*) die "$p is under /tmp, /run or /var/lib/rtslice, which the guests mount a tmpfs over: clone the repository (and put CARGO_TARGET_DIR) elsewhere" ;;
  esac
done
rm -rf "$OUT" && mkdir -p "$OUT"
# One `cargo test --workspace --no-run`: the very binaries `make test` builds and runs (no second build,
# no feature-unification rebuild); the guests run those of the crates that touch the kernel.
say "building the test binaries (cargo test --workspace --no-run)"
(cd "$REPO" && "$CARGO" test --workspace --no-run --message-format=json 2>"$OUT/build.log") >"$OUT/artifacts.json" \
  || die "cargo test --no-run failed (see $OUT/build.log)"
python3 - "$OUT" <<'PY' || die "cannot read cargo's artifact list ($OUT/artifacts.json)"
import json, sys
out = sys.argv[1]
tests, rtslice = [], None
for line in open(out + "/artifacts.json"):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    crate = m["manifest_path"].split("/")[-2]
    if m["profile"]["test"] and crate in ("host", "agent", "trace", "node", "cli"):
        # A library's own tests (`unit`) run in one process per binary in the guests (guest.sh).
        kind = "unit" if "lib" in m["target"]["kind"] else "test"
        tests.append(crate + "/" + m["target"]["name"] + " " + m["executable"] + " " + kind)
    elif not m["profile"]["test"] and m["target"]["name"] == "rtslice":
        rtslice = m["executable"]
open(out + "/tests.list", "w").write("".join(t + "\n" for t in sorted(tests)))
open(out + "/rtslice.bin", "w").write((rtslice or "") + "\n")
PY
[ -s "$OUT/tests.list" ] || die "cargo built no test binaries of host, agent, trace, node, cli (see $OUT/build.log)"
# Every test of every binary, listed once here: in a TCG guest each `--list` and each per-test
# filter match is a process start (~1.3 s, more with three guests on two CPUs), which cost a guest
# about a minute before a test ran. The guests get their selection ready (`tests.selected`).
: >"$OUT/tests.all"
while read -r label bin kind; do
  # A binary that cannot list its tests would silently drop them from every row: stop instead.
  names=$("$bin" --list 2>>"$OUT/build.log") || die "$bin --list failed (see $OUT/build.log)"
  printf '%s\n' "$names" | sed -n "s|: test\$||p" | sed "s|^|$label $bin $kind |" >>"$OUT/tests.all"
done <"$OUT/tests.list"
[ -s "$OUT/tests.all" ] || die "the test binaries in $OUT/tests.list list no tests"
RTSLICE_BIN=$(cat "$OUT/rtslice.bin")
[ -x "$RTSLICE_BIN" ] || die "cargo test built no rtslice binary (see $OUT/artifacts.json)"
# The guest mounts a tmpfs on the state directory; its mount point must exist on the shared root.
mkdir -p /var/lib/rtslice

# The tests a row runs (an extended regex; empty: all): RTSLICE_KERNELS_TESTS, else the row's own
# `tests` line, else `tests *` — what the row is given and what its result line says.
row_filter() { echo "${RTSLICE_KERNELS_TESTS:-${GTESTS[$1]:-$DEFAULT_TESTS}}"; }
# A row's tests, "<label> <binary> <kind> <test>" a line, into $2: those whose `<label>::<test>`
# matches the row's filter, less the `helper_*_role` entries — a test binary's re-exec roles
# (an agent, a spawner, a crashing applier), which do nothing when run on their own.
select_tests() {
  local filter; filter=$(row_filter "$1")
  F="$filter" awk '{ id = $1 "::" $4 } id !~ /::helper_[a-z0-9_]*_role$/ && (ENVIRON["F"] == "" || id ~ ENVIRON["F"])' "$OUT/tests.all" >"$2"
}

# ---- one guest -------------------------------------------------------------------------------------
# The last N lines a guest printed, without the serial console's escapes and carriage returns.
console_last() { tr -d '\r' <"$1" 2>/dev/null | sed 's/\x1b\[[0-9;?]*[A-Za-z]//g' | grep -av '^[[:space:]]*$\|^qemu-system-x86_64: terminating on signal' | tail -n "$2"; }
# Kills guest $2 (its `timeout`, which passes the signal on to qemu) unless its console shows the
# doctor line within BOOT_TIMEOUT, and leaves "$1/boot-hung" when it did.
boot_watch() {
  local waited=0
  while [ "$waited" -lt "$BOOT_TIMEOUT" ]; do
    sleep 2; waited=$((waited + 2))
    grep -aq 'rtslice-kernels: doctor:\|rtslice-kernels: running .* instead of the tests' "$1/console.log" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 0
  done
  : >"$1/boot-hung"
  kill "$2" 2>/dev/null
}

run_guest() {
  local g=$1 dir=${KDIR[${GKERNEL[$1]}]} res="$OUT/$1" vmlinuz rc t0 last
  mkdir -p "$res"
  # The guest's own subset (matrix.conf `tests`), unless RTSLICE_KERNELS_TESTS names the tests to run.
  select_tests "$1" "$res/tests.selected"; echo "$RTSLICE_BIN" >"$res/rtslice.bin"
  echo "${GHAS[$1]:-}" | xargs >"$res/expect"
  [ -n "${RTSLICE_KERNELS_SCRIPT:-}" ] && cp "$RTSLICE_KERNELS_SCRIPT" "$res/script.sh"
  vmlinuz=${KIMAGE[${GKERNEL[$1]}]}
  t0=$(date +%s)
  # qemu 7.2's multi-threaded TCG occasionally executes a stale int3 while the guest kernel patches its
  # own text (static keys, text_poke_bp): the guest dies with "Oops: int3" in whatever code it was
  # running (seen in 2 of 7 matrix runs, always on the 8-vCPU row, never natively). That is the
  # emulator's race, not rtslice's, so such a guest is booted once more from scratch; the retry is
  # printed on its result line and the first console is kept. Any other failure is never retried.
  # thread=single (one host thread runs every vCPU of a guest) by default: multi-threaded TCG ran stale
  # int3s of the guest kernel's live code patching (below); RTSLICE_KERNELS_TCG=multi brings it back.
  local attempt qpid watcher
  for attempt in 1 2; do
  rm -f "$res/boot-hung"
  timeout --foreground -k 10 "$GUEST_TIMEOUT" qemu-system-x86_64 -accel "tcg,thread=$TCG_THREADS" -cpu max -smp "${GCPUS[$g]}" -m "$MEM" \
    -nographic -no-reboot -kernel "$vmlinuz" -initrd "$dir/initramfs.cpio.gz" \
    -append "console=ttyS0 panic=-1 rtslice.guest=$g rtslice.script=$HERE/guest.sh ${GEXTRA[$g]}" \
    -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$res,mount_tag=results,security_model=none" \
    </dev/null >"$res/console.log" 2>&1 &
  qpid=$!
  boot_watch "$res" "$qpid" & watcher=$!
  wait "$qpid"
  rc=$?
  kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
  if [ "$attempt" -eq 1 ] && [ -f "$res/boot-hung" ]; then
    mv "$res/console.log" "$res/console.boot-hung.log"
    echo "retried once: the first boot did not reach its tests in ${BOOT_TIMEOUT}s, its console ending \"$(console_last "$res/console.boot-hung.log" 1)\" (first console: $res/console.boot-hung.log)" >"$res/retried"
    continue
  fi
  if [ "$attempt" -eq 1 ] && [ ! -f "$res/done" ] && grep -aq 'Oops: int3' "$res/console.log"; then
    mv "$res/console.log" "$res/console.int3.log"
    [ -f "$res/results.txt" ] && mv "$res/results.txt" "$res/results.int3.txt"
    echo "retried once after qemu's TCG int3 race during $(grep -a 'rtslice-kernels: start ' "$res/console.int3.log" | tail -1 | sed 's/.*start //') (first console: $res/console.int3.log)" >"$res/retried"
    continue
  fi
  break
  done
  echo $(( $(date +%s) - t0 )) >"$res/seconds"
  if [ -f "$res/boot-hung" ]; then
    echo "guest $g did not reach its tests in ${BOOT_TIMEOUT}s, twice (both consoles kept)" >"$res/killed"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    last=$(grep -a 'rtslice-kernels: start ' "$res/console.log" | tail -1 | sed 's/.*start //')
    echo "guest $g hung: killed after ${GUEST_TIMEOUT}s; the last test started was ${last:-none (the guest never reached the tests)}" >"$res/killed"
  fi
}

run_native() {
  local res="$OUT/host" t0
  mkdir -p "$res"
  select_tests host "$res/tests.selected"; echo "$RTSLICE_BIN" >"$res/rtslice.bin"
  t0=$(date +%s)
  # Natively, tests queue for the host-wide KernelLock behind other users' kernel tests (normal on a
  # shared machine): a longer bound than a guest's.
  RTSLICE_KERNELS_TEST_TIMEOUT=${RTSLICE_KERNELS_NATIVE_TEST_TIMEOUT:-1200} \
    timeout -k 10 "$NATIVE_TIMEOUT" sh "$HERE/guest.sh" host "$res" >"$res/console.log" 2>&1
  [ $? -eq 124 ] && echo "row host hung: killed after ${NATIVE_TIMEOUT}s; the last test started was $(grep 'start ' "$res/console.log" | tail -1 | sed 's/.*start //')" >"$res/killed"
  echo $(( $(date +%s) - t0 )) >"$res/seconds"
}

# ---- run the matrix --------------------------------------------------------------------------------
for g in "${GUESTS[@]}"; do
  selected "$g" || continue
  a=${GKERNEL[$g]}
  [ -n "${KDIR[$a]:-}" ] && continue
  fetch_kernel "$a" || die "kernel $a unavailable"
  [ -n "${KSKIP[$a]:-}" ] && continue
  build_initramfs "${KDIR[$a]}" || die "cannot build the initramfs for $a"
done
running=0
for g in "${GUESTS[@]}"; do
  selected "$g" || continue
  [ -n "${KSKIP[${GKERNEL[$g]}]:-}" ] && continue
  say "booting $g (${KNAME[${GKERNEL[$g]}]}, ${GCPUS[$g]} vCPUs${GEXTRA[$g]:+, ${GEXTRA[$g]}})"
  run_guest "$g" &
  running=$((running + 1))
  if [ "$running" -ge "$PARALLEL" ]; then wait -n; running=$((running - 1)); fi
done
wait
if selected host; then say "running the same tests natively on this host"; run_native; fi

# ---- report ----------------------------------------------------------------------------------------
passed=0 failed=0 skipped_rows=0
for g in "${GUESTS[@]}" host; do
  selected "$g" || continue
  res="$OUT/$g"
  if [ "$g" != host ] && [ -n "${KSKIP[${GKERNEL[$g]}]:-}" ]; then
    # Never silent, never a failure: the row names what this machine lacks.
    echo "kernels: SKIP $g (${KNAME[${GKERNEL[$g]}]}, ${GCPUS[$g]} vCPUs): ${KSKIP[${GKERNEL[$g]}]}"
    skipped_rows=$((skipped_rows + 1))
    continue
  fi
  ok=$(grep -c '^ok ' "$res/results.txt" 2>/dev/null); skipped=$(grep -c '^skipped ' "$res/results.txt" 2>/dev/null)
  ignored=$(grep -c '^ignored ' "$res/results.txt" 2>/dev/null)
  # A test that ran out of its time says so (TIMEOUT after N s), one that failed says FAILED.
  bad=$(grep -E '^(FAILED|TIMEOUT) ' "$res/results.txt" 2>/dev/null | awk '{print $2 " (" $1 " after " substr($NF, 2, length($NF) - 2) ")"}' | tr '\n' ' ')
  nbad=$(grep -cE '^(FAILED|TIMEOUT) ' "$res/results.txt" 2>/dev/null); nbad=${nbad:-0}
  if [ "$g" = host ]; then what="this host $(uname -r), $(nproc) CPUs, native"
  else what="${KNAME[${GKERNEL[$g]}]}, ${GCPUS[$g]} vCPUs, cgroup v2${GEXTRA[$g]:+, ${GEXTRA[$g]}}$(f=$(row_filter "$g"); echo "${f:+, tests $f}")"; fi
  why=""
  if [ -f "$res/killed" ]; then why=$(cat "$res/killed")
  elif [ ! -f "$res/done" ] && grep -aq 'Kernel panic' "$res/console.log" 2>/dev/null; then
    why="the guest kernel panicked ($(grep -a -m1 -E 'Oops|BUG:' "$res/console.log" | sed 's/^\[[ 0-9.]*\] //')) during $(grep -a 'rtslice-kernels: start ' "$res/console.log" | tail -1 | sed 's/.*start //') (see $res/console.log)"
  elif [ ! -f "$res/done" ]; then why="the guest stopped before finishing its tests (see $res/console.log)"
  elif [ "${ok:-0}" -eq 0 ]; then why="no test passed"
  fi
  if [ -z "$why" ] && [ "$nbad" -eq 0 ]; then verdict=PASS; passed=$((passed + 1)); else verdict=FAIL; failed=$((failed + 1)); fi
  # Skips by the capability the guest lacks (rtslice-testkit's one skip helper names it).
  needs=$(grep -ao 'SKIPPED \[[^]]*\]' "$res/results.txt" 2>/dev/null | sed 's/SKIPPED //' | sort | uniq -c | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}')
  # The three slowest tests: where a guest's time went.
  slow=$(sed -n 's/^\([a-zA-Z]*\) \([^ ]*\) .*\[\([0-9]*\)s\]$/\3 \2/p' "$res/results.txt" 2>/dev/null | sort -rn | head -3 | awk '{printf "%s%s %ss", (NR > 1 ? ", " : ""), $2, $1}')
  echo "kernels: $verdict $g ($what): ${ok:-0} ok, ${skipped:-0} skipped, ${ignored:-0} ignored, $nbad failed in $(cat "$res/seconds" 2>/dev/null || echo ?)s${needs:+ (skips: $needs)}${bad:+ — failed: $bad}${why:+ — $why}$([ -f "$res/retried" ] && echo " — $(cat "$res/retried")")${slow:+ — slowest: $slow}"
  # A guest that did not finish: where its console stopped (CI keeps only this output).
  if [ "$g" != host ] && [ ! -f "$res/done" ]; then
    console_last "$res/console.log" 12 | cut -c1-300 | sed "s|^|kernels:   $g console: |"
  fi
  # Each failure's own words (CI shows only the end of the output; the logs stay on that machine).
  grep -E '^(FAILED|TIMEOUT) ' "$res/results.txt" 2>/dev/null | awk '{print $2}' | while read -r id; do
    f="$res/logs/$(echo "$id" | tr -c 'A-Za-z0-9_.-' '_').log"
    msg=$(grep -a -A2 'panicked at' "$f" 2>/dev/null | head -3 | tr '\n' ' ' | cut -c1-600)
    echo "kernels:   $g $id: ${msg:-$(tail -n 3 "$f" 2>/dev/null | tr '\n' ' ' | cut -c1-400)}"
  done
done
say "matrix wall time $(( $(date +%s) - T0 ))s; logs in $OUT/<guest>/"
echo "kernels: $passed passed, $failed failed$([ "$skipped_rows" -gt 0 ] && echo ", $skipped_rows skipped")"
[ "$failed" -eq 0 ]
