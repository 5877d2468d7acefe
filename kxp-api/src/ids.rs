//! Ids as types, so an endpoint id can never be passed where a delivery id is wanted. Each is
//! the server's string, unchanged: a type prefix and a UUIDv7 in lowercase hex (`ep_…`), which
//! sort by creation time and serve as cursors — except event ids, which are plain UUIDv4s
//! (the envelope's `id`, what receivers deduplicate on).

id_type! {
    /// An account: the unit of isolation (`acc_` and 32 hex digits).
    AccountId, example = "acc_0193a0c4c1e07c2e9f3b7a1d2c4e5f60"
}

id_type! {
    /// An endpoint: where an account's events are delivered (`ep_` and 32 hex digits).
    EndpointId, example = "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61"
}

id_type! {
    /// An event: the envelope's `id`, a UUID (no prefix), the same for every delivery and
    /// replay of the event, so receivers deduplicate on it.
    EventId, example = "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62"
}

id_type! {
    /// A delivery: one event to one endpoint (`dlv_` and 32 hex digits). A replay is a new
    /// delivery of the same event.
    DeliveryId, example = "dlv_0193a0c4c1e07c2e9f3b7a1d2c4e5f63"
}

id_type! {
    /// An operational notice on one channel (`ntf_` and 32 hex digits).
    NotificationId, example = "ntf_0193a0c4c1e07c2e9f3b7a1d2c4e5f64"
}

id_type! {
    /// A registered JSON Schema (`sch_` and 32 hex digits).
    SchemaId, example = "sch_0193a0c4c1e07c2e9f3b7a1d2c4e5f65"
}

id_type! {
    /// Where the next page of a list starts: pass `next_cursor` back as `?cursor=`. Opaque to
    /// clients (today the last id of the page; that may change).
    Cursor, example = "dlv_0193a0c4c1e07c2e9f3b7a1d2c4e5f63"
}
