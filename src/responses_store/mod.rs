//! TEMPORARY in-memory stand-in for the response store (being built on branch resp-store).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One stored response.
#[derive(Debug, Clone, Default)]
pub struct StoredResponse {
    pub id: String,
    pub client_key_id: Option<String>,
    pub created_ms: i64,
    pub route: String,
    pub provider: String,
    pub previous_id: Option<String>,
    pub input: String,
    pub output: String,
    pub response: String,
}

/// The store.
#[derive(Debug, Clone, Default)]
pub struct ResponseStore(Option<Arc<Mutex<HashMap<String, StoredResponse>>>>);

/// A new response id.
pub fn new_id() -> String {
    format!("resp_{:032x}", fastrand::u128(..))
}

impl ResponseStore {
    pub fn memory() -> ResponseStore {
        ResponseStore(Some(Arc::default()))
    }
    pub fn off() -> ResponseStore {
        ResponseStore(None)
    }
    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }
    pub fn put(&self, r: StoredResponse) {
        if let Some(m) = &self.0 {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(r.id.clone(), r);
        }
    }
    pub async fn get(&self, id: &str, key: Option<&str>) -> Result<Option<StoredResponse>, String> {
        Ok(self.0.as_ref().and_then(|m| {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(id)
                .filter(|r| r.client_key_id.as_deref() == key)
                .cloned()
        }))
    }
    pub async fn delete(&self, id: &str, key: Option<&str>) -> Result<bool, String> {
        let Some(m) = &self.0 else { return Ok(false) };
        let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
        if m.get(id).is_some_and(|r| r.client_key_id.as_deref() == key) {
            m.remove(id);
            return Ok(true);
        }
        Ok(false)
    }
}
