//! Label and field selectors, as far as the tests use them: `k=v`, `k==v`, `k!=v`, `k`, `!k`
//! for labels; `metadata.name` and `metadata.namespace` with `=`, `==`, `!=` for fields.

use super::store::ApiError;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Exists,
    Absent,
}

#[derive(Debug, Default)]
pub struct Selector {
    labels: Vec<(String, Op, String)>,
    fields: Vec<(String, Op, String)>,
}

fn terms(s: &str) -> impl Iterator<Item = (String, Op, String)> + '_ {
    s.split(',').filter(|t| !t.trim().is_empty()).map(|t| {
        let t = t.trim();
        if let Some((k, v)) = t.split_once("!=") {
            (k.trim().into(), Op::Ne, v.trim().into())
        } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
            (k.trim().into(), Op::Eq, v.trim().into())
        } else if let Some(k) = t.strip_prefix('!') {
            (k.trim().into(), Op::Absent, String::new())
        } else {
            (t.into(), Op::Exists, String::new())
        }
    })
}

impl Selector {
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, ApiError> {
        let fields: Vec<_> = terms(fields.unwrap_or("")).collect();
        for (f, op, _) in &fields {
            if !matches!(f.as_str(), "metadata.name" | "metadata.namespace")
                || matches!(op, Op::Exists | Op::Absent)
            {
                return Err(ApiError::new(
                    400,
                    "BadRequest",
                    format!("field label not supported: {f}"),
                ));
            }
        }
        Ok(Self {
            labels: terms(labels.unwrap_or("")).collect(),
            fields,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let label_ok = self.labels.iter().all(|(k, op, v)| {
            let have = labels.get(k).and_then(Value::as_str);
            match op {
                Op::Eq => have == Some(v.as_str()),
                Op::Ne => have != Some(v.as_str()),
                Op::Exists => have.is_some(),
                Op::Absent => have.is_none(),
            }
        });
        let field_ok = self.fields.iter().all(|(f, op, v)| {
            let key = f.trim_start_matches("metadata.");
            let have = obj["metadata"][key].as_str().unwrap_or("");
            (have == v) == (*op == Op::Eq)
        });
        label_ok && field_ok
    }
}
