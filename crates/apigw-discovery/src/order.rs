//! The order kube-aggregator gives groups and versions in `/apis`: APIServices sorted by
//! groupPriorityMinimum (highest first, ties by name); a group sits where its first APIService
//! does; within a group, versions by versionPriority (highest first), ties by kube-aware
//! version order. The first version is the preferred one. Also the order kube-aggregator merges
//! the APIServices' OpenAPI specs in ([`spec_order`]).

use apigw_registry::ApiService;
use std::cmp::Ordering;
use std::collections::HashMap;

/// A version string parsed the way apimachinery's `CompareKubeAwareVersionStrings` does:
/// `v<major>[(alpha|beta)<minor>]`.
fn parse_kube(v: &str) -> Option<(u8, u64, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let major: u64 = rest[..digits].parse().ok()?;
    let rest = &rest[digits..];
    let (stage, minor) = if rest.is_empty() {
        return Some((2, major, 0));
    } else if let Some(m) = rest.strip_prefix("alpha") {
        (0, m)
    } else if let Some(m) = rest.strip_prefix("beta") {
        (1, m)
    } else {
        return None;
    };
    if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stage, major, minor.parse().ok()?))
}

/// `Greater` when `a` is the higher version: GA > beta > alpha, then major, then minor;
/// kube-like versions above all others, which compare in reverse string order (so that, sorted
/// highest first, they come out ascending).
pub fn compare_kube_aware(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    match (parse_kube(a), parse_kube(b)) {
        (None, None) => b.cmp(a),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some((sa, ma, na)), Some((sb, mb, nb))) => sa.cmp(&sb).then(ma.cmp(&mb)).then(na.cmp(&nb)),
    }
}

/// Groups in kube-aggregator's `/apis` order, as indexes into `items`: APIServices by
/// groupPriorityMinimum (highest first, ties by name), a group where its first APIService
/// sits, each group's members in [`version_order`] (preferred first). `svc` says which
/// APIService an item is, so renderers can order their own entries.
pub fn ordered_groups<'a, T>(
    items: &'a [T],
    svc: impl Fn(&'a T) -> &'a ApiService,
) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (svc(&items[a]), svc(&items[b]));
        b.group_priority_minimum
            .cmp(&a.group_priority_minimum)
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match at.get(svc(&items[i]).group.as_str()) {
            Some(&g) => groups[g].push(i),
            None => {
                at.insert(svc(&items[i]).group.as_str(), groups.len());
                groups.push(vec![i]);
            }
        }
    }
    for members in &mut groups {
        members.sort_by(|&a, &b| version_order(svc(&items[a]), svc(&items[b])));
    }
    groups
}

/// Sorts `items` as kube-aggregator orders the APIServices' OpenAPI v2 specs before merging
/// them: by their group's highest groupPriorityMinimum (higher first), then by name (upstream
/// compares two versions of one group by name alone). `svc` says which APIService an item is.
pub fn spec_order<T>(items: &mut [T], svc: impl Fn(&T) -> &ApiService) {
    let mut top: HashMap<String, i64> = HashMap::new();
    for s in items.iter().map(&svc) {
        let gpm = top
            .entry(s.group.clone())
            .or_insert(s.group_priority_minimum);
        *gpm = (*gpm).max(s.group_priority_minimum);
    }
    let priority = |s: &ApiService| top.get(s.group.as_str()).copied().unwrap_or(0);
    items.sort_by(|a, b| {
        let (a, b) = (svc(a), svc(b));
        let by_group = if a.group == b.group {
            Ordering::Equal
        } else {
            priority(b).cmp(&priority(a))
        };
        by_group.then_with(|| a.name.cmp(&b.name))
    });
}

/// Orders APIServices within a group: versionPriority (highest first), then kube-aware
/// version order.
pub fn version_order(a: &ApiService, b: &ApiService) -> Ordering {
    b.version_priority
        .cmp(&a.version_priority)
        .then_with(|| compare_kube_aware(&b.version, &a.version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn svc(group: &str, version: &str, gpm: i64, vp: i64) -> Arc<ApiService> {
        Arc::new(
            ApiService::from_value(json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": format!("{version}.{group}")},
                "spec": {"group": group, "version": version, "groupPriorityMinimum": gpm,
                         "versionPriority": vp, "service": {"name": "s", "namespace": "n"}}
            }))
            .unwrap(),
        )
    }

    fn order(services: &[Arc<ApiService>]) -> Vec<(String, Vec<String>)> {
        ordered_groups(services, |s| &**s)
            .into_iter()
            .map(|g| {
                (
                    services[g[0]].group.clone(),
                    g.iter().map(|&i| services[i].version.clone()).collect(),
                )
            })
            .collect()
    }

    fn g(name: &str, versions: &[&str]) -> (String, Vec<String>) {
        (
            name.into(),
            versions.iter().map(|v| v.to_string()).collect(),
        )
    }

    #[test]
    fn kube_aware_order() {
        let mut v = vec![
            "v11alpha2",
            "foo10",
            "v10",
            "v12alpha1",
            "v3beta1",
            "foo1",
            "v2",
            "v1beta1",
            "v10beta3",
            "v1",
            "v1alpha1",
            "v10alpha1",
            "v1alpha10",
            "v1beta2",
            "v0",
        ];
        v.sort_by(|a, b| compare_kube_aware(b, a));
        assert_eq!(
            v,
            [
                "v10",
                "v2",
                "v1",
                "v0",
                "v10beta3",
                "v3beta1",
                "v1beta2",
                "v1beta1",
                "v12alpha1",
                "v11alpha2",
                "v10alpha1",
                "v1alpha10",
                "v1alpha1",
                "foo1",
                "foo10"
            ]
        );
    }

    #[test]
    fn not_kube_like() {
        for v in [
            "v", "1", "v1gamma1", "v1alpha", "vbeta1", "v1beta1x", "V1", "v1.2", "v-1",
        ] {
            assert!(parse_kube(v).is_none(), "{v}");
        }
        assert!(parse_kube("v99999999999999999999999").is_none());
        assert_eq!(compare_kube_aware("abc", "abd"), Ordering::Greater);
    }

    #[test]
    fn seed_example() {
        let s = [
            svc("wardle.example.com", "v1alpha1", 1000, 15),
            svc("wardle.example.com", "v1", 2000, 20),
            svc("bloops.example.com", "v1", 1500, 10),
        ];
        assert_eq!(
            order(&s),
            [
                g("wardle.example.com", &["v1", "v1alpha1"]),
                g("bloops.example.com", &["v1"])
            ]
        );
    }

    #[test]
    fn group_placed_by_its_highest_apiservice() {
        let s = [
            svc("a.example.com", "v1", 100, 10),
            svc("b.example.com", "v1", 200, 10),
            svc("a.example.com", "v2", 300, 5),
        ];
        assert_eq!(
            order(&s),
            [
                g("a.example.com", &["v1", "v2"]),
                g("b.example.com", &["v1"])
            ]
        );
    }

    #[test]
    fn priority_ties_break_by_apiservice_name() {
        // v1.zeta... sorts after v1.alpha...; but v1.beta < v2.alpha by name ("v1." < "v2.").
        let s = [
            svc("zeta.example.com", "v1", 500, 10),
            svc("alpha.example.com", "v2", 500, 10),
            svc("beta.example.com", "v1", 500, 10),
        ];
        assert_eq!(
            order(&s),
            [
                g("beta.example.com", &["v1"]),
                g("zeta.example.com", &["v1"]),
                g("alpha.example.com", &["v2"])
            ]
        );
    }

    #[test]
    fn equal_version_priority_uses_kube_order() {
        let s = [
            svc("kav.example.com", "v1beta1", 800, 10),
            svc("kav.example.com", "v2alpha1", 800, 10),
            svc("kav.example.com", "v1", 800, 10),
            svc("kav.example.com", "v10beta3", 800, 10),
            svc("kav.example.com", "foo", 800, 10),
        ];
        assert_eq!(
            order(&s),
            [g(
                "kav.example.com",
                &["v1", "v10beta3", "v1beta1", "v2alpha1", "foo"]
            )]
        );
    }

    #[test]
    fn version_priority_beats_kube_order() {
        let s = [
            svc("p.example.com", "v1", 800, 1),
            svc("p.example.com", "v1alpha1", 800, 50),
            svc("p.example.com", "v2beta1", 800, 20),
        ];
        assert_eq!(
            order(&s),
            [g("p.example.com", &["v1alpha1", "v2beta1", "v1"])]
        );
    }

    #[test]
    fn many_groups_by_priority() {
        let s: Vec<_> = (1..=30)
            .map(|i| {
                svc(
                    &format!("g{i:02}.example.com"),
                    "v1",
                    (i * 37 % 31) as i64 + 1,
                    1,
                )
            })
            .collect();
        let got = order(&s);
        let prios: Vec<i64> = got
            .iter()
            .map(|(name, _)| {
                s.iter()
                    .find(|x| &x.group == name)
                    .unwrap()
                    .group_priority_minimum
            })
            .collect();
        assert!(prios.windows(2).all(|w| w[0] >= w[1]), "{prios:?}");
        assert_eq!(got.len(), 30);
    }

    #[test]
    fn specs_merge_in_group_priority_order_then_by_name() {
        let mut all = vec![
            svc("c.example.com", "v1", 100, 1),
            svc("b.example.com", "v1", 50, 1),
            svc("a.example.com", "v1", 100, 1),
            svc("b.example.com", "v2", 2000, 1),
        ];
        spec_order(&mut all, |s| &**s);
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "v1.b.example.com",
                "v2.b.example.com",
                "v1.a.example.com",
                "v1.c.example.com"
            ]
        );
    }
}
