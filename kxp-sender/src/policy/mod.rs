//! The policy: the sender's decisions as pure functions of the model, the settings and a time
//! passed in. The retry schedule and its jitter, the circuit breaker, the rate limit, adaptive concurrency, the accounts' fair shares of the workers, the health
//! maths, what a notice says, when an expiring certificate is announced, when a console session expires and when failed sign-ins are refused. No SQL, no clock, no I/O: the store calls these inside its
//! transactions and the engine around its attempts, and writes down what they return.

pub(crate) mod certificates;
pub(crate) mod circuit;
pub(crate) mod concurrency;
pub(crate) mod fairness;
pub(crate) mod health;
pub(crate) mod notice;
pub(crate) mod rate;
pub(crate) mod schedule;
pub(crate) mod session;
pub(crate) mod sign_in;
