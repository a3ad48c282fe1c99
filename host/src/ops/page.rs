//! Paged lists: every admin list is read a page at a time, one short transaction per page,
//! the client sending back the cursor it was given.

use super::OpsError;
use crate::store::{Cursor, PoolCursor};

/// Rows per page when the client names no `limit`, and the most it may name.
pub const DEFAULT_PAGE: u32 = 500;
/// The largest page.
pub const MAX_PAGE: u32 = 1000;

/// `?after=CURSOR&limit=N` of a list.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct PageRequest {
    /// Where the page starts: the cursor the previous page came with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Rows per page, 1 to [`MAX_PAGE`] ([`DEFAULT_PAGE`] when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// A page of rows and, when it is full, the cursor of the next one.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The rows.
    pub rows: Vec<T>,
    /// Where the next page starts (the key of the last row), present when this page is full.
    pub next: Option<String>,
}

impl<T> Page<T> {
    /// A page of `rows` asked for with `limit`, its next cursor the key of the last row when
    /// the page is full.
    pub(crate) fn new<K: std::fmt::Display>(
        rows: Vec<T>,
        limit: u32,
        key: impl Fn(&T) -> K,
    ) -> Self {
        let next = (rows.len() >= limit as usize)
            .then(|| rows.last().map(|r| key(r).to_string()))
            .flatten();
        Self { rows, next }
    }
}

/// A position in a paged list: `(created_at, id)` for lists in creation order, `(tenant, id)`
/// for pools, the id for events and audits, the tenant id for tenants.
pub(crate) trait PageKey: Sized + std::fmt::Display {
    /// The key as its `Display` wrote it; `None` for anything else.
    fn parse(text: &str) -> Option<Self>;
}

impl PageKey for Cursor {
    fn parse(text: &str) -> Option<Self> {
        Cursor::parse(text)
    }
}

impl PageKey for PoolCursor {
    fn parse(text: &str) -> Option<Self> {
        PoolCursor::parse(text)
    }
}

/// Events and audits: the id of the last row of the previous page.
impl PageKey for i64 {
    fn parse(text: &str) -> Option<Self> {
        text.parse().ok()
    }
}

/// Tenants: the last id of the previous page.
impl PageKey for super::Id {
    fn parse(text: &str) -> Option<Self> {
        super::Id::new(text).ok()
    }
}

impl PageRequest {
    /// The checked limit, and the cursor if the client named one (the caller knows where its
    /// list starts).
    pub(crate) fn resolve<K: PageKey>(&self) -> Result<(Option<K>, u32), OpsError> {
        let limit = self.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(OpsError::invalid(format!("limit must be 1 to {MAX_PAGE}")));
        }
        let after = match &self.after {
            None => None,
            Some(text) => Some(
                K::parse(text)
                    .ok_or_else(|| OpsError::invalid("after is not a cursor of this list"))?,
            ),
        };
        Ok((after, limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_cursors_are_checked() {
        let ok = PageRequest {
            after: Some("7".into()),
            limit: Some(2),
        };
        assert_eq!(ok.resolve::<i64>().unwrap(), (Some(7), 2));
        assert_eq!(
            PageRequest::default().resolve::<i64>().unwrap(),
            (None, DEFAULT_PAGE)
        );
        for limit in [0, MAX_PAGE + 1] {
            let bad = PageRequest {
                after: None,
                limit: Some(limit),
            };
            assert!(bad.resolve::<i64>().is_err());
        }
        let bad = PageRequest {
            after: Some("x".into()),
            limit: None,
        };
        assert!(bad.resolve::<i64>().is_err());
    }

    #[test]
    fn a_full_page_names_the_next() {
        let page = Page::new(vec![1_i64, 2], 2, |r| *r);
        assert_eq!(page.next.as_deref(), Some("2"));
        let page = Page::new(vec![1_i64], 2, |r| *r);
        assert_eq!(page.next, None);
    }
}
