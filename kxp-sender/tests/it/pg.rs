//! A fresh PostgreSQL database per test, dropped afterwards, so runs never see each other.

use sqlx::{Connection, PgConnection};

pub struct Database {
    admin_url: String,
    name: String,
    url: String,
}

impl Database {
    pub async fn create(admin_url: &str, prefix: &str) -> Database {
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(admin_url).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
        let (base, _) = admin_url.rsplit_once('/').unwrap();
        Database {
            admin_url: admin_url.to_owned(),
            url: format!("{base}/{name}"),
            name,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub async fn drop(self) {
        let mut admin = PgConnection::connect(&self.admin_url).await.unwrap();
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut admin)
        .await
        .unwrap();
    }
}
