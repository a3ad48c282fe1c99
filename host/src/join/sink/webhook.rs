//! The webhook target: one `POST` of the refusal's JSON per refusal, through the host's
//! outbound client ([`crate::outbound`]: `https://`, or `http://` to loopback; no redirects).
//! An answer other than 2xx is a failed delivery.

use std::path::Path;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::CONTENT_TYPE;

use super::{DeliveryError, Refusal, SinkError};
use crate::outbound::{self, without_url};

pub(super) struct Webhook {
    client: reqwest::Client,
    url: Url,
}

impl Webhook {
    pub(super) fn new(
        url: &str,
        timeout: Duration,
        ca_file: Option<&Path>,
    ) -> Result<Self, SinkError> {
        let (client, url) = outbound::client(url, timeout, ca_file)?;
        Ok(Self { client, url })
    }

    pub(super) async fn deliver(&self, refusal: &Refusal) -> Result<(), DeliveryError> {
        let body = serde_json::to_vec(refusal).map_err(|e| DeliveryError::Http(e.to_string()))?;
        let response = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| DeliveryError::Http(without_url(e).to_string()))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(DeliveryError::Http(format!("answered {status}")))
        }
    }
}
