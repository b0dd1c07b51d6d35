//! TOSCA import: Tacker's VDU form (study B) and ETSI SOL001's Vdu.Compute.

use std::time::Duration;

use rtslice_spec::*;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example(name: &str) -> String {
    std::fs::read_to_string(root().join("examples/tosca").join(name)).unwrap()
}

fn errors(text: &str) -> Vec<String> {
    match import_tosca(text, "t.yaml") {
        Ok(i) => panic!("expected errors, got {:?}", i.spec),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

fn reservation(w: &Workload) -> &Reservation {
    match &w.demand {
        Some(Demand::Reservation(r)) => r,
        other => panic!("{}: not a reservation: {other:?}", w.name),
    }
}

#[test]
fn sol001_vdu_compute_becomes_workloads() {
    let imported = import_tosca(&example("sol001-vnfd.yaml"), "sol001-vnfd.yaml").unwrap();
    let w = &imported.spec.workloads;
    let names: Vec<&str> = w.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["du-1", "du-2", "cu", "oam"], "one workload per initial instance (vdu_profile)");
    for du in &w[..2] {
        let r = reservation(du);
        assert_eq!((r.runtime, r.period, r.count), (Duration::from_micros(700), Some(Duration::from_millis(1)), Some(2)));
        assert_eq!(du.memory, Some(4096 << 20));
    }
    assert!(matches!(&w[2].demand, Some(Demand::Dedicated(Dedicated { count: Some(2), cpus: None }))), "static pinning: {:?}", w[2].demand);
    assert_eq!(w[2].memory, Some(2 << 30));
    assert!(matches!(&w[3].demand, Some(Demand::BestEffort(b)) if b.cap == Some(1.0)), "{:?}", w[3].demand);
    let unmapped: Vec<String> = imported.unmapped.iter().map(|u| format!("{}: {}", u.path, u.reason)).collect();
    for needle in [
        "du.properties.vdu_profile.max_number_of_instances: not mapped: reserved for the 2 initial instance(s); scaling out to 4",
        "du.properties.sw_image_data: not mapped",
        "oam.capabilities.virtual_compute.properties.virtual_local_storage: not mapped",
        "node_templates.du_fh_cp: not mapped: node type `tosca.nodes.nfv.VduCp` is not a VDU",
    ] {
        assert!(unmapped.iter().any(|u| u.contains(needle)), "missing `{needle}` in {unmapped:#?}");
    }
    assert_eq!(unmapped.len(), 4, "name, description and the capability's identity are not reported: {unmapped:#?}");
}

#[test]
fn imported_memory_is_written_in_units() {
    let imported = import_tosca(&example("sol001-vnfd.yaml"), "sol001-vnfd.yaml").unwrap();
    let text = to_yaml(&imported.spec);
    for line in ["memory: 4GiB", "memory: 2GiB", "memory: 512MiB"] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    assert_eq!(parse(&text, "again.yaml").unwrap(), imported.spec);
    let tacker = to_yaml(&import_tosca(&example("study-b-vnfd.yaml"), "b.yaml").unwrap().spec);
    assert!(tacker.contains("memory: 4GiB") && tacker.contains("memory: 1GiB"), "{tacker}");
}

#[test]
fn a_template_without_vdu_is_an_error() {
    let text = "tosca_definitions_version: tosca_simple_yaml_1_3
topology_template:
  node_templates:
    cp:
      type: tosca.nodes.nfv.VduCp
    vl:
      type: tosca.nodes.nfv.VnfVirtualLink
";
    assert_eq!(
        errors(text),
        ["t.yaml:4:5: topology_template.node_templates: no VDU to import; workloads come from node templates of type `tosca.nodes.nfv.Vdu.Compute` (ETSI SOL001) or `tosca.nodes.nfv.VDU.Tacker`"]
    );
}

const SOL001_RT: &str = "tosca_definitions_version: tosca_simple_yaml_1_3
topology_template:
  node_templates:
    du:
      type: tosca.nodes.nfv.Vdu.Compute
      capabilities:
        virtual_compute:
          properties:
            virtual_cpu: { num_virtual_cpu: 1 }
            requested_additional_capabilities:
              rt:
                requested_additional_capability_name: rt
                target_performance_parameters: { cpu.rt_runtime_us: RUNTIME, cpu.rt_period_us: PERIOD }
";

#[test]
fn sol001_real_time_values_are_checked_and_an_invalid_period_is_the_only_error() {
    let sol = |rt: &str, p: &str| SOL001_RT.replace("RUNTIME", rt).replace("PERIOD", p);
    let ok = import_tosca(&sol("'2000'", "10000"), "t.yaml").unwrap();
    assert_eq!(reservation(&ok.spec.workloads[0]).runtime, Duration::from_millis(2));
    assert_eq!(
        errors(&sol("\"500000\"", "lots")),
        ["t.yaml:13:97: topology_template.node_templates.du.capabilities.virtual_compute.properties.requested_additional_capabilities.rt.target_performance_parameters.cpu.rt_period_us: `lots` is not a whole number of microseconds in 0..=4194304000"],
        "no `runtime exceeds the period` against the default period that would have stood in"
    );
    let e = errors(&sol("\"5000\"", "\"1000\""));
    assert_eq!(e.len(), 1);
    assert!(e[0].ends_with("target_performance_parameters.cpu.rt_runtime_us: runtime exceeds the period"), "{e:?}");
}

#[test]
fn a_vdu_compute_without_virtual_compute_is_an_error() {
    let text = "topology_template:\n  node_templates:\n    du:\n      type: tosca.nodes.nfv.Vdu.Compute\n      properties: { name: du }\n";
    assert_eq!(
        errors(text),
        ["t.yaml:4:7: topology_template.node_templates.du.capabilities.virtual_compute.properties: missing; a Vdu.Compute needs virtual_compute properties (virtual_cpu.num_virtual_cpu, virtual_memory.virtual_mem_size)"]
    );
}

#[test]
fn vdu_profile_bounds_are_checked() {
    let text = "topology_template:
  node_templates:
    du:
      type: tosca.nodes.nfv.Vdu.Compute
      properties:
        vdu_profile: { min_number_of_instances: 3, max_number_of_instances: 2 }
      capabilities:
        virtual_compute:
          properties:
            virtual_cpu: { num_virtual_cpu: 1 }
";
    assert_eq!(
        errors(text),
        ["t.yaml:6:77: topology_template.node_templates.du.properties.vdu_profile.max_number_of_instances: 2 is below min_number_of_instances 3"]
    );
}
