//! Chat with a model from the command line, streaming the answer.
//!
//! ```text
//! cargo run --example chat -- "What is a typed graph?"          # scripted model, no network
//! cargo run --example chat -- --base-url http://127.0.0.1:18080/v1 --model smollm2 "Hi!"
//! cargo run --example chat -- --anthropic --base-url http://127.0.0.1:18080 --model smollm2 "Hi!"
//! cargo run --example chat -- --model gpt-4o "Hi!"              # key from OPENAI_API_KEY
//! ```
//!
//! Options: `--model NAME`, `--base-url URL` (OpenAI-compatible, up to `/v1`; with
//! `--anthropic`, the server root), `--anthropic` (Messages API), `--system TEXT`,
//! `--max-tokens N`, `--api-key KEY` (else the provider's environment variable).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use futures_util::StreamExt;
use loomflow::model::{
    AnthropicModel, Message, Model, ModelRequest, ModelResponse, OpenAiModel, ScriptedModel,
    StreamChunk, Usage, resolve,
};

#[derive(Default)]
struct Args {
    question: Vec<String>,
    model: Option<String>,
    base_url: Option<String>,
    anthropic: bool,
    system: Option<String>,
    max_tokens: Option<u32>,
    api_key: Option<String>,
    help: bool,
}

const USAGE: &str = "usage: chat [--model NAME] [--base-url URL] [--anthropic] [--system TEXT] \
                     [--max-tokens N] [--api-key KEY] QUESTION... (--help for more)";

const HELP: &str = "\
chat: ask a model a question and stream its answer. Without --model or --base-url, a
scripted model answers (no network); the token usage goes to stderr.

Usage: cargo run --example chat -- [OPTIONS] QUESTION...

Options:
  --model NAME      the model: a name for --base-url (default: smollm2), or a model string
                    such as gpt-4o or claude-... (key from OPENAI_API_KEY / ANTHROPIC_API_KEY)
  --base-url URL    an OpenAI-compatible server, up to /v1 (with --anthropic: the server root)
  --anthropic       speak the Anthropic Messages API instead of Chat Completions
  --system TEXT     a system message
  --max-tokens N    cap the answer's length
  --api-key KEY     the key, instead of the provider's environment variable
  -h, --help        print this help
";

fn parse_args() -> Result<Args, String> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--model" => args.model = Some(value("--model")?),
            "--base-url" => args.base_url = Some(value("--base-url")?),
            "--system" => args.system = Some(value("--system")?),
            "--api-key" => args.api_key = Some(value("--api-key")?),
            "--max-tokens" => {
                let n = value("--max-tokens")?;
                args.max_tokens = Some(n.parse().map_err(|_| format!("bad --max-tokens {n:?}"))?);
            }
            "--anthropic" => args.anthropic = true,
            "-h" | "--help" => {
                args.help = true;
                return Ok(args);
            }
            flag if flag.starts_with("--") => {
                return Err(format!("unknown option {flag}\n{USAGE}"));
            }
            _ => args.question.push(arg),
        }
    }
    if args.question.is_empty() {
        return Err(USAGE.to_owned());
    }
    Ok(args)
}

fn build_model(args: &Args) -> Result<Arc<dyn Model>, loomflow::model::ModelError> {
    let question = args.question.join(" ");
    let name = args.model.clone().unwrap_or_else(|| "smollm2".to_owned());
    match (&args.base_url, &args.model) {
        (Some(url), _) if args.anthropic => {
            let mut builder = AnthropicModel::builder(name).base_url(url.trim_end_matches("/v1"));
            if let Some(key) = &args.api_key {
                builder = builder.api_key(key.as_str());
            }
            Ok(Arc::new(builder.build()?))
        }
        (Some(url), _) => {
            let mut builder = OpenAiModel::builder(name).base_url(url);
            if let Some(key) = &args.api_key {
                builder = builder.api_key(key.as_str());
            }
            Ok(Arc::new(builder.build()?))
        }
        (None, Some(model)) if args.anthropic => {
            let mut builder = AnthropicModel::builder(model.as_str());
            if let Some(key) = &args.api_key {
                builder = builder.api_key(key.as_str());
            }
            Ok(Arc::new(builder.build()?))
        }
        (None, Some(model)) => match &args.api_key {
            Some(key) => loomflow::model::resolve_with_key(model, key.as_str()),
            None => resolve(model),
        },
        (None, None) => Ok(Arc::new(ScriptedModel::new(vec![
            ModelResponse::text(format!(
                "You asked: \"{question}\". I am a scripted model; pass --base-url and --model \
             to talk to a real one."
            ))
            .with_usage(Usage {
                input_tokens: question.split_whitespace().count() as u64,
                output_tokens: 20,
                cached_tokens: 0,
            }),
        ]))),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let model = match build_model(&args) {
        Ok(model) => model,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(Message::system(system));
    }
    messages.push(Message::user(args.question.join(" ")));
    let mut request = ModelRequest::new(messages);
    if let Some(max) = args.max_tokens {
        request = request.max_tokens(max);
    }

    let mut stream = model.stream(request);
    let mut stdout = std::io::stdout();
    let mut usage = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(StreamChunk::Text { text }) => {
                let _ = write!(stdout, "{text}");
                let _ = stdout.flush();
            }
            Ok(StreamChunk::ToolCall {
                name: Some(name), ..
            }) => {
                let _ = write!(stdout, "\n[tool call: {name}]");
            }
            Ok(StreamChunk::Usage(u)) => usage = Some(u),
            Ok(StreamChunk::Finish { reason }) => {
                let _ = writeln!(stdout);
                eprintln!("[{}: finished ({reason:?})]", model.name());
            }
            Ok(_) => {}
            Err(error) => {
                let _ = writeln!(stdout);
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(u) = usage {
        eprintln!(
            "[tokens: {} in ({} cached), {} out]",
            u.input_tokens, u.cached_tokens, u.output_tokens
        );
    }
    ExitCode::SUCCESS
}
