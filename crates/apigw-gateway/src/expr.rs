//! CEL expressions of the configuration (the JWT issuers' `claims.*` and `user.*`, the
//! authorization webhooks' `request.*` match conditions),
//! compiled once with the `cel` crate (standard library, optional values, strings, lists,
//! math and encoder extensions) and evaluated per token.

use serde_json::Value as Json;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

/// Expressions longer than this are refused, as are deeper bracket nestings: the parser's
/// work on pathological input is unbounded (cel-rust issues 305/306).
const MAX_LEN: usize = 10 * 1024;
const MAX_NESTING: usize = 32;

/// The environment every expression compiles and runs in.
fn environment() -> Result<&'static Arc<cel::Env>, ExprError> {
    ENV.as_ref().map_err(|e| ExprError::Env(e.clone()))
}

static ENV: LazyLock<Result<Arc<cel::Env>, String>> = LazyLock::new(|| {
    let mut env = cel::Env::stdlib();
    for ext in [
        cel::extensions::strings as fn(&mut cel::Env) -> Result<(), cel::DeclarationError>,
        cel::extensions::lists,
        cel::extensions::math,
        cel::extensions::encoders,
    ] {
        env.add_extension(ext).map_err(|e| e.to_string())?;
    }
    Ok(Arc::new(env))
});

/// Why an expression did not compile, or did not give a value of the type wanted.
#[derive(Debug, thiserror::Error)]
pub enum ExprError {
    #[error("expression longer than {MAX_LEN} bytes")]
    TooLong,
    #[error("expression nested deeper than {MAX_NESTING}")]
    TooDeep,
    /// The CEL environment (built once) failed to build.
    #[error("the CEL environment: {0}")]
    Env(String),
    #[error("compilation failed")]
    Compile(#[source] cel::ParseErrors),
    #[error(
        "compilation failed: undeclared reference to {unknown:?} (only {allowed:?} may be used)"
    )]
    Undeclared {
        unknown: Vec<String>,
        allowed: Vec<String>,
    },
    #[error("{expression:?}")]
    Eval {
        expression: String,
        #[source]
        source: cel::ExecutionError,
    },
    #[error("{expression:?} must return {want}, returned {got}")]
    Type {
        expression: String,
        want: &'static str,
        got: String,
    },
}

/// Identifiers that name types and function namespaces rather than variables.
const BUILTIN_IDENTS: &[&str] = &[
    "optional",
    "math",
    "base64",
    "strings",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// Calls `found` with every identifier of `e` not bound by an enclosing comprehension
/// (the variables of `map`, `all`, ... macros).
fn free_idents<'a>(
    e: &'a cel::IdedExpr,
    bound: &mut Vec<&'a str>,
    found: &mut impl FnMut(&'a str),
) {
    use cel::common::ast::{EntryExpr, Expr};
    match &e.expr {
        Expr::Ident(name) => {
            if !bound.contains(&name.as_str()) {
                found(name);
            }
        }
        Expr::Select(s) => free_idents(&s.operand, bound, found),
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                free_idents(t, bound, found);
            }
            for a in &c.args {
                free_idents(a, bound, found);
            }
        }
        Expr::List(l) => {
            for x in &l.elements {
                free_idents(x, bound, found);
            }
        }
        Expr::Map(m) => entries(&m.entries, bound, found),
        Expr::Struct(s) => entries(&s.entries, bound, found),
        Expr::Comprehension(c) => {
            free_idents(&c.iter_range, bound, found);
            free_idents(&c.accu_init, bound, found);
            let depth = bound.len();
            bound.push(&c.iter_var);
            if let Some(v) = &c.iter_var2 {
                bound.push(v);
            }
            bound.push(&c.accu_var);
            free_idents(&c.loop_cond, bound, found);
            free_idents(&c.loop_step, bound, found);
            free_idents(&c.result, bound, found);
            bound.truncate(depth);
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }

    fn entries<'a>(
        entries: &'a [cel::common::ast::IdedEntryExpr],
        bound: &mut Vec<&'a str>,
        found: &mut impl FnMut(&'a str),
    ) {
        for entry in entries {
            match &entry.expr {
                EntryExpr::StructField(f) => free_idents(&f.value, bound, found),
                EntryExpr::MapEntry(m) => {
                    free_idents(&m.key, bound, found);
                    free_idents(&m.value, bound, found);
                }
            }
        }
    }
}

/// A compiled expression and its source.
#[derive(Clone)]
pub struct Expression {
    pub source: String,
    program: Arc<cel::Program>,
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

impl PartialEq for Expression {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Expression {
    /// Compiles `source`; it may use only the variables in `allowed`.
    pub fn compile(source: &str, allowed: &[&str]) -> Result<Self, ExprError> {
        if source.len() > MAX_LEN {
            return Err(ExprError::TooLong);
        }
        let mut depth = 0usize;
        for c in source.chars() {
            match c {
                '(' | '[' | '{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(ExprError::TooDeep);
                    }
                }
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        let env = environment()?;
        let program = env.compile(source).map_err(ExprError::Compile)?;
        let mut unknown = Vec::new();
        free_idents(program.expression(), &mut Vec::new(), &mut |name| {
            if !allowed.contains(&name)
                && !BUILTIN_IDENTS.contains(&name)
                && !unknown.contains(&name.to_string())
            {
                unknown.push(name.to_string());
            }
        });
        if !unknown.is_empty() {
            return Err(ExprError::Undeclared {
                unknown,
                allowed: allowed.iter().map(|a| a.to_string()).collect(),
            });
        }
        Ok(Self {
            source: source.to_string(),
            program: Arc::new(program),
        })
    }

    /// The expression's value with `vars` bound.
    pub fn eval(&self, vars: &[(&str, cel::Value)]) -> Result<cel::Value, ExprError> {
        let env = environment()?;
        let mut ctx = cel::Context::with_env(env.clone());
        for (name, value) in vars {
            ctx.add_variable_from_value(*name, value.clone());
        }
        self.program
            .execute(&ctx)
            .map_err(|source| ExprError::Eval {
                expression: self.source.clone(),
                source,
            })
    }

    /// Evaluates to a bool, or an error naming what it gave instead.
    pub fn eval_bool(&self, vars: &[(&str, cel::Value)]) -> Result<bool, ExprError> {
        match self.eval(vars)? {
            cel::Value::Bool(b) => Ok(b),
            other => Err(self.wrong_type("a bool", other.type_of().to_string())),
        }
    }

    fn wrong_type(&self, want: &'static str, got: String) -> ExprError {
        ExprError::Type {
            expression: self.source.clone(),
            want,
            got,
        }
    }

    /// Evaluates to a string.
    pub fn eval_string(&self, vars: &[(&str, cel::Value)]) -> Result<String, ExprError> {
        match self.eval(vars)? {
            cel::Value::String(s) => Ok(s.to_string()),
            other => Err(self.wrong_type("a string", other.type_of().to_string())),
        }
    }

    /// Evaluates to a string or a list of strings (null or an empty string: none).
    pub fn eval_strings(&self, vars: &[(&str, cel::Value)]) -> Result<Vec<String>, ExprError> {
        match self.eval(vars)? {
            cel::Value::String(s) if s.is_empty() => Ok(Vec::new()),
            cel::Value::String(s) => Ok(vec![s.to_string()]),
            cel::Value::Null => Ok(Vec::new()),
            cel::Value::List(list) => list
                .iter()
                .map(|v| match v {
                    cel::Value::String(s) => Ok(s.to_string()),
                    other => Err(self.wrong_type(
                        "a string or a list of strings",
                        format!("a list holding {}", other.type_of()),
                    )),
                })
                .collect(),
            other => {
                Err(self.wrong_type("a string or a list of strings", other.type_of().to_string()))
            }
        }
    }
}

/// A JSON value as CEL sees it: whole numbers as `int` (as kube's unstructured conversion
/// does), others as `double`.
pub fn from_json(v: &Json) -> cel::Value {
    match v {
        Json::Null => cel::Value::Null,
        Json::Bool(b) => cel::Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => match n.as_u64() {
                Some(u) => cel::Value::UInt(u),
                None => cel::Value::Float(n.as_f64().unwrap_or_default()),
            },
        },
        Json::String(s) => cel::Value::String(Arc::new(s.clone())),
        Json::Array(a) => cel::Value::List(Arc::new(a.iter().map(from_json).collect())),
        Json::Object(m) => object(m),
    }
}

/// A JSON object as a CEL map with string keys.
pub fn object(m: &serde_json::Map<String, Json>) -> cel::Value {
    let map: HashMap<cel::objects::Key, cel::Value> = m
        .iter()
        .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), from_json(v)))
        .collect();
    cel::Value::Map(cel::objects::Map { map: Arc::new(map) })
}

/// `user` for user validation rules: username, uid, groups, extra.
pub fn user(id: &crate::authn::Identity) -> cel::Value {
    let strings = |v: &[String]| {
        cel::Value::List(Arc::new(
            v.iter()
                .map(|s| cel::Value::String(Arc::new(s.clone())))
                .collect(),
        ))
    };
    let extra: HashMap<cel::objects::Key, cel::Value> = id
        .extra
        .iter()
        .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), strings(v)))
        .collect();
    let fields: HashMap<cel::objects::Key, cel::Value> = [
        ("username", cel::Value::String(Arc::new(id.user.clone()))),
        (
            "uid",
            cel::Value::String(Arc::new(id.uid.clone().unwrap_or_default())),
        ),
        ("groups", strings(&id.groups)),
        (
            "extra",
            cel::Value::Map(cel::objects::Map {
                map: Arc::new(extra),
            }),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.to_string())), v))
    .collect();
    cel::Value::Map(cel::objects::Map {
        map: Arc::new(fields),
    })
}
