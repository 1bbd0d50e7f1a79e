//! Code generation for `#[node]`.

use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::model::{Invalid, NodeModel};
use crate::common::{crate_path, has_receiver, unit_value, with_original};

const CALL_DOC: &str = "The node's body, callable directly.";

pub(crate) fn expand(model: &NodeModel) -> TokenStream {
    let krate = crate_path(model.krate.as_ref());
    let ident = &model.func.sig.ident;
    let unit = unit_value(&model.func, CALL_DOC);
    let name = &model.name;
    let state_ty = &model.state_ty;
    let state_check = state_check(&krate, state_ty);
    let markers = &model.markers;
    let description = match &model.description {
        Some(text) => quote!(::core::option::Option::Some(#text)),
        None => quote!(::core::option::Option::None),
    };
    // The generated bindings carry a prefix: a plain `state`, `ctx` or `output` could not be
    // bound where a node or tool of that name (a static, see `unit_value`) is in scope.
    let call = if let Some(context_ty) = &model.context_ty {
        let ctx = context_check(&krate, context_ty);
        quote!(#ident::call(__loomflow_state, #ctx))
    } else {
        quote!({
            let _ = __loomflow_ctx;
            #ident::call(__loomflow_state)
        })
    };

    // Chosen by type (see `loomflow::graph::node_output`). The binding is made here, at the
    // call site, and put in as a token: spelled inside `quote_spanned!` it would take the
    // return type's span, which a `macro_rules!` that wrote the fn gives its own hygiene.
    let output = format_ident!("__loomflow_output");
    let convert = quote_spanned! {model.output_span=>
        {
            #[allow(unused_imports)]
            use #krate::__private::{
                BoxedErrorOutputKind as _, NodeErrorOutputKind as _, OtherNodeOutputKind as _,
            };
            // Bound again under the return type's span, for errors to point at it.
            #[allow(clippy::let_unit_value)]
            let __loomflow_value = #output;
            (&&&#krate::__private::NodeOutputOf(&__loomflow_value))
                .node_output_kind()
                .convert(__loomflow_value)
        }
    };

    quote! {
        #unit

        const _: () = {
            #state_check

            impl #krate::Node<#state_ty> for #ident {
                fn name(&self) -> &str {
                    #name
                }

                fn description(&self) -> ::core::option::Option<&str> {
                    #description
                }

                fn markers(&self) -> &[&'static str] {
                    &[#(#markers),*]
                }

                fn run<'a>(
                    &'a self,
                    __loomflow_state: &'a mut #state_ty,
                    __loomflow_ctx: &'a #krate::Context,
                ) -> #krate::__private::BoxFuture<'a, #krate::__private::NodeResult> {
                    ::std::boxed::Box::pin(async move {
                        let #output = #call.await;
                        #convert
                    })
                }
            }
        };
    }
}

/// On a validation error: the errors, plus the same unit value and `name::call` a valid
/// node has, implementing `Node` with a body that never runs (the crate does not compile),
/// so that `.node(name)` elsewhere adds no follow-on errors.
pub(crate) fn fallback(invalid: &Invalid) -> TokenStream {
    let func = &invalid.func;
    if has_receiver(func) {
        return with_original(func.to_token_stream(), invalid.error.clone());
    }
    let krate = crate_path(invalid.krate.as_ref());
    let ident = &func.sig.ident;
    let unit = unit_value(func, CALL_DOC);
    let name = &invalid.name;
    let (generics, state_ty, state_check) = match &invalid.state_ty {
        Some(ty) => (quote!(), ty.to_token_stream(), state_check(&krate, ty)),
        None => (quote!(<S>), quote!(S), quote!()),
    };
    let errors = invalid.error.to_compile_error();
    quote! {
        #unit

        const _: () = {
            #state_check

            impl #generics #krate::Node<#state_ty> for #ident {
                fn name(&self) -> &str {
                    #name
                }

                fn run<'a>(
                    &'a self,
                    _: &'a mut #state_ty,
                    _: &'a #krate::Context,
                ) -> #krate::__private::BoxFuture<'a, #krate::__private::NodeResult> {
                    ::core::unreachable!("#[node] reported a compile error")
                }
            }
        };

        #errors
    }
}

/// Asserts `S: State` with a call spanned at the user's `&mut S`, so a state that is not
/// Clone + Serialize + DeserializeOwned + Send + Sync is reported on their type (as
/// axum-macros' `debug_handler` does) rather than inside generated code or at `Graph::new`.
/// A call, not a `where S: State` clause, so that `State`'s own message is the one shown.
fn state_check(krate: &TokenStream, state_ty: &syn::Type) -> TokenStream {
    let span = state_ty.span();
    let krate = respan(krate, span);
    let assert = quote_spanned! {span=>
        __loomflow_assert_state::<#state_ty>()
    };
    quote! {
        #[allow(dead_code)]
        fn __loomflow_state_check() {
            fn __loomflow_assert_state<S: #krate::State>() {}
            #assert;
        }
    }
}

/// The context, handed over as the user's `&T` through `NodeContext`, spanned at `T`: the
/// context under any name (an import renamed, an alias) compiles, and another type is
/// reported on that type, in the trait's own words.
fn context_check(krate: &TokenStream, context_ty: &syn::Type) -> TokenStream {
    let span = context_ty.span();
    let krate = respan(krate, span);
    // The binding put in as a token made here: spelled inside `quote_spanned!`, it would
    // take the type's span, which a `macro_rules!` that wrote the fn gives its own hygiene.
    let ctx = format_ident!("__loomflow_ctx");
    quote_spanned! {span=>
        <#context_ty as #krate::__private::NodeContext>::from_context(#ctx)
    }
}

/// The crate path with every token at `span`, so the whole where-clause bound points at
/// the user's type.
fn respan(tokens: &TokenStream, span: proc_macro2::Span) -> TokenStream {
    tokens
        .clone()
        .into_iter()
        .map(|mut tree| {
            tree.set_span(span);
            tree
        })
        .collect()
}
