//! Model adapters' own cost: request build, SSE parse and decode of a streamed reply.
//!
//! - `adapter/{openai,anthropic}/1000_tokens`: `Model::stream` against a local HTTP server,
//!   folded into a response; `adapter/raw_http/1000_tokens` fetches the same body with plain
//!   reqwest and no parsing, so the difference is the adapter's overhead.
//! - `adapter/openai/10000_tokens` and `sse_parser/*`: the cost grows linearly with the reply.
//!
//! Run: `CARGO_BUILD_JOBS=1 cargo bench -p loomflow-benches --bench model_stream`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../tests/support/fixtures.rs"]
mod fixtures;
#[path = "../tests/support/mock_server.rs"]
mod mock_server;

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt;
use loomflow::model::sse::SseParser;
use loomflow::model::{
    AnthropicModel, Message, Model, ModelRequest, OpenAiModel, RetryPolicy, collect_stream,
};
use mock_server::{MockServer, Reply};

/// Real servers flush every token or so; 4 KiB pieces keep the mock server's share small.
const PIECE: usize = 4096;

fn request() -> ModelRequest {
    ModelRequest::new(vec![
        Message::system("You are a helpful assistant."),
        Message::user("Write a long answer."),
    ])
    .max_tokens(2000)
}

fn bench_adapters(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("adapter");
    group.measurement_time(Duration::from_secs(5));

    for tokens in [1000usize, 10_000] {
        let body = fixtures::openai_text_stream(tokens);
        let server = rt.block_on(MockServer::repeating(Reply::sse(&body, PIECE)));
        let model = OpenAiModel::builder("gpt-test")
            .base_url(format!("{}/v1", server.url()))
            .retry(RetryPolicy::none())
            .build()
            .unwrap();
        group.throughput(Throughput::Elements(tokens as u64));
        group.bench_function(format!("openai/{tokens}_tokens"), |b| {
            b.iter(|| {
                let response = rt
                    .block_on(collect_stream(model.stream(request())))
                    .unwrap();
                black_box(response.usage.output_tokens)
            })
        });
        if tokens == 1000 {
            // plain HTTP only, but reqwest still wants a TLS config: give it an empty one
            let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
            let client = reqwest::Client::builder()
                .tls_backend_preconfigured(tls)
                .build()
                .unwrap();
            let url = format!("{}/v1/chat/completions", server.url());
            group.bench_function("raw_http/1000_tokens", |b| {
                b.iter(|| {
                    rt.block_on(async {
                        let response = client.post(&url).body("{}").send().await.unwrap();
                        let mut bytes = response.bytes_stream();
                        let mut n = 0;
                        while let Some(chunk) = bytes.next().await {
                            n += chunk.unwrap().len();
                        }
                        black_box(n)
                    })
                })
            });
        }
        drop(server);
    }

    let body = fixtures::anthropic_text_stream(1000);
    let server = rt.block_on(MockServer::repeating(Reply::sse(&body, PIECE)));
    let model = AnthropicModel::builder("claude-test")
        .base_url(server.url())
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    group.throughput(Throughput::Elements(1000));
    group.bench_function("anthropic/1000_tokens", |b| {
        b.iter(|| {
            let response = rt
                .block_on(collect_stream(model.stream(request())))
                .unwrap();
            black_box(response.usage.output_tokens)
        })
    });
    group.finish();
}

fn bench_parser(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse_parser");
    for tokens in [1000usize, 10_000] {
        let body = fixtures::openai_text_stream(tokens);
        group.throughput(Throughput::Elements(tokens as u64));
        group.bench_function(format!("openai/{tokens}_tokens"), |b| {
            b.iter(|| {
                let mut parser = SseParser::new();
                let mut events = Vec::with_capacity(64);
                let mut n = 0;
                // 1,500-byte pieces, about one TCP segment each
                for piece in body.as_bytes().chunks(1500) {
                    parser.push(piece, &mut events);
                    n += events.len();
                    events.clear();
                }
                black_box(n)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_adapters, bench_parser);
criterion_main!(benches);
