//! Which argument values are secrets, so that audit rows, approvals and logs keep a mask
//! instead (the arguments' digest is still of the unmasked value, keyed, and the chain
//! verifies), also where an error message repeats one ([`scrub`]).
//!
//! Three sources, any of which makes a value secret:
//! - the tool's input schema: a property whose schema says `writeOnly: true` or
//!   `format: "password"`, found once when the tool is registered ([`SchemaSecrets`]),
//!   through `properties`, `items`, `prefixItems`, `additionalProperties`,
//!   `allOf`/`anyOf`/`oneOf` and local `$ref`s — for built-in and federated tools alike;
//! - the tool's own declaration ([`crate::ToolSpec::secret_fields`], JSON pointers);
//! - the deployment's secret-name pattern ([`SecretNames`]): any object key, at any
//!   depth, whose name matches it. The pattern is matched against the key in lower
//!   snake case (`apiKey` and `API-Key` are both seen as `api_key`), so one pattern
//!   covers the usual spellings.

use serde_json::Value;

/// What a masked argument value is replaced with.
pub const MASK: &str = "***";

/// The default secret-name pattern: words that name credentials, as whole `_`-separated
/// words of the snake-cased key (`api_key`, `accessToken`, `db_password`; not
/// `max_tokens` or `author`).
pub const DEFAULT_SECRET_NAMES: &str = r"(^|_)(password|passwd|passphrase|pwd|secret|token|api_?key|apikey|access_?key|private_?key|authorization|auth_?header|credentials?|cookie|session_?id|client_?secret|bearer)(_|$)";

/// The deployment's secret-name pattern. Cheap to clone: clones share one compiled
/// pattern and its match caches (a cloned `regex::Regex` starts a cache pool of its own,
/// and the executor is cloned for every call — that cost 15 % of MCP throughput).
#[derive(Clone, Debug)]
pub struct SecretNames(std::sync::Arc<regex::Regex>);

impl SecretNames {
    /// A pattern (Rust `regex` syntax) matched against snake-cased argument names.
    pub fn new(pattern: &str) -> Result<Self, regex::Error> {
        Ok(Self(std::sync::Arc::new(regex::Regex::new(pattern)?)))
    }

    /// Whether an argument named `key` holds a secret.
    pub fn matches(&self, key: &str) -> bool {
        self.0.is_match(&snake_case(key))
    }
}

impl Default for SecretNames {
    fn default() -> Self {
        Self::new(DEFAULT_SECRET_NAMES).expect("the default secret-name pattern compiles")
    }
}

/// `apiKey`, `API-Key`, `api key` → `api_key`; a name already in snake case (most
/// argument names: this runs for every key of every call) is not copied.
fn snake_case(key: &str) -> std::borrow::Cow<'_, str> {
    if !key
        .chars()
        .any(|c| c.is_uppercase() || matches!(c, '-' | ' ' | '.'))
    {
        return std::borrow::Cow::Borrowed(key);
    }
    let mut out = String::with_capacity(key.len() + 4);
    let mut previous_lower = false;
    for c in key.chars() {
        if c.is_uppercase() {
            if previous_lower {
                out.push('_');
            }
            out.extend(c.to_lowercase());
            previous_lower = false;
        } else if c == '-' || c == ' ' || c == '.' {
            out.push('_');
            previous_lower = false;
        } else {
            out.push(c);
            previous_lower = c.is_lowercase() || c.is_ascii_digit();
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One step of a path into the arguments.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Key(String),
    /// Any key of an object (`additionalProperties`).
    AnyKey,
    /// Any element of an array (`items`).
    AnyIndex,
    Index(usize),
}

/// The argument paths an input schema marks secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchemaSecrets(Vec<Vec<Step>>);

/// How deep the schema walk goes (nesting and `$ref` hops together), and how many schema
/// nodes it visits in all: bounds against recursive or hostile (federated) schemas, far
/// beyond any real tool's arguments.
const MAX_DEPTH: usize = 24;
const MAX_NODES: usize = 10_000;

impl SchemaSecrets {
    /// The secret paths of `schema`.
    pub fn of(schema: &Value) -> Self {
        let mut walker = Walker {
            root: schema,
            found: Vec::new(),
            path: Vec::new(),
            following: Vec::new(),
            budget: MAX_NODES,
        };
        walker.walk(schema);
        let mut paths = walker.found;
        paths.sort();
        paths.dedup();
        Self(paths)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn is_secret(schema: &Value) -> bool {
    schema.get("writeOnly") == Some(&Value::Bool(true))
        || schema.get("format").and_then(Value::as_str) == Some("password")
}

/// One walk over a schema, collecting the paths of secret fields.
struct Walker<'a> {
    root: &'a Value,
    found: Vec<Vec<Step>>,
    /// Where in the arguments the schema being walked applies.
    path: Vec<Step>,
    /// The `$ref`s being followed, outermost first.
    following: Vec<&'a str>,
    budget: usize,
}

impl<'a> Walker<'a> {
    fn walk(&mut self, schema: &'a Value) {
        if self.path.len() + self.following.len() > MAX_DEPTH || self.budget == 0 {
            return;
        }
        self.budget -= 1;
        let Some(object) = schema.as_object() else {
            return;
        };
        if is_secret(schema) && !self.path.is_empty() {
            self.found.push(self.path.clone());
            return;
        }
        // A `$ref` is followed unless it is already being followed further up: a
        // recursive schema marks the same fields at every level, so one level tells all.
        if let Some(reference) = object.get("$ref").and_then(Value::as_str)
            && let Some(target) = reference
                .strip_prefix('#')
                .and_then(|p| self.root.pointer(p))
            && !self.following.contains(&reference)
        {
            self.following.push(reference);
            self.walk(target);
            self.following.pop();
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            for branch in object
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.walk(branch);
            }
        }
        if let Some(properties) = object.get("properties").and_then(Value::as_object) {
            for (name, sub) in properties {
                self.nested(Step::Key(name.clone()), sub);
            }
        }
        if let Some(sub) = object.get("additionalProperties") {
            self.nested(Step::AnyKey, sub);
        }
        if let Some(prefix) = object.get("prefixItems").and_then(Value::as_array) {
            for (i, sub) in prefix.iter().enumerate() {
                self.nested(Step::Index(i), sub);
            }
        }
        match object.get("items") {
            Some(Value::Array(tuple)) => {
                for (i, sub) in tuple.iter().enumerate() {
                    self.nested(Step::Index(i), sub);
                }
            }
            Some(sub) => self.nested(Step::AnyIndex, sub),
            None => {}
        }
    }

    fn nested(&mut self, step: Step, schema: &'a Value) {
        self.path.push(step);
        self.walk(schema);
        self.path.pop();
    }
}

/// `args` as the audit keeps them: every secret value replaced by [`MASK`].
pub fn mask(
    args: &Value,
    schema: &SchemaSecrets,
    pointers: &[String],
    names: &SecretNames,
) -> Value {
    let mut masked = args.clone();
    for path in &schema.0 {
        mask_path(&mut masked, path);
    }
    for pointer in pointers {
        if let Some(slot) = masked.pointer_mut(pointer) {
            *slot = Value::String(MASK.to_owned());
        }
    }
    mask_names(&mut masked, names, 0);
    masked
}

fn mask_path(value: &mut Value, path: &[Step]) {
    let Some((step, rest)) = path.split_first() else {
        *value = Value::String(MASK.to_owned());
        return;
    };
    match (step, value) {
        (Step::Key(key), Value::Object(map)) => {
            if let Some(slot) = map.get_mut(key) {
                mask_path(slot, rest);
            }
        }
        (Step::AnyKey, Value::Object(map)) => {
            for slot in map.values_mut() {
                mask_path(slot, rest);
            }
        }
        (Step::AnyIndex, Value::Array(items)) => {
            for slot in items {
                mask_path(slot, rest);
            }
        }
        (Step::Index(i), Value::Array(items)) => {
            if let Some(slot) = items.get_mut(*i) {
                mask_path(slot, rest);
            }
        }
        _ => {}
    }
}

/// Masks every value under a key `names` matches. Arguments nest no deeper than JSON
/// parsing allowed (serde_json's 128 levels); the bound is kept here too.
fn mask_names(value: &mut Value, names: &SecretNames, depth: usize) {
    if depth > 128 {
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, slot) in map.iter_mut() {
                if names.matches(key) {
                    *slot = Value::String(MASK.to_owned());
                } else {
                    mask_names(slot, names, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            for slot in items {
                mask_names(slot, names, depth + 1);
            }
        }
        _ => {}
    }
}

/// The values [`mask`] hid in `masked` (`args` as masked): every string or number of
/// four characters or more under a slot `masked` holds [`MASK`] where `args` held
/// something else. Nothing is allocated for a call without secrets.
pub fn masked_values(args: &Value, masked: &Value) -> Vec<String> {
    fn hidden(original: &Value, out: &mut Vec<String>, depth: usize) {
        match original {
            Value::String(s) if s.chars().count() >= 4 => out.push(s.clone()),
            Value::Number(n) => {
                let n = n.to_string();
                if n.len() >= 4 {
                    out.push(n);
                }
            }
            Value::Array(items) if depth < 128 => {
                for item in items {
                    hidden(item, out, depth + 1);
                }
            }
            Value::Object(map) if depth < 128 => {
                for item in map.values() {
                    hidden(item, out, depth + 1);
                }
            }
            _ => {}
        }
    }
    fn walk(args: &Value, masked: &Value, out: &mut Vec<String>, depth: usize) {
        match (args, masked) {
            (Value::String(a), Value::String(m)) if a == m => {}
            (original, Value::String(m)) if m == MASK => hidden(original, out, depth),
            (Value::Object(a), Value::Object(m)) if depth < 128 => {
                for (key, value) in a {
                    if let Some(slot) = m.get(key) {
                        walk(value, slot, out, depth + 1);
                    }
                }
            }
            (Value::Array(a), Value::Array(m)) if depth < 128 => {
                for (value, slot) in a.iter().zip(m) {
                    walk(value, slot, out, depth + 1);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(args, masked, &mut out, 0);
    out
}

/// `text` with every one of `secrets` in it replaced by [`MASK`]: a message that repeats
/// what the caller sent (an upstream's "invalid password 'hunter2'") keeps no secret
/// the arguments' masking hid, whether it repeats it as given, escaped in JSON (the
/// arguments echoed as a document) or percent-encoded (a URL the secret went into).
pub fn scrub(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_owned();
    for secret in secrets {
        for form in repeated_as(secret) {
            if text.contains(form.as_str()) {
                text = text.replace(form.as_str(), MASK);
            }
        }
    }
    text
}

/// The forms a message may repeat `secret` in: as given, then those that differ from it
/// (inside a JSON string; form- and percent-encoded, as query strings and paths carry it).
fn repeated_as(secret: &str) -> Vec<String> {
    let mut forms = vec![secret.to_owned()];
    let json = serde_json::to_string(secret).unwrap_or_default();
    let json = json
        .strip_prefix('"')
        .and_then(|j| j.strip_suffix('"'))
        .unwrap_or(secret);
    let form: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
    let percent = form.replace('+', "%20");
    for other in [json.to_owned(), form, percent] {
        if !forms.contains(&other) {
            forms.push(other);
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_values_masking_hid_are_scrubbed_from_a_message() {
        let names = SecretNames::default();
        let args = json!({
            "user": "ann",
            "password": "hunter2",
            "pin": 987654,
            "credentials": {"key": "k-123456", "short": "ab"},
            "tokens": [{"token": "t-999"}],
            "note": "***",
        });
        let masked = mask(&args, &SchemaSecrets::default(), &[], &names);
        let hidden = masked_values(&args, &masked);
        assert_eq!(hidden, ["k-123456", "hunter2", "t-999"], "{masked}");
        assert_eq!(
            scrub(
                "login as ann with hunter2 failed (key k-123456, t-999)",
                &hidden
            ),
            "login as ann with *** failed (key ***, ***)"
        );
        assert!(masked_values(&json!({"path": "a.txt"}), &json!({"path": "a.txt"})).is_empty());
    }

    #[test]
    fn a_secret_repeated_escaped_or_encoded_is_scrubbed_too() {
        let hidden = ["p\"w/d s+=".to_owned()];
        let echoed = json!({"password": &hidden[0]}).to_string();
        assert_eq!(
            scrub(&format!("bad arguments {echoed}"), &hidden),
            r#"bad arguments {"password":"***"}"#
        );
        assert_eq!(
            scrub(
                "GET https://api.test/login?pw=p%22w%2Fd+s%2B%3D failed; path /u/p%22w%2Fd%20s%2B%3D",
                &hidden
            ),
            "GET https://api.test/login?pw=*** failed; path /u/***"
        );
        assert_eq!(scrub("said p\"w/d s+=", &hidden), "said ***");
    }

    #[test]
    fn names_are_matched_as_snake_case_words() {
        let names = SecretNames::default();
        for secret in [
            "api_key",
            "apiKey",
            "API-Key",
            "token",
            "accessToken",
            "db_password",
            "client_secret",
            "Authorization",
            "x-api-key",
        ] {
            assert!(names.matches(secret), "{secret}");
        }
        for plain in ["max_tokens", "author", "path", "tokenizer", "keys", "url"] {
            assert!(!names.matches(plain), "{plain}");
        }
    }

    #[test]
    fn schema_marks_are_found_through_nesting_and_refs() {
        let schema = json!({
            "type": "object",
            "$defs": {"cred": {"type": "string", "writeOnly": true}},
            "properties": {
                "url": {"type": "string"},
                "login": {"type": "object", "properties": {"pin": {"type": "string", "format": "password"}}},
                "keys": {"type": "array", "items": {"$ref": "#/$defs/cred"}},
                "headers": {"type": "object", "additionalProperties": {"type": "string", "writeOnly": true}},
                "either": {"anyOf": [{"type": "object", "properties": {"otp": {"writeOnly": true}}}]}
            }
        });
        let secrets = SchemaSecrets::of(&schema);
        let args = json!({
            "url": "https://x",
            "login": {"pin": "1234"},
            "keys": ["a", "b"],
            "headers": {"X-Custom": "v"},
            "either": {"otp": "9"},
            "nested": {"config": {"apiKey": "k", "name": "n"}}
        });
        let masked = mask(&args, &secrets, &[], &SecretNames::default());
        assert_eq!(
            masked,
            json!({
                "url": "https://x",
                "login": {"pin": "***"},
                "keys": ["***", "***"],
                "headers": {"X-Custom": "***"},
                "either": {"otp": "***"},
                "nested": {"config": {"apiKey": "***", "name": "n"}}
            })
        );
    }

    #[test]
    fn a_recursive_schema_is_walked_to_a_bound() {
        // Two branches per level: unbounded, this would visit 2^24 nodes.
        let schema = json!({"properties": {"a": {"$ref": "#"}, "b": {"$ref": "#"}, "c": {"writeOnly": true}}});
        let secrets = SchemaSecrets::of(&schema);
        assert!(!secrets.is_empty());
    }
}
