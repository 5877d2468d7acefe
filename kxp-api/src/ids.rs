//! Ids as types, so an endpoint id can never be passed where a delivery id is wanted. Each is
//! the server's string, unchanged: a type prefix and a UUIDv7 in lowercase hex (`ep_…`), which
//! sort by creation time and serve as cursors — except event ids, which are plain UUIDv4s
//! (the envelope's `id`, what receivers deduplicate on).
//!
//! With the `sqlx` feature each id but [`Cursor`] is also a `sqlx::Type` (transparent: bound and
//! decoded as the `TEXT` it is stored as, on SQLite and PostgreSQL alike), so the server's
//! rows hold these types and not bare strings.

id_type! {
    /// An account: the unit of isolation (`acc_` and 32 hex digits).
    #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
    AccountId, example = "acc_0193a0c4c1e07c2e9f3b7a1d2c4e5f60"
}

id_type! {
    /// An operator: one of the platform's own people, whose key acts for every account (`op_`
    /// and 32 hex digits). No route answers operators; `kxp operators` shows their ids.
    #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
    OperatorId, example = "op_0193a0c4c1e07c2e9f3b7a1d2c4e5f66"
}

id_type! {
    /// An endpoint: where an account's events are delivered (`ep_` and 32 hex digits).
    #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
    EndpointId, example = "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61"
}

id_type! {
    /// An event: the envelope's `id`, a UUID (no prefix), the same for every delivery and
    /// replay of the event, so receivers deduplicate on it.
    #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
    EventId, example = "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62"
}

id_type! {
    /// A delivery: one event to one endpoint (`dlv_` and 32 hex digits). A replay is a new
    /// delivery of the same event.
    #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
    DeliveryId, example = "dlv_0193a0c4c1e07c2e9f3b7a1d2c4e5f63"
}

id_type! {
    /// An operational notice on one channel (`ntf_` and 32 hex digits).
    #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
    NotificationId, example = "ntf_0193a0c4c1e07c2e9f3b7a1d2c4e5f64"
}

id_type! {
    /// A registered JSON Schema (`sch_` and 32 hex digits).
    #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
    SchemaId, example = "sch_0193a0c4c1e07c2e9f3b7a1d2c4e5f65"
}

id_type! {
    /// An erasure by tag (`er_` and 32 hex digits): `POST /v1/erasures`.
    #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
    ErasureId, example = "er_0193a0c4c1e07c2e9f3b7a1d2c4e5f67"
}

id_type! {
    /// Where the next page of a list starts: pass `next_cursor` back as `?cursor=`. Opaque to
    /// clients (today the last id of the page; that may change).
    Cursor, example = "dlv_0193a0c4c1e07c2e9f3b7a1d2c4e5f63"
}

// The `sqlx` feature's promise, on both backends the server runs on: an id binds and decodes
// as the TEXT it is stored as, and a nullable column decodes into `Option<Id>`. PostgreSQL
// runs when `KXP_TEST_DATABASE_URL` names one.
#[cfg(all(test, feature = "sqlx"))]
mod sqlx_tests {
    use sqlx::Connection;

    use super::{DeliveryId, EndpointId};

    macro_rules! round_trip {
        ($conn:expr, $create:literal) => {{
            let conn = $conn;
            sqlx::query($create).execute(&mut *conn).await.unwrap();
            let (id, probe) = (EndpointId::from("ep_1"), DeliveryId::from("dlv_1"));
            sqlx::query("INSERT INTO ids (id, probe) VALUES ($1, $2), ($3, NULL)")
                .bind(&id)
                .bind(Some(&probe))
                .bind(EndpointId::from("ep_2"))
                .execute(&mut *conn)
                .await
                .unwrap();
            let rows: Vec<(EndpointId, Option<DeliveryId>)> =
                sqlx::query_as("SELECT id, probe FROM ids WHERE id >= $1 ORDER BY id")
                    .bind(&id)
                    .fetch_all(&mut *conn)
                    .await
                    .unwrap();
            assert_eq!(rows, [(id, Some(probe)), (EndpointId::from("ep_2"), None)]);
        }};
    }

    #[tokio::test]
    async fn ids_are_text_in_sqlite() {
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        round_trip!(&mut conn, "CREATE TABLE ids (id TEXT NOT NULL, probe TEXT)");
    }

    #[tokio::test]
    async fn ids_are_text_in_postgres() {
        let Ok(url) = std::env::var("KXP_TEST_DATABASE_URL") else {
            return;
        };
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        round_trip!(
            &mut conn,
            "CREATE TEMP TABLE ids (id TEXT NOT NULL, probe TEXT)"
        );
    }
}
