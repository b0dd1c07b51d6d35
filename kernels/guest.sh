#!/bin/sh
# Runs inside a test guest (chroot on the host's read-only root) or natively for row "host":
# every test in $RESULTS/tests.selected (chosen on the host), an integration test's each in a process of its
# own so a hang or crash is attributed to one test, a unit-test binary's (kind `unit`: most take
# milliseconds, and a process start costs a TCG guest ~1.3 s) in one process per binary by
# run_unit_tests.py, still timed, timed out and reported per test; results go to
# $RESULTS/results.txt ("<status> <binary>::<test> [Ns]") and the console ("rtslice-kernels: ..."
# lines), logs to $RESULTS/logs/.
# Usage: guest.sh GUEST-NAME [RESULTS-DIR]   (results default to the guest's writable 9p export)
guest=$1
R=${2:-/run/rtslice-results}
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp LANG=C.UTF-8
export RUST_BACKTRACE=1
# Only inside a TCG guest: timing means nothing there, so the tests that assert latencies or CPU
# shares relax exactly those assertions (documented in kernels/README.md and docs/host.md).
[ "$guest" != host ] && export RTSLICE_TEST_GUEST=1
# What this guest is declared to have (matrix.conf's `has`): a test that skips for it fails.
[ -s "$R/expect" ] && export RTSLICE_TEST_EXPECT="$(cat "$R/expect")"
say() { echo "rtslice-kernels: $*"; }
mkdir -p "$R/logs"
: >"$R/results.txt"
rtslice=$(cat "$R/rtslice.bin")
# On the console first: a guest that stops before its tests shows whether it got this far.
say "running rtslice doctor"
{
  echo "== uname"; uname -a
  echo "== cmdline"; cat /proc/cmdline
  echo "== rtslice doctor"; "$rtslice" doctor
  echo "== rtslice doctor --json"; "$rtslice" doctor --json
} >"$R/doctor.txt" 2>&1
say "doctor: $(grep -iE 'preemption model' "$R/doctor.txt" | head -1)"
# Investigation hook (RTSLICE_KERNELS_SCRIPT on the host): run that script instead of the tests.
if [ -f "$R/script.sh" ]; then
  say "running $R/script.sh instead of the tests"
  sh -x "$R/script.sh" >"$R/script.log" 2>&1
  say "script exited with $?"; echo done >"$R/done"; exit 0
fi
per_test_timeout=${RTSLICE_KERNELS_TEST_TIMEOUT:-300}
# What a test that is about to time out waits on, for its log: each user thread's state, wait channel
# and kernel stack, and the kernel state rtslice's tests leave when a reset could not finish.
hung_state() {
  echo "== rtslice-kernels: timing out; user threads (pid/tid comm state wchan: kernel stack)"
  for d in /proc/[0-9]*/task/[0-9]*; do
    [ -s "${d%/task/*}/cmdline" ] || continue
    echo "$d $(cat "$d/comm" 2>/dev/null) $(cut -d' ' -f3 "$d/stat" 2>/dev/null) $(cat "$d/wchan" 2>/dev/null): $(head -4 "$d/stack" 2>/dev/null | tr '\n' ' ')"
  done
  echo "== root cpu.rt.max: $(cat /sys/fs/cgroup/cpu.rt.max 2>/dev/null); $(grep dying /sys/fs/cgroup/cgroup.stat 2>/dev/null | tr '\n' ' ')"
  find /sys/fs/cgroup -maxdepth 3 -type d -name '*rtslice*' 2>/dev/null
}
# The tests this row runs, "<label> <binary> <kind> <test>" a line, selected and listed on the host
# (matrix.sh: the row's `tests` filter or RTSLICE_KERNELS_TESTS): a `--list` or a `grep` per test
# costs a TCG guest a process start each. One binary's tests are consecutive lines.
here=$(dirname "$0")
awk '$2 != b { if (b != "") print line; b = $2; line = $1 " " $2 " " $3 } { line = line " " $4 }
     END { if (b != "") print line }' "$R/tests.selected" >"$R/tests.binaries"
while read -r label bin kind selected; do
  if [ "$kind" = unit ]; then
    python3 "$here/run_unit_tests.py" "$label" "$bin" "$R/results.txt" "$R/logs" "$per_test_timeout" $selected
    continue
  fi
  for t in $selected; do
    id="$label::$t"
    log="$R/logs/$(echo "$id" | tr -c 'A-Za-z0-9_.-' '_').log"
    say "start $id"
    # Seconds from /proc/uptime by the shell's own `read`: every process started costs a TCG guest
    # tens of milliseconds under load, and this loop runs hundreds of tests.
    read -r t0 _ </proc/uptime; t0=${t0%%.*}
    timeout -k 10 "$per_test_timeout" "$bin" --exact "$t" --nocapture --test-threads=1 >"$log" 2>&1 &
    tpid=$!
    # A test about to be killed for time leaves what it waits on: a hang with no output said nothing.
    ( sleep $((per_test_timeout - 3)) && kill -0 "$tpid" 2>/dev/null && hung_state >>"$log" 2>&1 ) 2>/dev/null &
    watchdog=$!
    wait "$tpid"
    rc=$?
    # Its `sleep` too: the tests launch `sleep` workloads and look for leftovers.
    pkill -P "$watchdog" 2>/dev/null; kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
    read -r t1 _ </proc/uptime; secs=$(( ${t1%%.*} - t0 ))
    # One pass over the log: ignored, skipped (a test may skip only a part — one mechanism, one
    # kernel feature — so its first three reasons stay on the line) or ok.
    verdict=$(awk '/^test result: ok\. 0 passed; 0 failed; 1 ignored/ { ig = 1 }
      /SKIPPED/ { sk = 1; if (n < 3) { w = w (n ? ";" : "") substr($0, index($0, "SKIPPED")); n++ } }
      END { printf "%s %s", ig ? "ignored" : (sk ? "skipped" : "ok"), w }' "$log")
    why=${verdict#* }
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then st=TIMEOUT
    elif [ $rc -ne 0 ]; then st=FAILED
    else st=${verdict%% *}
    fi
    # Each test's time on its line: a guest that runs out of time shows which tests grew.
    echo "$st $id${why:+ ($why)} [${secs}s]" >>"$R/results.txt"
    say "$st $id${why:+ ($why)} [${secs}s]"
    [ "$st" = FAILED ] || [ "$st" = TIMEOUT ] && tail -n 25 "$log" | sed 's/^/    | /'
  done
done <"$R/tests.binaries"
sync
say "done"
echo done >"$R/done"
