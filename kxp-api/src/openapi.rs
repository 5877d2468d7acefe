//! The OpenAPI description.

/// The API's OpenAPI document.
pub struct ApiDoc;

/// The OpenAPI document.
pub fn openapi() {}
