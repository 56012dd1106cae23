//! Build facts for `/version`: the git commit and tree state of the checkout (empty when not
//! built from one, as Kubernetes reports them), the build date (`SOURCE_DATE_EPOCH` when set,
//! for reproducible builds, else now) and the compiler's version. Reruns only when the checked
//! out commit or `SOURCE_DATE_EPOCH` change, not on every build (so the tree state is the one
//! seen when the commit last changed).

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let git_dir = git(&["rev-parse", "--git-dir"]);
    if let Some(dir) = &git_dir {
        let dir = Path::new(dir);
        // In a linked worktree (`git worktree add`) HEAD is the worktree's own, while branches
        // and packed-refs live in the common directory: watching a path that does not exist
        // would make cargo rerun this script, and rebuild the crate, on every build.
        let common = git(&["rev-parse", "--git-common-dir"]);
        let common = common.as_deref().map_or(dir, Path::new);
        for path in [dir.join("HEAD"), common.join("packed-refs")] {
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
        // The branch HEAD names moves on every commit while HEAD itself stays the same.
        if let Ok(head) = std::fs::read_to_string(dir.join("HEAD")) {
            if let Some(reference) = head.strip_prefix("ref: ") {
                let path = common.join(reference.trim());
                // A branch only in packed-refs gets its own file on its next commit.
                let watched = if path.exists() {
                    path
                } else {
                    common.join("refs").join("heads")
                };
                println!("cargo:rerun-if-changed={}", watched.display());
            }
        }
    } else {
        // Not a checkout: nothing to watch but this script.
        println!("cargo:rerun-if-changed=build.rs");
    }
    let commit = git_dir
        .as_ref()
        .and_then(|_| git(&["rev-parse", "HEAD"]))
        .filter(|c| c.len() == 40 && c.chars().all(|ch| ch.is_ascii_hexdigit()))
        .unwrap_or_default();
    let tree_state = match git_dir
        .as_ref()
        .filter(|_| !commit.is_empty())
        .and_then(|_| git(&["--no-optional-locks", "status", "--porcelain"]))
    {
        Some(changes) if changes.is_empty() => "clean",
        Some(_) => "dirty",
        None => "",
    };
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    println!("cargo:rustc-env=APIGW_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=APIGW_GIT_TREE_STATE={tree_state}");
    println!("cargo:rustc-env=APIGW_BUILD_DATE={}", rfc3339(epoch));
    println!("cargo:rustc-env=APIGW_RUSTC_VERSION={rustc_version}");
}

/// `git args...` in the package directory: its trimmed output, None when git is missing or fails.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Seconds since the epoch as `2006-01-02T15:04:05Z` (UTC), the form Kubernetes' buildDate has.
fn rfc3339(epoch: i64) -> String {
    let days = epoch.div_euclid(86_400);
    let secs = epoch.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}
