//! Code generation for `#[node]`.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};

use super::model::{Invalid, NodeModel};
use crate::common::{crate_path, has_receiver, unit_value, with_original};

const CALL_DOC: &str = "The node's body, callable directly.";

pub(crate) fn expand(model: &NodeModel) -> TokenStream {
    let krate = crate_path(model.krate.as_ref());
    let ident = &model.func.sig.ident;
    let unit = unit_value(&model.func, CALL_DOC);
    let name = &model.name;
    let state_ty = &model.state_ty;
    let markers = &model.markers;
    let description = match &model.description {
        Some(text) => quote!(::core::option::Option::Some(#text)),
        None => quote!(::core::option::Option::None),
    };
    let call = if model.takes_context {
        quote!(#ident::call(state, ctx))
    } else {
        quote!({
            let _ = ctx;
            #ident::call(state)
        })
    };

    let convert = quote_spanned! {model.output_span=>
        #krate::__private::IntoNodeResult::into_node_result(output)
    };

    quote! {
        #unit

        const _: () = {
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
                    state: &'a mut #state_ty,
                    ctx: &'a #krate::Context,
                ) -> #krate::__private::BoxFuture<'a, #krate::__private::NodeResult> {
                    ::std::boxed::Box::pin(async move {
                        let output = #call.await;
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
    let (generics, state_ty) = match &invalid.state_ty {
        Some(ty) => (quote!(), ty.to_token_stream()),
        None => (quote!(<S>), quote!(S)),
    };
    let errors = invalid.error.to_compile_error();
    quote! {
        #unit

        const _: () = {
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
