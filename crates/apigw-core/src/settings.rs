//! Settings given as `serve` flags or in the YAML file: the [`section!`](crate::section) macro a
//! concern declares its flags with (each with its file key), and the merge context [`Cx`] the
//! concern reads its section into settings with. Flags win over the file field by field, which
//! the macro writes ([`Given`]); `Cx` knows which settings came from the file, so a problem
//! names the flag or the file and key, and a path from the file is taken relative to the file.

use crate::duration::parse_duration;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

#[doc(hidden)]
pub use serde::de::MapAccess;

/// One configuration problem: where (a flag, or file and field) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub at: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// Whether a setting was given: a value, a non-empty list, a switch turned on. A flag given
/// wins over the file's.
pub trait Given {
    fn given(&self) -> bool;
}

impl<T> Given for Option<T> {
    fn given(&self) -> bool {
        self.is_some()
    }
}

impl<T> Given for Vec<T> {
    fn given(&self) -> bool {
        !self.is_empty()
    }
}

impl Given for bool {
    fn given(&self) -> bool {
        *self
    }
}

/// Declares one section of settings: a clap `Args` struct whose fields also name their file key
/// (and its aliases), read a file value of their own type (or through `as` a function from the
/// file's form), and lay the flags given over the file's (`over`).
#[macro_export]
macro_rules! section {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_attr:meta])*
                pub $field:ident: $ty:ty = $key:literal $(| $alias:literal)* $(as $from_file:path)?,
            )*
        }
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Default, clap::Args)]
        pub struct $name {
            $($(#[$field_attr])* pub $field: $ty,)*
        }

        impl $name {
            /// This section's file keys, aliases after their key.
            pub const KEYS: &'static [&'static str] = &[$($key, $($alias,)*)*];

            /// The key `key` stands for, if this section owns it.
            pub fn canonical(key: &str) -> Option<&'static str> {
                match key {
                    $($key $(| $alias)* => Some($key),)*
                    _ => None,
                }
            }

            /// Reads the file's value of `key` (a canonical key of this section).
            pub fn read<'de, A: $crate::settings::MapAccess<'de>>(
                &mut self,
                key: &str,
                map: &mut A,
            ) -> Result<(), A::Error> {
                match key {
                    $($key => self.$field = $($from_file)?(map.next_value()?),)*
                    _ => {}
                }
                Ok(())
            }

            /// These flags over the file's `file`: each setting the flags do not give is the
            /// file's, and its key goes to `from_file`.
            pub fn over(mut self, file: Self, from_file: &mut Vec<&'static str>) -> Self {
                use $crate::settings::Given;
                $(
                    if !self.$field.given() && file.$field.given() {
                        self.$field = file.$field;
                        from_file.push($key);
                    }
                )*
                self
            }
        }
    };
}

/// `flag-name` as the file's key, `flagName`.
pub fn camel(flag: &str) -> String {
    let mut out = String::with_capacity(flag.len());
    let mut upper = false;
    for c in flag.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// `path` from the file, relative to the file's directory `base`: `config/../certs-dev/x.crt`
/// becomes `certs-dev/x.crt`, so messages name the path a user would type. Only when both
/// spellings reach the same place (through a symlinked directory, `..` goes elsewhere): the
/// same file, or for a file not there yet, the same directory.
pub fn in_dir(base: &Path, path: &Path) -> PathBuf {
    let joined = base.join(path);
    let mut clean = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir
                if matches!(clean.components().next_back(), Some(Component::Normal(_))) =>
            {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    let place = |p: &Path| {
        std::fs::canonicalize(p).ok().or_else(|| {
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
            std::fs::canonicalize(dir.unwrap_or(Path::new(".")))
                .ok()
                .map(|d| d.join(p.file_name().unwrap_or_default()))
        })
    };
    match (place(&joined), place(&clean)) {
        (Some(a), Some(b)) if a == b && !clean.as_os_str().is_empty() => clean,
        _ => joined,
    }
}

/// The non-blank entries of a list setting.
pub fn list(entries: Vec<String>) -> Vec<String> {
    entries
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .collect()
}

/// The merge context: where settings came from, and what reading them has found.
pub struct Cx<'a> {
    /// The file `--config` named, if any.
    file: Option<&'a Path>,
    /// The keys whose value came from the file.
    from_file: Vec<&'static str>,
    /// Missing files, reported first (after a missing serving pair).
    early: Vec<ConfigError>,
    /// Every other problem.
    later: Vec<ConfigError>,
    warnings: Vec<String>,
}

impl<'a> Cx<'a> {
    /// A context for settings read from the flags over `file` (if any), `from_file` naming the
    /// keys whose value came from the file.
    pub fn new(file: Option<&'a Path>, from_file: Vec<&'static str>) -> Self {
        Self {
            file,
            from_file,
            early: Vec::new(),
            later: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Whether `flag`'s value came from the file.
    pub fn in_file(&self, flag: &str) -> bool {
        self.file.is_some() && self.from_file.contains(&camel(flag).as_str())
    }

    /// Names a setting where it was given: `--flag-name` or `file.yaml: flagName`.
    pub fn name(&self, flag: &str) -> String {
        match (self.in_file(flag), self.file) {
            (true, Some(file)) => format!("{}: {}", file.display(), camel(flag)),
            _ => format!("--{flag}"),
        }
    }

    /// A problem with `flag`, named where it was given.
    pub fn problem(&mut self, flag: &str, message: String) {
        let at = self.name(flag);
        self.problem_at(at, message);
    }

    /// A problem at `at`, as written.
    pub fn problem_at(&mut self, at: String, message: String) {
        self.later.push(ConfigError { at, message });
    }

    /// Each of a section's `problems`, by flag name.
    pub fn problems(&mut self, problems: Vec<(&'static str, String)>) {
        for (flag, message) in problems {
            self.problem(flag, message);
        }
    }

    /// Something worth a warning but not an error (a deprecated flag or key).
    pub fn warn(&mut self, warning: String) {
        self.warnings.push(warning);
    }

    /// A path setting; from the file, relative to the file.
    pub fn path(&self, flag: &str, value: Option<PathBuf>) -> Option<PathBuf> {
        let base = self.file.and_then(Path::parent);
        match (value, base) {
            (Some(p), Some(base)) if self.in_file(flag) => Some(in_dir(base, &p)),
            (value, _) => value,
        }
    }

    /// A file setting, reported with the first problems when it names no file.
    pub fn file(&mut self, flag: &str, value: Option<PathBuf>) -> Option<PathBuf> {
        let path = self.path(flag, value);
        if let Some(missing) = self.missing(flag, &path) {
            self.early.push(missing);
        }
        path
    }

    /// A file setting, reported with the other problems when it names no file.
    pub fn later_file(&mut self, flag: &str, value: Option<PathBuf>) -> Option<PathBuf> {
        let path = self.path(flag, value);
        if let Some(missing) = self.missing(flag, &path) {
            self.later.push(missing);
        }
        path
    }

    fn missing(&self, flag: &str, path: &Option<PathBuf>) -> Option<ConfigError> {
        let path = path.as_ref().filter(|p| !p.is_file())?;
        Some(ConfigError {
            at: self.name(flag),
            message: format!("{}: no such file", path.display()),
        })
    }

    /// A duration setting, `default` when not given or not a duration (a problem then).
    pub fn duration(&mut self, flag: &str, value: Option<String>, default: Duration) -> Duration {
        let Some(text) = value else {
            return default;
        };
        parse_duration(&text).unwrap_or_else(|m| {
            self.problem(flag, m);
            default
        })
    }

    /// The problems found, missing files first, and the warnings.
    pub fn finish(mut self) -> (Vec<ConfigError>, Vec<String>) {
        self.early.append(&mut self.later);
        (self.early, self.warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_and_each_setting_from_the_file_is_named_there() {
        crate::section! {
            /// A section for the test.
            pub struct Probe {
                /// A path.
                #[arg(long)]
                pub some_file: Option<PathBuf> = "someFile",
                /// A list.
                #[arg(long)]
                pub names: Vec<String> = "names" | "oldNames",
                /// A switch.
                #[arg(long)]
                pub on: bool = "on",
            }
        }
        let flags = Probe {
            names: vec!["flag".into()],
            ..Probe::default()
        };
        let file = Probe {
            some_file: Some("x.pem".into()),
            names: vec!["file".into()],
            on: true,
        };
        let mut from_file = Vec::new();
        let merged = flags.over(file, &mut from_file);
        assert_eq!(merged.names, ["flag"]);
        assert!(merged.on);
        assert_eq!(from_file, ["someFile", "on"]);
        assert_eq!(Probe::canonical("oldNames"), Some("names"));
        assert_eq!(Probe::KEYS, ["someFile", "names", "oldNames", "on"]);

        // The file's form: each key into the section, an alias as its key.
        struct FromFile(Probe);
        impl<'de> serde::Deserialize<'de> for FromFile {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = FromFile;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("a map")
                    }
                    fn visit_map<A: MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<FromFile, A::Error> {
                        let mut probe = Probe::default();
                        while let Some(key) = map.next_key::<String>()? {
                            let key = Probe::canonical(&key).expect("a key of the section");
                            probe.read(key, &mut map)?;
                        }
                        Ok(FromFile(probe))
                    }
                }
                d.deserialize_map(V)
            }
        }
        let read = crate::yaml::from_str::<FromFile>("someFile: a.pem\noldNames: [x, y]\n")
            .expect("the section's keys");
        assert_eq!(read.0.some_file, Some(PathBuf::from("a.pem")));
        assert_eq!(read.0.names, ["x", "y"]);

        let config = Path::new("/etc/apigw/config.yaml");
        let mut cx = Cx::new(Some(config), from_file);
        assert_eq!(
            cx.path("some-file", merged.some_file),
            Some(PathBuf::from("/etc/apigw/x.pem"))
        );
        assert_eq!(cx.name("names"), "--names");
        cx.problem("on", "wrong".into());
        let (problems, _) = cx.finish();
        assert_eq!(problems[0].to_string(), "/etc/apigw/config.yaml: on: wrong");
    }
}
