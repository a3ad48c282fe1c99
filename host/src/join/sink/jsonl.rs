//! The JSON-lines target: one refusal a line, appended.
//!
//! The file is opened again for each line (`O_APPEND`, created with mode 0600), so a rotated
//! file is followed without a restart; each line goes out in one `write`. No fsync: the
//! database holds the record that must survive.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::{DeliveryError, Refusal, SinkError};

pub(super) struct Jsonl {
    path: PathBuf,
}

fn open(path: &Path) -> std::io::Result<std::fs::File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

impl Jsonl {
    /// Checks at start that the file can be appended to (creating it).
    pub(super) fn open(path: &Path) -> Result<Self, SinkError> {
        open(path).map_err(|source| SinkError::Open {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            path: path.to_owned(),
        })
    }

    pub(super) async fn deliver(&self, refusal: &Refusal) -> Result<(), DeliveryError> {
        let mut line = serde_json::to_vec(refusal).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || open(&path)?.write_all(&line))
            .await
            .map_err(std::io::Error::other)??;
        Ok(())
    }
}
