//! Runnable examples (work in progress: see issue 3).
