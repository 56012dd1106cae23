//! A verified token's claims checked as kube-apiserver's JWT authenticator checks them (times,
//! audience, `claimValidationRules`) and mapped to an [`Identity`] (`claimMappings`).

use super::config::{IssuerSettings, Mapping, PrefixedClaim, Rule};
use super::Reason;
use apigw_expr as expr;
use apigw_request::Identity;
use serde_json::{Map, Value};

/// Allowed clock skew for `nbf`, as go-oidc (which kube uses) allows; `exp` gets none.
pub const NBF_SKEW_SECS: f64 = 300.0;

/// A failed check: its reason and a detail for the log.
pub type Failure = (Reason, String);

/// `exp` (required, no leeway) and `nbf` (optional, 5 minutes of skew) against `now`.
pub fn check_times(claims: &Map<String, Value>, now: f64) -> Result<(), Failure> {
    let time = |name: &str| -> Result<Option<f64>, Failure> {
        match claims.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n.as_f64().map(Some).ok_or_else(|| {
                (
                    Reason::MalformedClaims,
                    format!("claim {name:?} is not a number"),
                )
            }),
            Some(_) => Err((
                Reason::MalformedClaims,
                format!("claim {name:?} is not a number"),
            )),
        }
    };
    match time("exp")? {
        None => return Err((Reason::MalformedClaims, "claim \"exp\" is missing".into())),
        Some(exp) if now >= exp => {
            return Err((
                Reason::Expired,
                format!("token expired at {exp}, now {now:.0}"),
            ))
        }
        Some(_) => {}
    }
    if let Some(nbf) = time("nbf")? {
        if nbf > now + NBF_SKEW_SECS {
            return Err((
                Reason::NotYetValid,
                format!("token not valid before {nbf}, now {now:.0}"),
            ));
        }
    }
    Ok(())
}

/// The token's `aud` (a string or a list of strings) must name one of `audiences`.
pub fn check_audience(claims: &Map<String, Value>, audiences: &[String]) -> Result<(), Failure> {
    let matches = |a: &Value| a.as_str().is_some_and(|a| audiences.iter().any(|x| x == a));
    let ok = match claims.get("aud") {
        Some(aud @ Value::String(_)) => matches(aud),
        Some(Value::Array(list)) => list.iter().any(matches),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err((
            Reason::WrongAudience,
            format!(
                "aud {} is not one of {audiences:?}",
                claims.get("aud").unwrap_or(&Value::Null)
            ),
        ))
    }
}

/// The claims as CEL's `claims`, made only when some expression needs them.
pub struct CelClaims<'a> {
    claims: &'a Map<String, Value>,
    value: Option<cel::Value>,
}

impl<'a> CelClaims<'a> {
    pub fn new(claims: &'a Map<String, Value>) -> Self {
        Self {
            claims,
            value: None,
        }
    }

    fn vars(&mut self) -> [(&'static str, cel::Value); 1] {
        let claims = self.claims;
        let v = self.value.get_or_insert_with(|| expr::object(claims));
        [("claims", v.clone())]
    }
}

/// Every rule must evaluate to true; `reason` when one is false or fails.
fn check_cel_rules(
    rules: &[Rule],
    vars: &[(&str, cel::Value)],
    reason: Reason,
) -> Result<(), Failure> {
    for rule in rules {
        match rule.expression.eval_bool(vars) {
            Ok(true) => {}
            Ok(false) => {
                let message = match &rule.message {
                    Some(m) if !m.is_empty() => m.clone(),
                    _ => format!("{:?} evaluated to false", rule.expression.source),
                };
                return Err((reason, message));
            }
            Err(e) => return Err((reason, apigw_core::errors::chain(&e))),
        }
    }
    Ok(())
}

/// Every `claimValidationRules` rule: claims present as a string equal to the required value,
/// expressions true.
pub fn check_rules(cel: &mut CelClaims<'_>, settings: &IssuerSettings) -> Result<(), Failure> {
    let claims = cel.claims;
    for (claim, required) in &settings.required_claims {
        match claims.get(claim) {
            Some(Value::String(v)) if v == required => {}
            Some(Value::String(v)) => {
                return Err((
                    Reason::ClaimRuleFailed,
                    format!("claim {claim:?} is {v:?}, required {required:?}"),
                ))
            }
            Some(_) => {
                return Err((
                    Reason::ClaimRuleFailed,
                    format!("claim {claim:?} is not a string"),
                ))
            }
            None => {
                return Err((
                    Reason::ClaimRuleFailed,
                    format!("claim {claim:?} is missing"),
                ))
            }
        }
    }
    if settings.claim_rules.is_empty() {
        return Ok(());
    }
    check_cel_rules(&settings.claim_rules, &cel.vars(), Reason::ClaimRuleFailed)
}

/// The identity `claimMappings` make of the claims, checked by `userValidationRules`.
pub fn map_identity(
    cel: &mut CelClaims<'_>,
    settings: &IssuerSettings,
) -> Result<Identity, Failure> {
    let claims = cel.claims;
    let failed = |e: expr::ExprError| (Reason::MappingFailed, apigw_core::errors::chain(&e));
    let user = match &settings.username {
        Mapping::Claim(m) => username(claims, m)?,
        Mapping::Expression(e) => e.eval_string(&cel.vars()).map_err(failed)?,
    };
    if user.is_empty() {
        return Err((Reason::MappingFailed, "empty username".into()));
    }
    let groups = match &settings.groups {
        Some(Mapping::Claim(g)) => groups(claims, g)?,
        Some(Mapping::Expression(e)) => e.eval_strings(&cel.vars()).map_err(failed)?,
        None => Vec::new(),
    };
    let uid = match &settings.uid {
        Some(Mapping::Claim(u)) => Some(string_claim(claims, &u.claim)?),
        Some(Mapping::Expression(e)) => Some(e.eval_string(&cel.vars()).map_err(failed)?),
        None => None,
    };
    let mut id = Identity {
        user,
        uid,
        groups,
        ..Identity::default()
    };
    for (key, e) in &settings.extra {
        let values = e.eval_strings(&cel.vars()).map_err(failed)?;
        if !values.is_empty() {
            id.extra.insert(key.clone(), values);
        }
    }
    if !settings.user_rules.is_empty() {
        let uid = id.uid.as_deref().unwrap_or_default();
        let vars = [(
            "user",
            expr::user(&id.user, uid, &id.groups, id.extra.iter()),
        )];
        check_cel_rules(&settings.user_rules, &vars, Reason::UserRuleFailed)?;
    }
    Ok(id)
}

fn username(claims: &Map<String, Value>, m: &PrefixedClaim) -> Result<String, Failure> {
    let value = string_claim(claims, &m.claim)?;
    if m.claim == "email" {
        // kube refuses an email username the issuer says is unverified.
        match claims.get("email_verified") {
            None | Some(Value::Bool(true)) => {}
            Some(Value::Bool(false)) => {
                return Err((Reason::MappingFailed, "email not verified".into()))
            }
            Some(_) => {
                return Err((
                    Reason::MappingFailed,
                    "claim \"email_verified\" is not a boolean".into(),
                ))
            }
        }
    }
    Ok(format!("{}{value}", m.prefix))
}

fn groups(claims: &Map<String, Value>, m: &PrefixedClaim) -> Result<Vec<String>, Failure> {
    let bad = || {
        (
            Reason::MappingFailed,
            format!(
                "groups claim {:?} is not a string or a list of strings",
                m.claim
            ),
        )
    };
    match claims.get(&m.claim) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(g)) => Ok(vec![format!("{}{g}", m.prefix)]),
        Some(Value::Array(list)) => list
            .iter()
            .map(|g| {
                g.as_str()
                    .map(|g| format!("{}{g}", m.prefix))
                    .ok_or_else(bad)
            })
            .collect(),
        Some(_) => Err(bad()),
    }
}

fn string_claim(claims: &Map<String, Value>, claim: &str) -> Result<String, Failure> {
    match claims.get(claim) {
        Some(Value::String(v)) => Ok(v.clone()),
        Some(_) => Err((
            Reason::MappingFailed,
            format!("claim {claim:?} is not a string"),
        )),
        None => Err((
            Reason::MappingFailed,
            format!("claim {claim:?} not present"),
        )),
    }
}
