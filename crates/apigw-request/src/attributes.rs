//! Request attributes as kube-apiserver derives them from a path and method (its
//! `RequestInfo`): resource requests under `/api/<v>` and `/apis/<g>/<v>` get a verb, API group
//! and version, namespace, resource, subresource and name; everything else is a non-resource
//! request whose verb is the lowercase method.

use http::Method;

/// What a request asks to do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    pub resource_request: bool,
    pub verb: String,
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub path: String,
    /// The `labelSelector` and `fieldSelector` of a list, watch or deletecollection, decoded,
    /// as kube's `AuthorizeWithSelectors` gives them to authorizers.
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
}

impl Attributes {
    /// Derives the attributes of `method` on `path` with `query` (without the `?`).
    pub fn from_request(method: &Method, path: &str, query: Option<&str>) -> Self {
        Self::from_segments(method, path, &segments(path), query)
    }

    /// As [`Self::from_request`], from the path's [`segments`], split once by the caller.
    pub fn from_segments(
        method: &Method,
        path: &str,
        segments: &[&str],
        query: Option<&str>,
    ) -> Self {
        let mut out = Self {
            path: path.to_string(),
            ..Self::default()
        };
        out.verb = match out.fill(method, segments, query) {
            Some(verb) => verb.to_string(),
            None => method.as_str().to_ascii_lowercase(),
        };
        out
    }

    /// Everything but the verb; returns the verb of a resource request with a known method
    /// (None: the lowercase method).
    fn fill(
        &mut self,
        method: &Method,
        segments: &[&str],
        query: Option<&str>,
    ) -> Option<&'static str> {
        // Empty segments (a trailing slash; the path checks refuse any other) are not read.
        let mut parts: Vec<&str> = Vec::with_capacity(segments.len());
        parts.extend(segments.iter().copied().filter(|p| !p.is_empty()));
        let rest = match parts.as_slice() {
            ["api", version, rest @ ..] => {
                self.version = (*version).to_string();
                rest
            }
            ["apis", group, version, rest @ ..] => {
                self.group = (*group).to_string();
                self.version = (*version).to_string();
                rest
            }
            _ => return None,
        };
        let (watch_prefix, rest) = match rest {
            ["watch", rest @ ..] => (true, rest),
            _ => (false, rest),
        };
        let rest: &[&str] = match rest {
            ["namespaces", ns, tail @ ..] if !tail.is_empty() => {
                self.namespace = (*ns).to_string();
                tail
            }
            ["namespaces", ns] => {
                self.namespace = (*ns).to_string();
                rest
            }
            _ => rest,
        };
        if rest.is_empty() {
            // `/apis/<g>/<v>`: discovery of a group version, a non-resource request.
            return None;
        }
        self.resource_request = true;
        self.resource = rest[0].to_string();
        self.name = rest.get(1).map(|s| s.to_string()).unwrap_or_default();
        self.subresource = rest.get(2).map(|s| s.to_string()).unwrap_or_default();
        let watch = watch_prefix || watch_requested(query);
        let verb = self.verb_of(method, watch);
        if matches!(verb, Some("list" | "watch" | "deletecollection")) {
            self.label_selector = query_value(query, "labelSelector");
            self.field_selector = query_value(query, "fieldSelector");
        }
        // A list or watch of one name by field selector names it, as kube's RequestInfo does
        // (RBAC's resourceNames then apply).
        if matches!(verb, Some("list" | "watch")) && self.name.is_empty() {
            if let Some(name) = self.field_selector.as_deref().and_then(exact_name) {
                self.name = name;
            }
        }
        verb
    }

    /// The verb of a resource request with `method`.
    fn verb_of(&self, method: &Method, watch: bool) -> Option<&'static str> {
        match *method {
            Method::GET | Method::HEAD if watch => Some("watch"),
            Method::GET | Method::HEAD if self.name.is_empty() => Some("list"),
            Method::GET | Method::HEAD => Some("get"),
            Method::POST => Some("create"),
            Method::PUT => Some("update"),
            Method::PATCH => Some("patch"),
            Method::DELETE if self.name.is_empty() => Some("deletecollection"),
            Method::DELETE => Some("delete"),
            _ => None,
        }
    }

    /// `resource/subresource`, as authorization and metrics name it.
    pub fn full_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The segments of `path` after its leading `/`, empty ones kept (`/apis/` is `["apis", ""]`):
/// the one split of a request's path, read by its attributes and by its route.
pub fn segments(path: &str) -> Vec<&str> {
    // Room for the usual depth up front: one allocation, no regrowth.
    let mut segments = Vec::with_capacity(8);
    segments.extend(path.strip_prefix('/').unwrap_or(path).split('/'));
    segments
}

/// The name a field selector requires exactly (`metadata.name=x` or `==`, alone or among
/// other terms), when it is a valid path segment.
fn exact_name(selector: &str) -> Option<String> {
    let names: Vec<&str> = selector
        .split(',')
        .filter_map(|term| {
            let term = term.trim();
            let value = term
                .strip_prefix("metadata.name==")
                .or_else(|| term.strip_prefix("metadata.name="))?;
            Some(value.trim())
        })
        .collect();
    match names.as_slice() {
        [name] if !matches!(*name, "" | "." | "..") && !name.contains(['/', '%', '\\']) => {
            Some(name.to_string())
        }
        _ => None,
    }
}

/// The first value of `key` in `query`, decoded as Go's `url.ParseQuery` decodes it (`+` is
/// a space); None when absent or not UTF-8 once decoded.
pub fn query_value(query: Option<&str>, key: &str) -> Option<String> {
    let value = query?
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?;
    let spaced = value.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|v| v.into_owned())
}

/// True when the query asks for a watch (`watch=true`, `watch=1`, `watch=True` or bare `watch`).
fn watch_requested(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True" | "watch"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(method: Method, path: &str, query: Option<&str>) -> Attributes {
        Attributes::from_request(&method, path, query)
    }

    #[test]
    fn resource_requests() {
        let x = a(
            Method::GET,
            "/apis/wardle.example.com/v1alpha1/namespaces/ns/flunders",
            None,
        );
        assert!(x.resource_request);
        assert_eq!(
            (
                x.verb.as_str(),
                x.group.as_str(),
                x.namespace.as_str(),
                x.resource.as_str()
            ),
            ("list", "wardle.example.com", "ns", "flunders")
        );
        let x = a(
            Method::GET,
            "/apis/g/v1/namespaces/ns/flunders",
            Some("watch=1&x=y"),
        );
        assert_eq!(x.verb, "watch");
        let x = a(
            Method::GET,
            "/apis/g/v1/watch/namespaces/ns/flunders/f",
            None,
        );
        assert_eq!((x.verb.as_str(), x.name.as_str()), ("watch", "f"));
        let x = a(
            Method::POST,
            "/apis/g/v1/namespaces/ns/flunders/f/exec",
            None,
        );
        assert_eq!(
            (x.verb.as_str(), x.name.as_str(), x.subresource.as_str()),
            ("create", "f", "exec")
        );
        assert_eq!(x.full_resource(), "flunders/exec");
        let x = a(Method::DELETE, "/apis/g/v1/flunders", None);
        assert_eq!(
            (x.verb.as_str(), x.namespace.as_str()),
            ("deletecollection", "")
        );
        let x = a(Method::GET, "/api/v1/namespaces/ns", None);
        assert_eq!(
            (x.resource.as_str(), x.name.as_str(), x.namespace.as_str()),
            ("namespaces", "ns", "ns")
        );
        let x = a(
            Method::PATCH,
            "/apis/apiregistration.k8s.io/v1/apiservices/v1.x",
            None,
        );
        assert_eq!((x.verb.as_str(), x.name.as_str()), ("patch", "v1.x"));
    }

    #[test]
    fn non_resource_requests() {
        for p in [
            "/apis",
            "/apis/g",
            "/apis/g/v1",
            "/healthz",
            "/openapi/v2",
            "/",
        ] {
            let x = a(Method::GET, p, None);
            assert!(!x.resource_request, "{p}");
            assert_eq!(x.verb, "get");
        }
        assert_eq!(a(Method::POST, "/foo", None).verb, "post");
    }

    /// As kube's RequestInfo: a list or watch whose field selector requires one
    /// `metadata.name` is about that name; the selectors of a list, watch or deletecollection
    /// are kept, decoded.
    #[test]
    fn selectors_and_a_name_by_field_selector() {
        let things = "/apis/g/v1/namespaces/n/things";
        let x = a(
            Method::GET,
            things,
            Some("fieldSelector=metadata.name%3Dx%2Cstatus.phase%3DUp&labelSelector=app+in+(a)"),
        );
        assert_eq!((x.verb.as_str(), x.name.as_str()), ("list", "x"));
        assert_eq!(
            x.field_selector.as_deref(),
            Some("metadata.name=x,status.phase=Up")
        );
        assert_eq!(x.label_selector.as_deref(), Some("app in (a)"));
        let w = a(
            Method::GET,
            things,
            Some("watch=1&fieldSelector=metadata.name%3D%3Dy"),
        );
        assert_eq!((w.verb.as_str(), w.name.as_str()), ("watch", "y"));
        for q in [
            "fieldSelector=metadata.name%3D..",
            "fieldSelector=metadata.name!%3Dx",
        ] {
            assert_eq!(a(Method::GET, things, Some(q)).name, "", "{q}");
        }
        let get = a(
            Method::GET,
            &format!("{things}/z"),
            Some("fieldSelector=metadata.name%3Dx"),
        );
        assert_eq!(
            (get.name.as_str(), get.field_selector.as_deref()),
            ("z", None)
        );
        let dc = a(Method::DELETE, things, Some("labelSelector=app%3Dweb"));
        assert_eq!(dc.verb, "deletecollection");
        assert_eq!(dc.label_selector.as_deref(), Some("app=web"));
    }
}
