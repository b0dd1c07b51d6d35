//! `node.cache`, a workload's `cache` and `memoryBandwidth` (resctrl CAT / MBA): parsed, located
//! errors, and written back by `to_yaml`.

use rtslice_spec::*;

const GOOD: &str = r#"apiVersion: rtslice/v1
node:
  cpus: 0-7
  cache:
    ways: 12
    minWays: 2
    closids: 16
    shareableMask: "c00"
    domains:
      - {id: 0, cpus: 0-3}
      - {id: 1, cpus: 4-7}
    mba: {min: 10, granularity: 10}
workloads:
  - name: du
    demand: {reservation: {runtime: 50ms, period: 100ms}}
    cache: {ways: 4}
    memoryBandwidth: 50%
  - name: cu
    cache: {share: 25%}
  - name: ru
    cache: {masks: {0: "0x30", 1: "30"}}
"#;

#[test]
fn node_cache_and_requests_parse_and_round_trip() {
    let spec = parse(GOOD, "t.yaml").unwrap();
    let c = spec.node.cache.as_ref().unwrap();
    assert_eq!((c.ways, c.min_ways, c.closids, c.shareable_mask), (12, 2, 16, 0xc00));
    assert_eq!(c.domains[1], CacheDomain { id: 1, cpus: vec![4, 5, 6, 7] });
    assert_eq!(c.mba, Some(Mba { min: 10, granularity: 10 }));
    assert_eq!(spec.workloads[0].cache, Some(CacheRequest::Ways(4)));
    assert_eq!(spec.workloads[0].memory_bandwidth, Some(0.5));
    assert_eq!(spec.workloads[1].cache, Some(CacheRequest::Share(0.25)));
    assert_eq!(spec.workloads[2].cache, Some(CacheRequest::Masks([(0, 0x30), (1, 0x30)].into())));
    let back = parse(&to_yaml(&spec), "back.yaml").unwrap();
    assert_eq!(back, spec);
}

fn errors(text: &str) -> String {
    parse(text, "t.yaml").unwrap_err().to_string()
}

#[test]
fn bad_cache_fields_are_located_errors() {
    let e = errors(
        "apiVersion: rtslice/v1\nnode:\n  cpus: 0-3\n  cache: {ways: 8, domains: [{id: 0, cpus: 0-1}]}\nworkloads:\n  - name: a\n    cache: {ways: 9}\n  - name: b\n    cache: {ways: 2, share: 10%}\n  - name: c\n    memoryBandwidth: 150%\n",
    );
    assert!(e.contains("t.yaml:4:") && e.contains("node.cache.domains") && e.contains("CPU 2-3 has no L3"), "{e}");
    assert!(e.contains("workloads[1].cache") && e.contains("not ways and share"), "{e}");
    assert!(e.contains("workloads[2].memoryBandwidth"), "{e}");
    // Checked against the node's cache when it is valid.
    let e = errors("apiVersion: rtslice/v1\nnode:\n  cache: {ways: 8, minWays: 2}\nworkloads:\n  - name: a\n    cache: {ways: 9}\n  - name: b\n    cache: {ways: 1}\n");
    assert!(e.contains("t.yaml:6:") && e.contains("workloads[0].cache.ways") && e.contains("8 ways"), "{e}");
    assert!(e.contains("workloads[1].cache.ways") && e.contains("at least 2 ways"), "{e}");
    let e = errors(
        "apiVersion: rtslice/v1\nnode:\n  cache: {ways: 8, minWays: 2, domains: [{id: 0, cpus: 0-1}]}\n  cpus: 0-1\nworkloads:\n  - name: a\n    cache: {masks: {0: \"5\"}}\n  - name: b\n    cache: {masks: {0: \"100\"}}\n  - name: c\n    cache: {masks: {0: \"1\"}}\n  - name: d\n    cache: {masks: {2: \"3\"}}\n  - name: e\n    cache: {masks: {x: \"3\"}, ways: 2}\n",
    );
    assert!(e.contains("workloads[0].cache.masks.0") && e.contains("not one run"), "{e}");
    assert!(e.contains("workloads[1].cache.masks.0") && e.contains("outside the 8 ways"), "{e}");
    assert!(e.contains("workloads[2].cache.masks.0") && e.contains("at least 2 ways"), "{e}");
    assert!(e.contains("workloads[3].cache.masks.2") && e.contains("L3 2 is not in node.cache.domains"), "{e}");
    assert!(e.contains("workloads[4].cache") && e.contains("not ways and masks"), "{e}");
    let e = errors("apiVersion: rtslice/v1\nnode:\n  cache: {ways: 4, shareableMask: \"0x30\", minWays: 5}\n");
    assert!(e.contains("node.cache.shareableMask") && e.contains("outside the 4 ways"), "{e}");
    assert!(e.contains("node.cache.minWays"), "{e}");
    let e = errors("apiVersion: rtslice/v1\nworkloads:\n  - name: a\n    cache: {way: 2}\n");
    assert!(e.contains("did you mean `ways`"), "{e}");
}
