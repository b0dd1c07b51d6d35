//! JSON Schema of the spec (feature `schema`), derived from the types in `types.rs` with schemars.
//!
//! The types carry serde attributes that mirror the YAML keys, and schemars reads those, so field
//! names, optionality, enums and tagging come from the types themselves. The spec is decoded by a
//! located reader rather than serde, and some scalars are text with units in YAML (`2ms`, `0-3`,
//! `95%`, `4096MB`): the types below describe those textual forms, and the type fields that hold
//! them name one with `schemars(with = ...)`. The schema is for editors and CI; `rtslice plan` stays
//! the full check (ranges that depend on other fields, such as runtime ≤ period, are not expressible).

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};

/// The spec's JSON Schema (draft 2020-12), as `rtslice generate schema` prints it.
pub fn spec_schema() -> Schema {
    let mut schema = schemars::schema_for!(crate::Spec);
    schema.insert("$id".into(), "https://rtslice.dev/schema/rtslice-v1.json".into());
    schema.insert("title".into(), "rtslice spec (apiVersion: rtslice/v1)".into());
    schema
}

/// A duration with a unit: `1.4ms`, `100us`, `100µs`, `250ns`, `2s`, `1m`, `1h`.
pub struct DurationText;

impl JsonSchema for DurationText {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A duration with a unit: 1.4ms, 100us, 100µs, 250ns, 2s, 1m, 1h",
            "type": "string",
            "pattern": "^\\s*[0-9.]+([eE][-+]?[0-9]+)?\\s*(ns|us|µs|μs|ms|s|m|min|h)\\s*$"
        })
    }
}

/// A CPU list as the kernel writes it (`0-3,8`), one CPU id, or a list of ids.
pub struct CpuListText;

const CPU_LIST_PATTERN: &str = "^\\s*([0-9]+(-[0-9]+)?)(\\s*,\\s*[0-9]+(-[0-9]+)?)*\\s*$";

impl JsonSchema for CpuListText {
    fn schema_name() -> Cow<'static, str> {
        "CpuList".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "CPUs: a kernel CPU list (\"0-3,8\"), one CPU id, or a list of ids",
            "anyOf": [
                { "type": "string", "pattern": CPU_LIST_PATTERN },
                { "type": "integer", "minimum": 0 },
                { "type": "array", "items": { "type": "integer", "minimum": 0 } }
            ]
        })
    }
}

/// A byte size: `4096`, `512K`, `4096MB`, `1GiB`.
pub struct BytesText;

impl JsonSchema for BytesText {
    fn schema_name() -> Cow<'static, str> {
        "Bytes".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A byte size: 4096, 512K, 4096MB, 1GiB (K/M/G/T are powers of 1024)",
            "anyOf": [
                { "type": "integer", "minimum": 0 },
                { "type": "string", "pattern": "^\\s*[0-9.]+\\s*([kKmMgGtT]([iI]?[bB])?|[bB])?\\s*$" }
            ]
        })
    }
}

/// A fraction of one CPU: `0.95` or `95%`.
pub struct FractionText;

impl JsonSchema for FractionText {
    fn schema_name() -> Cow<'static, str> {
        "Fraction".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A fraction of one CPU: 0.95 or 95%",
            "anyOf": [
                { "type": "number", "minimum": 0, "maximum": 1 },
                { "type": "string", "pattern": "^\\s*[0-9.]+\\s*%?\\s*$" }
            ]
        })
    }
}

impl JsonSchema for crate::NodeCpus {
    fn schema_name() -> Cow<'static, str> {
        "NodeCpus".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let list = generator.subschema_for::<CpuListText>();
        json_schema!({
            "description": "The node's CPUs: `discovered` (the online CPUs of the host planned for) or a CPU list",
            "anyOf": [ { "const": "discovered" }, list ]
        })
    }
}

impl JsonSchema for crate::Slots {
    fn schema_name() -> Cow<'static, str> {
        "Slots".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let list = generator.subschema_for::<CpuListText>();
        json_schema!({
            "description": "`any`, or indices into the workload's sorted CPU set (slot 0 is its lowest CPU)",
            "anyOf": [ { "const": "any" }, list ]
        })
    }
}

impl JsonSchema for crate::Smt {
    fn schema_name() -> Cow<'static, str> {
        "Smt".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let list = generator.subschema_for::<CpuListText>();
        json_schema!({
            "description": "SMT layout: `none`, `+N` (CPU n and CPU n+N are one core), or one CPU list per core",
            "anyOf": [
                { "const": "none" },
                { "type": "string", "pattern": "^\\s*\\+[0-9]+\\s*$" },
                { "type": "array", "items": list }
            ]
        })
    }
}

/// A PCI address as sysfs and `lspci -D` print it.
pub struct PciAddressText;

impl JsonSchema for PciAddressText {
    fn schema_name() -> Cow<'static, str> {
        "PciAddress".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A PCI address DOMAIN:BUS:DEVICE.FUNCTION as `lspci -D` prints it (0000:3b:02.1); BUS:DEVICE.FUNCTION means domain 0",
            "type": "string",
            "pattern": "^\\s*([0-9a-fA-F]{1,8}:)?[0-9a-fA-F]{1,2}:[01]?[0-9a-fA-F]\\.[0-7]\\s*$"
        })
    }
}

impl JsonSchema for crate::DeviceIrqs {
    fn schema_name() -> Cow<'static, str> {
        "DeviceIrqs".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let slots = generator.subschema_for::<crate::Slots>();
        json_schema!({
            "description": "Where the device's IRQs go: `any` (the workload's CPUs, default), slots of the workload's CPUs, or `keep` (left alone)",
            "anyOf": [ { "const": "keep" }, slots ]
        })
    }
}
