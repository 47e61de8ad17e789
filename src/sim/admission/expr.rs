//! CEL for admission policies: an expression compiled once per stored policy version, with the
//! checks kube-apiserver's compiler makes that a parser alone can make too (syntax, references
//! to undeclared variables, fields the typed `request` does not have), and evaluated against
//! one request's variables.
//!
//! Owns the evaluation environment (the `cel` crate's standard library, built once), the
//! wording of compile errors as cel-go prints them (`ERROR: <input>:L:C: msg`, then the source
//! line and a caret, each after ` | `), and what this evaluator cannot do, refused at creation
//! as [`CompileError::Unmodelled`] rather than failing every request later: the `authorizer`
//! variable, and functions the `cel` crate does not have (most of Kubernetes' CEL libraries:
//! `lowerAscii`, `isSorted`, `quantity`, two-variable comprehensions...). It does not check
//! types (a validation that is not a boolean is found when it runs, as an error). It must never
//! read the store or decide a request.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use cel::common::ast::{EntryExpr, Expr as Ast, IdedExpr};
use serde_json::Value;

/// The standard environment, built once: a context made with `Context::default()` builds the
/// whole function table anew, per expression.
static ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| Arc::new(cel::Env::stdlib()));

/// Whether the evaluator has a function, by its (possibly qualified) name: probed once by
/// calling it without arguments (an unknown one is an undeclared reference, a known one an
/// overload error).
static KNOWN_FUNCTIONS: LazyLock<Mutex<HashMap<String, bool>>> = LazyLock::new(Default::default);

/// Identifiers that name types (`type(x) == int`).
const TYPE_NAMES: [&str; 10] = [
    "bool",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
];

/// The namespaces of functions in Kubernetes' CEL environment (`optional.of`, `sets.contains`,
/// `strings.quote`, `lists.range`) and cel-go's other extensions.
const FUNCTION_NAMESPACES: [&str; 6] = ["optional", "sets", "strings", "lists", "math", "base64"];

/// A CEL type, as cel-go names it (`bool`, `dyn`, `list(string)`, `kubernetes.UserInfo`);
/// `None` where this checker does not know it (and so does not judge it).
type Ty = Option<String>;

fn ty(name: &str) -> Ty {
    Some(name.to_string())
}

/// The fields of the object types kube-apiserver declares for `request` (`BuildRequestType`)
/// and `namespaceObject` (`BuildNamespaceType`), with their types.
fn object_fields(ty: &str) -> Option<&'static [(&'static str, &'static str)]> {
    const GVK: &str = "kubernetes.GroupVersionKind";
    const GVR: &str = "kubernetes.GroupVersionResource";
    const TIME: &str = "google.protobuf.Timestamp";
    Some(match ty {
        "kubernetes.AdmissionRequest" => &[
            ("kind", GVK),
            ("resource", GVR),
            ("subResource", "string"),
            ("requestKind", GVK),
            ("requestResource", GVR),
            ("requestSubResource", "string"),
            ("name", "string"),
            ("namespace", "string"),
            ("operation", "string"),
            ("userInfo", "kubernetes.UserInfo"),
            ("dryRun", "bool"),
            ("options", "dyn"),
        ],
        GVK => &[
            ("group", "string"),
            ("version", "string"),
            ("kind", "string"),
        ],
        GVR => &[
            ("group", "string"),
            ("version", "string"),
            ("resource", "string"),
        ],
        "kubernetes.UserInfo" => &[
            ("username", "string"),
            ("uid", "string"),
            ("groups", "list(string)"),
            ("extra", "map(string, list(string))"),
        ],
        "kubernetes.Namespace" => &[
            ("metadata", "kubernetes.NamespaceMetadata"),
            ("spec", "kubernetes.NamespaceSpec"),
            ("status", "kubernetes.NamespaceStatus"),
        ],
        "kubernetes.NamespaceMetadata" => &[
            ("name", "string"),
            ("generateName", "string"),
            ("namespace", "string"),
            ("labels", "map(string, string)"),
            ("annotations", "map(string, string)"),
            ("UID", "string"),
            ("creationTimestamp", TIME),
            ("deletionGracePeriodSeconds", "int"),
            ("deletionTimestamp", TIME),
            ("generation", "int"),
            ("resourceVersion", "string"),
            ("finalizers", "list(string)"),
        ],
        "kubernetes.NamespaceSpec" => &[("finalizers", "list(string)")],
        "kubernetes.NamespaceStatus" => &[
            ("conditions", "list(kubernetes.NamespaceCondition)"),
            ("phase", "string"),
        ],
        "kubernetes.NamespaceCondition" => &[
            ("status", "string"),
            ("type", "string"),
            ("lastTransitionTime", TIME),
            ("message", "string"),
            ("reason", "string"),
        ],
        _ => return None,
    })
}

/// The type of a map's values or a list's elements.
fn element(container: &str) -> Ty {
    if let Some(inner) = container
        .strip_prefix("list(")
        .and_then(|t| t.strip_suffix(')'))
    {
        return ty(inner);
    }
    let inner = container.strip_prefix("map(")?.strip_suffix(')')?;
    ty(inner.split_once(", ")?.1)
}

/// What an expression must evaluate to where it is written (kube-apiserver's `ReturnTypes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returns {
    /// A condition: matchConditions, validations.
    Bool,
    /// A messageExpression.
    String,
    /// An audit annotation's valueExpression.
    StringOrNull,
    /// A variable.
    Any,
}

/// What an expression may read where it is written (kube-apiserver's optional variable
/// declarations and composition, per kind of expression).
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// The names `variables` has there, with their types; `None` where `variables` is not
    /// declared (matchConditions, and every expression of a policy without variables).
    pub variables: Option<&'a [(String, Option<String>)]>,
    /// Whether `authorizer` is declared (everywhere but messageExpression).
    pub authorizer: bool,
    /// Whether `params` is declared (in a policy with a paramKind, which is refused as
    /// unmodelled: declared so that its expressions are not refused for reading it too).
    pub params: bool,
}

/// Why an expression is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// Refused by kube-apiserver's compiler as well: the detail of its `field.Invalid`
    /// (`compilation failed: ERROR: <input>:1:5: ...`).
    #[error("{0}")]
    Invalid(String),
    /// Accepted by kube-apiserver, but beyond this evaluator: the detail of a `field.Forbidden`.
    #[error("{0}")]
    Unmodelled(String),
}

/// The request variables an expression reads, so that only those are converted for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    /// `object`
    pub object: bool,
    /// `oldObject`
    pub old_object: bool,
    /// `request`
    pub request: bool,
    /// `namespaceObject`
    pub namespace_object: bool,
    /// `variables`
    pub variables: bool,
    /// The fields of `request` it reads, one bit each in [`REQUEST_FIELDS`] order (all of
    /// them when it reads `request` as a whole): the request is built with those only.
    pub request_fields: u16,
}

/// The top-level fields of kube-apiserver's `request`, in the order of [`Reads::request_fields`].
pub const REQUEST_FIELDS: [&str; 12] = [
    "kind",
    "resource",
    "subResource",
    "requestKind",
    "requestResource",
    "requestSubResource",
    "name",
    "namespace",
    "operation",
    "userInfo",
    "dryRun",
    "options",
];

/// The bit of a field of `request` in [`Reads::request_fields`].
pub fn request_field(name: &str) -> u16 {
    REQUEST_FIELDS
        .iter()
        .position(|f| *f == name)
        .map_or(0, |i| 1 << i)
}

/// A compiled expression.
#[derive(Debug)]
pub struct Expr {
    /// As written.
    pub source: String,
    program: cel::Program,
    /// What it reads.
    pub reads: Reads,
    /// Its type, where known.
    pub ty: Option<String>,
}

/// Compiles `source` for `scope`, to evaluate to what `returns` says.
pub fn compile(source: &str, scope: Scope, returns: Returns) -> Result<Expr, CompileError> {
    let program = ENV.compile(source).map_err(|e| {
        let errors = e
            .errors
            .iter()
            .map(|pe| {
                (
                    pe.pos.0.max(1) as usize,
                    (pe.pos.1 - 1).max(0) as usize,
                    pe.msg.clone(),
                )
            })
            .collect();
        CompileError::Invalid(format!("compilation failed: {}", display(source, errors)))
    })?;
    let mut check = Check {
        scope,
        bound: Vec::new(),
        errors: Vec::new(),
        unmodelled: Vec::new(),
        reads: Reads::default(),
        info: program.source_info(),
    };
    let ty = check.walk(program.expression());
    if !check.errors.is_empty() {
        let errors = check
            .errors
            .into_iter()
            .map(|(offset, msg)| {
                let (line, col) = line_col(source, offset);
                (line, col, msg)
            })
            .collect();
        return Err(CompileError::Invalid(format!(
            "compilation failed: {}",
            display(source, errors)
        )));
    }
    if let Some(t) = &ty {
        let fits = match returns {
            Returns::Bool => t == "bool",
            Returns::String => t == "string",
            Returns::StringOrNull => t == "string" || t == "null_type",
            Returns::Any => true,
        };
        if !fits {
            let wanted = match returns {
                Returns::Bool => "bool",
                Returns::String => "string",
                _ => "one of [string null_type]",
            };
            return Err(CompileError::Invalid(format!(
                "must evaluate to {wanted} but got {t}"
            )));
        }
    }
    if let Some(first) = check.unmodelled.into_iter().next() {
        return Err(CompileError::Unmodelled(first));
    }
    let reads = check.reads;
    Ok(Expr {
        source: source.to_string(),
        program,
        reads,
        ty,
    })
}

/// The 1-based line and 0-based column (in characters) of a character offset.
fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let (mut line, mut col) = (1, 0);
    for c in source.chars().take(offset) {
        if c == '\n' {
            line += 1;
            col = 0;
        } else {
            col += 1;
        }
    }
    (line, col)
}

/// Errors as cel-go's `Errors.ToDisplayString` prints them, sorted by location.
fn display(source: &str, mut errors: Vec<(usize, usize, String)>) -> String {
    errors.sort_by_key(|(line, col, _)| (*line, *col));
    errors
        .iter()
        .map(|(line, col, msg)| {
            let mut out = format!("ERROR: <input>:{line}:{}: {msg}", col + 1);
            if let Some(snippet) = source.split('\n').nth(line - 1) {
                let snippet = snippet.replace('\t', " ");
                out.push_str("\n | ");
                out.push_str(&snippet);
                out.push_str("\n | ");
                let mut chars = snippet.chars();
                for c in chars.by_ref().take(*col) {
                    out.push(if c.len_utf8() > 1 { '\u{ff0e}' } else { '.' });
                }
                out.push(match chars.next() {
                    Some(c) if c.len_utf8() > 1 => '\u{ff3e}',
                    _ => '^',
                });
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn known_function(name: &str, member: bool) -> bool {
    let call = if member {
        format!("dyn(0).{name}()")
    } else {
        format!("{name}()")
    };
    let mut known = KNOWN_FUNCTIONS.lock().unwrap_or_else(|e| e.into_inner());
    *known.entry(call.clone()).or_insert_with(|| {
        let ctx = cel::Context::with_env(ENV.clone());
        match ENV.compile(&call).map(|p| p.execute(&ctx)) {
            Ok(Err(cel::ExecutionError::UndeclaredReference(_))) | Err(_) => false,
            Ok(_) => true,
        }
    })
}

/// The checks of kube-apiserver's compiler that this parser's tree allows, over the parsed
/// expression: references, the fields of typed objects, and the expression's type where it
/// follows from its operators, literals and typed fields (`object` and `oldObject` are `dyn`).
struct Check<'a> {
    scope: Scope<'a>,
    /// Comprehension variables in scope, with their types.
    bound: Vec<(String, Ty)>,
    /// (character offset, message) of each error.
    errors: Vec<(usize, String)>,
    unmodelled: Vec<String>,
    reads: Reads,
    info: &'a cel::common::ast::SourceInfo,
}

/// Operators and functions whose result is a boolean whatever their arguments.
const BOOLEAN: [&str; 14] = [
    "_==_",
    "_!=_",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "@in",
    "_&&_",
    "_||_",
    "!_",
    "@not_strictly_false",
    "startsWith",
    "endsWith",
    "matches",
];

const ARITHMETIC: [&str; 5] = ["_+_", "_-_", "_*_", "_/_", "_%_"];

impl Check<'_> {
    fn offset(&self, e: &IdedExpr) -> usize {
        self.info
            .offset_for(e.id)
            .map_or(0, |(start, _)| start as usize)
    }

    fn bound(&self, name: &str) -> Option<&Ty> {
        self.bound
            .iter()
            .rev()
            .find(|(b, _)| b == name)
            .map(|(_, t)| t)
    }

    fn is_bound(&self, name: &str) -> bool {
        name.starts_with('@') || self.bound(name).is_some()
    }

    /// A free identifier: one of the declared variables (its type), a type name, or an error.
    fn root(&mut self, name: &str, e: &IdedExpr) -> Ty {
        match name {
            "object" => {
                self.reads.object = true;
                ty("dyn")
            }
            "oldObject" => {
                self.reads.old_object = true;
                ty("dyn")
            }
            "request" => {
                self.reads.request = true;
                ty("kubernetes.AdmissionRequest")
            }
            "namespaceObject" => {
                self.reads.namespace_object = true;
                ty("kubernetes.Namespace")
            }
            "params" if self.scope.params => None,
            "variables" if self.scope.variables.is_some() => {
                self.reads.variables = true;
                None
            }
            // Named first: the calls on it are the authorizer library's.
            "authorizer" if self.scope.authorizer => {
                self.unmodelled.insert(
                    0,
                    "the authorizer variable is not supported by the simulated API server \
                     (rollboot simulate has no authorizer to ask)"
                        .into(),
                );
                None
            }
            n if TYPE_NAMES.contains(&n) => None,
            n => {
                self.errors.push((
                    self.offset(e),
                    format!("undeclared reference to '{n}' (in container '')"),
                ));
                None
            }
        }
    }

    /// A chain of field selections `root.a.b` (each with its node, whether it is `has()`):
    /// the fields the root's type has, and the chain's type.
    fn select(&mut self, root: &IdedExpr, name: &str, chain: &[(&IdedExpr, &str, bool)]) -> Ty {
        let mut t = self.root(name, root);
        if name == "request" {
            if let Some((_, field, _)) = chain.first() {
                self.reads.request_fields |= request_field(field);
            }
        }
        for (i, (sel, field, test)) in chain.iter().enumerate() {
            let next = if i == 0 && name == "variables" {
                match self.scope.variables {
                    Some(vars) => match vars.iter().find(|(n, _)| n == field) {
                        Some((_, vt)) => Ok(vt.clone()),
                        None => Err(()),
                    },
                    None => Ok(None),
                }
            } else {
                match t.as_deref() {
                    Some("dyn") => Ok(ty("dyn")),
                    Some(o) => match object_fields(o) {
                        Some(fields) => fields
                            .iter()
                            .find(|(f, _)| f == field)
                            .map(|(_, ft)| ty(ft))
                            .ok_or(()),
                        None if o.starts_with("map(") => Ok(element(o)),
                        None => Ok(None),
                    },
                    None => Ok(None),
                }
            };
            t = match next {
                Ok(nt) => nt,
                Err(()) => {
                    self.errors
                        .push((self.offset(sel), format!("undefined field '{field}'")));
                    return None;
                }
            };
            if *test {
                t = ty("bool");
            }
        }
        t
    }

    fn walk(&mut self, e: &IdedExpr) -> Ty {
        match &e.expr {
            Ast::Unspecified => None,
            Ast::Literal(l) => {
                use cel::common::ast::LiteralValue as L;
                let name = match l {
                    L::Boolean(_) => "bool",
                    L::Int(_) => "int",
                    L::UInt(_) => "uint",
                    L::Double(_) => "double",
                    L::String(_) => "string",
                    L::Bytes(_) => "bytes",
                    L::Null => "null_type",
                };
                ty(name)
            }
            Ast::Ident(name) => match self.bound(name) {
                Some(t) => t.clone(),
                None if name.starts_with('@') => None,
                None => {
                    if name == "request" {
                        // Read as a whole (`request[k]`, `has(...)` of a computed key...).
                        self.reads.request_fields = u16::MAX;
                    }
                    let name = name.clone();
                    self.root(&name, e)
                }
            },
            Ast::Select(_) => {
                // The whole chain `root.a.b` from the outside in, checked from the root out.
                let mut chain = Vec::new();
                let mut at = e;
                while let Ast::Select(s) = &at.expr {
                    chain.push((at, s.field.as_str(), s.test));
                    at = &s.operand;
                }
                chain.reverse();
                match &at.expr {
                    Ast::Ident(root) if !self.is_bound(root) => {
                        let root = root.clone();
                        self.select(at, &root, &chain)
                    }
                    _ => {
                        let t = self.walk(at);
                        let has = chain.last().is_some_and(|(_, _, test)| *test);
                        match t.as_deref() {
                            _ if has => ty("bool"),
                            Some("dyn") => ty("dyn"),
                            _ => None,
                        }
                    }
                }
            }
            Ast::Call(c) => self.call(c),
            Ast::Comprehension(c) => {
                self.walk(&c.iter_range);
                let accu = self.walk(&c.accu_init);
                let before = self.bound.len();
                self.bound.push((c.iter_var.clone(), None));
                if let Some(v2) = &c.iter_var2 {
                    self.bound.push((v2.clone(), None));
                }
                self.bound.push((c.accu_var.clone(), accu));
                self.walk(&c.loop_cond);
                self.walk(&c.loop_step);
                let t = self.walk(&c.result);
                self.bound.truncate(before);
                t
            }
            Ast::List(l) => {
                l.elements.iter().for_each(|x| {
                    self.walk(x);
                });
                None
            }
            Ast::Map(m) => {
                m.entries.iter().for_each(|x| self.entry(&x.expr));
                None
            }
            Ast::Struct(s) => {
                s.entries.iter().for_each(|x| self.entry(&x.expr));
                None
            }
        }
    }

    fn call(&mut self, c: &cel::common::ast::CallExpr) -> Ty {
        let qualified = match c.target.as_deref() {
            // `optional.of(x)`, `sets.contains(a, b)`: a function of a namespace (of cel-go's
            // extensions; another undeclared name is an undeclared reference).
            Some(IdedExpr {
                expr: Ast::Ident(ns),
                ..
            }) if !self.is_bound(ns)
                && !self.declared(ns)
                && FUNCTION_NAMESPACES.contains(&ns.as_str()) =>
            {
                Some(format!("{ns}.{}", c.func_name))
            }
            _ => None,
        };
        let f = c.func_name.as_str();
        let operator = f.starts_with('_') || f.starts_with('@') || f.starts_with('!');
        let (name, member) = match &qualified {
            Some(q) => (q.as_str(), false),
            None => (f, c.target.is_some()),
        };
        if let Some(t) = c.target.as_deref().filter(|_| qualified.is_none()) {
            self.walk(t);
        }
        if !operator && !known_function(name, member) {
            // Its arguments are not looked into: how it binds names (a two-variable
            // comprehension's) is unknown here.
            self.unmodelled.push(format!(
                "the function '{name}' ({} argument{}) is not supported by the CEL evaluator of \
                 the simulated API server (rollboot simulate)",
                c.args.len(),
                if c.args.len() == 1 { "" } else { "s" }
            ));
            return None;
        }
        let args: Vec<Ty> = c.args.iter().map(|a| self.walk(a)).collect();
        let arg = |i: usize| args.get(i).cloned().flatten();
        if BOOLEAN.contains(&f) || (f == "contains" && member) {
            return ty("bool");
        }
        match f {
            "_?_:_" => match (arg(1), arg(2)) {
                (Some(a), Some(b)) if a == b => Some(a),
                (Some(a), Some(b)) if a == "dyn" || b == "dyn" => ty("dyn"),
                _ => None,
            },
            f if ARITHMETIC.contains(&f) => {
                const SCALARS: [&str; 5] = ["int", "uint", "double", "string", "bytes"];
                match (arg(0), arg(1)) {
                    (Some(a), Some(b))
                        if a == b && (a == "dyn" || SCALARS.contains(&a.as_str())) =>
                    {
                        Some(a)
                    }
                    (Some(a), Some(b)) if a == "dyn" && SCALARS.contains(&b.as_str()) => Some(b),
                    (Some(a), Some(b)) if b == "dyn" && SCALARS.contains(&a.as_str()) => Some(a),
                    _ => None,
                }
            }
            "-_" => arg(0).filter(|a| ["int", "double", "dyn"].contains(&a.as_str())),
            "_[_]" => match arg(0).as_deref() {
                Some("dyn") => ty("dyn"),
                Some(t) => element(t),
                None => None,
            },
            "size" => ty("int"),
            "string" | "int" | "uint" | "double" | "bytes" | "bool" | "dyn" if !member => ty(f),
            _ => None,
        }
    }

    fn entry(&mut self, e: &EntryExpr) {
        match e {
            EntryExpr::StructField(f) => {
                self.walk(&f.value);
            }
            EntryExpr::MapEntry(m) => {
                self.walk(&m.key);
                self.walk(&m.value);
            }
        }
    }

    /// Whether `name` is a variable of this scope (not a namespace of functions).
    fn declared(&self, name: &str) -> bool {
        matches!(name, "object" | "oldObject" | "request" | "namespaceObject")
            || (name == "params" && self.scope.params)
            || (name == "variables" && self.scope.variables.is_some())
            || (name == "authorizer" && self.scope.authorizer)
    }
}

/// An evaluation error as cel-go words it (the `cel` crate capitalizes some).
fn cel_error(e: cel::ExecutionError) -> String {
    match e {
        cel::ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        e => e.to_string(),
    }
}

/// The variables of one request, in one evaluation context shared by a policy's expressions:
/// each is converted to CEL (a deep copy, in the `cel` crate) once, when an expression first
/// reads it.
pub struct Inputs<'a> {
    object: &'a Value,
    old_object: &'a Value,
    request: &'a Value,
    namespace_object: &'a Value,
    context: RefCell<cel::Context<'static, 'static>>,
    added: Cell<Reads>,
}

impl<'a> Inputs<'a> {
    /// The JSON of `object`, `oldObject`, `request` and `namespaceObject` (null when absent).
    pub fn new(
        object: &'a Value,
        old_object: &'a Value,
        request: &'a Value,
        namespace_object: &'a Value,
    ) -> Inputs<'a> {
        Inputs {
            object,
            old_object,
            request,
            namespace_object,
            context: RefCell::new(cel::Context::with_env(ENV.clone())),
            added: Cell::new(Reads::default()),
        }
    }

    /// Adds to the context what `reads` asks for and it does not have yet.
    fn provide(&self, reads: Reads) {
        let mut added = self.added.get();
        let wanted = [
            ("object", reads.object, &mut added.object, self.object),
            (
                "oldObject",
                reads.old_object,
                &mut added.old_object,
                self.old_object,
            ),
            ("request", reads.request, &mut added.request, self.request),
            (
                "namespaceObject",
                reads.namespace_object,
                &mut added.namespace_object,
                self.namespace_object,
            ),
        ];
        for (name, read, done, json) in wanted {
            if read && !*done {
                let v = to_cel(json);
                self.context.borrow_mut().add_variable_from_value(name, v);
                *done = true;
            }
        }
        self.added.set(added);
    }
}

/// JSON as kube-apiserver's unstructured objects read in CEL: an integer is an `int` (the
/// `cel` crate's serde conversion makes a non-negative one a `uint`, so that `x + 1` fails),
/// other numbers `double`.
fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(o) => cel::Value::Map(cel::objects::Map {
            map: Arc::new(
                o.iter()
                    .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), to_cel(v)))
                    .collect(),
            ),
        }),
    }
}

impl Expr {
    /// Evaluates with `inputs` and, if it reads them, `variables` (those that failed are left
    /// out: reading one is `no such key`, which the caller words as the composition library).
    pub fn eval(
        &self,
        inputs: &Inputs,
        variables: &HashMap<String, cel::Value>,
    ) -> Result<cel::Value, String> {
        inputs.provide(self.reads);
        let ctx = inputs.context.borrow();
        if self.reads.variables {
            let mut scope = ctx.new_inner_scope();
            scope.add_variable_from_value("variables", variables.clone());
            return self.program.execute(&scope).map_err(cel_error);
        }
        self.program.execute(&ctx).map_err(cel_error)
    }
}

/// The CEL type name of a value, as cel-go prints it.
pub fn type_name(v: &cel::Value) -> &'static str {
    match v {
        cel::Value::List(_) => "list",
        cel::Value::Map(_) => "map",
        cel::Value::Int(_) => "int",
        cel::Value::UInt(_) => "uint",
        cel::Value::Float(_) => "double",
        cel::Value::String(_) => "string",
        cel::Value::Bytes(_) => "bytes",
        cel::Value::Bool(_) => "bool",
        cel::Value::Null => "null_type",
        _ => "dyn",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALIDATION: Scope = Scope {
        variables: None,
        authorizer: true,
        params: false,
    };

    fn invalid(source: &str, scope: Scope) -> String {
        match compile(source, scope, Returns::Bool) {
            Err(CompileError::Invalid(m)) => m,
            other => panic!("{source}: {other:?}"),
        }
    }

    fn ok(source: &str, scope: Scope) -> Expr {
        compile(source, scope, Returns::Bool).unwrap_or_else(|e| panic!("{source}: {e}"))
    }

    // The expected messages are kube-apiserver v1.36's, as it answered a policy carrying the
    // expression (../shared/realcluster, 2026-11-26).

    #[test]
    fn a_syntax_error_is_worded_as_cel_go_words_it() {
        assert_eq!(
            invalid("object.x ==", VALIDATION),
            "compilation failed: ERROR: <input>:1:12: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | object.x ==\n | ...........^"
        );
    }

    #[test]
    fn an_undeclared_reference_is_a_compile_error_but_comprehension_variables_are_not() {
        assert_eq!(
            invalid("object.a == 1 && obj.b == 2", VALIDATION),
            "compilation failed: ERROR: <input>:1:18: undeclared reference to 'obj' (in container '')\n | object.a == 1 && obj.b == 2\n | .................^"
        );
        assert_eq!(
            invalid("a.b == c", VALIDATION),
            "compilation failed: ERROR: <input>:1:1: undeclared reference to 'a' (in container '')\n | a.b == c\n | ^\nERROR: <input>:1:8: undeclared reference to 'c' (in container '')\n | a.b == c\n | .......^"
        );
        assert_eq!(
            invalid("object.a == 1 &&\n  foo == 2", VALIDATION),
            "compilation failed: ERROR: <input>:2:3: undeclared reference to 'foo' (in container '')\n |   foo == 2\n | ..^"
        );
        ok(
            "object.metadata.labels.all(k, k.startsWith('a') && [1].exists(x, x == 1))",
            VALIDATION,
        );
        // `variables` is declared only in a policy that has variables, `params` nowhere (no
        // paramKind).
        assert!(
            invalid("variables.x == 1", VALIDATION).contains("undeclared reference to 'variables'")
        );
        assert!(invalid("params.x == 1", VALIDATION).contains("undeclared reference to 'params'"));
    }

    #[test]
    fn fields_of_typed_objects_and_of_variables_are_checked() {
        assert!(invalid("request.user == ''", VALIDATION).contains(
            "ERROR: <input>:1:8: undefined field 'user'\n | request.user == ''\n | .......^"
        ));
        assert!(invalid("request.userInfo.name == ''", VALIDATION)
            .contains("ERROR: <input>:1:17: undefined field 'name'"));
        assert!(invalid("namespaceObject.metadata.foo == 1", VALIDATION)
            .contains("ERROR: <input>:1:25: undefined field 'foo'"));
        ok(
            "has(request.userInfo.extra) && request.kind.kind == 'Node'",
            VALIDATION,
        );
        let vars = [("allowed".to_string(), None)];
        let scope = Scope {
            variables: Some(&vars),
            authorizer: true,
            params: false,
        };
        ok("'x' in variables.allowed", scope);
        assert!(invalid("variables.other == 1", scope)
            .contains("ERROR: <input>:1:10: undefined field 'other'"));
    }

    #[test]
    fn a_condition_that_is_not_a_boolean_is_refused() {
        for (source, got) in [
            ("object.data", "dyn"),
            ("1 + 1", "int"),
            ("object.a + 1", "int"),
            ("'a' + 'b'", "string"),
            ("request.name", "string"),
            ("null", "null_type"),
            ("object.a[0]", "dyn"),
            ("true ? object.x : false", "dyn"),
            ("request.kind", "kubernetes.GroupVersionKind"),
            ("request.userInfo.groups", "list(string)"),
            ("namespaceObject.metadata.name", "string"),
        ] {
            assert_eq!(
                invalid(source, VALIDATION),
                format!("must evaluate to bool but got {got}"),
                "{source}"
            );
        }
        for source in [
            "object.data.x == 'a'",
            "has(object.data)",
            "!object.a",
            "object.a && true",
            "request.dryRun",
            "object.x ? true : false",
            "type(object) == map",
            "[1, 2].all(x, x > 0)",
            "object.data.x.startsWith('a')",
        ] {
            ok(source, VALIDATION);
        }
        let vars = [("v".to_string(), Some("dyn".to_string()))];
        let scope = Scope {
            variables: Some(&vars),
            authorizer: true,
            params: false,
        };
        assert_eq!(
            invalid("variables.v", scope),
            "must evaluate to bool but got dyn"
        );
        let message = |s: &str| compile(s, VALIDATION, Returns::String);
        assert!(message("'a' + object.x").is_ok());
        assert_eq!(
            message("object.x").unwrap_err().to_string(),
            "must evaluate to string but got dyn"
        );
        assert_eq!(
            compile("1", VALIDATION, Returns::StringOrNull)
                .unwrap_err()
                .to_string(),
            "must evaluate to one of [string null_type] but got int"
        );
    }

    #[test]
    fn what_the_evaluator_cannot_do_is_refused_as_unmodelled() {
        for (source, what) in [
            (
                "authorizer.group('').resource('pods').check('get').allowed()",
                "authorizer",
            ),
            ("object.metadata.name.lowerAscii() == 'x'", "lowerAscii"),
            ("object.spec.x.exists(k, v, v == 1)", "exists"),
        ] {
            match compile(source, VALIDATION, Returns::Bool) {
                Err(CompileError::Unmodelled(m)) => assert!(m.contains(what), "{m}"),
                other => panic!("{source}: {other:?}"),
            }
        }
        // Where `authorizer` is not declared, it is an undeclared reference, as in kube-apiserver.
        let message = Scope {
            variables: None,
            authorizer: false,
            params: false,
        };
        assert!(compile("authorizer.group('')", message, Returns::String)
            .unwrap_err()
            .to_string()
            .contains("undeclared reference to 'authorizer'"));
        ok(
            "optional.of(1).hasValue() && size(object.x) > 0 && string(1).startsWith('1') && type(1) == int",
            VALIDATION,
        );
    }

    #[test]
    fn a_json_integer_is_an_int_as_in_kube_apiserver() {
        let e = ok(
            "object.n + 1 == 4 && type(object.n) == int && type(object.f) == double",
            VALIDATION,
        );
        let (null, obj) = (Value::Null, serde_json::json!({"n": 3, "f": 0.5}));
        let inputs = Inputs::new(&obj, &null, &null, &null);
        assert_eq!(e.eval(&inputs, &HashMap::new()), Ok(cel::Value::Bool(true)));
    }

    #[test]
    fn an_expression_converts_only_the_variables_it_reads() {
        let e = ok("request.operation == 'UPDATE'", VALIDATION);
        assert_eq!(
            e.reads,
            Reads {
                request: true,
                request_fields: request_field("operation"),
                ..Reads::default()
            }
        );
        let (null, req) = (Value::Null, serde_json::json!({"operation": "UPDATE"}));
        let inputs = Inputs::new(&null, &null, &req, &null);
        assert_eq!(e.eval(&inputs, &HashMap::new()), Ok(cel::Value::Bool(true)));
        assert!(!inputs.added.get().object, "object was not converted");
    }
}
