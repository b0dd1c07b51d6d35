#!/bin/bash
# `make install` / `make uninstall` into a staging directory (DESTDIR): exactly the binary and the
# unit with their modes, the unit's ExecStart on the installed binary, and nothing left after
# uninstall. Needs no root (nothing outside the staging tree is touched). Called by `make test-install`.
set -euo pipefail
make=${MAKE:-make}
fail() { echo "test-install: $*" >&2; exit 1; }

check() { # PREFIX-or-empty, expected prefix
  local prefix_arg=$1 prefix=$2 tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  $make --no-print-directory install DESTDIR="$tmp" ${prefix_arg:+PREFIX=$prefix_arg} >/dev/null
  local want got
  want=$(printf '%s\n' "-rwxr-xr-x $tmp$prefix/bin/rtslice" "-rw-r--r-- $tmp$prefix/lib/systemd/system/rtslice.service")
  got=$(find "$tmp" -type f -printf '%p %M\n' | sort | awk '{print $2, $1}')
  [ "$got" = "$want" ] || fail "install with PREFIX=${prefix_arg:-(default)} put"$'\n'"$got"$'\n'"expected"$'\n'"$want"
  [ -z "$(find "$tmp" ! -type f ! -type d)" ] || fail "install made something that is neither a file nor a directory: $(find "$tmp" ! -type f ! -type d)"
  local exec
  exec=$(sed -n 's/^ExecStart=//p' "$tmp$prefix/lib/systemd/system/rtslice.service")
  [ "${exec%% *}" = "$prefix/bin/rtslice" ] || fail "the unit's ExecStart is '$exec', not $prefix/bin/rtslice …"
  "$tmp$prefix/bin/rtslice" --version >/dev/null || fail "the installed binary does not run"
  # A unit systemd itself accepts, when this host has systemd-analyze (not on minimal CI images).
  if command -v systemd-analyze >/dev/null && [ -d /run/systemd/system ]; then
    systemd-analyze verify --root="$tmp" "$tmp$prefix/lib/systemd/system/rtslice.service" >/dev/null 2>&1 \
      || echo "test-install: note: systemd-analyze verify complained (a staged root lacks the binary's libraries)"
  fi
  $make --no-print-directory uninstall DESTDIR="$tmp" ${prefix_arg:+PREFIX=$prefix_arg} >/dev/null
  [ -z "$(ls -A "$tmp")" ] || fail "uninstall left: $(find "$tmp" -mindepth 1)"
  echo "test-install: PREFIX=${prefix_arg:-(default /usr/local)}: ${want//$'\n'/, } (ExecStart=${exec%% *}); uninstall left nothing"
}

check "" /usr/local
check /opt/rtslice /opt/rtslice
