//! The admin API's HTTPS client: typed requests and answers (the shared
//! [`crate::ops::types`]), so a field the server renames breaks this build, not a run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::output::escape;
use crate::cli::AdminConnection;

/// The query of a list that takes none but its page.
pub(in crate::cli) const NO_QUERY: &[(&str, &str)] = &[];

/// A connection to one host's admin API with one admin key.
pub(in crate::cli) struct Client {
    http: reqwest::Client,
    /// The host's base URL (what `token create` and `workflows start` print and render).
    pub(in crate::cli) base: String,
    key: String,
    /// The `--ca` file, named in a trust failure.
    ca: PathBuf,
    /// Rows per list request.
    pub(in crate::cli) page_size: u32,
}

impl Client {
    pub(in crate::cli) fn new(conn: &AdminConnection) -> anyhow::Result<Self> {
        let dir = conn.data_dir.as_deref();
        let base = match (&conn.server, dir) {
            (Some(s), _) => s.trim_end_matches('/').to_owned(),
            (None, Some(dir)) => format!("https://{}", dev_listen(dir)?),
            (None, None) => bail!("pass --server (or --data-dir of a dev host)"),
        };
        let ca_path = conn
            .ca
            .clone()
            .or_else(|| dir.map(|d| d.join("tls/ca.pem")))
            .context("pass --ca (or --data-dir)")?;
        let key_path = conn
            .admin_key_file
            .clone()
            .or_else(|| dir.map(|d| d.join("admin.key")))
            .context("pass --admin-key-file (or --data-dir)")?;
        let key = std::fs::read_to_string(&key_path)
            .with_context(|| format!("reading {}", key_path.display()))?
            .trim()
            .to_owned();
        // reqwest is built without a crypto provider, so that aws-lc-rs is the one TLS stack
        // (its default features would link ring too): make aws-lc-rs the process default.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(load_ca(&ca_path)?)
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            http,
            base,
            key,
            ca: ca_path,
            page_size: conn.page_size,
        })
    }

    /// A request that got no answer: a TLS trust failure (the host's certificate is not from
    /// `--ca`) says so, rather than reading as an unreachable host.
    fn send_error(&self, e: reqwest::Error, path: &str) -> anyhow::Error {
        if gatehouse_agent::is_tls_trust_error(&e) {
            anyhow::anyhow!(
                "TLS trust failure calling {}{path}: the host's certificate is not trusted by \
                 --ca {}: {}",
                self.base,
                self.ca.display(),
                gatehouse_agent::error_line(&e)
            )
        } else {
            anyhow::anyhow!(
                "cannot reach the host at {}{path}: {}",
                self.base,
                gatehouse_agent::error_line(&e)
            )
        }
    }

    /// Sends a request and reads the answer as `T`, or fails with the host's error.
    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
        path: &str,
    ) -> anyhow::Result<(T, Option<String>)> {
        let resp = req
            .bearer_auth(&self.key)
            .send()
            .await
            .map_err(|e| self.send_error(e, path))?;
        let status = resp.status();
        let next = resp
            .headers()
            .get(crate::api::NEXT_CURSOR)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = resp.bytes().await.map_err(|e| self.send_error(e, path))?;
        if !status.is_success() {
            let error: gatehouse_proto::ApiError =
                serde_json::from_slice(&bytes).unwrap_or_else(|_| gatehouse_proto::ApiError {
                    code: String::new(),
                    message: String::from_utf8_lossy(&bytes).into_owned(),
                    retryable: None,
                });
            bail!(
                "{status}: {} {}",
                escape(&error.code),
                escape(&error.message)
            );
        }
        let value = serde_json::from_slice(&bytes).with_context(|| {
            format!("the host's answer to {path} is not what this client reads")
        })?;
        Ok((value, next))
    }

    /// `GET path`.
    pub(in crate::cli) async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let req = self.http.get(format!("{}{path}", self.base));
        Ok(self.send(req, path).await?.0)
    }

    /// `method path` with a JSON body, or none.
    pub(in crate::cli) async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> anyhow::Result<T> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            req = req.json(body);
        }
        Ok(self.send(req, path).await?.0)
    }

    /// `POST path` with a JSON body.
    pub(in crate::cli) async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// `POST path` without a body.
    pub(in crate::cli) async fn post_empty<T: DeserializeOwned>(
        &self,
        path: &str,
    ) -> anyhow::Result<T> {
        self.call::<(), T>(reqwest::Method::POST, path, None).await
    }

    /// One page of `GET path?query` from `after`: its rows and the next page's cursor.
    pub(in crate::cli) async fn page<Q: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        query: &Q,
        after: Option<&str>,
    ) -> anyhow::Result<(Vec<T>, Option<String>)> {
        let mut req = self
            .http
            .get(format!("{}{path}", self.base))
            .query(query)
            .query(&[("limit", self.page_size.to_string())]);
        if let Some(after) = after {
            req = req.query(&[("after", after)]);
        }
        self.send(req, path).await
    }

    /// Every row of a paged list, a page of `--page-size` rows per request following the
    /// host's cursor: each page is one short transaction on the host.
    pub(in crate::cli) async fn list<Q: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        query: &Q,
    ) -> anyhow::Result<Vec<T>> {
        let mut rows = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let (page, next) = self.page(path, query, after.as_deref()).await?;
            rows.extend(page);
            match next {
                Some(next) if after.as_deref() != Some(next.as_str()) => after = Some(next),
                _ => return Ok(rows),
            }
        }
    }
}

/// The listen address in a dev data directory's configuration.
fn dev_listen(dir: &Path) -> anyhow::Result<String> {
    let config = crate::config::Config::load(&dir.join("gatehouse.toml"))?;
    Ok(config.listen.replace("0.0.0.0", "127.0.0.1"))
}

/// A CA from a PEM file or a join trust file.
fn load_ca(path: &PathBuf) -> anyhow::Result<reqwest::Certificate> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let pem = if text.trim_start().starts_with('{') {
        serde_json::from_str::<gatehouse_proto::JoinTrust>(&text)
            .context("parsing the join trust file")?
            .tls_ca_pem
    } else {
        text
    };
    Ok(reqwest::Certificate::from_pem(pem.as_bytes())?)
}
