//! CPU lists as the kernel writes them (`0-3,6,8-9`), and their serde forms: a spec may write a CPU
//! list either as such a string or as a YAML sequence of ids; we always serialize the string.

// The text formats themselves are the OS layer's (sysfs and procfs speak them); spec keeps the
// names its users import and adds the serde forms.
pub use rtslice_sys::cpulist::{format_cpu_list, format_cpu_mask, parse_cpu_list, CpuListError, MAX_CPU_ID};

/// serde helpers: `Vec<u32>` as a CPU-list string, accepting a string or a sequence when reading.
pub mod serde_cpus {
    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(cpus: &[u32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_cpu_list(cpus))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        d.deserialize_any(CpusVisitor)
    }

    pub(crate) struct CpusVisitor;
    impl<'de> de::Visitor<'de> for CpusVisitor {
        type Value = Vec<u32>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a CPU list such as \"0-3,6\" or a sequence of CPU ids")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u32>, E> {
            super::parse_cpu_list(v).map_err(E::custom)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<u32>, E> {
            u32::try_from(v).map(|c| vec![c]).map_err(|_| E::custom("CPU id too large"))
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u32>, A::Error> {
            let mut out = Vec::new();
            while let Some(c) = seq.next_element::<u32>()? {
                out.push(c);
            }
            out.sort_unstable();
            out.dedup();
            Ok(out)
        }
    }

    /// The same for `Option<Vec<u32>>`.
    pub mod option {
        use serde::{Deserializer, Serializer};
        pub fn serialize<S: Serializer>(cpus: &Option<Vec<u32>>, s: S) -> Result<S::Ok, S::Error> {
            match cpus {
                Some(c) => super::serialize(c, s),
                None => s.serialize_none(),
            }
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u32>>, D::Error> {
            super::deserialize(d).map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    // The text formats are tested where they live (rtslice-sys::cpulist); here only the serde forms.
    #[derive(serde::Deserialize, serde::Serialize, PartialEq, Debug)]
    struct Cpus(#[serde(with = "super::serde_cpus")] Vec<u32>);

    #[test]
    fn serde_forms_take_a_string_or_a_sequence_and_write_the_string() {
        let from_text: Cpus = serde_json::from_str("\"0-3,6\"").unwrap();
        let from_seq: Cpus = serde_json::from_str("[6, 0, 1, 2, 3, 3]").unwrap();
        assert_eq!(from_text, Cpus(vec![0, 1, 2, 3, 6]));
        assert_eq!(from_seq, from_text);
        assert_eq!(serde_json::to_string(&from_seq).unwrap(), "\"0-3,6\"");
        assert!(serde_json::from_str::<Cpus>("\"3-1\"").is_err());
    }
}

/// serde helpers: `Vec<Vec<u32>>` (groups of CPUs: cores, caches, NUMA nodes) as a sequence of
/// CPU-list strings.
pub mod serde_cpu_groups {
    use serde::{de, ser::SerializeSeq, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(groups: &[Vec<u32>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(groups.len()))?;
        for g in groups {
            seq.serialize_element(&super::format_cpu_list(g))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u32>>, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = Vec<Vec<u32>>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a sequence of CPU lists such as [\"0-15\", \"16-31\"]")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Vec<u32>>, A::Error> {
                let mut out = Vec::new();
                while let Some(g) = seq.next_element::<String>()? {
                    out.push(super::parse_cpu_list(&g).map_err(de::Error::custom)?);
                }
                Ok(out)
            }
        }
        d.deserialize_seq(V)
    }
}
