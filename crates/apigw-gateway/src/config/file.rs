//! The YAML file: the settings of [`Flags`], camelCase, read into the same section structs
//! as the flags. The file is read in one pass: each key goes to the section that owns it, and
//! a key no section owns is an error listing every key (as `deny_unknown_fields` would).

use super::{ConfigError, Flags};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::path::Path;
use std::sync::LazyLock;

/// Every key of the file, in the order an unknown-key error lists them.
static KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(Flags::keys);

/// The YAML file: the same settings as the flags, but `config`.
#[derive(Debug, Default)]
pub(super) struct File(pub(super) Flags);

impl<'de> Deserialize<'de> for File {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct("File", &KEYS, FileVisitor)
    }
}

struct FileVisitor;

/// A key of the file, as written.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("field identifier")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

impl<'de> Visitor<'de> for FileVisitor {
    type Value = File;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("struct File")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<File, A::Error> {
        let mut file = Flags::default();
        let mut seen: Vec<&'static str> = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            match file.read(&key, &mut map)? {
                Some(k) if seen.contains(&k) => return Err(de::Error::duplicate_field(k)),
                Some(k) => seen.push(k),
                None => return Err(de::Error::unknown_field(&key, &KEYS)),
            }
        }
        Ok(File(file))
    }
}

/// Reads and parses the file at `path`; an empty file sets nothing.
pub(super) fn read_file(path: &Path) -> Result<File, Vec<ConfigError>> {
    let at = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![ConfigError {
            at: at.clone(),
            message: e.to_string(),
        }]
    })?;
    apigw_core::yaml::from_str::<Option<File>>(&text)
        .map(Option::unwrap_or_default)
        .map_err(|e| {
            vec![ConfigError {
                at,
                message: e.to_string(),
            }]
        })
}
