//! The identity-header policy: which request headers carry an identity. Built once from the
//! `--requestheader-*` settings (`apigw_authn::AuthnSettings::identity_headers`) and shared: authentication reads a trusted front proxy's
//! identity with it ([`IdentityHeaders::identity`]), and the proxy strips, with the same
//! policy, every header a client could use to speak for someone else
//! ([`IdentityHeaders::is_identity`]) before it sets the gateway's own.

use crate::Identity;
use http::{HeaderMap, HeaderName};

/// The configured front-proxy header names and prefixes, and the standard identity headers.
/// The default configures none: it reads no identity and strips only the standard headers.
#[derive(Debug, Clone, Default)]
pub struct IdentityHeaders {
    /// Username headers, in the configured order; names that are no header name are left out
    /// (no request could carry them).
    users: Vec<HeaderName>,
    groups: Vec<HeaderName>,
    /// Extra-header prefixes, lowercase, read as configured otherwise.
    extra_prefixes: Vec<String>,
    /// Every configured name, and the prefixes, as stripping compares them: lowercase, `_`
    /// read as `-`, empty entries left out (an empty prefix would match every header).
    strip_names: Vec<String>,
    strip_prefixes: Vec<String>,
}

impl IdentityHeaders {
    /// The policy for `--requestheader-username-headers`, `-group-headers` and
    /// `-extra-headers-prefix`.
    pub fn new<S: AsRef<str>>(users: &[S], groups: &[S], extra_prefixes: &[S]) -> Self {
        let names = |list: &[S]| -> Vec<HeaderName> {
            list.iter()
                .filter_map(|h| HeaderName::from_bytes(h.as_ref().as_bytes()).ok())
                .collect()
        };
        Self {
            users: names(users),
            groups: names(groups),
            extra_prefixes: extra_prefixes
                .iter()
                .map(|p| p.as_ref().to_ascii_lowercase())
                .collect(),
            strip_names: normalised(users.iter().chain(groups)),
            strip_prefixes: normalised(extra_prefixes),
        }
    }

    /// The identity a front proxy put in `headers`, or None when no username header has a
    /// value. Extra keys are lowercased and percent-decoded.
    pub fn identity(&self, headers: &HeaderMap) -> Option<Identity> {
        let user = self
            .users
            .iter()
            .find_map(|h| headers.get(h)?.to_str().ok())
            .map(str::trim)
            .filter(|u| !u.is_empty())?;
        let groups = self
            .groups
            .iter()
            .flat_map(|h| headers.get_all(h))
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect();
        let mut id = Identity::new(user, groups);
        for (name, value) in headers {
            let name = name.as_str();
            let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|p| name.strip_prefix(p.as_str()))
            else {
                continue;
            };
            let Ok(value) = value.to_str() else { continue };
            let key = percent_encoding::percent_decode_str(key)
                .decode_utf8_lossy()
                .into_owned();
            id.extra.entry(key).or_default().push(value.to_string());
        }
        Some(id)
    }

    /// True for headers a client must never pass to a backend: credentials, impersonation,
    /// any `X-Remote-*`, and every configured name or name under a configured prefix (as
    /// kube-apiserver clears them after authentication, whatever authenticated the request).
    /// `name` is lowercase, as `HeaderName`s are; `_` is read as `-`, since CGI-style
    /// servers (WSGI, Rack, PHP) map both to the same variable.
    pub fn is_identity(&self, name: &str) -> bool {
        let dashed;
        let name = if name.contains('_') {
            dashed = name.replace('_', "-");
            dashed.as_str()
        } else {
            name
        };
        name == "authorization"
            || name == "proxy-authorization"
            || name.starts_with("impersonate-")
            || name.starts_with("x-remote-")
            || self.strip_names.iter().any(|n| n == name)
            || self.strip_prefixes.iter().any(|p| name.starts_with(p))
    }
}

/// Lowercase with `_` read as `-`, trimmed, empty entries left out.
fn normalised<S: AsRef<str>>(list: impl IntoIterator<Item = S>) -> Vec<String> {
    list.into_iter()
        .map(|h| h.as_ref().trim().to_ascii_lowercase().replace('_', "-"))
        .filter(|h| !h.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kube_defaults() -> IdentityHeaders {
        IdentityHeaders::new(
            &["X-Remote-User"],
            &["X-Remote-Group"],
            &["X-Remote-Extra-"],
        )
    }

    #[test]
    fn reads_user_groups_and_decoded_extra() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", "alice".parse().unwrap());
        h.append("x-remote-group", "a".parse().unwrap());
        h.append("x-remote-group", "b".parse().unwrap());
        h.append("x-remote-extra-scopes", "s1".parse().unwrap());
        h.append("x-remote-extra-scopes", "s2".parse().unwrap());
        h.append("x-remote-extra-example.com%2fteam", "t".parse().unwrap());
        let id = kube_defaults().identity(&h).unwrap();
        assert_eq!(id.user, "alice");
        assert_eq!(id.groups, vec!["a", "b"]);
        assert_eq!(id.extra["scopes"], vec!["s1", "s2"]);
        assert_eq!(id.extra["example.com/team"], vec!["t"]);
    }

    #[test]
    fn no_user_header_is_no_identity() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-group", "a".parse().unwrap());
        assert!(kube_defaults().identity(&h).is_none());
        h.insert("x-remote-user", "alice".parse().unwrap());
        assert!(IdentityHeaders::default().identity(&h).is_none());
    }

    #[test]
    fn reads_and_strips_the_same_configured_names_in_any_case() {
        let policy = IdentityHeaders::new(
            &["X-Custom-User", "Other-User"],
            &["x-custom-GROUP"],
            &["X-Custom-Extra-"],
        );
        let mut h = HeaderMap::new();
        h.insert("OTHER-user", "bob".parse().unwrap());
        h.append("X-CUSTOM-group", "g".parse().unwrap());
        h.append("x-Custom-Extra-Team", "t".parse().unwrap());
        let id = policy.identity(&h).unwrap();
        assert_eq!(id.user, "bob");
        assert_eq!(id.groups, vec!["g"]);
        assert_eq!(id.extra["team"], vec!["t"]);
        // Every name read is a name stripped, in the lowercase form header maps keep.
        for name in h.keys() {
            assert!(policy.is_identity(name.as_str()), "{name} not stripped");
        }
        for name in [
            "x-custom-user",
            "x_custom_user",
            "x-custom-extra-any",
            "x_custom_group",
        ] {
            assert!(policy.is_identity(name), "{name}");
        }
        assert!(!policy.is_identity("x-custom-extra"));
        assert!(!policy.is_identity("accept"));
        assert!(!kube_defaults().is_identity("x-custom-user"));
    }

    #[test]
    fn standard_headers_are_identity_headers_without_configuration() {
        let none = IdentityHeaders::default();
        for name in [
            "authorization",
            "proxy-authorization",
            "proxy_authorization",
            "impersonate-user",
            "impersonate_extra_x",
            "x-remote-anything",
            "x_remote_user",
        ] {
            assert!(none.is_identity(name), "{name}");
        }
        assert!(!none.is_identity("x-forwarded-for"));
    }

    #[test]
    fn empty_configured_entries_match_nothing() {
        let policy = IdentityHeaders::new(&["", " "], &[], &[""]);
        assert!(!policy.is_identity("accept"));
    }
}
