#!/bin/bash
# Installs the freshly built .deb into this very system, checks that the installed binary works on an
# installed example, purges it and checks that nothing it installed is left. Called by `make test-deb`.
set -euo pipefail
deb=${1:?usage: packaging/test-deb.sh PATH/rtslice_VERSION_ARCH.deb}

if [ "$(id -u)" -ne 0 ]; then
  echo "test-deb: skipped: installing a package needs root (run make test as root, as CI does)"
  exit 0
fi
if dpkg-query -W -f='${Status}' rtslice 2>/dev/null | grep -q 'install ok installed'; then
  echo "test-deb: a package named rtslice is already installed; not touching it (dpkg --purge rtslice first)" >&2
  exit 1
fi

# The package's run-time directories: purge removes them, so what a developer's rtslice keeps there
# (the emulator's calibration cache) is set aside and put back; a node or an apply in use is refused.
if [ -S /run/rtslice/api.sock ] || [ -e /var/lib/rtslice/node ] || python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("changes") else 1)' /var/lib/rtslice/state.json 2>/dev/null; then
  echo "test-deb: rtslice is in use on this machine (/run/rtslice/api.sock or state in /var/lib/rtslice); not touching it (rtslice reset first)" >&2
  exit 1
fi
saved=
if [ -e /var/lib/rtslice ]; then saved=$(mktemp -d /var/lib/rtslice-test-deb.XXXXXX); mv /var/lib/rtslice "$saved/"; fi
restore() { if [ -n "$saved" ]; then rm -rf /var/lib/rtslice; mv "$saved/rtslice" /var/lib/rtslice; rmdir "$saved"; saved=; fi; }
list=$(mktemp) before=$(mktemp)
trap 'rm -f "$list" "$before"; dpkg --purge rtslice >/dev/null 2>&1 || true; restore' EXIT
# The paths of the package that exist before it is installed (/lib, a symlink on merged-/usr systems;
# /usr/share/man) are the system's, not the package's: purge must leave them.
dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's#^\./#/#; s#/$##' | while read -r path; do
  if [ -n "$path" ] && { [ -e "$path" ] || [ -L "$path" ]; }; then echo "$path"; fi
done > "$before"

dpkg -i "$deb"
dpkg -L rtslice > "$list"

/usr/bin/rtslice --version
/usr/bin/rtslice doctor
# Study B's worked example: the fourth container is refused, so `plan` exits 1 by design.
set +e
/usr/bin/rtslice plan /usr/share/rtslice/examples/study-b-worst-fit.yaml
code=$?
set -e
[ "$code" -eq 1 ] || { echo "test-deb: installed rtslice plan exited $code, expected 1 (one rejection)" >&2; exit 1; }
man -w rtslice >/dev/null 2>&1 || [ -f /usr/share/man/man1/rtslice.1.gz ] || { echo "test-deb: no man page installed" >&2; exit 1; }

# The node service as its unit starts it. CI's VM and containers run no systemd, so the unit's
# ExecStart line is run as systemd would, after making its RuntimeDirectory (0700) and
# StateDirectory; on a systemd host `systemctl enable --now rtslice` runs the same line.
unit=/usr/lib/systemd/system/rtslice.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[ -n "$exec_start" ] || { echo "test-deb: $unit has no ExecStart" >&2; exit 1; }
install -d -m 0700 /run/rtslice
install -d /var/lib/rtslice
log=$(mktemp)
trap 'rm -f "$list" "$before" "$log"; [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null; dpkg --purge rtslice >/dev/null 2>&1 || true; restore' EXIT
$exec_start >"$log" 2>&1 &
daemon=$!
for _ in $(seq 1 150); do
  [ -S /run/rtslice/api.sock ] && curl -sf --unix-socket /run/rtslice/api.sock http://rtslice/v1/node >/dev/null && break
  kill -0 "$daemon" 2>/dev/null || { echo "test-deb: the service exited at start:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.2
done
curl -sf --unix-socket /run/rtslice/api.sock http://rtslice/v1/node | grep -q '"cpus"' \
  || { echo "test-deb: the service's GET /v1/node did not answer with the node (log below)" >&2; cat "$log" >&2; exit 1; }
[ "$(stat -c %a /run/rtslice/api.sock)" = 600 ] || { echo "test-deb: the API socket is not mode 0600" >&2; exit 1; }
# A workload through the installed CLI and the service, left running when the service stops (the
# unit's KillMode=process: a restarted daemon re-adopts it): the purge below must stop it and undo
# its cgroups, or the host keeps what nothing could undo any more.
marker=$((700000 + $$))
printf 'apiVersion: rtslice/v1\nworkloads:\n  - name: pkgtest\n    launch: { command: [sleep, "%s"] }\n' "$marker" \
  | /usr/bin/rtslice deploy - || { echo "test-deb: deploy through the service failed (log below)" >&2; cat "$log" >&2; exit 1; }
/usr/bin/rtslice list | grep -q pkgtest || { echo "test-deb: rtslice list does not show the deployed workload" >&2; exit 1; }
pgrep -f "^sleep $marker\$" >/dev/null || { echo "test-deb: the deployed workload is not running" >&2; exit 1; }
kill -TERM "$daemon"; wait "$daemon" || true; daemon=
pgrep -f "^sleep $marker\$" >/dev/null || { echo "test-deb: stopping the service stopped its workload (KillMode=process keeps it)" >&2; exit 1; }

dpkg --purge rtslice
# prerm's reset stopped the workload and undid the node; postrm removed the state directories.
if pgrep -f "^sleep $marker\$" >/dev/null; then echo "test-deb: the workload outlived the purge" >&2; exit 1; fi
for d in /var/lib/rtslice /run/rtslice /sys/fs/cgroup/cpuset/rtslice /sys/fs/cgroup/cpu/rtslice /sys/fs/cgroup/rtslice.slice; do
  if [ -e "$d" ]; then echo "test-deb: left behind after purge: $d" >&2; exit 1; fi
done
# Every file and every directory the package owned alone must be gone; shared directories such as
# /usr/bin stay (other packages own them too).
left=0
while read -r path; do
  [ "$path" = "/." ] && continue
  grep -qxF "$path" "$before" && continue
  if [ -e "$path" ] || [ -L "$path" ]; then
    # A directory still owned by another package (/usr/bin, /usr/share/man/man1) is not ours to remove.
    if [ -d "$path" ] && [ ! -L "$path" ] && dpkg -S "$path" >/dev/null 2>&1; then continue; fi
    echo "test-deb: left behind: $path" >&2
    left=1
  fi
done < "$list"
if dpkg-query -W rtslice >/dev/null 2>&1; then
  echo "test-deb: dpkg still knows the package after purge" >&2
  left=1
fi
[ "$left" -eq 0 ] || exit 1
restore
echo "test-deb: installed, ran doctor and plan, started the service as its unit does and deployed through it, purged (the workload stopped, the node undone, the state removed); $(wc -l < "$list") paths checked, nothing left"
