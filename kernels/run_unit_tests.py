#!/usr/bin/env python3
"""Runs the tests of one unit-test binary (a crate's `--lib` tests) in as few processes as possible,
for kernels/guest.sh. Under TCG every process start costs a guest ~1.3 s (8 vCPUs on one host
thread), and the unit-test binaries hold half the matrix's tests, most of them milliseconds long.

Each result is still per test, as guest.sh writes them ("<status> <label>::<test> [Ns]" in
results.txt, "rtslice-kernels: ..." on the console): libtest with one test thread prints a test's
name when it starts and its result when it ends, so the time between the two is the test's, and a
test that runs past the per-test timeout is the one named TIMEOUT. A test that hangs or crashes the
process is reported alone; the tests after it run in a new process.

Usage: run_unit_tests.py LABEL BINARY RESULTS_FILE LOG_DIR TIMEOUT_SECONDS TEST...
"""
import os
import re
import select
import signal
import subprocess
import sys
import time

START = re.compile(r"^test (\S+) \.\.\. ", re.M)
# With output captured, the result follows the name on the same line; output a child process writes
# to the inherited descriptors may come in between, so the result may also start a line.
RESULT = re.compile(r"(?:^|(?<=\.\.\. ))(ok|FAILED|ignored(?:, [^\n]*)?)\n", re.M)
SECTION = re.compile(r"^---- (\S+) stdout ----\n(.*?)(?=^---- \S+ stdout ----$|^successes:$|^failures:$|\Z)", re.M | re.S)


def say(text):
    print(f"rtslice-kernels: {text}", flush=True)


def safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def run_once(label, binary, tests, timeout, log_path):
    """One process over `tests` (in order). Returns [(test, status, seconds)] for the tests that
    ended, in order, the whole output, and the test that was running when the process ended
    without finishing it (hung: TIMEOUT, or the process died: FAILED), if any."""
    proc = subprocess.Popen(
        [binary, "--exact", *tests, "--test-threads=1", "--show-output"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    fd = proc.stdout.fileno()
    text, pos, current, started, ended, unfinished = "", 0, None, 0.0, [], None
    with open(log_path, "w", encoding="utf-8") as log:
        while True:
            ready, _, _ = select.select([fd], [], [], 1.0)
            now = time.monotonic()
            chunk = os.read(fd, 65536) if ready else None
            if chunk:
                piece = chunk.decode("utf-8", "replace")
                log.write(piece)
                log.flush()
                text += piece
            # Starts and results in order, from where the last pass stopped.
            while True:
                if current is None:
                    m = START.search(text, pos)
                    if not m:
                        break
                    current, started, pos = m.group(1), now, m.end()
                    say(f"start {label}::{current}")
                else:
                    m = RESULT.search(text, pos)
                    if not m:
                        break
                    ended.append((current, m.group(1).split(",")[0], now - started))
                    current, pos = None, m.end()
            if current is not None and now - started > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return ended, text, (current, "TIMEOUT", now - started)
            if ready and not chunk:
                break
    rc = proc.wait()
    if current is not None:
        unfinished = (current, "FAILED", time.monotonic() - started)
        text += f"\n(the test process ended with status {rc} while {current} ran)\n"
    elif rc != 0 and not any(s == "FAILED" for _, s, _ in ended):
        # The harness failed outside any test (it could not start, or a filter matched nothing).
        unfinished = (tests[len(ended)] if len(ended) < len(tests) else tests[-1], "FAILED", 0.0)
        text += f"\n(the test process ended with status {rc} outside a test)\n"
    return ended, text, unfinished


def main():
    label, binary, results, log_dir, timeout = sys.argv[1:6]
    pending = sys.argv[6:]
    timeout = float(timeout)
    run = 0
    with open(results, "a", encoding="utf-8") as out:
        while pending:
            run += 1
            log_path = os.path.join(log_dir, safe(f"{label}.run{run}") + ".log")
            ended, text, unfinished = run_once(label, binary, pending, timeout, log_path)
            sections = {name: body for name, body in SECTION.findall(text)}
            rows = ended + ([unfinished] if unfinished else [])
            for name, status, secs in rows:
                body = sections.get(name, "")
                why = ";".join(re.findall(r"SKIPPED.*", body)[:3])
                if status == "ok" and why:
                    status = "skipped"
                line = f"{status} {label}::{name}{f' ({why})' if why else ''} [{int(round(secs))}s]"
                out.write(line + "\n")
                out.flush()
                say(line)
                if status in ("FAILED", "TIMEOUT"):
                    tail = (body or text).rstrip("\n").split("\n")[-25:]
                    for t in tail:
                        print(f"    | {t}", flush=True)
            done = {name for name, _, _ in rows}
            if not rows:
                break
            pending = [t for t in pending if t not in done]


if __name__ == "__main__":
    main()
