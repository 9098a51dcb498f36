//! A Postgres database of its own for one test. Shared by the e2e harness and the
//! store suite (`crates/toolgate-store/tests/store_suite`, which includes this file by
//! path: the store's tests cannot depend on the harness, which depends on the store).

/// A Postgres database of its own for one test, on the server at 127.0.0.1:5432
/// (`TG_TEST_PG` overrides the admin URL). Drop it with [`PgDb::drop_db`].
pub struct PgDb {
    pub name: String,
    pub url: String,
}

pub fn pg_admin_url() -> String {
    std::env::var("TG_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

impl PgDb {
    pub async fn create() -> PgDb {
        use sqlx::Connection;
        let name = format!("toolgate_test_{}", uuid::Uuid::now_v7().simple());
        let admin = pg_admin_url();
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .expect("connect to Postgres");
        sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
            .execute(&mut conn)
            .await
            .expect("create db");
        let base = &admin[..admin.rfind('/').expect("admin URL names a database")];
        PgDb {
            url: format!("{base}/{name}"),
            name,
        }
    }

    /// Drops the database (also done on drop, for tests that panic first).
    #[allow(
        dead_code,
        reason = "not every test binary including this file drops early"
    )]
    pub async fn drop_db(self) {
        drop(self);
    }
}

impl Drop for PgDb {
    /// Drops the database even when the test panicked before `drop_db`.
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        if name.is_empty() {
            return;
        }
        let admin = pg_admin_url();
        let _ = std::thread::spawn(move || {
            use sqlx::Connection;
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                    let sql = format!("drop database if exists {name} with (force)");
                    let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}
