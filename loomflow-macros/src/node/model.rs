//! A validated description of a `#[node]` function.

use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Type};

use super::attr::NodeArgs;
use crate::common::{doc_text, find_impl_trait, unraw};

const NOT_GENERIC: &str =
    "#[node] functions cannot be generic: the node's state type must be concrete";

pub(crate) struct NodeModel {
    pub(crate) func: ItemFn,
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    pub(crate) state_ty: Type,
    /// The type behind the second parameter's `&`, when the function takes the context:
    /// `Context`, or whatever the user calls it (a renamed import, an alias); the generated
    /// code checks that it is `Context`, at the user's type.
    pub(crate) context_ty: Option<Type>,
    /// Diagram markers found in the body (calls that wait for the outside world).
    pub(crate) markers: Vec<&'static str>,
    /// Where errors about the return type point.
    pub(crate) output_span: proc_macro2::Span,
    pub(crate) krate: Option<syn::Path>,
}

/// A `#[node]` fn that failed validation: what the fallback expansion still needs.
pub(crate) struct Invalid {
    pub(crate) error: syn::Error,
    pub(crate) func: ItemFn,
    pub(crate) name: String,
    /// The state type, when the signature names a concrete one.
    pub(crate) state_ty: Option<Type>,
    pub(crate) krate: Option<syn::Path>,
}

impl NodeModel {
    /// Validates the attribute and the signature together, so that every problem is reported.
    pub(crate) fn new(mut args: NodeArgs, func: ItemFn) -> Result<Self, Box<Invalid>> {
        let mut errors = std::mem::take(&mut args.errors);
        let sig = &func.sig;
        if sig.asyncness.is_none() {
            errors.push_spanned(sig.fn_token, "#[node] functions must be `async fn`");
        }
        if crate::common::has_type_generics(&sig.generics) {
            errors.push_spanned(crate::common::generics_tokens(&sig.generics), NOT_GENERIC);
        }
        if let Some(variadic) = &sig.variadic {
            errors.push_spanned(variadic, "#[node] functions cannot be variadic");
        }
        if let Some(unsafety) = &sig.unsafety {
            errors.push_spanned(
                unsafety,
                "#[node] functions cannot be `unsafe`: the graph calls them; keep the unsafe \
                 code in a safe fn of your own, with the checks it needs",
            );
        }

        let mut state_ty = None;
        let mut context_ty = None;
        let mut typed_index = 0;
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(receiver) => errors.push_spanned(
                    receiver,
                    "#[node] functions cannot take `self`: write a free function, or implement `Node` by hand",
                ),
                FnArg::Typed(pat_type) => match (
                    post_increment(&mut typed_index),
                    crate::common::ungrouped(&pat_type.ty),
                ) {
                    (0, Type::Reference(r)) if r.mutability.is_some() => {
                        match find_impl_trait(&r.elem) {
                            Some(impl_trait) => errors.push_spanned(impl_trait, NOT_GENERIC),
                            None => state_ty = Some((*r.elem).clone()),
                        }
                    }
                    (0, other) => errors.push_spanned(
                        other,
                        "the first parameter of a #[node] function must be the state, as `&mut S`",
                    ),
                    // Taken by its place, whatever its type is called: the generated code
                    // checks that it is `Context` (see `expand::context_check`).
                    (1, Type::Reference(r)) if r.mutability.is_none() => {
                        context_ty = Some((*r.elem).clone());
                    }
                    (1, other) => errors.push_spanned(
                        other,
                        "the second parameter of a #[node] function must be `&Context`",
                    ),
                    (_, other) => errors.push_spanned(
                        other,
                        "#[node] functions take at most two parameters: `&mut S` and `&Context`",
                    ),
                },
            }
        }
        if sig.inputs.is_empty() {
            errors.push(syn::Error::new(
                sig.paren_token.span.join(),
                "#[node] functions take the state as their first parameter, as `&mut S`",
            ));
        }
        let name = args.name.map_or_else(|| unraw(&sig.ident), |n| n.value());
        let state_ty = match (errors.finish(), state_ty) {
            (Ok(()), Some(state_ty)) => state_ty,
            (result, state_ty) => {
                let error = result.err().unwrap_or_else(|| {
                    syn::Error::new(sig.paren_token.span.join(), "missing state parameter")
                });
                // A generic fn's state names a parameter the fallback cannot declare.
                let concrete = !crate::common::has_type_generics(&sig.generics);
                return Err(Box::new(Invalid {
                    error,
                    name,
                    state_ty: state_ty.filter(|_| concrete),
                    krate: args.krate,
                    func,
                }));
            }
        };

        Ok(Self {
            name,
            description: doc_text(&func.attrs),
            markers: markers(&func.block),
            state_ty,
            context_ty,
            output_span: match &func.sig.output {
                syn::ReturnType::Default => func.sig.ident.span(),
                syn::ReturnType::Type(_, ty) => ty.span(),
            },
            krate: args.krate,
            func,
        })
    }
}

fn post_increment(counter: &mut usize) -> usize {
    let current = *counter;
    *counter += 1;
    current
}

/// Markers for Mermaid, from the method calls the body makes: a node that calls
/// `wait_for_signal` waits for a signal; one that calls `interrupt` may suspend.
fn markers(block: &syn::Block) -> Vec<&'static str> {
    use quote::ToTokens;

    fn scan(tokens: proc_macro2::TokenStream, found: &mut Vec<&'static str>) {
        let mut after_dot = false;
        for tree in tokens {
            match tree {
                proc_macro2::TokenTree::Group(group) => scan(group.stream(), found),
                proc_macro2::TokenTree::Punct(p) => {
                    after_dot = p.as_char() == '.';
                    continue;
                }
                proc_macro2::TokenTree::Ident(ident) if after_dot => {
                    let marker = match ident.to_string().as_str() {
                        "wait_for_signal" => Some("waits for signal"),
                        "interrupt" => Some("may interrupt"),
                        _ => None,
                    };
                    if let Some(marker) = marker
                        && !found.contains(&marker)
                    {
                        found.push(marker);
                    }
                }
                _ => {}
            }
            after_dot = false;
        }
    }

    let mut found = Vec::new();
    scan(block.to_token_stream(), &mut found);
    found
}
