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

/// A typed value stored as JSON text.
pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Invalid(format!("not JSON: {e}")))
}

/// `items` as a JSON array of strings, which both backends expand into rows of `value`
/// (`json_each` on SQLite, `json_array_elements_text` on Postgres).
pub(crate) fn json_list<T: ToString>(items: impl IntoIterator<Item = T>) -> String {
    Value::from_iter(items.into_iter().map(|item| item.to_string())).to_string()
}
