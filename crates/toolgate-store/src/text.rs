//! How the SQL written once for both backends moves values: ids, JSON and lists travel
//! as text (cast on Postgres by each module's macro), and come back through these.

use serde_json::Value;
use uuid::Uuid;

use crate::StoreError;

/// A statement assembled with `format!` from the macros' cast fragments and column lists
/// (never from a caller's value: those are bound).
pub(crate) fn sql(s: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(s)
}

/// An id read back as text.
pub(crate) fn uuid(s: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("bad uuid {s:?}: {e}")))
}

/// JSON read back as text.
pub(crate) fn json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored JSON: {e}")))
}

/// What stands in for U+0000 (NUL) in what is stored: Postgres's `text` cannot hold the
/// character and its `jsonb` refuses the escape `\u0000`, so a NUL in a client's tool
/// name, arguments or MCP client name, or in a tool's result, would fail the write (and
/// with it the call, or the audit batch it shares). U+FFFD, the replacement character.
pub(crate) const NUL_STANDIN: &str = "\u{FFFD}";

/// `s` with every NUL replaced by [`NUL_STANDIN`]; borrowed (no copy) when it has none.
pub(crate) fn without_nul(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') {
        std::borrow::Cow::Owned(s.replace('\0', NUL_STANDIN))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// `value` as JSON text for a `jsonb` column: a NUL in any string or key replaced by
/// [`NUL_STANDIN`] (see there). serde_json writes a NUL only as the escape `\u0000`,
/// so text without that sequence is returned as written.
pub(crate) fn jsonb_text(value: &Value) -> String {
    let text = value.to_string();
    if !text.contains("\\u0000") {
        return text;
    }
    fn clean(value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(without_nul(s).into_owned()),
            Value::Array(items) => Value::Array(items.iter().map(clean).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (without_nul(k).into_owned(), clean(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    clean(value).to_string()
}

/// A typed value stored as JSON text.
pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Invalid(format!("not JSON: {e}")))
}

/// `items` as a JSON array of strings, which both backends expand into rows of `value`
/// (`json_each` on SQLite, `json_array_elements_text` on Postgres).
pub(crate) fn json_list<T: ToString>(items: impl IntoIterator<Item = T>) -> String {
    Value::from_iter(items.into_iter().map(|item| item.to_string())).to_string()
}
