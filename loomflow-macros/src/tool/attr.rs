//! Parsing `#[tool(name = "...", description = "...", approval, destructive, crate = path,
//! param(x = "..."))]`.

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitStr, Path, Token};

use crate::common::Errors;

mod kw {
    syn::custom_keyword!(name);
    syn::custom_keyword!(description);
    syn::custom_keyword!(approval);
    syn::custom_keyword!(destructive);
    syn::custom_keyword!(param);
}

/// The attribute's arguments, each duplicate reported once.
#[derive(Default)]
pub(crate) struct ToolArgs {
    pub(crate) name: Option<LitStr>,
    pub(crate) description: Option<LitStr>,
    pub(crate) approval: bool,
    pub(crate) destructive: bool,
    pub(crate) krate: Option<Path>,
    /// Parameter descriptions, in the order written.
    pub(crate) params: Vec<(Ident, LitStr)>,
    /// Problems found while parsing; reported with the signature's.
    pub(crate) errors: Errors,
}

enum Arg {
    Name(kw::name, LitStr),
    Description(kw::description, LitStr),
    Approval(kw::approval),
    Destructive(kw::destructive),
    Crate(Token![crate], Path),
    /// The descriptions that parsed, and the errors of those that did not.
    Param(Vec<ParamDoc>, Errors),
}

struct ParamDoc {
    ident: Ident,
    text: LitStr,
}

impl Parse for ParamDoc {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let ident = input.parse()?;
        input.parse::<Token![=]>()?;
        Ok(Self {
            ident,
            text: input.parse()?,
        })
    }
}

impl Parse for Arg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::name) {
            let key = input.parse::<kw::name>()?;
            input.parse::<Token![=]>()?;
            Ok(Self::Name(key, input.parse()?))
        } else if lookahead.peek(kw::description) {
            let key = input.parse::<kw::description>()?;
            input.parse::<Token![=]>()?;
            Ok(Self::Description(key, input.parse()?))
        } else if lookahead.peek(kw::approval) {
            Ok(Self::Approval(input.parse()?))
        } else if lookahead.peek(kw::destructive) {
            Ok(Self::Destructive(input.parse()?))
        } else if lookahead.peek(Token![crate]) {
            let key = input.parse::<Token![crate]>()?;
            input.parse::<Token![=]>()?;
            Ok(Self::Crate(key, input.parse()?))
        } else if lookahead.peek(kw::param) {
            input.parse::<kw::param>()?;
            let content;
            syn::parenthesized!(content in input);
            let (docs, errors) = crate::common::parse_each(&content);
            Ok(Self::Param(docs, errors))
        } else {
            Err(lookahead.error())
        }
    }
}

impl ToolArgs {
    pub(crate) fn parse(tokens: TokenStream) -> Self {
        let mut args = Self::default();
        let (parsed, mut errors) = crate::common::parse_arguments::<Arg>(tokens);
        for arg in parsed {
            match arg {
                Arg::Name(key, value) => {
                    if args.name.is_some() {
                        errors.push_spanned(key, "duplicate `name` attribute");
                    } else if value.value().is_empty() {
                        errors.push_spanned(&value, "tool name must not be empty");
                    } else {
                        args.name = Some(value);
                    }
                }
                Arg::Description(key, value) => {
                    errors.set_once(&mut args.description, value, key.span, "description");
                }
                Arg::Approval(key) => {
                    if args.approval {
                        errors.push_spanned(key, "duplicate `approval` attribute");
                    }
                    args.approval = true;
                }
                Arg::Destructive(key) => {
                    if args.destructive {
                        errors.push_spanned(key, "duplicate `destructive` attribute");
                    }
                    args.destructive = true;
                }
                Arg::Crate(key, path) => errors.set_once(&mut args.krate, path, key.span, "crate"),
                Arg::Param(docs, malformed) => {
                    errors.extend(malformed);
                    for doc in docs {
                        if args.params.iter().any(|(ident, _)| *ident == doc.ident) {
                            errors.push_spanned(
                                &doc.ident,
                                format!("duplicate description for parameter `{}`", doc.ident),
                            );
                        } else {
                            args.params.push((doc.ident, doc.text));
                        }
                    }
                }
            }
        }
        args.errors = errors;
        args
    }
}
