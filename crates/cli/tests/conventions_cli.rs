//! The CLI's shared conventions (issue 17, "a consistent CLI"), checked on the real binary: `--json`,
//! `-q/--quiet`, ratios as `95%`, one spelling of each mechanism, one error prefix, quiet exit on a
//! closed pipe, model inputs checked like the spec, plan counts, reset's agent files, generated files;
//! and the source's own size limit (no file over 1,000 lines).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rtslice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtslice")).args(args).current_dir(root()).output().expect("run rtslice")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rtslice-conventions-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The help line of `flag` in `rtslice ARGS --help`, flag and description, whitespace collapsed.
fn help_line(args: &[&str], flag: &str) -> Option<String> {
    let mut a = args.to_vec();
    a.push("--help");
    let out = rtslice(&a);
    assert_eq!(out.status.code(), Some(0), "{args:?} --help: {}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let i = lines.iter().position(|l| l.trim_start().split([' ', ',']).any(|w| w == flag))?;
    // clap puts a long description on the lines after the flag when it does not fit.
    let mut joined = lines[i].trim().to_string();
    for l in &lines[i + 1..] {
        if l.trim_start().starts_with('-') || l.trim().is_empty() {
            break;
        }
        joined.push(' ');
        joined.push_str(l.trim());
    }
    Some(joined.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Every subcommand that reports a result.
const WITH_RESULT: &[&[&str]] = &[
    &["plan"],
    &["doctor"],
    &["apply"],
    &["status"],
    &["reset"],
    &["trace"],
    &["emulate"],
    &["noise"],
    &["model", "predict"],
    &["model", "size"],
    &["model", "validate"],
    &["loadgen", "client"],
    &["bench"],
    &["demo"],
    &["import", "tosca"],
];

#[test]
fn json_is_one_flag_with_one_meaning_on_every_subcommand() {
    let expected = "--json Print the result as JSON on standard output instead of the human view";
    for sub in WITH_RESULT {
        let line = help_line(sub, "--json").unwrap_or_else(|| panic!("`rtslice {}` has no --json", sub.join(" ")));
        assert_eq!(line, expected, "rtslice {}", sub.join(" "));
    }
}

#[test]
fn quiet_is_spelled_alike() {
    for sub in [&["trace"][..], &["emulate"], &["noise"], &["bench"], &["demo"]] {
        let line = help_line(sub, "--quiet").unwrap_or_else(|| panic!("`rtslice {}` has no --quiet", sub.join(" ")));
        assert!(line.starts_with("-q, --quiet No live view or progress"), "rtslice {}: {line}", sub.join(" "));
    }
}

#[test]
fn trace_writes_its_report_to_a_file_with_output() {
    let out = rtslice(&["trace", "--help"]);
    let help = stdout(&out);
    assert!(help.contains("--output <FILE>") && help.contains("--csv <FILE>"), "{help}");
    // The former `--json FILE` is now a usage error, with the one error prefix.
    let old = rtslice(&["trace", "--pid", "1", "--json", "report.json"]);
    assert_eq!(old.status.code(), Some(2));
    assert!(stderr(&old).starts_with("rtslice: error: "), "{}", stderr(&old));

    // A real trace of a sleeping process (schedstat: no BPF or root needed): JSON on stdout and in FILE.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let dir = temp_dir("trace");
    let file = dir.join("r.json");
    let pid = sleeper.id().to_string();
    let out = rtslice(&[
        "trace", "--pid", &pid, "--schedstat", "--duration", "300ms", "-q", "--json", "--output", file.to_str().unwrap(),
    ]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let on_stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("stdout not JSON ({e}): {}", stdout(&out)));
    let in_file: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(on_stdout, in_file);
    assert!(on_stdout["threads"].is_array(), "{on_stdout}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn mechanisms_have_one_spelling_and_accept_the_other() {
    let help = stdout(&rtslice(&["apply", "--help"]));
    assert!(help.contains("rt_group") && !help.contains("rt-group"), "{help}");
    let help = stdout(&rtslice(&["model", "validate", "--help"]));
    assert!(help.contains("rt_group") && !help.contains("rt-group"), "{help}");
    // The alias gets past argument parsing (the missing file is what fails then)...
    let out = rtslice(&["model", "validate", "does/not/exist.yaml", "--mechanism", "rt-group"]);
    assert!(stderr(&out).contains("cannot read experiment file"), "{}", stderr(&out));
    // ...an unknown spelling does not, and the error lists the one spelling.
    let out = rtslice(&["model", "validate", "does/not/exist.yaml", "--mechanism", "rtgroup"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.starts_with("rtslice: error: ") && err.contains("rt_group"), "{err}");
}

const SIZE: &[&str] = &["model", "size", "--lambda", "300", "--mu", "1000", "--period", "2ms", "--target-percentile", "20ms", "--json"];

#[test]
fn ratios_accept_percentages() {
    let with = |extra: &[&str]| {
        let mut a = SIZE.to_vec();
        a.extend_from_slice(extra);
        let out = rtslice(&a);
        assert_eq!(out.status.code(), Some(0), "{a:?}: {}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert_eq!(with(&["--cap", "95%", "--phi", "99%"]), with(&["--cap", "0.95", "--phi", "0.99"]));
    assert_eq!(with(&["--cap", "80%"])["cap"], 0.8);
    let out = rtslice(&[SIZE, &["--cap", "120%"][..]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("rtslice: error: "), "{}", stderr(&out));
}

const PREDICT: &[&str] = &["model", "predict", "--lambda", "300", "--mu", "1000"];

#[test]
fn model_inputs_are_checked_like_the_spec() {
    for (args, needle) in [
        (&["--runtime", "1ms", "--period", "10s"][..], "--period: period 10s is outside the kernel's range 100us–4194304us"),
        (&["--runtime", "50us", "--period", "50us"], "--period: period 50us is outside the kernel's range"),
        (&["--runtime", "3ms", "--period", "2ms"], "--runtime: runtime 3ms is longer than the period 2ms"),
        (&["--runtime", "0s", "--period", "2ms"], "--runtime: a reservation needs a runtime above 0"),
    ] {
        let out = rtslice(&[PREDICT, args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.starts_with("rtslice: error: ") && err.contains(needle), "{args:?}: {err}");
        // Only the true error: a valid runtime is not blamed for an invalid period.
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(out.stdout.is_empty());
    }
    let out = rtslice(&["model", "size", "--lambda", "300", "--mu", "1000", "--period", "5s", "--target-mean", "10ms"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn model_prints_durations_with_units() {
    let out = rtslice(&[PREDICT, &["--runtime", "1.4ms", "--period", "2ms"][..]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Q = 1400us every P = 2ms"), "{text}");
    let mut a = SIZE.to_vec();
    a.pop(); // human view
    let text = stdout(&rtslice(&a));
    let line = text.lines().find(|l| l.starts_with("smallest reservation")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("every P = 2ms"), "{line}");
    assert!(!line.contains("0.00"), "no raw seconds: {line}");
}

#[test]
fn errors_have_one_prefix() {
    for (args, code) in [
        (&["plan", "--no-such-flag"][..], 2),
        (&["plan", "does/not/exist.yaml"], 2),
        (&["no-such-subcommand"], 2),
        (&["emulate", "--duration", "0s"], 2),
        (&["loadgen", "client", "--count", "0"], 2),
    ] {
        let out = rtslice(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).starts_with("rtslice: error: "), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_spec_that_is_not_text_says_so() {
    let dir = temp_dir("binary");
    let f = dir.join("garbage.yaml");
    std::fs::write(&f, [0x7f, b'E', b'L', b'F', 0xff, 0xfe, 0x00, 0x80]).unwrap();
    let out = rtslice(&["plan", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not UTF-8 text"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn plan_prints_admitted_and_rejected_counts() {
    let out = rtslice(&["plan", "examples/study-b-worst-fit.yaml", "--online", "0-3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).trim_end().ends_with("3 admitted, 1 rejected"), "{}", stdout(&out));
    let out = rtslice(&["plan", "examples/study-a-cloud-ran.yaml", "--online", "0-7", "--isolcpus", ""]);
    assert!(stdout(&out).trim_end().ends_with("3 admitted, 0 rejected"), "{}", stdout(&out));
}

/// Reads a few bytes, then closes the pipe while the child still has much more to write.
fn run_into_closed_pipe(args: &[&str], stdin: Option<String>) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtslice"))
        .args(args)
        .current_dir(root())
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        let mut w = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let _ = w.write_all(text.as_bytes());
        });
    }
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (child.wait().unwrap(), err)
}

#[test]
fn a_closed_pipe_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    // A plan of 1000 best-effort workloads prints far more than a pipe holds (118 KB of text, 186 KB
    // of JSON against 64 KiB).
    let mut spec = String::from("apiVersion: rtslice/v1\nnode: {cpus: 0-3}\nworkloads:\n");
    for i in 0..1000 {
        spec.push_str(&format!("  - name: w{i}\n"));
    }
    for (args, input) in [
        (&["plan", "-", "--json"][..], Some(spec.clone())),
        (&["plan", "-"], Some(spec)),
        (&["model", "predict", "--lambda", "300", "--mu", "1000", "--runtime", "1ms", "--period", "2ms", "--sweep", "lambda=1:1000:20000"], None),
    ] {
        let (status, err) = run_into_closed_pipe(args, input);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(status.success() || status.signal() == Some(libc_sigpipe()), "{args:?}: {status:?} {err}");
        assert!(err.is_empty(), "{args:?}: nothing on stderr: {err}");
    }
}

fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn reset_removes_the_agents_log_and_statistics() {
    let dir = temp_dir("reset");
    for f in ["agent.log", "agent.stats.json"] {
        std::fs::write(dir.join(f), "from an earlier run").unwrap();
    }
    let out = rtslice(&["reset", "--state-dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for f in ["agent.log", "agent.stats.json"] {
        assert!(!dir.join(f).exists(), "{f} left in the state directory");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn man_pages_and_completions_are_generated_from_the_cli() {
    let dir = temp_dir("generate");
    let man = dir.join("man");
    let comp = dir.join("completions");
    assert!(rtslice(&["generate", "man", man.to_str().unwrap()]).status.success());
    assert!(rtslice(&["generate", "completions", comp.to_str().unwrap()]).status.success());
    for page in ["rtslice.1", "rtslice-plan.1", "rtslice-model-size.1", "rtslice-trace.1"] {
        let text = std::fs::read_to_string(man.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page} is not a man page");
    }
    assert!(std::fs::read_to_string(man.join("rtslice-trace.1")).unwrap().contains("output"));
    let bash = std::fs::read_to_string(comp.join("rtslice.bash")).unwrap();
    assert!(bash.contains("plan") && bash.contains("--json"), "bash completion lists subcommands and flags");
    assert!(comp.join("_rtslice").exists() && comp.join("rtslice.fish").exists());
    // The packaging helper stays out of the user's view.
    assert!(!stdout(&rtslice(&["--help"])).contains("generate"));
    let _ = std::fs::remove_dir_all(dir);
}

fn schema() -> Value {
    let out = rtslice(&["generate", "schema"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn yaml_to_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_shipped_example_validates_against_the_schema() {
    let validator = jsonschema::validator_for(&schema()).expect("the schema is a valid JSON Schema");
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join("examples")).unwrap().chain(std::fs::read_dir(root().join("examples/oci")).unwrap()) {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        // The spec parser is the reference: what it accepts, the schema must accept too.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(rtslice_spec_parses(&path), "{} is a spec", path.display());
        let doc = yaml_to_json(&path);
        let errors: Vec<String> = validator.iter_errors(&doc).map(|e| format!("{} at {}", e, e.instance_path)).collect();
        assert!(errors.is_empty(), "{}:\n{}\n{text}", path.display(), errors.join("\n"));
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} examples found");

    // The schema can fail: an unknown field and a duration without a unit are refused.
    let bad: Value = serde_json::json!({"apiVersion": "rtslice/v1", "node": {"cpus": "0-3", "colour": "blue"}});
    assert!(!validator.is_valid(&bad));
    let bad: Value = serde_json::json!({"apiVersion": "rtslice/v1", "workloads": [{"name": "a", "demand": {"reservation": {"runtime": "2", "period": "10ms"}}}]});
    assert!(!validator.is_valid(&bad));
    // Devices: addresses with a function, irqs `keep` or slots.
    let device = |d: Value| serde_json::json!({"apiVersion": "rtslice/v1", "workloads": [{"name": "a", "devices": [d]}]});
    for good in [serde_json::json!({"pci": "0000:3b:02.1", "irqs": "keep"}), serde_json::json!({"pci": "3b:02.1", "irqs": 1}), serde_json::json!({"pci": "0000:af:1f.7", "irqs": "0-1"})] {
        assert!(validator.is_valid(&device(good.clone())), "{good}");
    }
    for bad in [serde_json::json!({"pci": "0000:3b:02"}), serde_json::json!({"pci": "0000:3b:02.1", "irqs": "never"}), serde_json::json!({"irqs": 1})] {
        assert!(!validator.is_valid(&device(bad.clone())), "{bad}");
    }
    let good: Value = serde_json::json!({"apiVersion": "rtslice/v1", "workloads": [{"name": "a", "demand": {"reservation": {"runtime": "2ms", "period": "10ms"}}}]});
    assert!(validator.is_valid(&good), "{:?}", validator.iter_errors(&good).map(|e| e.to_string()).collect::<Vec<_>>());
}

fn rtslice_spec_parses(path: &Path) -> bool {
    let out = rtslice(&["plan", path.to_str().unwrap(), "--json", "--online", "0-7", "--isolcpus", "4-7"]);
    matches!(out.status.code(), Some(0) | Some(1))
}

/// The source's own convention (docs/ARCHITECTURE.md): no Rust file in the workspace over 1,000
/// lines, so a module stays one job a reader can hold; a file that grows past it is split by job.
#[test]
fn no_source_file_is_over_a_thousand_lines() {
    fn walk(dir: &Path, out: &mut Vec<(usize, PathBuf)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "target") {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let lines = std::fs::read_to_string(&p).unwrap().lines().count();
                out.push((lines, p));
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("crates"), &mut files);
    assert!(files.len() > 100, "found the workspace's sources ({} files)", files.len());
    let long: Vec<String> = files.iter().filter(|(n, _)| *n > 1000).map(|(n, p)| format!("{} ({n} lines)", p.display())).collect();
    assert!(long.is_empty(), "split these by job: {}", long.join(", "));
}

/// No module imports another in a circle (docs/ARCHITECTURE.md): per crate, the top-level modules
/// (a file or a directory under src/) and the `crate::<module>` paths their code names (comments and
/// `mod tests` left out) form a graph without cycles, so each module can be read after the ones it
/// uses. A child module naming its parent (`super::`) is structure, not an import.
#[test]
fn no_module_imports_another_in_a_circle() {
    use std::collections::{BTreeMap, BTreeSet};
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    fn names_after(code: &str, prefix: &str) -> Vec<String> {
        code.match_indices(prefix)
            .map(|(i, _)| code[i + prefix.len()..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect())
            .collect()
    }
    let mut checked = 0;
    let mut circles = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        let src = krate.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        sources(&src, &mut files);
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in &files {
            let rel = f.strip_prefix(&src).unwrap();
            let module = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
            if module == "lib" || module == "main" || module == "bin" {
                continue;
            }
            let text = std::fs::read_to_string(f).unwrap();
            let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            let code: String = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
            let mut deps: BTreeSet<String> = names_after(&code, "crate::").into_iter().collect();
            // `use crate::{a, b::c}` names a and b.
            for (i, _) in code.match_indices("use crate::{") {
                let group = &code[i + "use crate::{".len()..];
                let group = &group[..group.find('}').unwrap_or(group.len())];
                deps.extend(group.split(',').map(|p| p.trim().split("::").next().unwrap_or("").to_string()));
            }
            deps.remove(&module);
            graph.entry(module).or_default().extend(deps);
        }
        let modules: BTreeSet<String> = graph.keys().cloned().collect();
        for deps in graph.values_mut() {
            deps.retain(|d| modules.contains(d));
        }
        checked += modules.len();
        // A module is in a circle when it reaches itself.
        for m in &modules {
            let mut seen = BTreeSet::new();
            let mut stack: Vec<&String> = graph[m].iter().collect();
            while let Some(n) = stack.pop() {
                if seen.insert(n.clone()) {
                    stack.extend(graph[n].iter());
                }
            }
            if seen.contains(m) {
                circles.push(format!("{}: {m}", krate.file_name().to_string_lossy()));
            }
        }
    }
    assert!(checked > 50, "found the workspace's modules ({checked})");
    assert!(circles.is_empty(), "modules that import themselves through others: {}", circles.join(", "));
}
