//! `cloud_iid_call_us_wasm`: the cloud-iid component's verify of one GCE identity token (RS256,
//! the host's native signature check), a fresh instance each call over the in-memory store,
//! starting from its prepared configuration as every join does (WIT `prepared`); and what that
//! saves a join, natively: `cloud_iid_configure_us_native` (parsing the configuration text:
//! PEM, X.509, JWKs) vs `cloud_iid_from_prepared_us_native` (reading the prepared form).
//!
//! The configuration is the test kit's four providers plus AWS's real ap-southeast-2
//! `/rsa2048` and `/signature` certificates (tests/vectors/aws).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use gatehouse::imports::Session;
use gatehouse::pki::Pki;
use gatehouse::runtime::bindings::types as wit;
use gatehouse::runtime::{AttestorSettings, Runtime, RuntimeConfig};
use gatehouse_attestor_cloud_iid::{CloudIid, mint};
use gatehouse_sdk::Attestor as _;
use serde_json::json;

use crate::median;
use crate::memory::MemoryStore;

const ID: &str = "cloud-iid";
const NOW: i64 = 1_800_000_000_000;

/// Medians in microseconds.
pub(super) struct Measured {
    pub call_wasm_us: f64,
    pub configure_native_us: f64,
    pub from_prepared_native_us: f64,
    /// The prepared form's size.
    pub prepared_bytes: usize,
}

fn config(providers: &mint::Providers) -> serde_json::Value {
    let mut config = providers.config(600_000);
    let aws = &mut config["providers"]["aws"];
    let test = aws["certificates"].as_str().unwrap_or_default().to_owned();
    aws["certificates"] = json!(format!(
        "{test}{}",
        include_str!("../../tests/vectors/aws/rsa2048-ap-southeast-2.pem")
    ));
    aws["signatureCertificates"] = json!(include_str!(
        "../../tests/vectors/aws/rsa-ap-southeast-2.pem"
    ));
    config["resolve"] = json!([
        { "provider": "gcp", "account": "bench-project", "tenantId": "root" },
    ]);
    config
}

pub(super) async fn measure(iterations: usize) -> anyhow::Result<Measured> {
    let providers = mint::Providers::new();
    let config = config(&providers);
    let text = config.to_string();
    let pki = Arc::new(Pki::generate("bench.invalid")?);
    let runtime_config = RuntimeConfig {
        attestors: BTreeMap::from([(
            ID.to_owned(),
            AttestorSettings {
                config: config.clone(),
                ..AttestorSettings::default()
            },
        )]),
        ..RuntimeConfig::default()
    };
    let runtime: Runtime<MemoryStore> =
        Runtime::load(&runtime_config, gatehouse::app::builtin_attestors())
            .await
            .context("loading cloud-iid with the benchmark's configuration")?;
    let evidence = mint::bytes(&providers.gcp("bench-project", "vm-1", NOW - 60_000));
    let request = Arc::new(crate::join_request(ID, evidence, vec![1; 32]));

    let mut wasm = Vec::with_capacity(iterations);
    for i in 0..iterations + iterations / 10 {
        let session = Session::new(ID, MemoryStore::new(NOW, []), pki.clone(), vec![1; 32]);
        let started = Instant::now();
        let call = runtime.verify(ID, session, &request).await;
        let took = started.elapsed();
        match call.result {
            Ok(wit::Outcome::Admitted(_)) => {}
            other => bail!(
                "the cloud-iid component did not admit the benchmark token: {:?}",
                other.map(|_| ())
            ),
        }
        if i >= iterations / 10 {
            wasm.push(took);
        }
    }

    let configured = CloudIid::configure(&text).map_err(anyhow::Error::msg)?;
    let prepared = configured.prepare();
    let (mut parse, mut read) = (Vec::new(), Vec::new());
    for i in 0..iterations + iterations / 10 {
        let started = Instant::now();
        let from_text = CloudIid::configure(&text).map_err(anyhow::Error::msg)?;
        let parsed = started.elapsed();
        let started = Instant::now();
        let from_prepared = CloudIid::from_prepared(&prepared);
        let took = started.elapsed();
        ensure!(
            from_prepared.is_some_and(|c| c.prepare() == from_text.prepare()),
            "the prepared form did not read back as the configuration"
        );
        if i >= iterations / 10 {
            parse.push(parsed);
            read.push(took);
        }
    }
    Ok(Measured {
        call_wasm_us: median(wasm),
        configure_native_us: median(parse),
        from_prepared_native_us: median(read),
        prepared_bytes: prepared.len(),
    })
}

#[cfg(test)]
mod tests {
    /// The component admits the token from its prepared configuration (checked inside
    /// `measure`), the prepared form reads back as the parsed one, and the figures are real.
    #[tokio::test]
    async fn the_component_admits_and_both_forms_are_timed() -> anyhow::Result<()> {
        let m = super::measure(20).await?;
        anyhow::ensure!(m.call_wasm_us > 0.0 && m.configure_native_us > 0.0);
        anyhow::ensure!(m.prepared_bytes > 0);
        Ok(())
    }
}
