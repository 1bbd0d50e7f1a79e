//! Parsing `#[agent(model = "...", tools(a, b), max_turns = 10, ...)]`.

use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream};
use syn::{LitFloat, LitInt, LitStr, Path, Token};

use crate::common::Errors;

mod kw {
    syn::custom_keyword!(name);
    syn::custom_keyword!(model);
    syn::custom_keyword!(tools);
    syn::custom_keyword!(max_turns);
    syn::custom_keyword!(timeout_secs);
    syn::custom_keyword!(temperature);
    syn::custom_keyword!(max_tokens);
    syn::custom_keyword!(instructions);
}

/// The attribute's arguments, each with the span of its key (for duplicate errors).
#[derive(Default)]
pub(crate) struct AgentArgs {
    pub(crate) name: Option<LitStr>,
    pub(crate) model: Option<LitStr>,
    /// Values implementing `Tool`: a `#[tool]` fn's name, `Calculator::new()`, ….
    pub(crate) tools: Vec<syn::Expr>,
    pub(crate) max_turns: Option<LitInt>,
    pub(crate) timeout_secs: Option<LitInt>,
    pub(crate) temperature: Option<LitFloat>,
    pub(crate) max_tokens: Option<LitInt>,
    pub(crate) instructions: Option<LitStr>,
    pub(crate) krate: Option<Path>,
    /// Problems found while parsing; reported with the struct's.
    pub(crate) errors: Errors,
}

enum Arg {
    Name(Span, LitStr),
    Model(Span, LitStr),
    /// The tools that parsed, and the errors of those that did not.
    Tools(Span, Vec<syn::Expr>, Errors),
    MaxTurns(Span, LitInt),
    Timeout(Span, LitInt),
    Temperature(Span, LitFloat),
    MaxTokens(Span, LitInt),
    Instructions(Span, LitStr),
    Crate(Span, Path),
}

fn value<T: Parse>(input: ParseStream<'_>) -> syn::Result<T> {
    input.parse::<Token![=]>()?;
    input.parse()
}

/// `= 0.7`, or a whole number (`= 1`), which is the same temperature.
fn temperature(input: ParseStream<'_>) -> syn::Result<LitFloat> {
    input.parse::<Token![=]>()?;
    match input.parse::<syn::Lit>()? {
        syn::Lit::Float(float) => Ok(float),
        syn::Lit::Int(int) if int.suffix().is_empty() => Ok(LitFloat::new(
            &format!("{}.0", int.base10_digits()),
            int.span(),
        )),
        other => Err(syn::Error::new(
            other.span(),
            "expected a number for `temperature`, such as 0.7",
        )),
    }
}

impl Parse for Arg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let span = input.span();
        let look = input.lookahead1();
        if look.peek(kw::name) {
            input.parse::<kw::name>()?;
            Ok(Self::Name(span, value(input)?))
        } else if look.peek(kw::model) {
            input.parse::<kw::model>()?;
            Ok(Self::Model(span, value(input)?))
        } else if look.peek(kw::tools) {
            input.parse::<kw::tools>()?;
            let content;
            syn::parenthesized!(content in input);
            let (paths, errors) = crate::common::parse_each(&content);
            Ok(Self::Tools(span, paths, errors))
        } else if look.peek(kw::max_turns) {
            input.parse::<kw::max_turns>()?;
            Ok(Self::MaxTurns(span, value(input)?))
        } else if look.peek(kw::timeout_secs) {
            input.parse::<kw::timeout_secs>()?;
            Ok(Self::Timeout(span, value(input)?))
        } else if look.peek(kw::temperature) {
            input.parse::<kw::temperature>()?;
            Ok(Self::Temperature(span, temperature(input)?))
        } else if look.peek(kw::max_tokens) {
            input.parse::<kw::max_tokens>()?;
            Ok(Self::MaxTokens(span, value(input)?))
        } else if look.peek(kw::instructions) {
            input.parse::<kw::instructions>()?;
            Ok(Self::Instructions(span, value(input)?))
        } else if look.peek(Token![crate]) {
            input.parse::<Token![crate]>()?;
            Ok(Self::Crate(span, value(input)?))
        } else {
            Err(look.error())
        }
    }
}

impl AgentArgs {
    pub(crate) fn parse(tokens: TokenStream) -> Self {
        let mut args = Self::default();
        let (parsed, mut errors) = crate::common::parse_arguments::<Arg>(tokens);
        let mut tools_seen = false;
        for arg in parsed {
            match arg {
                Arg::Name(s, v) => errors.set_once(&mut args.name, v, s, "name"),
                Arg::Model(s, v) => errors.set_once(&mut args.model, v, s, "model"),
                Arg::Tools(s, v, malformed) => {
                    errors.extend(malformed);
                    if tools_seen {
                        errors.push(syn::Error::new(s, "duplicate `tools` attribute"));
                    }
                    tools_seen = true;
                    args.tools.extend(v);
                }
                Arg::MaxTurns(s, v) => errors.set_once(&mut args.max_turns, v, s, "max_turns"),
                Arg::Timeout(s, v) => errors.set_once(&mut args.timeout_secs, v, s, "timeout_secs"),
                Arg::Temperature(s, v) => {
                    errors.set_once(&mut args.temperature, v, s, "temperature")
                }
                Arg::MaxTokens(s, v) => errors.set_once(&mut args.max_tokens, v, s, "max_tokens"),
                Arg::Instructions(s, v) => {
                    errors.set_once(&mut args.instructions, v, s, "instructions")
                }
                Arg::Crate(s, v) => errors.set_once(&mut args.krate, v, s, "crate"),
            }
        }
        if let Some(turns) = &args.max_turns
            && turns.base10_parse::<u32>().map_or(true, |n| n == 0)
        {
            errors.push_spanned(turns, "max_turns must be a whole number from 1");
        }
        args.errors = errors;
        args
    }
}
