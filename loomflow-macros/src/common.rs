//! Pieces shared by the macros: doc comments, error collection, the crate path.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};

/// Collects errors so that a macro reports every problem at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(existing) => existing.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn push_spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Fills an attribute's slot, or reports ``duplicate `key` attribute`` at `key_span`.
    pub(crate) fn set_once<T>(
        &mut self,
        slot: &mut Option<T>,
        value: T,
        key_span: proc_macro2::Span,
        key: &str,
    ) {
        if slot.is_some() {
            self.push(syn::Error::new(
                key_span,
                format!("duplicate `{key}` attribute"),
            ));
        } else {
            *slot = Some(value);
        }
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// The text of `///` comments, lines trimmed and joined, or `None` when there is none.
pub(crate) fn doc_text(attrs: &[syn::Attribute]) -> Option<String> {
    let mut lines = Vec::new();
    for attr in attrs {
        if !attr.path().is_ident("doc") {
            continue;
        }
        if let syn::Meta::NameValue(nv) = &attr.meta
            && let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
        {
            lines.push(s.value().trim().to_owned());
        }
    }
    let text = lines.join("\n").trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// The path generated code uses to reach loomflow: `::loomflow` unless overridden.
pub(crate) fn crate_path(path: Option<&syn::Path>) -> TokenStream {
    match path {
        Some(path) => path.to_token_stream(),
        None => quote!(::loomflow),
    }
}

/// On error: the user's item unchanged plus the errors, so the rest of their crate still
/// compiles and only the real problems are reported.
pub(crate) fn with_original(item: TokenStream, error: syn::Error) -> TokenStream {
    let errors = error.to_compile_error();
    quote! { #item #errors }
}
