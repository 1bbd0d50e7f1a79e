//! A server-sent events parser, incremental and linear in its input.
//!
//! Feed it bytes as they arrive, cut anywhere (even inside a UTF-8 character or between `\r`
//! and `\n`); it yields the same events as if the whole body had come at once. It follows the
//! WHATWG rules that matter for model APIs: `\n`, `\r\n` and `\r` line ends, `:` comments,
//! `field: value` with one optional space, multi-line `data:` joined by `\n`, `event:` and
//! `id:`, and an event dispatched on each blank line. One field beyond the standard is kept:
//! an `error:` line (llama.cpp's server sends one when a generation fails after the 200) reads
//! as an `error` event carrying that line as its data.
//!
//! # Examples
//!
//! ```
//! use loomflow::model::sse::SseParser;
//!
//! let mut parser = SseParser::new();
//! let mut events = Vec::new();
//! parser.push(b"event: ping\nda", &mut events);
//! parser.push(b"ta: {}\r\n\r\n: comment\ndata: [DONE]\n\n", &mut events);
//! assert_eq!(events[0].event.as_deref(), Some("ping"));
//! assert_eq!(events[0].data, "{}");
//! assert!(events[1].is_done());
//! ```

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when one was sent (`None` means the default, `message`).
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
    /// The `id:` field, when one was sent.
    pub id: Option<String>,
}

impl SseEvent {
    /// Whether this is OpenAI's end-of-stream sentinel, `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data == "[DONE]"
    }
}

/// The incremental parser.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The last byte seen was a `\r`: a `\n` right after it belongs to the same line end.
    after_cr: bool,
    /// Whether the stream's first bytes (a possible BOM) have been looked at.
    started: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    id: Option<String>,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes; every event they complete is appended to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) {
        if !self.started && !bytes.is_empty() {
            self.started = true;
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(end) = find_line_end(bytes) {
            let (line, rest) = bytes.split_at(end);
            let is_cr = rest[0] == b'\r';
            bytes = &rest[1..];
            if self.line.is_empty() {
                self.process_line(line, out);
            } else {
                self.line.extend_from_slice(line);
                let whole = std::mem::take(&mut self.line);
                self.process_line(&whole, out);
                self.line = whole;
                self.line.clear();
            }
            if is_cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.line.extend_from_slice(bytes);
    }

    /// Ends the stream: a last line without its line end, and a last event without its
    /// blank line, are taken as if both had come, and the event is appended to `out`. (The
    /// WHATWG rules drop such an event; a server that closes right after its last event
    /// would then lose the end of a reply.) The parser is then at the start of a stream.
    pub fn end(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out);
        }
        self.dispatch(out);
        *self = Self::default();
    }

    /// Whether a line has begun and not ended: a body that ends now was cut mid-line.
    pub fn has_partial_line(&self) -> bool {
        !self.line.is_empty()
    }

    /// Ends the stream the strict way: per the SSE rules an event not closed by a blank
    /// line is dropped; this returns whether such an unfinished event (or line) was pending.
    pub fn finish(&mut self) -> bool {
        let pending = !self.line.is_empty() || self.has_data || self.event.is_some();
        *self = Self::default();
        pending
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                push_utf8(&mut self.data, value);
            }
            // Not a WHATWG field: llama.cpp's server reports a failure after the 200 as an
            // `error: {...}` line. It is read as an `error` event with that data, so that the
            // failure is not skipped as an unknown field.
            b"error" => {
                self.event = Some("error".to_owned());
                self.data.clear();
                self.has_data = true;
                push_utf8(&mut self.data, value);
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" => self.id = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {} // `retry:` and unknown fields are ignored
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        out.push(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
            id: self.id.clone(),
        });
    }
}

/// Appends `bytes` as text; invalid UTF-8 becomes U+FFFD. `from_utf8` first: it is much
/// faster than the lossy path on the (usual) valid input.
fn push_utf8(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => out.push_str(text),
        Err(_) => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

fn find_line_end(bytes: &[u8]) -> Option<usize> {
    memchr::memchr2(b'\n', b'\r', bytes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    const OPENAI: &str = concat!(
        ": keep-alive\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Héllo\"}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\r\r",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n",
        "data: [DONE]\n\n",
    );

    const ANTHROPIC: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-x\",\"stop_reason\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: ping\n",
        "data: {\"type\": \"ping\"}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi ✓\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"add\",\"input\":{}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\": 1}\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut out);
        }
        assert!(!parser.finish());
        out
    }

    /// Splits `input` at the given points (taken modulo its length, in any order): the
    /// chunk boundaries the decoders' property tests try.
    pub(crate) fn split_at(input: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut start = 0;
        for cut in cuts {
            pieces.push(input[start..cut].to_vec());
            start = cut;
        }
        pieces.push(input[start..].to_vec());
        pieces
    }

    #[test]
    fn the_end_of_the_body_ends_the_last_line_and_event() {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        parser.push(b"data: a\n\ndata: b\ndata: c", &mut out);
        assert_eq!(out.len(), 1, "the last event has no blank line yet");
        parser.end(&mut out);
        assert_eq!(out[1].data, "b\nc");
        parser.end(&mut out);
        assert_eq!(out.len(), 2, "nothing is left to end");
    }

    #[test]
    fn parses_openai_transcript() {
        let events = parse_all(&[OPENAI.as_bytes()]);
        assert_eq!(events.len(), 6);
        assert!(events[1].data.contains("Héllo"));
        assert!(events[5].is_done());
        assert!(events.iter().all(|e| e.event.is_none()));
    }

    #[test]
    fn parses_anthropic_transcript() {
        let events = parse_all(&[ANTHROPIC.as_bytes()]);
        let names: Vec<_> = events.iter().map(|e| e.event.as_deref().unwrap()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
    }

    #[test]
    fn joins_multi_line_data_and_keeps_ids() {
        let events = parse_all(&[b"id: 7\ndata: a\ndata\ndata:  b\nretry: 10\n\n"]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "a\n\n b");
        assert_eq!(events[0].id.as_deref(), Some("7"));
    }

    #[test]
    fn an_error_line_is_an_error_event() {
        let events = parse_all(&[b"error: {\"code\":500}\n\ndata: [DONE]\n\n"]);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].event.as_deref(), Some("error"));
        assert_eq!(events[0].data, "{\"code\":500}");
        assert!(events[1].event.is_none() && events[1].is_done());
    }

    #[test]
    fn event_without_data_is_not_dispatched_and_unfinished_event_is_reported() {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        parser.push(b"event: x\n\ndata: tail", &mut out);
        assert!(out.is_empty());
        assert!(parser.finish());
    }

    #[test]
    fn lone_cr_at_chunk_end_then_lf_is_one_line_end() {
        let events = parse_all(&[b"data: a\r", b"\n\r", b"\ndata: b\r", b"\r"]);
        assert_eq!(
            events.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }

    #[test]
    fn is_linear_on_one_huge_line_fed_byte_by_byte() {
        let mut body = b"data: ".to_vec();
        body.extend(std::iter::repeat_n(b'x', 200_000));
        body.extend_from_slice(b"\n\n");
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for byte in body.chunks(1) {
            parser.push(byte, &mut out);
        }
        assert_eq!(out[0].data.len(), 200_000);
    }

    proptest! {
        #[test]
        fn any_split_of_openai_transcript_parses_the_same(cuts in proptest::collection::vec(0usize..4096, 0..40)) {
            let whole = parse_all(&[OPENAI.as_bytes()]);
            let pieces = split_at(OPENAI.as_bytes(), &cuts);
            let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
            prop_assert_eq!(parse_all(&refs), whole);
        }

        #[test]
        fn any_split_of_anthropic_transcript_parses_the_same(cuts in proptest::collection::vec(0usize..8192, 0..60)) {
            let whole = parse_all(&[ANTHROPIC.as_bytes()]);
            let pieces = split_at(ANTHROPIC.as_bytes(), &cuts);
            let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
            prop_assert_eq!(parse_all(&refs), whole);
        }

        #[test]
        fn byte_by_byte_equals_whole(crlf in any::<bool>()) {
            let text = if crlf { ANTHROPIC.replace('\n', "\r\n") } else { ANTHROPIC.to_owned() };
            let whole = parse_all(&[text.as_bytes()]);
            let refs: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
            prop_assert_eq!(parse_all(&refs), whole);
        }
    }
}
