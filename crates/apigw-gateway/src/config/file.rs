//! The YAML file: the settings of [`super::sections`], camelCase, read into the same section
//! structs as the flags. The file is read in one pass: each key goes to the section that owns
//! it, and a key no section owns is an error listing every key (as `deny_unknown_fields`
//! would).

use super::sections::{
    AuditFlags, AuthnFlags, AuthzFlags, AvailabilityFlags, ClusterFlags, LimitsFlags, LogFlags,
    ProxyFlags, ServerFlags, ServingFlags,
};
use super::ConfigError;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::path::Path;
use std::sync::LazyLock;

/// Every key of the file, aliases after their key, section by section: the order an
/// unknown-key error lists them in.
static KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    [
        ServingFlags::KEYS,
        AuthnFlags::KEYS,
        ProxyFlags::KEYS,
        ClusterFlags::KEYS,
        AuthzFlags::KEYS,
        AvailabilityFlags::KEYS,
        ServerFlags::KEYS,
        LimitsFlags::KEYS,
        LogFlags::KEYS,
        AuditFlags::KEYS,
    ]
    .concat()
});

/// The YAML file: the same settings as [`super::Flags`], camelCase, by section.
#[derive(Debug, Default)]
pub(super) struct File {
    pub(super) serving: ServingFlags,
    pub(super) authn: AuthnFlags,
    pub(super) proxy: ProxyFlags,
    pub(super) cluster: ClusterFlags,
    pub(super) authz: AuthzFlags,
    pub(super) availability: AvailabilityFlags,
    pub(super) server: ServerFlags,
    pub(super) limits: LimitsFlags,
    pub(super) log: LogFlags,
    pub(super) audit: AuditFlags,
}

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
        let mut file = File::default();
        let mut seen: Vec<&'static str> = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            macro_rules! dispatch {
                ($($section:ident: $ty:ident),*) => {
                    $(if let Some(k) = $ty::canonical(&key) {
                        if seen.contains(&k) {
                            return Err(de::Error::duplicate_field(k));
                        }
                        seen.push(k);
                        file.$section.read(k, &mut map)?;
                        continue;
                    })*
                };
            }
            dispatch!(
                serving: ServingFlags,
                authn: AuthnFlags,
                proxy: ProxyFlags,
                cluster: ClusterFlags,
                authz: AuthzFlags,
                availability: AvailabilityFlags,
                server: ServerFlags,
                limits: LimitsFlags,
                log: LogFlags,
                audit: AuditFlags
            );
            return Err(de::Error::unknown_field(&key, &KEYS));
        }
        Ok(file)
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
