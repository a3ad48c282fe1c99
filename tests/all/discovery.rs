//! Discovery end to end, on every backend: site agents join with site tokens and race for the
//! site's boot lease over mTLS (one wins), the holder renders a boot (a signed assertion under
//! its lease epoch and a discovery token from the site API) onto a kernel command line, and a
//! ramdisk reads it back and joins with attestor `discovery`: a ramdisk certificate of at most
//! 2 hours carrying the commissioning kinds. Then every refusal the seed names, each with its
//! reason in `security.join.refused`: a reused assertion, a stale one, a MAC the machine does
//! not claim, an assertion signed under an epoch the lease has moved past, and one by a
//! retired site node. And the site API's own refusals. Every discovery token comes from a
//! discovery workflow an operator started for the MAC at the site; the site node only fetches
//! it, while it holds the boot lease.

use std::time::Duration;

use gatehouse::store::{NodeCertRow, NodeRole};
use gatehouse_agent::{
    BootEntry, DiscoveryProducer, JoinClient, JoinError, JoinOptions, Joined, NodeKey, SiteClient,
    SiteError, TokenProducer, join, load_identity, read_cmdline, write_identity,
};
use gatehouse_proto::site::LeaseState;
use gatehouse_proto::{Claims, Role, TokenString};

use crate::common::{Backend, TestHost, backends};

const SITE: &str = "fra1";
const MIN: i64 = 60_000;
const UUID: &str = "4c4c4544-0042-3510-8052-b4c04f4e4d32";
const COMMISSIONING: &str =
    "urn:bc:kinds:inventory.refresh,logs.collect,diag.*,disk.wipe,deploy.*,boot.kexec";

/// A site node joined with a site token for [`SITE`]: its identity directory.
async fn site_node(host: &TestHost) -> (tempfile::TempDir, String) {
    let token = host
        .create_token_with(serde_json::json!({
            "role": "site", "uses": 1, "ttlSeconds": 3600, "siteId": SITE,
        }))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let key = NodeKey::generate().unwrap();
    let client = JoinClient::new(&host.url(), &host.trust).unwrap();
    let joined = join(
        &client,
        &host.trust,
        &mut TokenProducer::new(Role::Site),
        Some(&token),
        &key,
        &JoinOptions::default(),
    )
    .await
    .unwrap();
    write_identity(dir.path(), &key, &joined).unwrap();
    (dir, joined.node_id)
}

fn site_client(host: &TestHost, dir: &tempfile::TempDir, site: &str) -> SiteClient {
    SiteClient::new(
        &host.url(),
        &host.trust,
        load_identity(dir.path()).unwrap(),
        site,
    )
    .unwrap()
}

fn entry(mac: &str, not_after: i64) -> BootEntry {
    BootEntry {
        mac: mac.into(),
        workflow_id: None,
        product_uuid: Some(UUID.into()),
        ip: Some("10.20.0.7".into()),
        not_after,
    }
}

fn wall_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// The ramdisk: reads the command line back and joins with attestor discovery as ramdisk,
/// claiming `macs` and the product UUID.
async fn ramdisk_join(
    host: &TestHost,
    cmdline: &str,
    macs: &[&str],
) -> Result<(Joined, NodeKey), JoinError> {
    let creds = read_cmdline(cmdline).unwrap();
    ramdisk_join_with(host, &creds.token, &creds.assertion, macs).await
}

async fn ramdisk_join_with(
    host: &TestHost,
    token: &TokenString,
    assertion: &str,
    macs: &[&str],
) -> Result<(Joined, NodeKey), JoinError> {
    let client = JoinClient::new(&host.url(), &host.trust).unwrap();
    let key = NodeKey::generate().unwrap();
    let options = JoinOptions {
        claims: Claims {
            macs: macs.iter().map(|m| (*m).to_owned()).collect(),
            product_uuid: Some(UUID.into()),
        },
        ..JoinOptions::default()
    };
    let joined = join(
        &client,
        &host.trust,
        &mut DiscoveryProducer::new(assertion),
        Some(token),
        &key,
        &options,
    )
    .await?;
    Ok((joined, key))
}

/// Asserts the join was refused (ACCESS_DENIED to the agent) with `reason` in the last
/// `security.join.refused` event.
#[track_caller]
fn refused(result: Result<(Joined, NodeKey), JoinError>) {
    assert!(
        matches!(result, Err(JoinError::Denied)),
        "expected ACCESS_DENIED, got {:?}",
        result.map(|(j, _)| j.node_id)
    );
}

async fn last_refusal(host: &TestHost) -> String {
    host.refusal_reasons().await.pop().unwrap_or_default()
}

async fn certs(host: &TestHost, node_id: &str) -> Vec<NodeCertRow> {
    let mut tx = host.running.db.begin().await.unwrap();
    let rows = tx.node_certs(node_id).await.unwrap();
    tx.commit().await.unwrap();
    rows
}

/// The operator starts a discovery workflow for `mac` at `site` with `gatehouse workflows
/// start --mac --site` (the admin API underneath): its id.
async fn discovery_workflow(host: &TestHost, site: &str, mac: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (exit, out) = host
        .cli(
            dir.path(),
            &[
                "workflows",
                "start",
                "--mac",
                mac,
                "--site",
                site,
                "--product-uuid",
                UUID,
                "--json",
            ],
        )
        .await;
    let out = exit.output(out).unwrap();
    let body: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(body["kind"], "discovery");
    assert_eq!(body["state"], "running");
    body["id"].as_str().unwrap().to_owned()
}

/// The discovery tokens in the database.
async fn discovery_tokens(host: &TestHost) -> Vec<gatehouse::store::TokenRow> {
    let mut tx = host.running.db.begin().await.unwrap();
    let rows = tx.list_tokens().await.unwrap();
    tx.commit().await.unwrap();
    rows.into_iter()
        .filter(|t| t.role == gatehouse::store::TokenRole::Discovery)
        .collect()
}

/// The reasons of `security.site.refused` events, oldest first.
async fn site_refusals(host: &TestHost) -> Vec<String> {
    host.events()
        .await
        .into_iter()
        .filter(|e| e.kind == "security.site.refused")
        .filter_map(|e| e.reason)
        .collect()
}

async fn retire(host: &TestHost, node_id: &str) {
    let resp = host
        .http()
        .post(format!("{}/v1/admin/nodes/{node_id}/retire", host.url()))
        .bearer_auth(&host.admin_key)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "retire: {}", resp.status());
}

#[tokio::test]
async fn a_ramdisk_joins_through_its_site_agent_and_every_refusal_has_its_reason() {
    for backend in backends() {
        end_to_end(backend).await;
    }
}

async fn end_to_end(backend: Backend) {
    let host = TestHost::start(backend).await;
    let (dir_a, id_a) = site_node(&host).await;
    let (dir_b, id_b) = site_node(&host).await;
    let (a, b) = (
        site_client(&host, &dir_a, SITE),
        site_client(&host, &dir_b, SITE),
    );
    let ttl = Duration::from_secs(60);

    // Two site agents race for the boot lease: exactly one holds it, at epoch 1.
    let (ra, rb) = tokio::join!(a.acquire(ttl), b.acquire(ttl));
    let (holder, holder_id, other, other_id, lease) = match (ra, rb) {
        (Ok(l), Err(SiteError::Conflict(_))) => (&a, &id_a, &b, &id_b, l),
        (Err(SiteError::Conflict(_)), Ok(l)) => (&b, &id_b, &a, &id_a, l),
        (ra, rb) => panic!("expected one winner: {ra:?} / {rb:?}"),
    };
    assert_eq!(
        (lease.name.as_str(), lease.holder.as_str(), lease.epoch),
        ("site:fra1:boot", holder_id.as_str(), 1)
    );
    // The holder renews at its epoch; the other can neither renew nor take it.
    let lease = holder.renew(1, ttl).await.unwrap();
    assert_eq!(lease.epoch, 1);
    assert!(matches!(
        other.renew(1, ttl).await,
        Err(SiteError::Conflict(_))
    ));
    assert!(matches!(
        other.acquire(ttl).await,
        Err(SiteError::Conflict(_))
    ));

    // The operator starts a discovery workflow for each machine that will boot.
    for mac in [
        "52:54:00:00:0a:01",
        "52:54:00:00:0b:01",
        "52:54:00:00:0c:01",
        "52:54:00:00:0d:01",
        "52:54:00:00:0d:02",
        "52:54:00:00:0e:01",
    ] {
        discovery_workflow(&host, SITE, mac).await;
    }

    // The holder renders one boot; the ramdisk reads it back from its command line and joins.
    let now = wall_ms();
    let rendered = holder
        .render_boot(&lease, &entry("52:54:00:00:0a:01", now + 60 * MIN), now)
        .await
        .unwrap();
    let cmdline =
        format!("BOOT_IMAGE=/vmlinuz initrd=ramdisk.img console=ttyS0 {rendered} quiet\n");
    assert!(
        cmdline.len() < 2048,
        "fits a kernel command line: {}",
        cmdline.len()
    );
    let (joined, _) = ramdisk_join(&host, &cmdline, &["52:54:00:00:0a:02", "52:54:00:00:0a:01"])
        .await
        .unwrap();
    assert_eq!(joined.attestor, "discovery");
    // A ramdisk certificate of at most 2 hours (plus the minute it is back-dated), carrying
    // the commissioning kinds in the certificate itself.
    let rows = certs(&host, &joined.node_id).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].role, NodeRole::Ramdisk);
    assert_eq!(rows[0].statements, [COMMISSIONING]);
    assert!(rows[0].not_after - rows[0].not_before <= 2 * 60 * MIN + MIN);
    let (_, leaf) = x509_parser::parse_x509_certificate(&joined.chain[0]).unwrap();
    let uris: Vec<String> = leaf
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::URI(u) => Some((*u).to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(
        uris,
        [
            format!(
                "spiffe://{}/node/{}",
                host.trust.trust_domain, joined.node_id
            ),
            COMMISSIONING.to_owned()
        ]
    );
    let kinds = gatehouse_proto::kinds::parse_statement(&uris[1]).unwrap();
    assert!(gatehouse_proto::kinds::allows(&kinds, "disk.wipe"));
    assert!(gatehouse_proto::kinds::allows(&kinds, "deploy.image"));
    assert!(!gatehouse_proto::kinds::allows(&kinds, "node.exec"));
    let ev = host.events().await;
    assert!(
        ev.iter()
            .any(|e| e.kind == "node.joined"
                && e.node_id.as_deref() == Some(joined.node_id.as_str()))
    );

    // A reused assertion: the same one with a fresh token for the same MAC.
    let creds = read_cmdline(&cmdline).unwrap();
    let again = holder
        .discovery_token(&lease, &entry("52:54:00:00:0a:01", now + 60 * MIN))
        .await
        .unwrap();
    let again = TokenString::parse(&again.token).unwrap();
    refused(ramdisk_join_with(&host, &again, &creds.assertion, &["52:54:00:00:0a:01"]).await);
    assert_eq!(last_refusal(&host).await, "assertion-reused");

    // A stale assertion: signed 16 minutes ago (by the site agent's clock, this machine's),
    // so its notAfter (at most 15 minutes after issuedAt) has passed.
    let mac = "52:54:00:00:0b:01";
    let now = wall_ms();
    let stale_text = holder
        .sign_assertion(&lease, &entry(mac, now + 60 * MIN), now - 16 * MIN)
        .unwrap()
        .to_text();
    let token = holder
        .discovery_token(&lease, &entry(mac, wall_ms() + 60 * MIN))
        .await
        .unwrap();
    refused(
        ramdisk_join_with(
            &host,
            &TokenString::parse(&token.token).unwrap(),
            &stale_text,
            &[mac],
        )
        .await,
    );
    assert_eq!(last_refusal(&host).await, "assertion-stale");

    // A MAC the machine does not claim.
    let now = wall_ms();
    let rendered = holder
        .render_boot(&lease, &entry("52:54:00:00:0c:01", now + 60 * MIN), now)
        .await
        .unwrap();
    refused(ramdisk_join(&host, &rendered, &["52:54:00:00:0c:02"]).await);
    assert_eq!(last_refusal(&host).await, "mac-not-claimed");

    // The lease moves to the other site node (a higher epoch): what the old holder signed
    // under epoch 1 no longer admits, what the new holder signs does.
    let now = wall_ms();
    let fenced = holder
        .render_boot(&lease, &entry("52:54:00:00:0d:01", now + 60 * MIN), now)
        .await
        .unwrap();
    let released = holder.release(lease.epoch).await.unwrap();
    assert_eq!(released.epoch, 1);
    let moved: LeaseState = other.acquire(ttl).await.unwrap();
    assert_eq!((moved.holder.as_str(), moved.epoch), (other_id.as_str(), 2));
    refused(ramdisk_join(&host, &fenced, &["52:54:00:00:0d:01"]).await);
    assert_eq!(last_refusal(&host).await, "lease-epoch");
    // The old holder's renewal at epoch 1 is refused too.
    assert!(matches!(
        holder.renew(1, ttl).await,
        Err(SiteError::Conflict(_))
    ));
    let now = wall_ms();
    let rendered = other
        .render_boot(&moved, &entry("52:54:00:00:0d:02", now + 60 * MIN), now)
        .await
        .unwrap();
    let (joined, _) = ramdisk_join(&host, &rendered, &["52:54:00:00:0d:02"])
        .await
        .unwrap();
    assert_eq!(
        certs(&host, &joined.node_id).await[0].role,
        NodeRole::Ramdisk
    );

    // An assertion by a site node retired after it signed.
    let now = wall_ms();
    let rendered = other
        .render_boot(&moved, &entry("52:54:00:00:0e:01", now + 60 * MIN), now)
        .await
        .unwrap();
    retire(&host, other_id).await;
    refused(ramdisk_join(&host, &rendered, &["52:54:00:00:0e:01"]).await);
    assert_eq!(last_refusal(&host).await, "signer-retired");

    // The retired node's site API is closed, with its reason.
    assert!(matches!(other.renew(2, ttl).await, Err(SiteError::Denied)));
    let site_refusals: Vec<String> = host
        .events()
        .await
        .into_iter()
        .filter(|e| e.kind == "security.site.refused")
        .filter_map(|e| e.reason)
        .collect();
    assert_eq!(site_refusals.last().map(String::as_str), Some("retired"));

    host.stop().await;
}

#[tokio::test]
async fn the_site_api_admits_only_live_site_nodes_for_their_own_site() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let (dir, _) = site_node(&host).await;
        let ttl = Duration::from_secs(30);

        // Another site's lease.
        let foreign = site_client(&host, &dir, "ams1");
        assert!(matches!(foreign.acquire(ttl).await, Err(SiteError::Denied)));
        // A TTL out of bounds is a bad request, not a refusal.
        let mine = site_client(&host, &dir, SITE);
        assert!(matches!(
            mine.acquire(Duration::from_secs(3600)).await,
            Err(SiteError::Host { status: 400, .. })
        ));
        // Acquiring again while holding keeps the epoch; after a release, a new epoch.
        let l1 = mine.acquire(ttl).await.unwrap();
        assert_eq!(mine.acquire(ttl).await.unwrap().epoch, l1.epoch);
        mine.release(l1.epoch).await.unwrap();
        assert!(matches!(
            mine.release(l1.epoch).await,
            Err(SiteError::Conflict(_))
        ));
        assert_eq!(mine.acquire(ttl).await.unwrap().epoch, l1.epoch + 1);

        // A node (not a site node) with a valid certificate.
        let token = host.create_token("node", 1).await;
        let node_dir = tempfile::tempdir().unwrap();
        let key = NodeKey::generate().unwrap();
        let client = JoinClient::new(&host.url(), &host.trust).unwrap();
        let joined = join(
            &client,
            &host.trust,
            &mut TokenProducer::new(Role::Node),
            Some(&token),
            &key,
            &JoinOptions::default(),
        )
        .await
        .unwrap();
        write_identity(node_dir.path(), &key, &joined).unwrap();
        let not_site = site_client(&host, &node_dir, SITE);
        assert!(matches!(
            not_site.acquire(ttl).await,
            Err(SiteError::Denied)
        ));
        let held = mine.acquire(ttl).await.unwrap();
        discovery_workflow(&host, SITE, "52:54:00:00:0f:01").await;
        assert!(matches!(
            not_site
                .discovery_token(&held, &entry("52:54:00:00:0f:01", wall_ms() + MIN))
                .await,
            Err(SiteError::Denied)
        ));

        assert_eq!(
            site_refusals(&host).await,
            ["foreign-lease", "not-a-site-node", "not-a-site-node"]
        );

        // The token of the operator's workflow, fetched by the lease holder: single use,
        // discovery, the workflow's site, bound to its MAC and product UUID.
        let workflow = discovery_workflow(&host, SITE, "52:54:00:00:0f:02").await;
        let minted = mine
            .discovery_token(&held, &entry("52:54:00:00:0f:02", wall_ms() + MIN))
            .await
            .unwrap();
        let mut tx = host.running.db.begin().await.unwrap();
        let row = tx.lock_token(&minted.id).await.unwrap().unwrap();
        tx.commit().await.unwrap();
        assert_eq!(row.role, gatehouse::store::TokenRole::Discovery);
        assert_eq!((row.uses_total, row.uses_left), (1, 1));
        assert_eq!(row.site_id.as_deref(), Some(SITE));
        assert_eq!(row.expect.mac.as_deref(), Some("52:54:00:00:0f:02"));
        assert_eq!(row.expect.product_uuid.as_deref(), Some(UUID));
        // Fetching again mints a new token and revokes the unspent one: one live token per
        // workflow.
        let named = BootEntry {
            workflow_id: Some(workflow.clone()),
            ..entry("52:54:00:00:0f:02", wall_ms() + MIN)
        };
        let second = mine.discovery_token(&held, &named).await.unwrap();
        let live: Vec<String> = discovery_tokens(&host)
            .await
            .into_iter()
            .filter(|t| !t.revoked)
            .map(|t| t.id)
            .collect();
        assert_eq!(live, std::slice::from_ref(&second.id));
        // Cancelling the workflow revokes its token and closes the fetch.
        let resp = host
            .http()
            .post(format!(
                "{}/v1/admin/workflows/{workflow}/cancel",
                host.url()
            ))
            .bearer_auth(&host.admin_key)
            .send()
            .await
            .unwrap();
        let cancelled: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(cancelled["tokenRevoked"], true, "{cancelled}");
        assert!(discovery_tokens(&host).await.iter().all(|t| t.revoked));
        assert!(matches!(
            mine.discovery_token(&held, &named).await,
            Err(SiteError::Denied)
        ));
        assert_eq!(
            site_refusals(&host).await.last().map(String::as_str),
            Some("no-workflow")
        );

        host.stop().await;
    }
}

/// Rule 10, deterministically: the boot lease changes hands while a ramdisk's join is in
/// flight. The attestor reads the lease at the epoch the assertion was signed under (the move
/// is not committed yet); the join's locked phase then waits on the lease row's lock, the move
/// commits, the re-read sees epoch 2, the round runs again and the attestor refuses
/// `lease-epoch`. No ramdisk node is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_a_lease_moved_mid_join_admits_nothing() {
    if !backends().contains(&Backend::Postgres) {
        return;
    }
    let host = TestHost::start(Backend::Postgres).await;
    let (dir_a, _) = site_node(&host).await;
    let (_dir_b, id_b) = site_node(&host).await;
    let a = site_client(&host, &dir_a, SITE);
    let lease = a.acquire(Duration::from_secs(60)).await.unwrap();
    let mac = "52:54:00:00:1a:01";
    discovery_workflow(&host, SITE, mac).await;
    let now = wall_ms();
    let rendered = a
        .render_boot(&lease, &entry(mac, now + 60 * MIN), now)
        .await
        .unwrap();
    let nodes_before = host
        .running
        .db
        .begin()
        .await
        .unwrap()
        .list_nodes()
        .await
        .unwrap()
        .len();

    let mut moving = host.running.db.begin().await.unwrap();
    moving
        .put_lease(&gatehouse::store::LeaseRow {
            name: lease.name.clone(),
            holder: id_b,
            epoch: lease.epoch + 1,
            expires_at: host.now().await + 60_000,
        })
        .await
        .unwrap();
    use sqlx::Connection as _;
    let mut watch = sqlx::PgConnection::connect(&host.database_url)
        .await
        .unwrap();
    let macs = [mac];
    let (joined, ()) = tokio::join!(ramdisk_join(&host, &rendered, &macs), async {
        crate::common::lock_waiters(&mut watch, 1).await;
        moving.commit().await.unwrap();
    });
    refused(joined);
    assert_eq!(last_refusal(&host).await, "lease-epoch");
    let nodes_after = host
        .running
        .db
        .begin()
        .await
        .unwrap()
        .list_nodes()
        .await
        .unwrap()
        .len();
    assert_eq!(nodes_after, nodes_before, "a ramdisk node was admitted");
    host.stop().await;
}

#[tokio::test]
async fn a_discovery_token_is_fetched_only_by_the_lease_holder_of_the_workflows_site() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let (dir_a, _) = site_node(&host).await;
        let (dir_b, _) = site_node(&host).await;
        let (a, b) = (
            site_client(&host, &dir_a, SITE),
            site_client(&host, &dir_b, SITE),
        );
        let ttl = Duration::from_secs(30);
        let mac = "52:54:00:00:1a:01";
        let workflow = discovery_workflow(&host, SITE, mac).await;
        // Another site's workflow, for another MAC and for the same one.
        let foreign = discovery_workflow(&host, "ams1", "52:54:00:00:1a:02").await;
        discovery_workflow(&host, "ams1", mac).await;

        // Nobody holds the lease yet: a node naming any epoch is refused.
        let not_held = LeaseState {
            name: "site:fra1:boot".into(),
            holder: String::new(),
            epoch: 1,
            expires_at: 0,
        };
        let e = entry(mac, wall_ms() + MIN);
        assert!(matches!(
            a.discovery_token(&not_held, &e).await,
            Err(SiteError::Denied)
        ));
        let lease = a.acquire(ttl).await.unwrap();
        // A site node of the same site that does not hold the lease.
        assert!(matches!(
            b.discovery_token(&lease, &e).await,
            Err(SiteError::Denied)
        ));
        // The holder, naming an epoch it does not hold.
        let stale = LeaseState {
            epoch: lease.epoch + 1,
            ..lease.clone()
        };
        assert!(matches!(
            a.discovery_token(&stale, &e).await,
            Err(SiteError::Denied)
        ));
        // The holder asking for another site's MAC, or naming another site's workflow, or
        // its own workflow with another MAC.
        for (mac, workflow_id) in [
            ("52:54:00:00:1a:02", None),
            ("52:54:00:00:1a:02", Some(foreign.clone())),
            (mac, Some(foreign.clone())),
            ("52:54:00:00:1a:03", Some(workflow.clone())),
        ] {
            let e = BootEntry {
                workflow_id,
                ..entry(mac, wall_ms() + MIN)
            };
            assert!(matches!(
                a.discovery_token(&lease, &e).await,
                Err(SiteError::Denied)
            ));
        }
        // Nothing was minted by any of it.
        assert!(discovery_tokens(&host).await.is_empty());
        assert_eq!(
            site_refusals(&host).await,
            [
                "not-lease-holder",
                "not-lease-holder",
                "not-lease-holder",
                "no-workflow",
                "no-workflow",
                "no-workflow",
                "no-workflow",
            ]
        );
        // After the lease moves, the old holder is refused and the new one fetches.
        a.release(lease.epoch).await.unwrap();
        let moved = b.acquire(ttl).await.unwrap();
        assert!(matches!(
            a.discovery_token(&lease, &e).await,
            Err(SiteError::Denied)
        ));
        let named = BootEntry {
            workflow_id: Some(workflow.clone()),
            ..e.clone()
        };
        let token = b.discovery_token(&moved, &named).await.unwrap();
        let rows = discovery_tokens(&host).await;
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].id, token.id);
        assert_eq!(rows[0].site_id.as_deref(), Some(SITE));
        assert_eq!(rows[0].expect.mac.as_deref(), Some(mac));
        host.stop().await;
    }
}
