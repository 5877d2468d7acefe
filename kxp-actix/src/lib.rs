//! Verify kxp webhooks in actix-web (work in progress: see issue 3).
