//! Total decoding of `AnyRow`s: every column read either yields the Rust value or a
//! [`StoreError::Corrupt`] naming the table and column, never a panic.
//!
//! Booleans are stored as integers 0/1 on both backends, because the Any driver decodes a
//! SQLite integer as an integer and a Postgres `boolean` as a boolean, and neither as the
//! other.

use std::str::FromStr;

use serde::de::DeserializeOwned;
use sqlx::any::AnyRow;
use sqlx::{Decode, Row, Type};

use super::StoreError;

/// One row of one table, read column by column.
pub(super) struct Fields<'r> {
    row: &'r AnyRow,
    table: &'static str,
}

impl<'r> Fields<'r> {
    /// Reads `row`, naming `table` in errors.
    pub(super) fn new(row: &'r AnyRow, table: &'static str) -> Self {
        Fields { row, table }
    }

    fn corrupt(&self, column: &str, why: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt(format!("{}.{}: {}", self.table, column, why))
    }

    fn get<T>(&self, column: &str) -> Result<T, StoreError>
    where
        T: for<'a> Decode<'a, sqlx::Any> + Type<sqlx::Any>,
    {
        self.row
            .try_get::<T, _>(column)
            .map_err(|e| self.corrupt(column, e))
    }

    /// A non-null text column.
    pub(super) fn text(&self, column: &str) -> Result<String, StoreError> {
        self.get(column)
    }

    /// A nullable text column.
    pub(super) fn opt_text(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.get(column)
    }

    /// A non-null integer column.
    pub(super) fn i64(&self, column: &str) -> Result<i64, StoreError> {
        self.get(column)
    }

    /// A nullable integer column.
    pub(super) fn opt_i64(&self, column: &str) -> Result<Option<i64>, StoreError> {
        self.get(column)
    }

    /// A non-null integer column that must fit a `u32`.
    pub(super) fn u32(&self, column: &str) -> Result<u32, StoreError> {
        let v = self.i64(column)?;
        u32::try_from(v).map_err(|_| self.corrupt(column, format_args!("{v} is not a u32")))
    }

    /// A non-null integer column that must be non-negative.
    pub(super) fn u64(&self, column: &str) -> Result<u64, StoreError> {
        let v = self.i64(column)?;
        u64::try_from(v).map_err(|_| self.corrupt(column, format_args!("{v} is negative")))
    }

    /// A boolean stored as 0 or 1.
    pub(super) fn bool(&self, column: &str) -> Result<bool, StoreError> {
        match self.i64(column)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.corrupt(column, format_args!("{v} is not a boolean (0 or 1)"))),
        }
    }

    /// A non-null blob column.
    pub(super) fn bytes(&self, column: &str) -> Result<Vec<u8>, StoreError> {
        self.get(column)
    }

    /// A non-null blob column holding a SHA-256 digest.
    pub(super) fn sha256(&self, column: &str) -> Result<[u8; 32], StoreError> {
        let v = self.bytes(column)?;
        self.digest(column, v)
    }

    /// A nullable blob column holding a SHA-256 digest.
    pub(super) fn opt_sha256(&self, column: &str) -> Result<Option<[u8; 32]>, StoreError> {
        match self.get::<Option<Vec<u8>>>(column)? {
            Some(v) => self.digest(column, v).map(Some),
            None => Ok(None),
        }
    }

    fn digest(&self, column: &str, v: Vec<u8>) -> Result<[u8; 32], StoreError> {
        let len = v.len();
        v.try_into()
            .map_err(|_| self.corrupt(column, format_args!("{len} bytes, not a SHA-256")))
    }

    /// A text column holding a name of a text enum.
    pub(super) fn parse<T>(&self, column: &str) -> Result<T, StoreError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        self.text(column)?
            .parse()
            .map_err(|e| self.corrupt(column, e))
    }

    /// A nullable text column holding a name of a text enum.
    pub(super) fn opt_parse<T>(&self, column: &str) -> Result<Option<T>, StoreError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        self.opt_text(column)?
            .map(|v| v.parse().map_err(|e| self.corrupt(column, e)))
            .transpose()
    }

    /// A non-null text column holding JSON.
    pub(super) fn json<T: DeserializeOwned>(&self, column: &str) -> Result<T, StoreError> {
        serde_json::from_str(&self.text(column)?).map_err(|e| self.corrupt(column, e))
    }

    /// A nullable text column holding JSON.
    pub(super) fn opt_json<T: DeserializeOwned>(
        &self,
        column: &str,
    ) -> Result<Option<T>, StoreError> {
        match self.opt_text(column)? {
            Some(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| self.corrupt(column, e)),
            None => Ok(None),
        }
    }
}

/// Encodes a boolean the way [`Fields::bool`] reads it.
pub(super) fn flag(b: bool) -> i16 {
    i16::from(b)
}

/// Encodes a list of strings as the JSON text the list columns hold.
pub(super) fn json_list(list: &[String]) -> String {
    serde_json::Value::Array(
        list.iter()
            .cloned()
            .map(serde_json::Value::String)
            .collect(),
    )
    .to_string()
}
