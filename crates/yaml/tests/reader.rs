//! The reader's contract: every error in one pass, located, in file order; did-you-mean; UTF-8.

use proptest::prelude::*;
use rtslice_yaml::{index, load, suggest, utf8, DocKind, Errors, Reader, Val};

const DOC: DocKind<'static> = DocKind { noun: "job", empty_hint: "a job has a `name`" };

#[derive(Debug, PartialEq)]
struct Job {
    name: String,
    cpus: i64,
    tags: Vec<String>,
}

fn job(text: &str) -> Result<Job, Errors> {
    let root = load(text, "job.yaml", DOC)?;
    let mut r = Reader::new("job.yaml", "job");
    let job = r.fields(&root, "", &["name", "cpus", "tags", "exclusive"]).and_then(|m| {
        let name = m.required(&mut r, "name", "give the job a name", |r, n, p| r.string(n, p));
        let cpus = m.optional(&mut r, "cpus", |r, n, p| r.int(n, p, 1, 64)).unwrap_or(1);
        let tags = m
            .optional(&mut r, "tags", |r, n, p| {
                let items = r.seq(n, p, "tags")?;
                Some(items.iter().enumerate().filter_map(|(i, t)| r.string(t, &index(p, i))).collect())
            })
            .unwrap_or_default();
        m.optional(&mut r, "exclusive", |r, n, p| r.boolean(n, p));
        Some(Job { name: name?, cpus, tags })
    });
    r.finish(job)
}

fn lines(e: Errors) -> Vec<String> {
    e.iter().map(ToString::to_string).collect()
}

#[test]
fn a_valid_document_decodes() {
    let j = job("name: du1\ncpus: 4\ntags: [a, 7]\nexclusive: true\n").unwrap();
    assert_eq!(j, Job { name: "du1".into(), cpus: 4, tags: vec!["a".into(), "7".into()] });
}

#[test]
fn every_error_is_reported_at_once_in_file_order() {
    let e = job("tags: [a, [b]]\ncpu: 3\nexclusive: maybe\nzzzzzzzz: 1\n").unwrap_err();
    assert_eq!(
        lines(e),
        [
            "job.yaml:1:1: name: missing; give the job a name",
            "job.yaml:1:11: tags[1]: expected a string, found a list",
            "job.yaml:2:1: cpu: unknown field `cpu`; did you mean `cpus`?",
            "job.yaml:3:12: exclusive: expected true or false, found a string",
            "job.yaml:4:1: zzzzzzzz: unknown field `zzzzzzzz`; allowed here: name, cpus, tags, exclusive",
        ]
    );
}

#[test]
fn ranges_kinds_and_null_fields() {
    let e = job("name: x\ncpus: 65\ntags: nope\n").unwrap_err();
    assert_eq!(
        lines(e),
        ["job.yaml:2:7: cpus: 65 is out of range; allowed 1..=64", "job.yaml:3:7: tags: must be a list of tags, found a string"]
    );
    // `key:` with nothing after it counts as absent.
    assert_eq!(job("name: x\ncpus:\n").unwrap().cpus, 1);
    assert_eq!(lines(job("- a\n").unwrap_err()), ["job.yaml:1:1: the job must be a mapping (key: value), found a list"]);
}

#[test]
fn document_level_errors_name_the_document() {
    assert_eq!(lines(job("").unwrap_err()), ["job.yaml:1:1: the file is empty; a job has a `name`"]);
    assert_eq!(lines(job("name: a\n---\nname: b\n").unwrap_err()), ["job.yaml:3:1: more than one YAML document; put one job per file"]);
    let e = lines(job("name: [a\n").unwrap_err());
    assert!(e[0].starts_with("job.yaml:") && e[0].contains("not valid YAML"), "{e:?}");
}

#[test]
fn the_tree_keeps_positions_and_values() {
    let root = load("a:\n  b: [1, 2.5, true, ~, x]\n", "t.yaml", DOC).unwrap();
    let b = root.get("a").and_then(|a| a.get("b")).unwrap();
    assert_eq!((b.line, b.col), (2, 6));
    let items = b.as_seq().unwrap();
    assert_eq!(items[1].val, Val::Float(2.5));
    assert_eq!((items[4].line, items[4].col), (2, 24));
    assert_eq!(items.iter().map(|i| i.kind()).collect::<Vec<_>>(), ["an integer", "a number", "a boolean", "nothing (null)", "a string"]);
}

#[test]
fn one_of_suggests_the_nearest_name() {
    let root = load("mode: worst-fti\n", "t.yaml", DOC).unwrap();
    let mut r = Reader::new("t.yaml", "job");
    assert_eq!(r.one_of(root.get("mode").unwrap(), "mode", &["worst-fit", "best-fit"]), None);
    assert_eq!(r.errors()[0].reason, "unknown value `worst-fti`; did you mean `worst-fit`?");
}

#[test]
fn suggestions_prefer_abbreviations_then_edit_distance() {
    let allowed = ["match", "policy", "priority", "period", "runtime"];
    assert_eq!(suggest("prio", &allowed), Some("priority"));
    assert_eq!(suggest("Polcy", &allowed), Some("policy"));
    assert_eq!(suggest("xyzzy", &allowed), None);
}

#[test]
fn binary_input_is_named_as_not_utf8_at_the_first_bad_byte() {
    assert_eq!(utf8(b"name: du1\n", "a.yaml").unwrap(), "name: du1\n");
    let e = utf8(b"name: d\xc3\xa9\nx: \xff\xfe", "a.yaml").unwrap_err();
    assert_eq!(
        lines(e),
        ["a.yaml:2:4: not UTF-8 text: byte 13 (0xff) is not valid UTF-8; is this a binary file? save it as UTF-8 YAML"]
    );
}

/// The hand-written Levenshtein that strsim replaced: suggestions must not change.
fn old_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()]
}

proptest! {
    #[test]
    fn strsim_agrees_with_the_replaced_levenshtein(a in "[a-zA-Z]{0,12}", b in "[a-zA-Z]{0,12}") {
        prop_assert_eq!(strsim::levenshtein(&a.to_lowercase(), &b.to_lowercase()), old_distance(&a, &b));
    }
}

#[test]
fn aliases_resolve_to_the_anchored_value() {
    let root = load("a: &x [1, 2]\nb: *x\n", "t.yaml", DOC).unwrap();
    let b = root.get("b").unwrap();
    assert_eq!(b.as_seq().unwrap().iter().map(|n| n.val.clone()).collect::<Vec<_>>(), [Val::Int(1), Val::Int(2)]);
    // The alias is located where it is used, the values inside it where the anchor's value is written.
    assert_eq!((b.line, b.col), (2, 4));
    assert_eq!((b.as_seq().unwrap()[1].line, b.as_seq().unwrap()[1].col), (1, 11));
    // Expansion is bounded (billion laughs): an error, never an exhausted machine.
    let mut text = String::from("a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n");
    for i in 1..9 {
        let p = i - 1;
        text += &format!("a{i}: &a{i} [{}]\n", vec![format!("*a{p}"); 10].join(","));
    }
    let e = lines(load(&text, "t.yaml", DOC).unwrap_err());
    assert!(e[0].contains("not valid YAML") && e[0].contains("alias"), "{e:?}");
}

#[test]
fn merge_keys_are_named_as_unsupported() {
    let e = job("common: &b {cpus: 2}\nname: x\n<<: *b\n").unwrap_err();
    let e = lines(e);
    assert!(e.iter().any(|l| l == "job.yaml:1:1: common: unknown field `common`; allowed here: name, cpus, tags, exclusive"), "{e:?}");
    assert!(e.iter().any(|l| l.starts_with("job.yaml:3:1: <<: unknown field `<<`; merge keys (`<<: *anchor`) are not part of YAML 1.2")), "{e:?}");
}

#[test]
fn tagged_values_keep_a_position() {
    let root = load("a: !custom 3\nb: !!str 5\n", "t.yaml", DOC).unwrap();
    let a = root.get("a").unwrap();
    assert_eq!((a.line, a.col, &a.val), (1, 4, &Val::Int(3)));
    assert_eq!(root.get("b").unwrap().val, Val::Str("5".into()));
}
