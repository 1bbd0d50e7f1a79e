//! Code generation for `#[tool]`.

use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote, quote_spanned};

use super::model::{Invalid, Param, ToolModel};
use crate::common::{crate_path, has_receiver, unit_value, unraw, with_original};

const CALL_DOC: &str = "The tool's body, callable directly.";

pub(crate) fn expand(model: &ToolModel) -> TokenStream {
    let krate = crate_path(model.krate.as_ref());
    let private = quote!(#krate::__private);
    let func = &model.func;
    let ident = &func.sig.ident;
    let unit = unit_value(func, CALL_DOC);
    let name = &model.name;
    let description = &model.description;
    let approval = model.approval;
    let destructive = model.destructive;
    let serde_path = format!("{private}::serde");
    let schemars_path = format!("{private}::schemars");

    let mut fields = Vec::new();
    let mut field_idents = Vec::new();
    let mut locals = Vec::new();
    let mut call_args = Vec::new();
    let mut whole_ty = None;
    for (index, param) in model.params.iter().enumerate() {
        match param {
            Param::Context => call_args.push(quote!(__loomflow_ctx)),
            Param::Arg {
                ident: field,
                ty,
                description,
                field_attrs,
            } => {
                // As a description, not a doc comment: schemars reads a doc comment that
                // starts with `#` as a title.
                let doc = description
                    .as_ref()
                    .map(|text| quote!(#[schemars(description = #text)]));
                fields.push(quote!(#(#field_attrs)* #doc #field: #ty));
                field_idents.push(field.clone());
                let local = format_ident!("__loomflow_arg_{}", index);
                locals.push(local.clone());
                call_args.push(quote!(#local));
                whole_ty = Some(ty.clone());
            }
        }
    }

    let takes_context = model.params.iter().any(|p| matches!(p, Param::Context));
    let parse = match (&whole_ty, model.single_may_be_whole) {
        (Some(ty), true) => quote! {
            let (#(#locals,)*) = if __loomflow_setup().whole {
                (#private::parse_tool_arguments::<#ty>(#name, __loomflow_schema, __loomflow_arguments)?,)
            } else {
                let __loomflow_args = #private::parse_tool_arguments::<__LoomflowToolArgs>(
                    #name,
                    __loomflow_schema,
                    __loomflow_arguments,
                )?;
                (#(__loomflow_args.#field_idents,)*)
            };
        },
        _ => quote! {
            let __loomflow_args = #private::parse_tool_arguments::<__LoomflowToolArgs>(
                #name,
                __loomflow_schema,
                __loomflow_arguments,
            )?;
            let (#(#locals,)*) = (#(__loomflow_args.#field_idents,)*);
        },
    };
    let whole = match (&whole_ty, model.single_may_be_whole) {
        (Some(ty), true) => quote!(#private::whole_argument_schema::<#ty>()),
        _ => quote!(::core::option::Option::None),
    };
    // Chosen by type, not by spelling: an alias of `Result` is fallible, and a user type
    // named `Result` is a plain value.
    // The binding is made at the call site and put in as a token: spelled inside
    // `quote_spanned!` it would take the return type's span, which a `macro_rules!` that
    // wrote the fn gives its own hygiene.
    let output = format_ident!("__loomflow_output");
    let convert = quote_spanned! {model.output_span=>
        {
            #[allow(unused_imports)]
            use #private::{
                FallibleOutputKind as _, PlainOutputKind as _, ToolErrorOutputKind as _,
            };
            // Bound again under the return type's span, for errors to point at it.
            #[allow(clippy::let_unit_value)]
            let __loomflow_value = #output;
            (&&&#private::OutputOf(&__loomflow_value))
                .tool_output_kind()
                .convert(__loomflow_value, #name)
        }
    };
    // A sync body runs on tokio's blocking pool, so that it does not hold up the task that
    // dispatches it (nor the other calls of its turn), and the host's timeout can end the
    // wait for it. The context it may borrow is cloned for the blocking thread.
    let run = if func.sig.asyncness.is_some() {
        quote! {
            let #output = #ident::call(#(#call_args),*).await;
            #convert
        }
    } else {
        let own_context = takes_context.then(
            || quote!(let __loomflow_ctx_owned = ::core::clone::Clone::clone(__loomflow_ctx);),
        );
        let borrow_context =
            takes_context.then(|| quote!(let __loomflow_ctx = &__loomflow_ctx_owned;));
        quote! {
            #own_context
            #private::run_blocking_tool(#name, move || {
                #borrow_context
                let #output = #ident::call(#(#call_args),*);
                #convert
            })
            .await
        }
    };

    // A field the model did not mean is refused, unless a parameter flattened takes the
    // fields no other one names (a map of labels, say).
    let flattened = model.params.iter().any(|param| match param {
        Param::Arg { field_attrs, .. } => field_attrs.iter().any(is_flatten),
        Param::Context => false,
    });
    let deny_unknown = (!flattened).then(|| quote!(#[serde(deny_unknown_fields)]));
    quote! {
        #unit

        const _: () = {
            #[derive(#private::serde::Deserialize, #private::schemars::JsonSchema)]
            #[serde(crate = #serde_path)]
            #[schemars(crate = #schemars_path)]
            #deny_unknown
            #[allow(non_camel_case_types, dead_code)]
            struct __LoomflowToolArgs {
                #(#fields,)*
            }

            struct __LoomflowToolSetup {
                spec: #krate::tool::ToolSpec,
                whole: bool,
            }

            fn __loomflow_setup() -> &'static __LoomflowToolSetup {
                static SETUP: #private::std::sync::OnceLock<__LoomflowToolSetup> =
                    #private::std::sync::OnceLock::new();
                SETUP.get_or_init(|| {
                    // Prefixed: a plain name could not be bound where a tool or node of
                    // that name (a static) is in scope.
                    let __loomflow_whole: ::core::option::Option<#private::serde_json::Value> =
                        #whole;
                    let __loomflow_whole_found = __loomflow_whole.is_some();
                    let __loomflow_parameters = match __loomflow_whole {
                        ::core::option::Option::Some(__loomflow_schema) => __loomflow_schema,
                        ::core::option::Option::None => {
                            #private::tool_arguments_schema::<__LoomflowToolArgs>()
                        }
                    };
                    __LoomflowToolSetup {
                        spec: #krate::tool::ToolSpec::new(
                            #name,
                            #description,
                            __loomflow_parameters,
                        )
                        .requires_approval(#approval)
                        .destructive(#destructive),
                        whole: __loomflow_whole_found,
                    }
                })
            }

            impl #krate::tool::Tool for #ident {
                fn spec(&self) -> &#krate::tool::ToolSpec {
                    &__loomflow_setup().spec
                }

                fn call<'a>(
                    &'a self,
                    __loomflow_arguments: #private::serde_json::Value,
                    __loomflow_ctx: &'a #krate::tool::ToolContext,
                ) -> #private::BoxFuture<
                    'a,
                    ::core::result::Result<#private::serde_json::Value, #krate::tool::ToolError>,
                > {
                    ::std::boxed::Box::pin(async move {
                        let _ = __loomflow_ctx;
                        let __loomflow_schema = &__loomflow_setup().spec.parameters;
                        #parse
                        #run
                    })
                }
            }
        };
    }
}

/// On a validation error: the errors, plus the same unit value and `name::call` a valid
/// tool has, implementing `Tool` with bodies that never run (the crate does not compile),
/// so that `.with(name)` elsewhere adds no follow-on errors.
pub(crate) fn fallback(invalid: &Invalid) -> TokenStream {
    let func = &invalid.func;
    // A fn named as the schema derive's bindings stays a fn: as a static it would break
    // every `JsonSchema` derive in its module, the other tools' too.
    let schema_binding = matches!(unraw(&func.sig.ident).as_str(), "schema" | "generator");
    if has_receiver(func) || schema_binding {
        return with_original(func.to_token_stream(), invalid.error.clone());
    }
    let krate = crate_path(invalid.krate.as_ref());
    let private = quote!(#krate::__private);
    let ident = &func.sig.ident;
    let unit = unit_value(func, CALL_DOC);
    let errors = invalid.error.to_compile_error();
    quote! {
        #unit

        const _: () = {
            impl #krate::tool::Tool for #ident {
                fn spec(&self) -> &#krate::tool::ToolSpec {
                    ::core::unreachable!("#[tool] reported a compile error")
                }

                fn call<'a>(
                    &'a self,
                    _: #private::serde_json::Value,
                    _: &'a #krate::tool::ToolContext,
                ) -> #private::BoxFuture<
                    'a,
                    ::core::result::Result<#private::serde_json::Value, #krate::tool::ToolError>,
                > {
                    ::core::unreachable!("#[tool] reported a compile error")
                }
            }
        };

        #errors
    }
}

/// Whether `attr` is `#[serde(.., flatten, ..)]` (not a `rename = "flatten"`).
fn is_flatten(attr: &syn::Attribute) -> bool {
    if !attr.path().is_ident("serde") {
        return false;
    }
    let mut flatten = false;
    let _ = attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("flatten") {
            flatten = true;
        } else if meta.input.peek(syn::Token![=]) {
            let _: syn::Expr = meta.value()?.parse()?;
        } else if meta.input.peek(syn::token::Paren) {
            let _ = meta.input.step(|cursor| match cursor.token_tree() {
                Some((_, rest)) => Ok(((), rest)),
                None => Err(cursor.error("a group")),
            });
        }
        Ok(())
    });
    flatten
}
