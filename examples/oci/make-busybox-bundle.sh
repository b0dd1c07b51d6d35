#!/bin/sh
# Builds a tiny OCI bundle from Debian's busybox-static (apt-get install busybox-static):
#   examples/oci/make-busybox-bundle.sh /var/lib/rtslice/bundles/busybox-spinner
# The bundle holds rootfs/ (busybox and one symlink per applet) and a minimal config.json whose
# process.args is a CPU spinner; `rtslice apply` never modifies it — it keeps this configuration
# (args, env, cwd, and whatever you add: mounts, devices, namespaces) and merges its own part into a
# copy in its state directory (cgroup path, CPUs, RT budget, scheduler, capabilities; a network
# namespace and Docker's seccomp profile on request; what a minimal config leaves out, such as the
# namespaces and /proc, from rtslice's default), pointing runc at this rootfs. rtslice-host's runc test builds the same bundle with rtslice_host::oci::busybox_bundle.
set -eu
dir=${1:?usage: $0 BUNDLE_DIR [ARGS...]}
shift || true
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || { echo "busybox not found: apt-get install busybox-static" >&2; exit 1; }
file "$busybox" 2>/dev/null | grep -q "statically linked" || echo "warning: $busybox may not be static (install busybox-static)" >&2
mkdir -p "$dir/rootfs/bin" "$dir/rootfs/proc" "$dir/rootfs/sys" "$dir/rootfs/dev" "$dir/rootfs/tmp" "$dir/rootfs/etc"
cp "$busybox" "$dir/rootfs/bin/busybox"
for applet in $("$dir/rootfs/bin/busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$dir/rootfs/bin/$applet"
done
if [ $# -eq 0 ]; then set -- sh -c 'while :; do :; done'; fi
args=$(for a in "$@"; do printf '"%s",' "$(printf '%s' "$a" | sed 's/\\/\\\\/g; s/"/\\"/g')"; done)
cat > "$dir/config.json" <<JSON
{
  "ociVersion": "1.0.2",
  "process": { "args": [${args%,}], "env": ["PATH=/bin"], "cwd": "/" },
  "root": { "path": "rootfs", "readonly": true }
}
JSON
echo "bundle ready: $dir (args: $*)"
