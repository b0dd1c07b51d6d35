#!/bin/bash
# `make install` / `make uninstall` for hosts without dpkg: the release binary and the systemd unit
# under PREFIX, staged under DESTDIR when it is set (packagers, the test). Called by the Makefile with
#   packaging/install.sh install|uninstall BINARY
# and PREFIX, DESTDIR, BINDIR, UNITDIR in the environment.
set -euo pipefail
action=${1:?usage: packaging/install.sh install|uninstall [BINARY]}
here=$(cd "$(dirname "$0")" && pwd)
: "${PREFIX:=/usr/local}" "${DESTDIR:=}"
: "${BINDIR:=$PREFIX/bin}" "${UNITDIR:=$PREFIX/lib/systemd/system}"
bin=$DESTDIR$BINDIR/rtslice
unit=$DESTDIR$UNITDIR/rtslice.service

# systemd reads units only at start and on daemon-reload; a staged tree (DESTDIR) is not the running
# system's, and a host without systemd (a container, CI) has nothing to reload.
reload() {
  if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl daemon-reload
  fi
}

case $action in
install)
  src=${2:?packaging/install.sh install needs the path of the release binary}
  [ -x "$src" ] || { echo "install: $src is not a built binary; run make release first" >&2; exit 1; }
  install -D -m 0755 "$src" "$bin"
  # The packaged unit runs /usr/bin/rtslice (the .deb's path); this one runs the binary just installed.
  tmp=$(mktemp)
  trap 'rm -f "$tmp"' EXIT
  sed "s#^ExecStart=/usr/bin/rtslice #ExecStart=$BINDIR/rtslice #" "$here/rtslice.service" > "$tmp"
  grep -q "^ExecStart=$BINDIR/rtslice " "$tmp" || { echo "install: packaging/rtslice.service has no ExecStart=/usr/bin/rtslice line to point at $BINDIR" >&2; exit 1; }
  install -D -m 0644 "$tmp" "$unit"
  reload
  echo "installed $bin and $unit"
  [ -n "$DESTDIR" ] || echo "start it with: systemctl enable --now rtslice (a running service must be stopped before make uninstall)"
  ;;
uninstall)
  if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ] && systemctl is-active --quiet rtslice 2>/dev/null; then
    echo "uninstall: the rtslice service is running; stop it first: systemctl disable --now rtslice" >&2
    exit 1
  fi
  rm -f "$bin" "$unit"
  # In a staged tree every directory install created is ours: remove those left empty, up to
  # DESTDIR itself (kept). On the live system the directories (/usr/local/bin, …) are shared: kept.
  if [ -n "$DESTDIR" ]; then
    for d in "$(dirname "$bin")" "$(dirname "$unit")"; do
      while [ "$d" != "${DESTDIR%/}" ] && [ "${d#"${DESTDIR%/}"/}" != "$d" ] && rmdir "$d" 2>/dev/null; do d=$(dirname "$d"); done
    done
  fi
  reload
  echo "removed $bin and $unit"
  ;;
*) echo "usage: packaging/install.sh install|uninstall [BINARY]" >&2; exit 2 ;;
esac
