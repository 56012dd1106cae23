//! FlowSchemas and PriorityLevelConfigurations as users write them for a cluster
//! (`flowcontrol.apiserver.k8s.io/v1`, YAML or JSON, several documents or a `List` in a file),
//! read from `--flowcontrol-config` (a file, or a directory of `*.yaml`, `*.yml`, `*.json`) into
//! [`super::config`]'s objects, with upstream's defaults. They are laid over the built-in
//! configuration by name: a file's object replaces the built-in one of its name, or adds to it.

use super::config::{
    Distinguisher, FlowSchema, LevelKind, LimitResponse, NonResourceRule, PolicyRules,
    PriorityLevel, ResourceRule, Seats, Subject,
};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

const API_VERSION: &str = "flowcontrol.apiserver.k8s.io/v1";

/// The objects of a configuration.
#[derive(Debug, Default, Clone)]
pub struct Objects {
    pub levels: Vec<PriorityLevel>,
    pub schemas: Vec<FlowSchema>,
}

/// The files `path` names: itself, or a directory's manifest files.
pub fn files(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        apigw_core::yaml::manifest_files(path).unwrap_or_default()
    } else {
        vec![path.to_path_buf()]
    }
}

/// Reads every object of `path`; every problem, each naming its file and object.
pub fn load(path: &Path) -> Result<Objects, Vec<String>> {
    let mut out = Objects::default();
    let mut problems = Vec::new();
    for file in files(path) {
        let shown = file.display().to_string();
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) => {
                problems.push(format!("{shown}: {e}"));
                continue;
            }
        };
        match parse(&text) {
            Ok(objects) => {
                out.levels.extend(objects.levels);
                out.schemas.extend(objects.schemas);
            }
            Err(found) => problems.extend(found.into_iter().map(|p| format!("{shown}: {p}"))),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// The objects of one file's text.
pub fn parse(text: &str) -> Result<Objects, Vec<String>> {
    let docs = apigw_core::yaml::documents(text).map_err(|e| vec![e.to_string()])?;
    let mut items = Vec::new();
    for doc in docs {
        match doc["kind"].as_str() {
            Some("List") => items.extend(doc["items"].as_array().cloned().unwrap_or_default()),
            _ => items.push(doc),
        }
    }
    parse_items(items, false)
}

/// The objects of `items` (each a FlowSchema or a PriorityLevelConfiguration, as JSON).
/// `mandatory`: `exempt` and `catch-all` may be among them (a cluster's, which
/// kube-apiserver maintains); a file may not change them.
pub fn parse_items(items: Vec<Value>, mandatory: bool) -> Result<Objects, Vec<String>> {
    let mut out = Objects::default();
    let mut problems = Vec::new();
    for item in items {
        let name = item["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let what = format!("{} {name}", item["kind"].as_str().unwrap_or("object"));
        if item["apiVersion"] != API_VERSION {
            problems.push(format!("{what}: apiVersion: must be {API_VERSION}"));
            continue;
        }
        if name.is_empty() {
            problems.push(format!("{what}: metadata.name: Required value"));
            continue;
        }
        // The mandatory objects are kube-apiserver's to keep: it overwrites any change to them.
        if !mandatory && (name == super::config::EXEMPT || name == super::config::CATCH_ALL) {
            problems.push(format!(
                "{what}: metadata.name: {name:?} is a mandatory object, kept as kube-apiserver defines it"
            ));
            continue;
        }
        let uid = item["metadata"]["uid"]
            .as_str()
            .map_or_else(String::new, str::to_string);
        match item["kind"].as_str() {
            Some("PriorityLevelConfiguration") => match level(&name, &item["spec"]) {
                Ok((seats, kind)) => out.levels.push(PriorityLevel {
                    uid: if uid.is_empty() {
                        super::config::uid("prioritylevelconfiguration", &name)
                    } else {
                        uid
                    },
                    name,
                    seats,
                    kind,
                }),
                Err(m) => problems.push(format!("{what}: {m}")),
            },
            Some("FlowSchema") => match schema(&name, &item["spec"]) {
                Ok(mut s) => {
                    if !uid.is_empty() {
                        s.uid = uid;
                    }
                    out.schemas.push(s)
                }
                Err(m) => problems.push(format!("{what}: {m}")),
            },
            other => problems.push(format!(
                "{what}: kind: {other:?} is neither FlowSchema nor PriorityLevelConfiguration"
            )),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LevelSpec {
    #[serde(rename = "type")]
    kind: String,
    limited: Option<Limited>,
    exempt: Option<Exempt>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Exempt {
    nominal_concurrency_shares: Option<u32>,
    lendable_percent: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Limited {
    nominal_concurrency_shares: Option<u32>,
    lendable_percent: Option<u32>,
    borrowing_limit_percent: Option<u32>,
    limit_response: Option<LimitResponseSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LimitResponseSpec {
    #[serde(rename = "type")]
    kind: String,
    queuing: Option<Queuing>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Queuing {
    queues: Option<usize>,
    hand_size: Option<usize>,
    queue_length_limit: Option<usize>,
}

/// `lendablePercent` at `at`, checked (0 to 100; 0 when unset).
fn lendable(at: &str, percent: Option<u32>) -> Result<u32, String> {
    match percent.unwrap_or(0) {
        p @ 0..=100 => Ok(p),
        p => Err(format!(
            "{at}.lendablePercent: Invalid value: {p}: must be between 0 and 100, inclusive"
        )),
    }
}

fn level(name: &str, spec: &Value) -> Result<(Seats, LevelKind), String> {
    let spec: LevelSpec = serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?;
    match spec.kind.as_str() {
        "Exempt" => {
            let exempt = spec.exempt.unwrap_or(Exempt {
                nominal_concurrency_shares: None,
                lendable_percent: None,
            });
            let seats = Seats {
                lendable_percent: lendable("spec.exempt", exempt.lendable_percent)?,
                ..Seats::shares(exempt.nominal_concurrency_shares.unwrap_or(0))
            };
            Ok((seats, LevelKind::Exempt))
        }
        "Limited" => {
            let limited = spec.limited.ok_or("spec.limited: Required value")?;
            let shares = limited.nominal_concurrency_shares.unwrap_or(30);
            if shares == 0 && name != super::config::EXEMPT {
                return Err("spec.limited.nominalConcurrencyShares: must be positive".into());
            }
            let seats = Seats {
                shares,
                lendable_percent: lendable("spec.limited", limited.lendable_percent)?,
                borrowing_limit_percent: limited.borrowing_limit_percent,
            };
            let response = limited
                .limit_response
                .ok_or("spec.limited.limitResponse: Required value")?;
            let limit = match response.kind.as_str() {
                "Reject" => LimitResponse::Reject,
                "Queue" => {
                    let q = response.queuing.unwrap_or(Queuing {
                        queues: None,
                        hand_size: None,
                        queue_length_limit: None,
                    });
                    let queues = q.queues.unwrap_or(64);
                    let hand_size = q.hand_size.unwrap_or(8);
                    let queue_length_limit = q.queue_length_limit.unwrap_or(50);
                    if queues == 0 || hand_size == 0 || hand_size > queues {
                        return Err(format!(
                            "spec.limited.limitResponse.queuing: queues {queues} and handSize {hand_size}: both positive, handSize at most queues"
                        ));
                    }
                    if queues > 10_000
                        || hand_size > super::classify::MAX_HAND
                        || queue_length_limit == 0
                    {
                        return Err("spec.limited.limitResponse.queuing: at most 10000 queues, a hand of at most 128, a positive queueLengthLimit".into());
                    }
                    LimitResponse::Queue {
                        queues,
                        hand_size,
                        queue_length_limit,
                    }
                }
                other => {
                    return Err(format!(
                        "spec.limited.limitResponse.type: Unsupported value: {other:?}: supported values: \"Queue\", \"Reject\""
                    ))
                }
            };
            Ok((seats, LevelKind::Limited(limit)))
        }
        other => Err(format!(
            "spec.type: Unsupported value: {other:?}: supported values: \"Exempt\", \"Limited\""
        )),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SchemaSpec {
    priority_level_configuration: NameRef,
    matching_precedence: Option<u32>,
    distinguisher_method: Option<TypeRef>,
    #[serde(default)]
    rules: Vec<RulesSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameRef {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TypeRef {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RulesSpec {
    #[serde(default)]
    subjects: Vec<SubjectSpec>,
    #[serde(default)]
    resource_rules: Vec<ResourceRuleSpec>,
    #[serde(default)]
    non_resource_rules: Vec<NonResourceRuleSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SubjectSpec {
    kind: String,
    user: Option<NameRef>,
    group: Option<NameRef>,
    service_account: Option<ServiceAccountRef>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceAccountRef {
    namespace: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResourceRuleSpec {
    verbs: Vec<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    #[serde(default)]
    cluster_scope: bool,
    #[serde(default)]
    namespaces: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NonResourceRuleSpec {
    verbs: Vec<String>,
    #[serde(rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
}

fn schema(name: &str, spec: &Value) -> Result<FlowSchema, String> {
    let spec: SchemaSpec =
        serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?;
    let precedence = spec.matching_precedence.unwrap_or(1000);
    if !(1..=10_000).contains(&precedence) {
        return Err(format!(
            "spec.matchingPrecedence: Invalid value: {precedence}: must be between 1 and 10000"
        ));
    }
    let distinguisher = match spec.distinguisher_method.as_ref().map(|d| d.kind.as_str()) {
        None => None,
        Some("ByUser") => Some(Distinguisher::ByUser),
        Some("ByNamespace") => Some(Distinguisher::ByNamespace),
        Some(other) => {
            return Err(format!(
                "spec.distinguisherMethod.type: Unsupported value: {other:?}: supported values: \"ByNamespace\", \"ByUser\""
            ))
        }
    };
    let mut rules = Vec::new();
    for (i, r) in spec.rules.into_iter().enumerate() {
        let mut subjects = Vec::new();
        for (j, s) in r.subjects.into_iter().enumerate() {
            let at = format!("spec.rules[{i}].subjects[{j}]");
            subjects.push(
                match (s.kind.as_str(), s.user, s.group, s.service_account) {
                    ("User", Some(u), _, _) => Subject::User(u.name),
                    ("Group", _, Some(g), _) => Subject::Group(g.name),
                    ("ServiceAccount", _, _, Some(sa)) => Subject::ServiceAccount {
                        namespace: sa.namespace,
                        name: sa.name,
                    },
                    (kind, ..) => {
                        return Err(format!(
                        "{at}: kind {kind:?} needs its own field (user, group or serviceAccount)"
                    ))
                    }
                },
            );
        }
        rules.push(PolicyRules {
            subjects,
            resource_rules: r
                .resource_rules
                .into_iter()
                .map(|r| ResourceRule {
                    verbs: r.verbs,
                    api_groups: r.api_groups,
                    resources: r.resources,
                    namespaces: r.namespaces,
                    cluster_scope: r.cluster_scope,
                })
                .collect(),
            non_resource_rules: r
                .non_resource_rules
                .into_iter()
                .map(|r| NonResourceRule {
                    verbs: r.verbs,
                    urls: r.non_resource_urls,
                })
                .collect(),
        });
    }
    Ok(FlowSchema {
        name: name.to_string(),
        uid: super::config::uid("flowschema", name),
        precedence,
        level: spec.priority_level_configuration.name,
        distinguisher,
        rules,
    })
}

/// `found` laid over `levels` and `schemas` by name; every FlowSchema whose priority level is
/// then missing is a problem.
pub fn compose(
    levels: Vec<PriorityLevel>,
    schemas: Vec<FlowSchema>,
    found: Objects,
) -> Result<(Vec<PriorityLevel>, Vec<FlowSchema>), Vec<String>> {
    let levels = merge(levels, found.levels, |l| l.name.as_str());
    let schemas = merge(schemas, found.schemas, |s| s.name.as_str());
    let dangling: Vec<String> = schemas
        .iter()
        .filter(|s| !levels.iter().any(|l| l.name == s.level))
        .map(|s| {
            format!(
                "FlowSchema {}: spec.priorityLevelConfiguration.name: no PriorityLevelConfiguration {:?}",
                s.name, s.level
            )
        })
        .collect();
    if dangling.is_empty() {
        Ok((levels, schemas))
    } else {
        Err(dangling)
    }
}

/// `overlay` over `base`, by name: a replaced object keeps its place, a new one is added.
pub fn merge<T: Clone>(base: Vec<T>, overlay: Vec<T>, name: impl Fn(&T) -> &str) -> Vec<T> {
    let mut out = base;
    for item in overlay {
        match out.iter_mut().find(|b| name(b) == name(&item)) {
            Some(slot) => *slot = item,
            None => out.push(item),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: batch}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    lendablePercent: 20
    borrowingLimitPercent: 150
    limitResponse:
      type: Queue
      queuing: {queues: 8, handSize: 2, queueLengthLimit: 10}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: batch-jobs, uid: 11111111-2222-3333-4444-555555555555}
spec:
  priorityLevelConfiguration: {name: batch}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByNamespace}
  rules:
  - subjects:
    - kind: ServiceAccount
      serviceAccount: {namespace: batch, name: "*"}
    - kind: User
      user: {name: robot}
    resourceRules:
    - verbs: ["*"]
      apiGroups: ["*"]
      resources: ["*"]
      namespaces: ["*"]
      clusterScope: true
"#;

    #[test]
    fn the_objects_users_apply_are_read() {
        let o = parse(FILE).expect("valid objects");
        assert_eq!(o.levels.len(), 1);
        assert_eq!(
            o.levels[0].kind,
            LevelKind::Limited(LimitResponse::Queue {
                queues: 8,
                hand_size: 2,
                queue_length_limit: 10
            })
        );
        assert_eq!(
            o.levels[0].seats,
            Seats {
                shares: 5,
                lendable_percent: 20,
                borrowing_limit_percent: Some(150),
            }
        );
        let s = &o.schemas[0];
        assert_eq!((s.precedence, s.level.as_str()), (500, "batch"));
        assert_eq!(s.uid, "11111111-2222-3333-4444-555555555555");
        assert_eq!(s.distinguisher, Some(Distinguisher::ByNamespace));
        assert_eq!(s.rules[0].subjects.len(), 2);
    }

    #[test]
    fn the_mandatory_objects_are_not_replaced_by_a_file() {
        let problems = parse(
            "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: exempt}\n\
             spec: {priorityLevelConfiguration: {name: global-default}}\n",
        )
        .unwrap_err();
        assert!(problems[0].contains("mandatory object"), "{problems:?}");
    }

    #[test]
    fn problems_name_the_object_and_field() {
        let bad = FILE
            .replace("type: Queue", "type: Maybe")
            .replace("matchingPrecedence: 500", "matchingPrecedence: 20000");
        let problems = parse(&bad).unwrap_err();
        assert!(
            problems.iter().any(|p| p.starts_with("PriorityLevelConfiguration batch: spec.limited.limitResponse.type: Unsupported value")),
            "{problems:#?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("FlowSchema batch-jobs: spec.matchingPrecedence")),
            "{problems:#?}"
        );
    }
}
