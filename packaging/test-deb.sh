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

list=$(mktemp) before=$(mktemp)
trap 'rm -f "$list" "$before"; dpkg --purge rtslice >/dev/null 2>&1 || true' EXIT
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
/usr/bin/rtslice plan /usr/share/rtslice/examples/study-b-worst-fit.yaml --online 0-3
code=$?
set -e
[ "$code" -eq 1 ] || { echo "test-deb: installed rtslice plan exited $code, expected 1 (one rejection)" >&2; exit 1; }
man -w rtslice >/dev/null 2>&1 || [ -f /usr/share/man/man1/rtslice.1.gz ] || { echo "test-deb: no man page installed" >&2; exit 1; }

dpkg --purge rtslice
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
echo "test-deb: installed, ran doctor and plan, purged; $(wc -l < "$list") paths checked, nothing left"
