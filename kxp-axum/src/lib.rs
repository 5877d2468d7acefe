//! Verify kxp webhooks in axum (work in progress: see issue 3).
