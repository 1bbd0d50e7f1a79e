//! Parsing `#[node(name = "...", crate = path)]`.

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream};
use syn::{LitStr, Path, Token};

use crate::common::Errors;

mod kw {
    syn::custom_keyword!(name);
}

/// The attribute's arguments.
#[derive(Default)]
pub(crate) struct NodeArgs {
    pub(crate) name: Option<LitStr>,
    pub(crate) krate: Option<Path>,
    /// Problems found while parsing; reported with the signature's.
    pub(crate) errors: Errors,
}

enum Arg {
    Name(kw::name, LitStr),
    Crate(Token![crate], Path),
}

impl Parse for Arg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::name) {
            let key = input.parse::<kw::name>()?;
            input.parse::<Token![=]>()?;
            Ok(Self::Name(key, input.parse()?))
        } else if lookahead.peek(Token![crate]) {
            let key = input.parse::<Token![crate]>()?;
            input.parse::<Token![=]>()?;
            Ok(Self::Crate(key, input.parse()?))
        } else {
            Err(lookahead.error())
        }
    }
}

impl NodeArgs {
    pub(crate) fn parse(tokens: TokenStream) -> Self {
        let mut args = Self::default();
        let (parsed, mut errors) = crate::common::parse_arguments::<Arg>(tokens);
        for arg in parsed {
            match arg {
                Arg::Name(key, value) => {
                    if args.name.is_some() {
                        errors.push_spanned(key, "duplicate `name` attribute");
                    } else if value.value().is_empty() {
                        errors.push_spanned(&value, "node name must not be empty");
                    } else {
                        args.name = Some(value);
                    }
                }
                Arg::Crate(key, path) => errors.set_once(&mut args.krate, path, key.span, "crate"),
            }
        }
        args.errors = errors;
        args
    }
}
