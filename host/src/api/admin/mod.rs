//! The admin API: the routes under `/v1/admin/`, one module per resource. A handler parses
//! (its path, query and body into the shared types of [`crate::ops::types`]), authenticates
//! the bearer key into the acting admin identity ([`AdminActor`]) and calls [`crate::ops`],
//! where the rules and the transactions are; nothing else.

pub(super) mod admins;
pub(super) mod attestors;
pub(super) mod join_requests;
pub(super) mod journal;
pub(super) mod nodes;
pub(super) mod pools;
pub(super) mod prune;
pub(super) mod tenants;
pub(super) mod tokens;
pub(super) mod workflows;

use axum::Json;
use axum::extract::FromRequestParts;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::error::ApiError;
use super::{AppState, NEXT_CURSOR};
use crate::ops::{Actor, Page};

/// The admin identity a request acts as: its `Authorization: Bearer` key, checked against
/// the configured key and the named identities ([`crate::ops::admins::authenticate`]). The
/// first extractor of every admin handler, so nothing of an unauthenticated request is read.
pub(super) struct AdminActor(pub(super) Actor);

impl FromRequestParts<AppState> for AdminActor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let presented = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or_default();
        // The configured key, or the previous one until its rotation window ends.
        let bootstrap = |key: &str| state.admin_keys.accepts(key, crate::wall_clock::now_ms());
        match crate::ops::admins::authenticate(&state.db, bootstrap, presented).await {
            Ok(actor) => Ok(Self(actor)),
            Err(crate::ops::admins::AuthError::Store(e)) => Err(e.into()),
            Err(refused) => {
                tracing::info!(reason = %refused, path = %parts.uri.path(), "admin request refused");
                Err(ApiError::Unauthenticated)
            }
        }
    }
}

/// A page as JSON, with [`NEXT_CURSOR`] when it is full.
pub(super) fn page<T: Serialize>(page: Page<T>) -> Response {
    let mut response = Json(page.rows).into_response();
    if let Some(next) = page.next
        && let Ok(value) = axum::http::HeaderValue::from_str(&next)
    {
        response.headers_mut().insert(NEXT_CURSOR, value);
    }
    response
}

/// A JSON body, or the invalid-input (or too-large) answer its rejection is.
pub(super) fn body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    body.map(|Json(v)| v).map_err(ApiError::from)
}

/// A query, or the invalid-input answer its rejection is.
pub(super) fn query<T>(
    query: Result<axum::extract::Query<T>, QueryRejection>,
) -> Result<T, ApiError> {
    query.map(|q| q.0).map_err(ApiError::from)
}
