//! Identity headers set by a trusted front proxy (`--requestheader-*`), read only on
//! connections whose client certificate proved a front proxy.

use super::Identity;
use http::HeaderMap;

/// Which headers carry the identity. Defaults are kube-apiserver's usual settings.
#[derive(Debug, Clone)]
pub struct RequestHeaderConfig {
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
}

impl Default for RequestHeaderConfig {
    fn default() -> Self {
        Self {
            username_headers: vec!["X-Remote-User".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_prefixes: vec!["X-Remote-Extra-".into()],
        }
    }
}

impl RequestHeaderConfig {
    /// The identity in `headers`, or None when no username header has a value.
    pub fn identity(&self, headers: &HeaderMap) -> Option<Identity> {
        let user = self
            .username_headers
            .iter()
            .find_map(|h| headers.get(h.as_str())?.to_str().ok())
            .map(str::trim)
            .filter(|u| !u.is_empty())?;
        let groups = self
            .group_headers
            .iter()
            .flat_map(|h| headers.get_all(h.as_str()))
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect();
        let mut id = Identity::new(user, groups);
        for (name, value) in headers {
            let name = name.as_str();
            let Some(key) = self.extra_prefixes.iter().find_map(|p| {
                name.get(..p.len())
                    .filter(|head| head.eq_ignore_ascii_case(p))
                    .map(|_| &name[p.len()..])
            }) else {
                continue;
            };
            let Ok(value) = value.to_str() else { continue };
            let key = percent_encoding::percent_decode_str(&key.to_ascii_lowercase())
                .decode_utf8_lossy()
                .into_owned();
            id.extra.entry(key).or_default().push(value.to_string());
        }
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_user_groups_and_decoded_extra() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", "alice".parse().unwrap());
        h.append("x-remote-group", "a".parse().unwrap());
        h.append("x-remote-group", "b".parse().unwrap());
        h.append("x-remote-extra-scopes", "s1".parse().unwrap());
        h.append("x-remote-extra-scopes", "s2".parse().unwrap());
        h.append("x-remote-extra-example.com%2fteam", "t".parse().unwrap());
        let id = RequestHeaderConfig::default().identity(&h).unwrap();
        assert_eq!(id.user, "alice");
        assert_eq!(id.groups, vec!["a", "b"]);
        assert_eq!(id.extra["scopes"], vec!["s1", "s2"]);
        assert_eq!(id.extra["example.com/team"], vec!["t"]);
    }

    #[test]
    fn no_user_header_is_no_identity() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-group", "a".parse().unwrap());
        assert!(RequestHeaderConfig::default().identity(&h).is_none());
    }
}
