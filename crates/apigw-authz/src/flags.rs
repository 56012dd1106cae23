//! Authorization's `serve` flags and file keys, read into [`AuthzSettings`].

use crate::{AuthzMode, AuthzSettings, LinkSettings};
use apigw_core::settings::{camel, list, Cx};
use std::path::PathBuf;

apigw_core::section! {
    /// [`AuthzSettings`].
    pub struct AuthzFlags {
        /// Authorizers in order (comma list): AlwaysAllow, AlwaysDeny, RBAC (objects from
        /// --rbac-policy-file), Webhook (SubjectAccessReview; cluster mode).
        #[arg(
            long,
            help_heading = "Authorization",
            value_delimiter = ',',
            display_order = 29
        )]
        pub authorization_mode: Vec<String> = "authorizationMode",
        /// kube's AuthorizationConfiguration file: the authorizers in order (RBAC, Webhook with
        /// matchConditions, AlwaysAllow, AlwaysDeny); reloaded when it changes. Not with
        /// --authorization-mode.
        #[arg(long, help_heading = "Authorization", display_order = 28)]
        pub authorization_config: Option<PathBuf> = "authorizationConfig",
        /// RBAC objects (Role, ClusterRole, RoleBinding, ClusterRoleBinding) for
        /// --authorization-mode=RBAC; reloaded when it changes.
        #[arg(long, help_heading = "Authorization", display_order = 30)]
        pub rbac_policy_file: Option<PathBuf> = "rbacPolicyFile",
        /// Deprecated: use --rbac-policy-file (kube-apiserver's flag of this name reads ABAC, not
        /// RBAC).
        #[arg(long, help_heading = "Authorization", display_order = 31)]
        pub authorization_policy_file: Option<PathBuf> = "authorizationPolicyFile",
    }
}

/// `--rbac-policy-file`, and its deprecated name (kube-apiserver's flag of that name reads
/// ABAC): one setting, given once in each place.
const RBAC: &str = "rbac-policy-file";
const RBAC_OLD: &str = "authorization-policy-file";

impl AuthzFlags {
    /// The settings; `cluster` says whether cluster mode is on, which `Webhook` needs.
    pub fn settings(self, cluster: bool, cx: &mut Cx) -> AuthzSettings {
        const CONFIG: &str = "authorization-config";
        let modes_given = !self.authorization_mode.is_empty();
        let config_file = cx.path(CONFIG, self.authorization_config);
        let mut modes = Vec::new();
        for name in list(self.authorization_mode) {
            match AuthzMode::from_flag(&name) {
                Ok(AuthzMode::Webhook) if !cluster => cx.problem(
                    "authorization-mode",
                    "Webhook (SubjectAccessReview) needs cluster mode: --kubeconfig or --cluster-mode"
                        .into(),
                ),
                Ok(mode) => modes.push(mode),
                Err(m) => cx.problem("authorization-mode", m),
            }
        }
        let links: Vec<LinkSettings> = match &config_file {
            Some(path) => {
                if modes_given {
                    cx.problem(
                        CONFIG,
                        "--authorization-config can not be specified when --authorization-mode or --authorization-webhook-* flags are defined".into(),
                    );
                }
                match crate::config::load(path) {
                    Ok(links) => links,
                    Err(e) => {
                        for problem in e.problems() {
                            cx.problem(CONFIG, problem);
                        }
                        Vec::new()
                    }
                }
            }
            None if modes.is_empty() => AuthzSettings::default().links,
            None => modes.into_iter().map(LinkSettings::from).collect(),
        };
        let policy_file = policy_file(self.rbac_policy_file, self.authorization_policy_file, cx);
        let settings = AuthzSettings {
            links,
            policy_file,
            config_file,
        };
        cx.problems(settings.problems());
        settings
    }

    /// Each flag with a default, by argument id, and the default as a user would write it.
    pub fn defaults() -> Vec<(&'static str, String)> {
        let links = AuthzSettings::default().links;
        let modes: Vec<&str> = links.iter().map(LinkSettings::kind).collect();
        vec![("authorization_mode", modes.join(","))]
    }
}

/// The RBAC policy file, given by its name or its deprecated one: a flag over the file, and
/// both names in one place a problem.
fn policy_file(new: Option<PathBuf>, old: Option<PathBuf>, cx: &mut Cx) -> Option<PathBuf> {
    let (new_in_file, old_in_file) = (cx.in_file(RBAC), cx.in_file(RBAC_OLD));
    if old.is_some() {
        if new.is_some() && new_in_file == old_in_file {
            let message = if new_in_file {
                format!(
                    "and {} (its deprecated name) are both set; keep only {}",
                    camel(RBAC_OLD),
                    camel(RBAC)
                )
            } else {
                format!("and --{RBAC_OLD} (its deprecated name) are both given; give only --{RBAC}")
            };
            cx.problem(RBAC, message);
        } else if old_in_file {
            let old = cx.name(RBAC_OLD);
            cx.warn(format!("{old} is deprecated; use {}", camel(RBAC)));
        } else {
            cx.warn(format!(
                "--{RBAC_OLD} is deprecated (kube-apiserver's flag of that name reads ABAC policy); use --{RBAC}"
            ));
        }
    }
    let (flag, path) = match (new, old) {
        (Some(_), Some(old)) if new_in_file && !old_in_file => (RBAC_OLD, old),
        (Some(new), _) => (RBAC, new),
        (None, Some(old)) => (RBAC_OLD, old),
        (None, None) => return None,
    };
    let path = cx.path(flag, Some(path))?;
    if !path.is_file() {
        cx.problem(flag, format!("{}: no such file", path.display()));
    }
    Some(path)
}
