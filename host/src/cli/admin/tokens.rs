//! `gatehouse token create|list|revoke`.

use std::io::Write;

use clap::{Args, Subcommand};

use super::client::{Client, NO_QUERY};
use super::output::{OutputArgs, Table, cell, escape, time, write_json};
use crate::cli::AdminConnection;
use crate::ops::Id;
use crate::ops::types::{CreateToken, CreatedToken, RevokedToken, Token, TokenExpectation};
use crate::store::TokenRole;

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum TokenCommand {
    /// Creates a token and prints it (shown once), and on stderr the agent command that joins
    /// a machine with it.
    Create(CreateTokenArgs),
    /// Lists tokens (never their secrets).
    List(ListArgs),
    /// Revokes a token.
    Revoke(RevokeArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ListArgs {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct RevokeArgs {
    /// The token id.
    id: Id,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct CreateTokenArgs {
    /// node, site, provisioned or discovery.
    #[arg(long)]
    role: TokenRole,
    /// How many joins it admits.
    #[arg(long, default_value_t = 1)]
    uses: u32,
    /// How long it is valid (e.g. 1h, 30m, 7d).
    #[arg(long, default_value = "1h")]
    ttl: humantime::Duration,
    /// The tenant machines join.
    #[arg(long, default_value = "root")]
    tenant: Id,
    /// The pool machines join.
    #[arg(long)]
    pool: Option<Id>,
    /// The site machines belong to.
    #[arg(long)]
    site: Option<Id>,
    /// Bind the token to a product UUID.
    #[arg(long)]
    expect_product_uuid: Option<String>,
    /// Bind the token to a MAC.
    #[arg(long)]
    expect_mac: Option<String>,
    /// Bind the token to re-keying this node.
    #[arg(long)]
    expect_node: Option<Id>,
    /// Allow re-keying a node that already exists for the machine.
    #[arg(long)]
    reclaim: bool,
    // `-o json` prints the whole answer instead of the token alone.
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

impl CreateTokenArgs {
    fn request(&self) -> CreateToken {
        CreateToken {
            role: self.role,
            uses: self.uses,
            ttl_seconds: self.ttl.as_secs(),
            tenant_id: self.tenant.clone(),
            pool_id: self.pool.clone(),
            site_id: self.site.clone(),
            expect: TokenExpectation {
                product_uuid: self.expect_product_uuid.clone(),
                mac: self.expect_mac.clone(),
                node_id: self.expect_node.as_ref().map(Id::to_string),
            },
            reclaim: self.reclaim,
        }
    }
}

pub(in crate::cli) async fn token(
    command: TokenCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create(a) => {
            let client = Client::new(&a.conn)?;
            let created: CreatedToken = client.post("/v1/admin/tokens", &a.request()).await?;
            if a.output.json() {
                write_json(out, &created)?;
            } else {
                writeln!(out, "{}", escape(&created.token))?;
                // On stderr, so `TOKEN=$(gatehouse token create …)` still captures the token
                // alone.
                if let Some(command) = agent_command(&client.base, a.role, &created.token) {
                    eprintln!("{command}");
                }
            }
        }
        TokenCommand::List(a) => {
            let list: Vec<Token> = Client::new(&a.conn)?
                .list("/v1/admin/tokens", &NO_QUERY)
                .await?;
            a.output.print(out, &list[..], write_table)?;
        }
        TokenCommand::Revoke(a) => {
            let revoked: RevokedToken = Client::new(&a.conn)?
                .post_empty(&format!("/v1/admin/tokens/{}/revoke", a.id))
                .await?;
            if a.output.json() {
                write_json(out, &revoked)?;
            } else {
                writeln!(out, "token {} revoked", escape(&revoked.id))?;
            }
        }
    }
    Ok(())
}

fn write_table(out: &mut (dyn Write + Send), list: &[Token]) -> anyhow::Result<()> {
    let mut t = Table::new(&[
        "ID",
        "ROLE",
        "TENANT",
        "POOL",
        "SITE",
        "USES LEFT",
        "STATE",
        "EXPIRES",
    ]);
    for token in list {
        let state = if token.revoked {
            "revoked"
        } else if token.uses_left == 0 {
            "spent"
        } else {
            "live"
        };
        t.row(vec![
            escape(&token.id),
            token.role.to_string(),
            escape(&token.tenant_id),
            cell(token.pool_id.as_deref()),
            cell(token.site_id.as_deref()),
            format!("{}/{}", token.uses_left, token.uses_total),
            state.to_owned(),
            time(Some(token.expires_at)),
        ]);
    }
    t.write(out)
}

/// The command that joins a machine with a token of `role` just printed, ready to run on the
/// machine: the token goes in on stdin (`--token-file /dev/stdin`), never on the agent's
/// command line, which other users of the machine can read. Provisioned and discovery tokens
/// are not joined with by hand (user data, a boot server).
fn agent_command(server: &str, role: TokenRole, token: &str) -> Option<String> {
    let join_role = match role {
        TokenRole::Node => "",
        TokenRole::Site => " --role site",
        TokenRole::Provisioned | TokenRole::Discovery => return None,
    };
    // A token is `gh1.<id>.<secret>` of URL-safe characters; anything else is not quoted
    // into a shell command.
    let safe = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/[]".contains(&b))
    };
    if !safe(token) || !safe(server) {
        return None;
    }
    Some(format!(
        "join a machine with it (as root, with join-trust.json from `gatehouse pki trust`):\n  \
         printf '%s' '{token}' | gatehouse-agent join --server {server} --ca join-trust.json \
         --token-file /dev/stdin --out /var/lib/gatehouse-agent{join_role}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_command_is_ready_to_run() {
        let command = agent_command("https://h:8443", TokenRole::Node, "gh1.tok_a.b-c_d").unwrap();
        assert!(
            command.ends_with(
                "printf '%s' 'gh1.tok_a.b-c_d' | gatehouse-agent join --server https://h:8443 \
                 --ca join-trust.json --token-file /dev/stdin --out /var/lib/gatehouse-agent"
            ),
            "{command}"
        );
        assert!(
            agent_command("https://h", TokenRole::Site, "gh1.a.b")
                .unwrap()
                .ends_with(" --role site")
        );
        assert!(agent_command("https://h", TokenRole::Provisioned, "gh1.a.b").is_none());
        // Nothing that could break out of the quotes is printed into a command.
        assert!(agent_command("https://h", TokenRole::Node, "gh1.a.b'; rm -rf /").is_none());
        assert!(agent_command("https://h;x", TokenRole::Node, "gh1.a.b").is_none());
    }

    #[test]
    fn create_sends_the_shared_request() {
        let cli = crate::cli::Cli::try_parse_args([
            "gatehouse",
            "token",
            "create",
            "--role",
            "site",
            "--uses",
            "3",
            "--ttl",
            "2h",
            "--pool",
            "gpu",
            "--server",
            "https://h",
        ])
        .unwrap();
        let crate::cli::Command::Token {
            command: TokenCommand::Create(a),
        } = cli.command
        else {
            panic!("not token create");
        };
        let req = a.request();
        assert_eq!(
            (req.role, req.uses, req.ttl_seconds, req.pool_id.as_deref()),
            (TokenRole::Site, 3, 7200, Some("gpu"))
        );
        assert!(
            crate::cli::Cli::try_parse_args([
                "gatehouse",
                "token",
                "create",
                "--role",
                "site",
                "--pool",
                "a/b"
            ])
            .is_err(),
            "ids are checked as arguments are parsed"
        );
    }
}
