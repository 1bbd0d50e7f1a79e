//! Pieces shared by the macros: doc comments, error collection, the crate path.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};
use syn::ItemFn;

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

    /// Adds every error `other` holds.
    pub(crate) fn extend(&mut self, other: Errors) {
        if let Some(error) = other.0 {
            self.push(error);
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

/// An attribute's comma-separated arguments, each parsed as `A`, with the errors of those
/// that did not parse: a bad argument is skipped up to the next comma, so the arguments
/// around it (a `description`, a `crate` path) still count and no follow-on errors come
/// from their loss.
pub(crate) fn parse_arguments<A: syn::parse::Parse>(tokens: TokenStream) -> (Vec<A>, Errors) {
    use syn::parse::Parser;
    let mut errors = Errors::default();
    let parser = |input: syn::parse::ParseStream<'_>| {
        let (parsed, found) = parse_each::<A>(input);
        errors.extend(found);
        Ok(parsed)
    };
    let parsed = parser.parse2(tokens).unwrap_or_else(|error| {
        errors.push(error);
        Vec::new()
    });
    (parsed, errors)
}

/// The comma-separated items of `input`, each parsed as `A`, with the errors of those that
/// did not parse, each skipped up to the next comma. Takes every token of `input`: a list
/// in parentheses (`param(...)`) that has a bad item leaves nothing unread, which would
/// make the whole attribute fail to parse and every argument in it be lost.
pub(crate) fn parse_each<A: syn::parse::Parse>(
    input: syn::parse::ParseStream<'_>,
) -> (Vec<A>, Errors) {
    let mut errors = Errors::default();
    let mut parsed = Vec::new();
    while !input.is_empty() {
        match input.parse::<A>() {
            Ok(arg) => parsed.push(arg),
            Err(error) => {
                errors.push(error);
                skip_to_comma(input);
            }
        }
        if input.is_empty() {
            break;
        }
        if let Err(error) = input.parse::<syn::Token![,]>() {
            errors.push(error);
            skip_to_comma(input);
            // The comma it stopped at, if any.
            let _ = input.parse::<Option<syn::Token![,]>>();
        }
    }
    (parsed, errors)
}

/// Moves `input` to its next top-level comma (or its end).
fn skip_to_comma(input: syn::parse::ParseStream<'_>) {
    // A step that always succeeds.
    let _ = input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((tree, next)) = rest.token_tree() {
            if matches!(&tree, proc_macro2::TokenTree::Punct(p) if p.as_char() == ',') {
                return Ok(((), rest));
            }
            rest = next;
        }
        Ok(((), rest))
    });
}

/// Whether a fn's generics hold more than lifetimes: a type or const parameter, or a
/// `where` clause. Lifetimes alone (`<'a>` on its references) change nothing the macros
/// generate, and are taken.
pub(crate) fn has_type_generics(generics: &syn::Generics) -> bool {
    generics.type_params().next().is_some()
        || generics.const_params().next().is_some()
        || generics.where_clause.is_some()
}

/// What an error about a fn's generics points at: its type or const parameters, or else its
/// `where` clause (which `Generics` does not print with its parameters: pointed at through
/// them, a fn with only a `where` clause was refused at the attribute).
pub(crate) fn generics_tokens(generics: &syn::Generics) -> proc_macro2::TokenStream {
    use quote::ToTokens as _;
    let typed = generics.type_params().next().is_some() || generics.const_params().next().is_some();
    match &generics.where_clause {
        Some(clause) if !typed => clause.to_token_stream(),
        _ => generics.to_token_stream(),
    }
}

/// An identifier as users write it in strings: `r#match` is `match`. The names `#[node]`,
/// `#[tool]` and `#[agent]` derive from a fn or struct are looked up by that text
/// (`.edge(START, "match")`, the tool name a model sends).
pub(crate) fn unraw(ident: &syn::Ident) -> String {
    let text = ident.to_string();
    match text.strip_prefix("r#") {
        Some(bare) => bare.to_owned(),
        None => text,
    }
}

/// The first `impl Trait` anywhere in `ty` (`Option<impl Into<String>>`, `&mut impl State`),
/// which generated code cannot name: the macros refuse it with their own message rather
/// than let rustc report E0562 inside the expansion.
pub(crate) fn find_impl_trait(ty: &syn::Type) -> Option<&syn::TypeImplTrait> {
    use syn::Type;
    match ty {
        Type::ImplTrait(found) => Some(found),
        Type::Array(t) => find_impl_trait(&t.elem),
        Type::Group(t) => find_impl_trait(&t.elem),
        Type::Paren(t) => find_impl_trait(&t.elem),
        Type::Ptr(t) => find_impl_trait(&t.elem),
        Type::Reference(t) => find_impl_trait(&t.elem),
        Type::Slice(t) => find_impl_trait(&t.elem),
        Type::Tuple(t) => t.elems.iter().find_map(find_impl_trait),
        Type::BareFn(t) => t
            .inputs
            .iter()
            .find_map(|arg| find_impl_trait(&arg.ty))
            .or_else(|| return_impl_trait(&t.output)),
        Type::Path(t) => t
            .qself
            .as_ref()
            .and_then(|q| find_impl_trait(&q.ty))
            .or_else(|| path_impl_trait(&t.path)),
        Type::TraitObject(t) => t.bounds.iter().find_map(|bound| match bound {
            syn::TypeParamBound::Trait(bound) => path_impl_trait(&bound.path),
            _ => None,
        }),
        _ => None,
    }
}

fn return_impl_trait(output: &syn::ReturnType) -> Option<&syn::TypeImplTrait> {
    match output {
        syn::ReturnType::Type(_, ty) => find_impl_trait(ty),
        syn::ReturnType::Default => None,
    }
}

fn path_impl_trait(path: &syn::Path) -> Option<&syn::TypeImplTrait> {
    path.segments
        .iter()
        .find_map(|segment| match &segment.arguments {
            syn::PathArguments::AngleBracketed(args) => {
                args.args.iter().find_map(|arg| match arg {
                    syn::GenericArgument::Type(ty) => find_impl_trait(ty),
                    syn::GenericArgument::AssocType(assoc) => find_impl_trait(&assoc.ty),
                    _ => None,
                })
            }
            syn::PathArguments::Parenthesized(args) => args
                .inputs
                .iter()
                .find_map(find_impl_trait)
                .or_else(|| return_impl_trait(&args.output)),
            syn::PathArguments::None => None,
        })
}

/// The text of `///` comments, or `None` when there is none: the lines joined, less the
/// indentation they all share (the space after `///`), so that a list or a code block in
/// an agent's instructions keeps its own indentation; trailing spaces and blank lines at
/// either end are dropped.
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
            // A `/** */` block is one attribute of several lines.
            lines.extend(block_lines(&s.value()));
        }
    }
    // Counted in characters: indentation may hold a wide space.
    let indent = lines
        .iter()
        .filter(|line| !line.is_empty())
        .map(|line| line.chars().take_while(|c| c.is_whitespace()).count())
        .min()
        .unwrap_or(0);
    let lines: Vec<&str> = lines
        .iter()
        .map(|line| match line.char_indices().nth(indent) {
            Some((at, _)) => &line[at..],
            None => "",
        })
        .collect();
    let text = lines.join("\n").trim_matches('\n').to_owned();
    (!text.is_empty()).then_some(text)
}

/// The lines of one doc attribute, trailing spaces dropped. A `/** */` block whose lines
/// after the first all start with a `*` margin (` * text`) loses it, as rustdoc drops it:
/// a proc macro is handed the block as written, stars and all.
fn block_lines(value: &str) -> Vec<String> {
    let mut lines: Vec<&str> = value.split('\n').map(str::trim_end).collect();
    let starred = lines.len() > 1
        && (lines.iter().skip(1))
            .filter(|line| !line.trim().is_empty())
            .all(|line| line.trim_start().starts_with('*'));
    if starred {
        for line in lines.iter_mut().skip(1) {
            let bare = line.trim_start();
            *line = bare.strip_prefix('*').unwrap_or(bare);
        }
    }
    lines.into_iter().map(str::to_owned).collect()
}

/// The first `#[doc = ...]` whose value is not a string written out (`include_str!(..)`,
/// `concat!(..)`): an attribute macro gets it unexpanded, so [`doc_text`] cannot read it.
pub(crate) fn unread_doc(attrs: &[syn::Attribute]) -> Option<&syn::Expr> {
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc"))
        .find_map(|attr| match &attr.meta {
            syn::Meta::NameValue(nv)
                if !matches!(
                    &nv.value,
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(_),
                        ..
                    })
                ) =>
            {
                Some(&nv.value)
            }
            _ => None,
        })
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

/// What `#[node]` and `#[tool]` turn a fn's name into, whether or not the rest of the
/// expansion succeeds: a braced unit struct (type namespace only, so `name::call(..)` works
/// and the name never acts as a pattern), a static of it (the value passed as
/// `.node(name)` / `.with(name)`), and the original body as `name::call`.
///
/// A static rather than a unit struct because a unit struct is also a pattern: there,
/// `let name = 5;` or `Struct { name, .. }` in the same module type-checks the binding
/// against the struct and fails with a baffling type error. Against a static, rustc says
/// plainly "let bindings cannot shadow statics" (E0530) and points at the fn.
pub(crate) fn unit_value(func: &ItemFn, call_doc: &str) -> TokenStream {
    let vis = &func.vis;
    let ident = &func.sig.ident;
    // Inner attributes (`#![allow(..)]`, `//!`) written at the top of the body: syn keeps
    // them with the fn's own, and they go back inside `call`'s body.
    let (outer, inner): (Vec<_>, Vec<_>) =
        (func.attrs.iter()).partition(|a| matches!(a.style, syn::AttrStyle::Outer));
    let (doc_attrs, other_attrs): (Vec<_>, Vec<_>) =
        outer.into_iter().partition(|a| a.path().is_ident("doc"));
    let mut sig = func.sig.clone();
    sig.ident = syn::Ident::new("call", ident.span());
    let stmts = &func.block.stmts;
    let block = quote_spanned! {func.block.brace_token.span.join()=>
        { #(#inner)* #(#stmts)* }
    };
    // At the fn's name, so that rustc's "the static is defined here" points there.
    let static_item = quote_spanned! {ident.span()=>
        #(#doc_attrs)*
        #[allow(non_upper_case_globals)]
        #vis static #ident: #ident = #ident {};
    };
    quote! {
        #(#doc_attrs)*
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #ident {}

        #static_item

        const _: () = {
            impl #ident {
                #[doc = #call_doc]
                #[allow(dead_code)]
                #(#other_attrs)*
                #vis #sig #block
            }
        };
    }
}

/// Whether the fn is a method (`self`): then it sits in an `impl` or a trait, where no
/// struct can be declared, and only the original item makes sense on error.
pub(crate) fn has_receiver(func: &ItemFn) -> bool {
    func.sig
        .inputs
        .iter()
        .any(|input| matches!(input, syn::FnArg::Receiver(_)))
}

/// `ty` without the invisible groups a `macro_rules!` fragment (`$t:ty`) arrives in, and
/// without parentheses: what a signature check should look at.
pub(crate) fn ungrouped(ty: &syn::Type) -> &syn::Type {
    match ty {
        syn::Type::Group(group) => ungrouped(&group.elem),
        syn::Type::Paren(paren) => ungrouped(&paren.elem),
        other => other,
    }
}

#[cfg(test)]
mod doc_tests {
    use super::doc_text;

    #[test]
    fn doc_text_keeps_the_indentation_inside_the_comment() {
        let item: syn::ItemStruct = syn::parse_quote! {
            /// You plan trips.
            ///
            /// Steps:
            /// - book
            ///   - the flight first
            ///
            ///     let code = 1;
            struct Planner;
        };
        assert_eq!(
            doc_text(&item.attrs).as_deref(),
            Some("You plan trips.\n\nSteps:\n- book\n  - the flight first\n\n    let code = 1;")
        );
        let wide: syn::ItemStruct = syn::parse_quote! {
            #[doc = "   Fetch it:"]
            #[doc = " \u{3000}second half."]
            struct Wide;
        };
        assert_eq!(
            doc_text(&wide.attrs).as_deref(),
            Some(" Fetch it:\nsecond half.")
        );
        let none: syn::ItemStruct = syn::parse_quote! {
            ///
            struct Empty;
        };
        assert_eq!(doc_text(&none.attrs), None);
    }

    /// A block comment's ` * ` margin is not part of the text: the description and the
    /// paragraphs are what rustdoc shows.
    #[test]
    fn doc_text_drops_a_block_comments_star_margin() {
        let starred: syn::ItemFn = syn::parse_quote! {
            /**
             * Get the weather.
             *
             * Internal notes:
             *   - indented
             */
            fn weather() {}
        };
        assert_eq!(
            doc_text(&starred.attrs).as_deref(),
            Some("Get the weather.\n\nInternal notes:\n  - indented")
        );
        let plain: syn::ItemFn = syn::parse_quote! {
            /** Plain block.
                * a list item, not a margin: the next line has none
                and more text */
            fn plain() {}
        };
        let text = doc_text(&plain.attrs).unwrap_or_default();
        assert!(text.contains("* a list item"), "{text}");
        assert!(text.ends_with("and more text"), "{text}");
    }
}
