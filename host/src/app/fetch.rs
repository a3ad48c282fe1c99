//! Configuration values the host fetches and keeps fresh: `[attestors.<id>.fetch."<key>"]`.
//!
//! An attestor is a sandboxed component with no network, and its keys come from its
//! configuration; but a provider's signing keys rotate (Google's JWKS every few weeks), and an
//! operator should not have to copy them in by hand. So the host fetches each such value at
//! start and then every `every_seconds`, outside any join: a join uses the configuration its
//! attestor was last loaded with and never waits on the network. A new value takes the path an
//! operator's edit takes: the attestor's `configure` judges it and the registry swaps in a new
//! version ([`AttestorWatch`]). A value that could not be fetched, or that the attestor
//! refused, leaves the last good one serving; either is logged and recorded as an event
//! (`attestor.fetch-failed`, `attestor.fetch-refused`). The last good value is kept under
//! `<data_dir>/fetched/`, so a host restarting while the provider is unreachable starts with
//! it; a first start with neither a copy nor an answer fails and says why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use reqwest::Url;
use serde_json::Value;

use super::AttestorWatch;
use crate::config::{Config, FetchFormat, fetch_key_path};
use crate::outbound::{self, OutboundError};
use crate::runtime::{ChangeKind, RuntimeConfig};
use crate::store::{Db, NewEvent};

/// Largest body a fetch accepts (Google's JWKS is about 2 KiB).
const MAX_BODY: usize = 1 << 20;
/// The deadline of one fetch (connect and whole exchange).
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a fetch gave no value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The client could not be set up (URL, CA file).
    #[error("{0}")]
    Client(#[from] OutboundError),
    /// No answer: connection, TLS or timeout.
    #[error("request failed: {0}")]
    Request(String),
    /// An answer other than 200.
    #[error("answered {0}")]
    Status(reqwest::StatusCode),
    /// A body over [`MAX_BODY`].
    #[error("body over {MAX_BODY} bytes")]
    TooLarge,
    /// A body that is not UTF-8 text.
    #[error("body is not UTF-8 text")]
    NotText,
    /// A body that is not JSON, with `format = "json"`.
    #[error("body is not JSON: {0}")]
    NotJson(String),
}

/// One fetched value: where it goes, where it comes from, how often.
pub struct Fetch {
    /// The attestor whose configuration it fills.
    pub attestor: String,
    /// Its dotted key in that configuration.
    pub key: String,
    url: Url,
    every: Duration,
    format: FetchFormat,
    client: reqwest::Client,
    /// The last good value, kept across restarts.
    copy: PathBuf,
}

impl Fetch {
    /// Every `[attestors.<id>.fetch]` entry of `config`, each with its client.
    pub fn all(config: &Config) -> Result<Vec<Fetch>, FetchError> {
        let mut all = Vec::new();
        for (id, section) in &config.attestors {
            for (key, source) in &section.fetch {
                let ca_file = source.ca_file.as_deref().map(|p| config.path(p));
                let (client, url) = outbound::client(&source.url, TIMEOUT, ca_file.as_deref())?;
                all.push(Fetch {
                    attestor: id.clone(),
                    key: key.clone(),
                    url,
                    every: Duration::from_secs(source.every_seconds),
                    format: source.format,
                    client,
                    copy: config
                        .path(Path::new("fetched"))
                        .join(id)
                        .join(format!("{key}.json")),
                });
            }
        }
        Ok(all)
    }

    /// Where this value is, for logs and events (the URL without its query, which may carry
    /// a secret).
    fn source(&self) -> String {
        let mut url = self.url.clone();
        url.set_query(None);
        let _ = url.set_password(None);
        let _ = url.set_username("");
        format!(
            "attestors.{}.fetch.\"{}\" from {url}",
            self.attestor, self.key
        )
    }

    /// Fetches the value once.
    pub async fn get(&self) -> Result<Value, FetchError> {
        let request = |e: reqwest::Error| FetchError::Request(outbound::without_url(e).to_string());
        let mut response = self
            .client
            .get(self.url.clone())
            .send()
            .await
            .map_err(request)?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(FetchError::Status(response.status()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_BODY as u64)
        {
            return Err(FetchError::TooLarge);
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(request)? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(FetchError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        let text = String::from_utf8(body).map_err(|_| FetchError::NotText)?;
        match self.format {
            FetchFormat::Text => Ok(Value::String(text)),
            FetchFormat::Json => {
                serde_json::from_str(&text).map_err(|e| FetchError::NotJson(e.to_string()))
            }
        }
    }

    /// The last good value a previous run kept, if any (an unreadable copy is none).
    fn read_copy(&self) -> Option<Value> {
        let text = std::fs::read(&self.copy).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Keeps `value` as the last good one: written beside, then renamed over the old copy,
    /// so a crash leaves the old copy or the new, never half of one.
    fn write_copy(&self, value: &Value) -> std::io::Result<()> {
        let dir = self.copy.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let temp = self.copy.with_extension("json.new");
        std::fs::write(&temp, serde_json::to_vec(value)?)?;
        std::fs::rename(&temp, &self.copy)
    }
}

/// The fetched values in force, by (attestor, key): laid over the configuration every time the
/// attestors load.
#[derive(Debug, Default)]
pub struct Fetched {
    values: Mutex<BTreeMap<(String, String), Value>>,
}

impl Fetched {
    /// Gets every value at start: the copy a previous run kept (refreshed in the background
    /// soon after), else a fetch now; a value with neither is an error naming both.
    pub async fn prime(fetches: &[Fetch]) -> Result<Self, String> {
        let fetched = Self::default();
        for fetch in fetches {
            let value = match fetch.read_copy() {
                Some(value) => value,
                None => {
                    let value = fetch.get().await.map_err(|e| {
                        format!(
                            "{}: no copy in {} and the fetch failed: {e}",
                            fetch.source(),
                            fetch.copy.display()
                        )
                    })?;
                    if let Err(e) = fetch.write_copy(&value) {
                        tracing::warn!(path = %fetch.copy.display(), error = %e, "could not keep the fetched value");
                    }
                    value
                }
            };
            fetched.set(fetch, Some(value));
        }
        Ok(fetched)
    }

    fn get(&self, fetch: &Fetch) -> Option<Value> {
        let values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        values
            .get(&(fetch.attestor.clone(), fetch.key.clone()))
            .cloned()
    }

    /// Sets (or with `None` removes) `fetch`'s value; returns what it was.
    fn set(&self, fetch: &Fetch, value: Option<Value>) -> Option<Value> {
        let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (fetch.attestor.clone(), fetch.key.clone());
        match value {
            Some(value) => values.insert(key, value),
            None => values.remove(&key),
        }
    }

    /// Lays the values over `config`: each at its dotted key of its attestor's configuration,
    /// creating the tables on the way (the file was checked to leave room for it; a value
    /// already there, from a configuration changed since, is replaced).
    pub fn apply(&self, config: &mut RuntimeConfig) {
        let values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        for ((attestor, key), value) in values.iter() {
            let Some(settings) = config.attestors.get_mut(attestor) else {
                continue;
            };
            let Some(path) = fetch_key_path(key) else {
                continue;
            };
            insert_at(&mut settings.config, &path, value.clone());
        }
    }
}

/// Puts `value` at `path` in `config`, turning what is on the way into objects.
fn insert_at(config: &mut Value, path: &[&str], value: Value) {
    let Some((last, on_the_way)) = path.split_last() else {
        return;
    };
    let mut at = config;
    for part in on_the_way {
        if !at.is_object() {
            *at = Value::Object(serde_json::Map::new());
        }
        let Value::Object(map) = at else { return };
        at = map
            .entry((*part).to_owned())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
    if !at.is_object() {
        *at = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(map) = at {
        map.insert((*last).to_owned(), value);
    }
}

/// Starts one refresh task per fetched value; each runs until aborted.
pub fn refresh(
    fetches: Vec<Fetch>,
    fetched: Arc<Fetched>,
    watch: Arc<AttestorWatch>,
    db: Db,
) -> Vec<tokio::task::JoinHandle<()>> {
    fetches
        .into_iter()
        .map(|fetch| {
            let refresher = Refresher {
                fetch,
                fetched: fetched.clone(),
                watch: watch.clone(),
                db: db.clone(),
            };
            tokio::spawn(refresher.run())
        })
        .collect()
}

/// What a refresher remembers between refreshes.
#[derive(Default)]
struct State {
    /// The last failure recorded as an event (kind, why); none after a success.
    recorded: Option<(&'static str, String)>,
    /// The last value the attestor refused: fetched again, it is not offered again.
    refused: Option<Value>,
}

/// Keeps one value fresh.
struct Refresher {
    fetch: Fetch,
    fetched: Arc<Fetched>,
    watch: Arc<AttestorWatch>,
    db: Db,
}

impl Refresher {
    async fn run(self) {
        // The first refresh is one period after the value was last fetched (the copy's age:
        // a host restarted on a days-old copy refreshes at once), at least a second away.
        let age = std::fs::metadata(&self.fetch.copy)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .unwrap_or_default();
        let first = self
            .fetch
            .every
            .saturating_sub(age)
            .max(Duration::from_secs(1));
        let mut ticks =
            tokio::time::interval_at(tokio::time::Instant::now() + first, self.fetch.every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut state = State::default();
        loop {
            ticks.tick().await;
            self.once(&mut state).await;
        }
    }

    /// One refresh.
    async fn once(&self, state: &mut State) {
        let fetch = &self.fetch;
        let value = match fetch.get().await {
            Ok(value) => value,
            Err(e) => {
                tracing::warn!(source = %fetch.source(), error = %e, "fetch failed; the last good value keeps serving");
                self.failed(state, "attestor.fetch-failed", e.to_string())
                    .await;
                return;
            }
        };
        if state.refused.as_ref() == Some(&value) {
            // The value the attestor refused last time: refused again, already recorded.
            return;
        }
        if self.fetched.get(fetch).as_ref() == Some(&value) {
            // Unchanged and serving: whatever failed before has recovered.
            state.recorded = None;
            return;
        }
        let before = self.fetched.set(fetch, Some(value.clone()));
        let reload = self.watch.reload().await;
        let refused = reload.changes.iter().find(|c| {
            c.kind == ChangeKind::LoadFailed && c.id.as_deref() == Some(fetch.attestor.as_str())
        });
        if let Some(change) = refused {
            self.fetched.set(fetch, before);
            let why = change.reason.clone().unwrap_or_default();
            tracing::warn!(source = %fetch.source(), reason = %why, "the attestor refused the fetched value; the last good value keeps serving");
            state.refused = Some(value);
            self.failed(state, "attestor.fetch-refused", why).await;
            return;
        }
        state.refused = None;
        state.recorded = None;
        if let Err(e) = fetch.write_copy(&value) {
            tracing::warn!(path = %fetch.copy.display(), error = %e, "could not keep the fetched value");
        }
        tracing::info!(source = %fetch.source(), "fetched value applied");
    }

    /// Records a failure as an event, unless it is the one recorded last (a key server down
    /// for an hour is one event, not 3,600).
    async fn failed(&self, state: &mut State, kind: &'static str, why: String) {
        let this = (kind, why);
        if state.recorded.as_ref() == Some(&this) {
            return;
        }
        self.record(this.0, &this.1).await;
        state.recorded = Some(this);
    }

    async fn record(&self, kind: &str, why: &str) {
        let reason = kind.trim_start_matches("attestor.");
        let written = async {
            let mut tx = self.db.begin().await?;
            let at = tx.now().await?;
            tx.insert_event(&NewEvent {
                at,
                kind: kind.to_owned(),
                tenant_id: None,
                node_id: None,
                attestor: Some(self.fetch.attestor.clone()),
                reason: Some(reason.to_owned()),
                token_id: None,
                payload: serde_json::json!({
                    "key": self.fetch.key,
                    "source": self.fetch.source(),
                    "why": why,
                }),
            })
            .await?;
            tx.commit().await
        }
        .await;
        if let Err(e) = written {
            tracing::error!(error = %e, "could not record a fetch failure as an event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::insert_at;
    use serde_json::json;

    #[test]
    fn a_value_goes_at_its_dotted_key_creating_tables_on_the_way() {
        let mut config = json!({ "maxAgeMs": 5, "providers": { "gcp": { "audience": "a" } } });
        insert_at(
            &mut config,
            &["providers", "gcp", "jwks"],
            json!({ "keys": [] }),
        );
        assert_eq!(
            config,
            json!({ "maxAgeMs": 5, "providers": { "gcp": { "audience": "a", "jwks": { "keys": [] } } } })
        );
        let mut empty = serde_json::Value::Null;
        insert_at(&mut empty, &["a", "b"], json!("pem"));
        assert_eq!(empty, json!({ "a": { "b": "pem" } }));
        // A later configuration with a value in the way: the fetched value wins.
        let mut clash = json!({ "a": 1 });
        insert_at(&mut clash, &["a", "b"], json!(2));
        assert_eq!(clash, json!({ "a": { "b": 2 } }));
    }
}
