//! The helper against swtpm: an agent that reaches the TPM only through the socket derives,
//! uses and certifies node keys there, and refuses every answer of a forged helper.

use super::*;
use crate::tpm::TpmNodeKey;
use crate::tpm::swtpm::{LocalCa, Swtpm};

/// A helper serving `tpm` on a socket in `dir`, on a runtime of its own.
fn spawn_helper(dir: &Path, tpm: Tpm) -> (PathBuf, tokio::runtime::Runtime) {
    let socket = dir.join("helper.sock");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(async { tokio::net::UnixListener::bind(&socket).unwrap() });
    rt.spawn(serve(listener, tpm));
    (socket, rt)
}

/// A forged helper: answers `ak` and `nodeKey` with the real TPM's values (so the key looks
/// right) but `sign` with a signature of another key, and `certify` with a certification whose
/// signature is flipped.
fn spawn_forger(dir: &Path, tpm: Tpm) -> (PathBuf, std::thread::JoinHandle<()>) {
    let socket = dir.join("forged.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let handle = std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut line = String::new();
            BufReader::new(&stream).read_line(&mut line).unwrap();
            let request: Request = serde_json::from_str(&line).unwrap();
            let response = match request {
                Request::Sign { unique, digest } => {
                    // A real signature, by another node key of the same TPM.
                    let mut other = unique32(&unique).unwrap();
                    other[0] ^= 1;
                    let (r, s) = tpm.sign(other, digest, HashingAlgorithm::Sha256).unwrap();
                    Response {
                        r: Some(r.to_vec()),
                        s: Some(s.to_vec()),
                        ..Response::default()
                    }
                }
                Request::Certify { .. } => {
                    let mut real = serve_request(&tpm, request);
                    if let Some(sig) = real.signature.as_mut() {
                        let last = sig.len() - 1;
                        sig[last] ^= 1;
                    }
                    real
                }
                other => serve_request(&tpm, other),
            };
            let mut text = serde_json::to_vec(&response).unwrap();
            text.push(b'\n');
            stream.write_all(&text).unwrap();
        }
    });
    (socket, handle)
}

#[test]
fn the_agent_uses_the_tpm_only_through_the_helper_and_checks_its_answers() {
    let ca = LocalCa::new().unwrap();
    let sw = Swtpm::start(&ca).unwrap();
    let tpm = sw.open().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (socket, _rt) = spawn_helper(dir.path(), tpm.clone());
    let remote = Tpm::through_helper(&socket);
    assert!(remote.is_helper());
    assert_eq!(remote.tcti(), format!("helper:{}", socket.display()));

    // The same AK and the same derived key as the TPM itself gives.
    let ak = remote.ak_public().unwrap();
    assert_eq!(ak, tpm.ak_public().unwrap());
    let key = TpmNodeKey::generate(&remote).unwrap();
    let local = TpmNodeKey::derive(&tpm, key.unique()).unwrap();
    assert_eq!(key.spki_der(), local.spki_der());
    // Signatures come back checked.
    assert_eq!(key.sign_fixed(b"message").unwrap().len(), 64);
    key.sign_der(b"message").unwrap();
    // A certification by the AK over the nonce, checked too.
    let name = tpm_name(&ak);
    let a = remote
        .key_attestation(name.clone(), key.unique(), [9; 32])
        .unwrap();
    assert_eq!(a.key_public, key.public_area());
    // Another AK name: refused by the helper (the TPM's AK is not that one).
    let mut other = name.clone();
    other[5] ^= 1;
    assert!(
        remote
            .key_attestation(other, key.unique(), [9; 32])
            .is_err()
    );
    // The helper offers nothing else: no enrollment, no clear.
    assert!(matches!(remote.enrollment(), Err(TpmError::Helper(_))));
    assert!(matches!(remote.clear(), Err(TpmError::Helper(_))));
    // And a request that is not one gets an error answer, not a TPM command.
    assert!(serde_json::from_str::<Request>(r#"{"op":"clear"}"#).is_err());
    assert!(
        serve_request(
            &tpm,
            Request::Sign {
                unique: vec![1; 31],
                digest: vec![0; 32]
            }
        )
        .error
        .is_some()
    );
}

#[test]
fn a_forged_helper_signature_or_certification_is_refused() {
    let ca = LocalCa::new().unwrap();
    let sw = Swtpm::start(&ca).unwrap();
    let tpm = sw.open().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (socket, _forger) = spawn_forger(dir.path(), tpm.clone());
    let forged = Tpm::through_helper(&socket);
    let key = TpmNodeKey::generate(&forged).unwrap();
    assert!(matches!(
        key.sign_fixed(b"message"),
        Err(TpmError::BadSignature)
    ));
    assert!(matches!(
        key.sign_der(b"message"),
        Err(TpmError::BadSignature)
    ));
    let name = tpm_name(&tpm.ak_public().unwrap());
    let err = forged
        .key_attestation(name, key.unique(), [9; 32])
        .unwrap_err();
    assert!(
        err.to_string().contains("the helper's certification"),
        "{err}"
    );
}

#[test]
fn requests_and_answers_round_trip_as_json_lines() {
    let r = Request::Certify {
        unique: vec![1; 32],
        ak_name: vec![0, 0x0b, 2],
        qualifying: vec![3; 32],
    };
    let text = serde_json::to_string(&r).unwrap();
    assert!(text.starts_with(r#"{"op":"certify","unique":""#), "{text}");
    assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), r);
    assert_eq!(
        serde_json::to_string(&Request::Ak).unwrap(),
        r#"{"op":"ak"}"#
    );
    let answer = Response {
        r: Some(vec![1; 32]),
        s: Some(vec![2; 32]),
        ..Response::default()
    };
    let text = serde_json::to_string(&answer).unwrap();
    assert_eq!(serde_json::from_str::<Response>(&text).unwrap(), answer);
    assert!(!text.contains("error"));
}
