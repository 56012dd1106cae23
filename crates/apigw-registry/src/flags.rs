//! The registry's `serve` flag and file key: the APIService manifest directory.

use apigw_core::settings::Cx;
use std::path::PathBuf;

apigw_core::section! {
    /// The APIService manifest directory ([`crate::ManifestDir`]).
    pub struct RegistryFlags {
        /// Directory of APIService manifests, watched for changes.
        #[arg(long, help_heading = "Backends", display_order = 16)]
        pub apiservice_dir: Option<PathBuf> = "apiserviceDir",
    }
}

impl RegistryFlags {
    /// The manifest directory, a problem when it is not one.
    pub fn settings(self, cx: &mut Cx) -> Option<PathBuf> {
        const DIR: &str = "apiservice-dir";
        let dir = cx.path(DIR, self.apiservice_dir)?;
        if !dir.is_dir() {
            cx.problem(DIR, format!("{}: no such directory", dir.display()));
        }
        Some(dir)
    }

    /// No default: without a directory (and without cluster mode) no APIService is served.
    pub fn defaults() -> Vec<(&'static str, String)> {
        Vec::new()
    }
}
