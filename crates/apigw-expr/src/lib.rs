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
/// At most this many operators outside string literals. The parser, and the evaluator after
/// it, recurse once per operator of a chain (`a.b.c...`, `1+1+1...`): about 4,000 of them fit
/// in 10 KiB and overflow a 2 MiB thread stack (a tokio worker's), which aborts the process.
/// cel's own recursion limit counts only bracket nesting. Found by fuzzing (`authn_config`).
const MAX_OPERATORS: usize = 256;

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
    #[error("expression with more than {MAX_OPERATORS} operators")]
    TooManyOperators,
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

/// The operator characters of `source` outside its string literals (`'...'`, `"..."`, their
/// triple-quoted and raw forms): an upper bound on the length of any operator chain in it. A
/// quote that is never closed starts no literal, so it hides nothing from the count.
fn operators(source: &str) -> usize {
    let b = source.as_bytes();
    let mut count = 0;
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'\'' || c == b'"' {
            let raw = i > 0 && matches!(b[i - 1], b'r' | b'R');
            let triple = b.get(i..i + 3) == Some(&[c, c, c][..]);
            let open = if triple { 3 } else { 1 };
            if let Some(end) = literal_end(b, i + open, c, triple, raw) {
                i = end;
                continue;
            }
        } else if b".[(!-+*/%<>=&|?".contains(&c) {
            count += 1;
        }
        i += 1;
    }
    count
}

/// Where the string literal whose body starts at `from` ends (just past its closing quote), or
/// None when it is never closed.
fn literal_end(b: &[u8], from: usize, quote: u8, triple: bool, raw: bool) -> Option<usize> {
    let mut i = from;
    while let Some(&c) = b.get(i) {
        if c == b'\\' && !raw {
            i += 2;
        } else if c == quote && !triple {
            return Some(i + 1);
        } else if c == quote && b.get(i..i + 3) == Some(&[quote, quote, quote][..]) {
            return Some(i + 3);
        } else {
            i += 1;
        }
    }
    None
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
        if operators(source) > MAX_OPERATORS {
            return Err(ExprError::TooManyOperators);
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

/// `user` for user validation rules: username, uid, groups, extra (an identity's fields,
/// given one by one so this module knows no identity type).
pub fn user<'a>(
    username: &str,
    uid: &str,
    groups: &[String],
    extra: impl Iterator<Item = (&'a String, &'a Vec<String>)>,
) -> cel::Value {
    let strings = |v: &[String]| {
        cel::Value::List(Arc::new(
            v.iter()
                .map(|s| cel::Value::String(Arc::new(s.clone())))
                .collect(),
        ))
    };
    let extra: HashMap<cel::objects::Key, cel::Value> = extra
        .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), strings(v)))
        .collect();
    let fields: HashMap<cel::objects::Key, cel::Value> = [
        (
            "username",
            cel::Value::String(Arc::new(username.to_string())),
        ),
        ("uid", cel::Value::String(Arc::new(uid.to_string()))),
        ("groups", strings(groups)),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles on a thread with a tokio worker's 2 MiB stack, where an expression is compiled
    /// on a reload and evaluated per request.
    fn compile_on_worker_stack(source: String) -> Result<(), String> {
        std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                Expression::compile(&source, &["claims"])
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
            .expect("spawn")
            .join()
            .expect("no panic")
    }

    /// Regression (fuzz target `authn_config`): a chain of 4,000 selects, or of additions,
    /// within the length and nesting limits overflowed a 2 MiB stack in the parser (SIGSEGV,
    /// the whole gateway). Now refused with a clear error before parsing.
    #[test]
    fn long_operator_chains_are_refused_before_parsing() {
        for chain in [
            format!("claims{}", ".a".repeat(4500)),
            format!("1{}", "+1".repeat(4900)),
            format!("{}1", "-".repeat(9000)),
        ] {
            assert!(chain.len() <= MAX_LEN);
            assert_eq!(
                compile_on_worker_stack(chain),
                Err(format!(
                    "expression with more than {MAX_OPERATORS} operators"
                ))
            );
        }
        // At the limit, it compiles on the same stack.
        let most = format!("claims{}", ".a".repeat(MAX_OPERATORS));
        assert_eq!(compile_on_worker_stack(most), Ok(()));
    }

    #[test]
    fn operators_inside_string_literals_are_not_counted() {
        let dots = ".".repeat(600);
        for source in [
            format!("claims.email.endsWith('{dots}')"),
            format!("claims.email.endsWith(\"{dots}\\\"{dots}\")"),
            format!("claims.email.endsWith('''{dots}'{dots}''')"),
        ] {
            assert_eq!(operators(&source), 3, "{source}");
            assert_eq!(compile_on_worker_stack(source), Ok(()));
        }
        assert_eq!(operators(&format!("claims.x.endsWith(r'\\{dots}')")), 3);
        // A quote never closed hides nothing.
        let open = format!("'{}", "+1".repeat(300));
        assert_eq!(operators(&open), 300);
        assert_eq!(
            compile_on_worker_stack(open),
            Err(format!(
                "expression with more than {MAX_OPERATORS} operators"
            ))
        );
    }
}
