//! `loomflow`: look at and answer the runs in a loomflow store, without writing code.
//!
//! ```text
//! loomflow --db sqlite:refunds.db runs --status waiting
//! loomflow --db sqlite:refunds.db show ord_7
//! loomflow --db sqlite:refunds.db signal ord_7 review '{"approved": true}' --key web-123
//! loomflow --db sqlite:refunds.db approve team call_1 --edit '{"order": "ord_42"}'
//! loomflow --db sqlite:refunds.db reject team call_1 --reason "not this one"
//! loomflow --db sqlite:refunds.db resume ord_7 '{"approved": true}'
//! loomflow --db sqlite:refunds.db cancel ord_7
//! loomflow --db sqlite:refunds.db delete ord_7
//! loomflow --db sqlite:refunds.db graph ord_7
//! ```
//!
//! Exit codes: 0 done (also when the reader of the output stopped reading); 1 the store
//! failed, or `serve` could not listen (an address in use) or its server stopped; 2 bad usage,
//! checked before the store is opened (an unknown flag, a payload that is not JSON, an
//! `--edit` that is not a JSON object, an empty signal name, `--key` or `--by`), and once it
//! is open a resume that names no interrupt while several are pending; 3 not found (no such run, no such pending
//! approval or interrupt, no loomflow store at `--db`; `delete` of a thread that never ran); 4 refused (the mailbox refused the
//! signal: a reserved name, a payload over the limit, a run that has ended; the store
//! refused what it was given; a call decided already; a run that is not interrupted, or an
//! interrupt that waits for a signal or a timer; a delete while a run executes the thread).

mod audit;
mod commands;
mod output;
mod serve;
mod start;
mod store;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Look at and answer the runs in a loomflow store.
#[derive(Debug, Parser)]
#[command(name = "loomflow", version, about, long_about = None)]
struct Cli {
    /// The store: `sqlite:PATH` (or a path to a SQLite file), `postgres://…`, or libpq
    /// `key=value` pairs (`host=db dbname=flows`). Errors never repeat it.
    #[arg(long, env = "LOOMFLOW_DB", global = true, hide_env_values = true)]
    db: Option<String>,
    /// Print JSON instead of tables, for scripts.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List runs, most recently updated first.
    Runs {
        /// Only runs in this state: queued, running, waiting, sleeping, interrupted,
        /// completed, failed, cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this graph.
        #[arg(long)]
        graph: Option<String>,
        /// At most this many; a full page ends with the `--after` of the next.
        #[arg(long)]
        limit: Option<usize>,
        /// Only runs listed after this one (`<updated_at_ms>:<thread>`, as a page's last
        /// line gives it): the next page.
        #[arg(long)]
        after: Option<String>,
    },
    /// Show one run: its state, what it waits for, its interrupts and pending approvals
    /// (with the exact arguments), its state and its history.
    Show {
        /// The thread.
        thread: String,
    },
    /// The audit log, oldest first: tool calls, decisions (who approved what), signals,
    /// interrupts and resumes.
    Audit {
        /// The thread; every thread when left out.
        thread: Option<String>,
        /// Only entries of this kind: tool_call, decision, signal_sent, signal_received,
        /// interrupt, resume.
        #[arg(long)]
        kind: Option<String>,
        /// At most this many.
        #[arg(long)]
        limit: Option<usize>,
        /// Only entries after this id: the last id of a page, for the next.
        #[arg(long, value_name = "ID")]
        after: Option<u64>,
    },
    /// Send a signal to a thread; a run waiting for it carries on.
    Signal {
        /// The thread.
        thread: String,
        /// The signal's name.
        name: String,
        /// The payload, as JSON.
        payload: String,
        /// An idempotency key: sending again with the same key delivers once.
        #[arg(long)]
        key: Option<String>,
    },
    /// Drop the oldest pending signal of a name, unread, and print it: the way past a payload
    /// the run's wait cannot read (its run fails on it at every recover). Audited.
    DropSignal {
        /// The thread.
        thread: String,
        /// The signal's name.
        name: String,
        /// Who drops it, for the audit log (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Approve a pending tool call.
    Approve {
        /// The thread.
        thread: String,
        /// The call's id (see `show`).
        call_id: String,
        /// Run the call with these arguments instead (a JSON object).
        #[arg(long)]
        edit: Option<String>,
        /// Who decides, for the audit log (default: $USER).
        #[arg(long)]
        by: Option<String>,
        /// Decide only the request the call made at this time (ms since the epoch, as
        /// `show` lists it): refused if the call has asked again since under the same id.
        #[arg(long, value_name = "MS")]
        asked_at: Option<u64>,
    },
    /// Reject a pending tool call.
    Reject {
        /// The thread.
        thread: String,
        /// The call's id (see `show`).
        call_id: String,
        /// Why: the model is told.
        #[arg(long)]
        reason: String,
        /// Who decides, for the audit log (default: $USER).
        #[arg(long)]
        by: Option<String>,
        /// Decide only the request the call made at this time (ms since the epoch, as
        /// `show` lists it): refused if the call has asked again since under the same id.
        #[arg(long, value_name = "MS")]
        asked_at: Option<u64>,
    },
    /// Resume an interrupted run with a value: the next execution of the run (a worker, or a
    /// recover in the program) applies it.
    Resume {
        /// The thread.
        thread: String,
        /// The resume value, as JSON.
        value: String,
        /// Which interrupt it answers, when several are pending (see `show`).
        #[arg(long)]
        interrupt: Option<String>,
    },
    /// Queue a run of a graph on a thread, for a worker that registered the graph.
    Submit {
        /// The graph, as its workers registered it.
        graph: String,
        /// The thread.
        thread: String,
        /// The run's input (the graph's state), as JSON; `-` reads it from stdin, `@PATH`
        /// from a file.
        input: String,
    },
    /// Start a thread from a checkpoint of another (its id as `show` lists it): to try a
    /// question again with another answer, or go back before a bad step. Refused onto
    /// another thread whose run has not ended; onto the same thread, it replaces the run
    /// that stands there (suspended, or stopped half-way), and says so.
    Fork {
        /// The thread the checkpoint is of.
        thread: String,
        /// The checkpoint's id.
        checkpoint: u64,
        /// The thread to start (the same one goes back on it).
        new_thread: String,
    },
    /// Cancel a run: at once if nobody executes it, else before its next step.
    Cancel {
        /// The thread.
        thread: String,
    },
    /// Delete a thread: its checkpoints, journal, run and pending signals (its audit log
    /// stays). Refused while a run executes it.
    Delete {
        /// The thread.
        thread: String,
    },
    /// Print the run's graph as Mermaid, with where it stands marked.
    Graph {
        /// The thread.
        thread: String,
    },
    /// Serve the HTTP ingress (signals, webhooks, runs, approvals) and the approval inbox.
    Serve {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// A bearer token callers must present (and the inbox's login token).
        #[arg(long, env = "LOOMFLOW_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Verify GitHub webhooks (X-Hub-Signature-256) with this secret.
        #[arg(long, env = "LOOMFLOW_GITHUB_SECRET", hide_env_values = true)]
        github_secret: Option<String>,
        /// Verify X-Loomflow-Signature (a signed time, path, delivery id and body) with this
        /// secret.
        #[arg(long, env = "LOOMFLOW_SIGNING_SECRET", hide_env_values = true)]
        signing_secret: Option<String>,
        /// Key the inbox's forms with this secret: give every replica the same one, and a
        /// page's forms are taken by whichever answers (and after a restart).
        #[arg(long, env = "LOOMFLOW_INBOX_FORM_SECRET", hide_env_values = true)]
        inbox_form_secret: Option<String>,
        /// Accept requests without a token. Only behind something that authenticates; refused
        /// beside a token or webhook secret, which it would leave unchecked.
        #[arg(long)]
        no_auth: bool,
        /// With --no-auth, also answer requests addressed to this host name (besides
        /// localhost and IP addresses). Repeat for several.
        #[arg(long = "allow-host", value_name = "NAME")]
        allow_hosts: Vec<String>,
    },
}

/// Why a command failed, with its exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }

    /// `serve` could not listen (its address is in use) or its server stopped.
    pub(crate) fn server(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self {
            code: 3,
            message: message.into(),
        }
    }

    pub(crate) fn refused(message: impl Into<String>) -> Self {
        Self {
            code: 4,
            message: message.into(),
        }
    }
}

impl From<loomflow::Error> for Failure {
    fn from(error: loomflow::Error) -> Self {
        let code = match &error {
            loomflow::Error::Runtime(
                loomflow::RuntimeError::UnknownRun { .. }
                | loomflow::RuntimeError::UnknownCheckpoint { .. }
                | loomflow::RuntimeError::UnknownInterrupt { .. }
                | loomflow::RuntimeError::NoPendingApproval { .. },
            ) => 3,
            // A blank thread name is the caller's: bad usage, whatever the store holds.
            loomflow::Error::Runtime(
                loomflow::RuntimeError::AmbiguousResume { .. }
                | loomflow::RuntimeError::EmptyThread
                | loomflow::RuntimeError::SubgraphCheckpoint { .. },
            ) => 2,
            loomflow::Error::Runtime(
                loomflow::RuntimeError::NotInterrupted { .. }
                | loomflow::RuntimeError::WaitsForSignal { .. }
                | loomflow::RuntimeError::WaitsForTimer { .. }
                | loomflow::RuntimeError::AlreadyDecided { .. }
                | loomflow::RuntimeError::AskedAgain { .. }
                | loomflow::RuntimeError::DecisionDropped { .. }
                | loomflow::RuntimeError::RunActive { .. }
                | loomflow::RuntimeError::ApprovalRunEnded { .. },
            ) => 4,
            loomflow::Error::Signal(_) => 4,
            // The store would refuse it again (a payload nested too deep): not a failure
            // to retry.
            loomflow::Error::Store(loomflow::runtime::StoreError::Refused { .. }) => 4,
            // A path or URL where no loomflow store is.
            loomflow::Error::Store(loomflow::runtime::StoreError::NotAStore { .. }) => 3,
            _ => 1,
        };
        Self {
            code,
            message: error.to_string(),
        }
    }
}

impl From<loomflow::RuntimeError> for Failure {
    fn from(error: loomflow::RuntimeError) -> Self {
        // A run executes the thread: refused, as the thread is there.
        if let loomflow::RuntimeError::Busy { .. } = error {
            return Self {
                code: 4,
                message: error.to_string(),
            };
        }
        Self::from(loomflow::Error::from(error))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) if json => {
            // A script reads its error as it reads its output (JSON escapes what it quotes).
            let error = serde_json::json!({
                "error": { "exit_code": failure.code, "message": failure.message }
            });
            eprintln!("{error}");
            ExitCode::from(failure.code)
        }
        Err(failure) => {
            // An error may quote what a caller, tool or model wrote (an interrupt's id).
            eprintln!("loomflow: {}", output::shown(&failure.message));
            ExitCode::from(failure.code)
        }
    }
}

/// Checks every argument before the store is opened: bad usage is 2, whatever the store,
/// and opens nothing.
fn check(command: &Command) -> Result<(), Failure> {
    match command {
        // An empty page would read as the last one, as over HTTP.
        Command::Runs { limit: Some(0), .. } | Command::Audit { limit: Some(0), .. } => {
            return Err(Failure::usage("--limit must be at least 1"));
        }
        Command::Runs { status, after, .. } => {
            if let Some(status) = status {
                commands::run_state(status)?;
            }
            if let Some(after) = after {
                commands::run_cursor(after)?;
            }
        }
        Command::Audit {
            kind: Some(kind), ..
        } => {
            audit::audit_kind(kind)?;
        }
        Command::Signal {
            name, payload, key, ..
        } => {
            commands::check_signal(name, key.as_deref())?;
            commands::parse_json("the payload", payload)?;
        }
        Command::DropSignal { name, by, .. } => {
            commands::check_signal(name, None)?;
            commands::decider(by.clone())?;
        }
        Command::Approve { edit, by, .. } => {
            commands::approval(edit.as_deref())?;
            commands::decider(by.clone())?;
        }
        Command::Reject { by, reason, .. } => {
            commands::decider(by.clone())?;
            if reason.trim().is_empty() {
                return Err(Failure::usage("--reason must say why: the model is told"));
            }
        }
        Command::Resume { value, .. } => {
            commands::parse_json("the resume value", value)?;
        }
        Command::Submit { graph, input, .. } => start::check_submit(graph, input)?,
        Command::Serve {
            token,
            github_secret,
            signing_secret,
            no_auth,
            allow_hosts,
            ..
        } => {
            if !allow_hosts.is_empty() && !no_auth {
                return Err(Failure::usage(
                    "--allow-host names the hosts a server without authentication answers: it \
                     needs --no-auth (with a token or secret, every host name is answered)",
                ));
            }
            let secrets = [
                ("--github-secret (LOOMFLOW_GITHUB_SECRET)", github_secret),
                ("--signing-secret (LOOMFLOW_SIGNING_SECRET)", signing_secret),
            ];
            for (flag, secret) in &secrets {
                if secret
                    .as_deref()
                    .is_some_and(|secret| secret.trim().is_empty())
                {
                    return Err(Failure::usage(format!(
                        "{flag} is empty: anyone could sign with it"
                    )));
                }
            }
            // Every request would be refused: say so rather than serve nothing.
            let signed = secrets.iter().any(|(_, secret)| secret.is_some());
            let token_given = token
                .as_deref()
                .is_some_and(|token| !token.trim().is_empty());
            // --no-auth would drop a token or secret the operator believes is checked.
            if *no_auth && (token_given || signed) {
                return Err(Failure::usage(
                    "--no-auth accepts every request, so a token (--token, LOOMFLOW_TOKEN) or \
                     webhook secret (--github-secret, --signing-secret) would not be checked: \
                     give one or the other",
                ));
            }
            if !token_given && !signed && !no_auth {
                return Err(Failure::usage(
                    "serve needs a bearer token (--token or LOOMFLOW_TOKEN, not empty), a \
                     webhook secret (--github-secret, --signing-secret), or --no-auth behind \
                     something that authenticates",
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

async fn run(cli: Cli) -> Result<(), Failure> {
    check(&cli.command)?;
    let lifetime = match cli.command {
        Command::Serve { .. } => store::Lifetime::Server,
        _ => store::Lifetime::Command,
    };
    let runtime = store::open(cli.db.as_deref(), lifetime).await?;
    let out = output::Output { json: cli.json };
    match cli.command {
        Command::Runs {
            status,
            graph,
            limit,
            after,
        } => commands::runs(&runtime, &out, (status, graph), (limit, after)).await,
        Command::Show { thread } => commands::show(&runtime, &out, &thread).await,
        Command::Audit {
            thread,
            kind,
            limit,
            after,
        } => {
            let page = (limit, after);
            audit::audit(&runtime, &out, thread.as_deref(), kind.as_deref(), page).await
        }
        Command::Signal {
            thread,
            name,
            payload,
            key,
        } => commands::signal(&runtime, &out, &thread, &name, &payload, key).await,
        Command::DropSignal { thread, name, by } => {
            let by = commands::decider(by)?;
            commands::drop_signal(&runtime, &out, &thread, &name, &by).await
        }
        Command::Approve {
            thread,
            call_id,
            edit,
            by,
            asked_at,
        } => {
            let by = commands::decider(by)?;
            let call = (thread.as_str(), call_id.as_str(), asked_at);
            commands::approve(&runtime, &out, call, edit.as_deref(), &by).await
        }
        Command::Reject {
            thread,
            call_id,
            reason,
            by,
            asked_at,
        } => {
            let by = commands::decider(by)?;
            let call = (thread.as_str(), call_id.as_str(), asked_at);
            commands::reject(&runtime, &out, call, reason, &by).await
        }
        Command::Resume {
            thread,
            value,
            interrupt,
        } => commands::resume(&runtime, &out, &thread, &value, interrupt.as_deref()).await,
        Command::Submit {
            graph,
            thread,
            input,
        } => start::submit(&runtime, &out, (&graph, &thread), &input).await,
        Command::Fork {
            thread,
            checkpoint,
            new_thread,
        } => start::fork(&runtime, &out, (&thread, checkpoint), &new_thread).await,
        Command::Cancel { thread } => commands::cancel(&runtime, &out, &thread).await,
        Command::Delete { thread } => commands::delete(&runtime, &out, &thread).await,
        Command::Graph { thread } => commands::graph(&runtime, &out, &thread).await,
        Command::Serve {
            listen,
            token,
            github_secret,
            signing_secret,
            inbox_form_secret,
            no_auth,
            allow_hosts,
        } => {
            let token = token.filter(|token| !token.is_empty());
            let mut config = loomflow::http::HttpConfig::new();
            if let Some(token) = token {
                config = config.bearer_token(token);
            }
            if let Some(secret) = github_secret {
                config = config.github_secret(secret);
            }
            if let Some(secret) = signing_secret {
                config = config.signing_secret(secret);
            }
            if let Some(secret) = inbox_form_secret {
                config = config.inbox_form_secret(secret);
            }
            if no_auth {
                config = config.without_auth();
            }
            for host in allow_hosts {
                config = config.allow_host(host);
            }
            serve::run(runtime, config, &listen).await
        }
    }
}
