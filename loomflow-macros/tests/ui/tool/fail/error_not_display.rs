use loomflow::prelude::*;

/// An API error: `Serialize` and `Debug`, but not `Display`.
#[derive(Debug, Serialize)]
struct ApiError {
    code: u16,
}

type ApiResult<T> = Result<T, ApiError>;

/// Through an alias: refused like the spelled-out form, not reported as a success.
#[tool]
fn via_alias(n: u32) -> ApiResult<u32> {
    if n == 0 { Err(ApiError { code: 404 }) } else { Ok(n) }
}

/// Spelled out.
#[tool]
fn spelled_out(n: u32) -> Result<u32, ApiError> {
    if n == 0 { Err(ApiError { code: 404 }) } else { Ok(n) }
}

fn main() {}
