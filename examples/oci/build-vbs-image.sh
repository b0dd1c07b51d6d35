#!/bin/sh
# Builds a small vBS image — the rtslice emulator (`rtslice emulate`) — as an OCI image layout,
# locally, without a registry, Docker or buildah: the layout is what `rtslice apply` runs from
# (`launch: {oci: DIR}`) and what `skopeo copy oci:DIR docker-daemon:vbs:local` would load elsewhere.
#   examples/oci/build-vbs-image.sh target/release/rtslice /var/lib/rtslice/images/vbs
#   sudo rtslice apply examples/oci/vbs-image.yaml
# Layers: 1) Debian's busybox-static (a shell for debugging: `runc exec`), 2) the rtslice binary with
# the shared libraries it links (from ldd: libelf, zlib, libc; the binary is not fully static because
# its BPF tracer links libelf), so the image runs on any x86-64 Linux. The image's command is the
# srsENB profile (study C); `args:` in the spec or a bundle's config.json override it.
set -eu
bin=${1:?usage: $0 RTSLICE_BINARY LAYOUT_DIR}
out=${2:?usage: $0 RTSLICE_BINARY LAYOUT_DIR}
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || { echo "busybox not found: apt-get install busybox-static" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/l1/bin" "$work/l1/proc" "$work/l1/sys" "$work/l1/dev" "$work/l1/tmp" "$work/l1/etc" "$work/l2/usr/bin"
cp "$busybox" "$work/l1/bin/busybox"
for applet in $("$work/l1/bin/busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$work/l1/bin/$applet"
done
cp "$bin" "$work/l2/usr/bin/rtslice"
# The libraries the binary links, at the paths the dynamic loader looks for them.
for lib in $(ldd "$bin" | awk '/=>/ {print $3} /^\t\// {print $1}'); do
  mkdir -p "$work/l2$(dirname "$lib")"
  cp -L "$lib" "$work/l2$lib"
done
mkdir -p "$out/blobs/sha256"
blob() { # FILE -> "sha256:HEX SIZE", stored in the layout
  h=$(sha256sum "$1" | cut -d' ' -f1)
  cp "$1" "$out/blobs/sha256/$h"
  echo "sha256:$h $(stat -c %s "$1")"
}
tar -C "$work/l1" --numeric-owner --owner=0 --group=0 -czf "$work/l1.tar.gz" .
tar -C "$work/l2" --numeric-owner --owner=0 --group=0 -czf "$work/l2.tar.gz" .
set -- $(blob "$work/l1.tar.gz"); l1d=$1; l1s=$2
set -- $(blob "$work/l2.tar.gz"); l2d=$1; l2s=$2
diff1=$(gzip -dc "$work/l1.tar.gz" | sha256sum | cut -d' ' -f1)
diff2=$(gzip -dc "$work/l2.tar.gz" | sha256sum | cut -d' ' -f1)
cat > "$work/config.json" <<JSON
{"architecture":"amd64","os":"linux",
 "config":{"Entrypoint":["/usr/bin/rtslice","emulate"],"Cmd":["--profile","srsenb","--json"],
           "Env":["PATH=/usr/bin:/bin","RTSLICE_IN_CONTAINER=1"],"WorkingDir":"/tmp"},
 "rootfs":{"type":"layers","diff_ids":["sha256:$diff1","sha256:$diff2"]}}
JSON
set -- $(blob "$work/config.json"); cd_=$1; cs=$2
cat > "$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
 "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"$cd_","size":$cs},
 "layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"$l1d","size":$l1s},
           {"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"$l2d","size":$l2s}]}
JSON
set -- $(blob "$work/manifest.json"); md=$1; ms=$2
printf '{"imageLayoutVersion":"1.0.0"}' > "$out/oci-layout"
cat > "$out/index.json" <<JSON
{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"$md","size":$ms,
 "annotations":{"org.opencontainers.image.ref.name":"vbs:local"}}]}
JSON
echo "image layout ready: $out ($(du -sh "$out" | cut -f1))"
