#!/bin/bash
# build.sh OUTDIR RTSLICE_BINARY: writes the harness's three images as OCI archives into OUTDIR and
# prints their paths, one a line. Made from local files only (no registry, no daemon):
#   pause.tar    docker.io/rtslice/pause:e2e    a static Go pause (pause/), the pod sandbox
#   busybox.tar  docker.io/rtslice/busybox:e2e  Debian's busybox-static, with its applet links
#   emu.tar      docker.io/rtslice/emu:e2e      the rtslice binary (debug info stripped) and the
#                                               shared libraries ldd lists, plus busybox; entrypoint
#                                               `rtslice emulate` (the emulated vBS of the scenario)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
out=$1 rtslice=$2
die() { echo "k8s-images: error: $*" >&2; exit 1; }
# Go: the machine's toolchain in /usr/local/go when `sudo` or make left it off PATH.
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH=/usr/local/go/bin:$PATH
mkdir -p "$out"
[ -x /bin/busybox ] || die "no /bin/busybox (apt-get install busybox-static)"
file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || ldd /bin/busybox 2>&1 | grep -q 'not a dynamic' \
  || die "/bin/busybox is not static (apt-get install busybox-static)"
[ -x "$rtslice" ] || die "no rtslice binary at $rtslice (cargo build -p rtslice)"

applets() {  # --symlink arguments: every applet of busybox as /bin/NAME -> busybox
  /bin/busybox --list | grep -v '^busybox$' | sed 's|^|--symlink=/bin/|; s|$|:busybox|'
}

(cd "$HERE/pause" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/pause" .) || die "go build of pause failed"
python3 "$HERE/mkimage.py" "$out/pause.tar" docker.io/rtslice/pause:e2e --entrypoint '["/pause"]' \
  --file "$out/pause:/pause" >/dev/null
python3 "$HERE/mkimage.py" "$out/busybox.tar" docker.io/rtslice/busybox:e2e --entrypoint '["/bin/sh"]' \
  --file /bin/busybox:/bin/busybox $(applets) >/dev/null

# The emulator: its libraries at the paths the dynamic loader looks for them (as ldd resolved them).
objcopy --strip-debug "$rtslice" "$out/rtslice" || die "objcopy --strip-debug $rtslice failed"
libs=()
while read -r lib; do
  [ -n "$lib" ] && libs+=("--file=$(readlink -f "$lib"):$lib:0755")
done < <(ldd "$rtslice" | awk '/=> \//{print $3} /^[ \t]*\/[^ ]*ld-linux/{print $1}')
python3 "$HERE/mkimage.py" "$out/emu.tar" docker.io/rtslice/emu:e2e --entrypoint '["/bin/rtslice", "emulate"]' \
  --file "$out/rtslice:/bin/rtslice" --file /bin/busybox:/bin/busybox $(applets) "${libs[@]}" >/dev/null
rm -f "$out/pause" "$out/rtslice"
ls "$out"/pause.tar "$out"/busybox.tar "$out"/emu.tar
