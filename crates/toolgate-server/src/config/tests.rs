//! The configuration's tests: layering, validation, secrets, and the README's own
//! TOML blocks.

use super::*;

mod layering {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_run_out_of_the_box_on_loopback_8080() {
        let config =
            Config::load(&Overrides::default(), env(&[("PATH", "/bin")])).expect("defaults");
        assert_eq!(config.listen, SocketAddr::from(([127, 0, 0, 1], 8080)));
        assert_eq!(
            config.workspace_root(),
            PathBuf::from("toolgate-data/workspace")
        );
        assert_eq!(config.http.max_body_bytes, 1024 * 1024);
    }

    #[test]
    fn file_then_environment_then_flags() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("toolgate.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:9000\"\n[http]\nmax_body_bytes = 10\n[tools]\ndiagnostics = false\n").expect("write");
        let overrides = Overrides {
            config_file: Some(file),
            listen: Some("127.0.0.1:9100".into()),
            data_dir: None,
        };
        let config = Config::load(
            &overrides,
            env(&[
                ("TOOLGATE_HTTP__MAX_BODY_BYTES", "20"),
                (
                    "TOOLGATE_HTTP__CORS_ALLOWED_ORIGINS",
                    "[\"https://app.example\"]",
                ),
            ]),
        )
        .expect("valid");
        assert_eq!(config.listen.port(), 9100, "flag wins");
        assert_eq!(config.http.max_body_bytes, 20, "environment beats file");
        assert_eq!(config.http.cors_allowed_origins, ["https://app.example"]);
        assert!(!config.tools.diagnostics, "file beats default");
    }

    /// The test suite's and the benchmarks' own variables stay out of the `TOOLGATE_*`
    /// namespace: every gateway they start inherits them, and a `TOOLGATE_*` variable
    /// that names no setting stops a gateway. (Before: the README's `TOOLGATE_TEST_PG`
    /// made every gateway the CLI tests spawned exit at start.)
    #[test]
    fn the_suites_own_variables_are_not_configuration() {
        let url = "postgres://postgres@127.0.0.1:5432/postgres";
        Config::load(
            &Overrides::default(),
            env(&[("TG_TEST_PG", url), ("BENCH_PG", url)]),
        )
        .expect("ignored");
        let err = Config::load(&Overrides::default(), env(&[("TOOLGATE_TEST_PG", url)]))
            .expect_err("a TOOLGATE_ variable naming no setting");
        // Named by its variable, not only by a key no file holds.
        assert!(err.to_string().contains("TOOLGATE_TEST_PG"), "{err}");
    }

    #[test]
    fn bad_values_are_all_reported_by_key() {
        let err = Config::load(
            &Overrides::default(),
            env(&[("TOOLGATE_HTTP__MAX_BODY_BYTES", "lots")]),
        )
        .expect_err("bad value");
        assert_eq!(err.0[0].0, "http.max_body_bytes", "{err}");

        let err = Config::load(
            &Overrides::default(),
            env(&[("TOOLGATE_HTTP__NO_SUCH_KEY", "1")]),
        )
        .expect_err("unknown key");
        assert!(err.to_string().contains("no_such_key"), "{err}");

        let err = Config::load(
            &Overrides::default(),
            env(&[
                ("DATABASE_URL", "mysql://nope"),
                ("TOOLGATE_TOOLS__MAX_OUTPUT_CHARS", "0"),
                ("TOOLGATE_MCP__SSE_POLL_AFTER_MS", "0"),
                ("TOOLGATE_LOG__FILTER", "[[["),
                ("TOOLGATE_LIMITS__PRINCIPAL_READS_PER_MINUTE", "0"),
            ]),
        )
        .expect_err("semantic errors");
        let keys: Vec<&str> = err.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "database.url",
                "limits.principal_reads_per_minute",
                "tools.max_output_chars",
                "mcp.sse_poll_after_ms",
                "log.filter",
            ],
            "{err}"
        );

        // One body of the largest size must fit in the bytes held at once.
        let err = Config::load(
            &Overrides::default(),
            env(&[
                ("TOOLGATE_HTTP__MAX_BODY_BYTES", "2000000"),
                (
                    "TOOLGATE_HTTP__MAX_BODY_BYTES_IN_FLIGHT_PER_TENANT",
                    "1000000",
                ),
            ]),
        )
        .expect_err("a share smaller than a body");
        let keys: Vec<&str> = err.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["http.max_body_bytes_in_flight_per_tenant"], "{err}");

        // The reserve is checked against the pool the backend will have.
        let reserve = |pairs: &[(&str, &str)]| {
            Config::load(&Overrides::default(), env(pairs))
                .map(|_| ())
                .map_err(|err| err.to_string())
        };
        let err =
            reserve(&[("TOOLGATE_DATABASE__RESERVED_CONNECTIONS", "8")]).expect_err("SQLite's 8");
        assert!(
            err.contains("database.reserved_connections") && err.contains("8 connections"),
            "{err}"
        );
        reserve(&[
            ("DATABASE_URL", "postgres://db/toolgate"),
            ("TOOLGATE_DATABASE__RESERVED_CONNECTIONS", "8"),
        ])
        .expect("Postgres' 16");
        let err = reserve(&[
            ("TOOLGATE_DATABASE__MAX_CONNECTIONS", "32"),
            ("TOOLGATE_DATABASE__RESERVED_CONNECTIONS", "40"),
        ])
        .expect_err("more than configured");
        assert!(err.contains("32 connections"), "{err}");
    }

    /// The keys a rotation keeps beside the current one are checked like it, each named by
    /// its place in the list.
    #[test]
    fn keys_being_rotated_out_are_checked_by_place() {
        let err = Config::load(
            &Overrides::default(),
            env(&[
                ("TOOLGATE_AUDIT__PREVIOUS_PUBLIC_KEYS", "[\"not-hex\"]"),
                (
                    "TOOLGATE_TENANT_UPSTREAMS__PREVIOUS_KEYS",
                    &format!("[\"{}\", \"short\"]", "ab".repeat(32)),
                ),
                ("TOOLGATE_AUTH__JWT__ISSUER", "https://idp.example/"),
                ("TOOLGATE_AUTH__JWT__AUDIENCE", "toolgate"),
                ("TOOLGATE_AUTH__JWT__JWKS_URL", "https://idp.example/jwks"),
                ("TOOLGATE_AUTH__JWT__HS256_PREVIOUS_SECRETS", "[\"short\"]"),
            ]),
        )
        .expect_err("bad keys");
        let keys: Vec<&str> = err.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "auth.jwt.hs256_previous_secrets",
                "auth.jwt.hs256_previous_secrets[0]",
                "audit.previous_public_keys[0]",
                "tenant_upstreams.previous_keys[1]"
            ],
            "{err}"
        );
        assert!(!err.to_string().contains("short\""), "never echoed: {err}");
    }

    #[test]
    fn an_invalid_upstream_glob_stops_start_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("toolgate.toml");
        std::fs::write(
            &path,
            "[[upstreams]]\nname = \"fx\"\ncommand = \"fx-server\"\nallow = [\"*\"]\ndeny = [\"delete_*\", \"[unclosed\"]\n",
        )
        .expect("write");
        let overrides = Overrides {
            config_file: Some(path),
            ..Overrides::default()
        };
        let err = Config::load(&overrides, env(&[])).expect_err("a bad deny glob");
        assert_eq!(err.0.len(), 1, "{err}");
        assert_eq!(err.0[0].0, "upstreams[0].deny", "{err}");
        assert!(err.0[0].1.contains("[unclosed"), "{err}");
    }

    #[test]
    fn a_token_exchange_needs_an_http_upstream_and_a_token_url() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("toolgate.toml");
        std::fs::write(
            &path,
            "[[upstreams]]\nname = \"fx\"\ncommand = \"fx-server\"\n\
             [upstreams.token_exchange]\ntoken_url = \"idp.test/token\"\n\
             client_id = \"toolgate\"\nclient_secret = \"s3cr3t\"\n",
        )
        .expect("write");
        let overrides = Overrides {
            config_file: Some(path),
            ..Overrides::default()
        };
        let err = Config::load(&overrides, env(&[])).expect_err("no HTTP, no URL");
        let keys: Vec<&str> = err.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "upstreams[0].token_exchange",
                "upstreams[0].token_exchange.token_url"
            ],
            "{err}"
        );
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }

    #[test]
    fn jwks_and_authorization_server_urls_are_checked_at_start() {
        let err = Config::load(
            &Overrides::default(),
            env(&[
                ("TOOLGATE_AUTH__JWT__ISSUER", "https://idp.test/"),
                ("TOOLGATE_AUTH__JWT__AUDIENCE", "toolgate"),
                ("TOOLGATE_AUTH__JWT__JWKS_URL", "idp.test/jwks"),
                (
                    "TOOLGATE_MCP__AUTHORIZATION_SERVERS",
                    "[\"ftp://idp.test\"]",
                ),
            ]),
        )
        .expect_err("bad URLs");
        let keys: Vec<&str> = err.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["auth.jwt.jwks_url", "mcp.authorization_servers"],
            "{err}"
        );
    }

    #[test]
    fn sse_polling_needs_the_events_in_the_store() {
        let polling = [("TOOLGATE_MCP__SSE_POLL_AFTER_MS", "30000")];
        Config::load(&Overrides::default(), env(&polling)).expect("polling alone");
        let err = Config::load(
            &Overrides::default(),
            env(&[polling[0], ("TOOLGATE_MCP__DURABLE_STREAMS", "false")]),
        )
        .expect_err("polling with events in memory");
        assert_eq!(err.0[0].0, "mcp.durable_streams", "{err}");
    }

    #[test]
    fn a_missing_config_file_is_named() {
        let overrides = Overrides {
            config_file: Some("/no/such/toolgate.toml".into()),
            ..Overrides::default()
        };
        let err = Config::load(&overrides, env(&[])).expect_err("missing file");
        assert!(err.to_string().contains("/no/such/toolgate.toml"), "{err}");
    }
}

mod secret_tests {
    use super::*;

    #[test]
    fn database_url_comes_from_database_url_and_never_prints() {
        let env = vec![(
            "DATABASE_URL".to_string(),
            "postgres://u:hunter2@db/toolgate".to_string(),
        )];
        let config = Config::load(&Overrides::default(), env).expect("valid");
        let url = config.database.url.as_ref().expect("set");
        assert_eq!(url.expose(), "postgres://u:hunter2@db/toolgate");
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}

mod readme {
    use super::Config;

    /// The README's TOML blocks, each as written and with its commented-out settings
    /// (`# key = value`, `# [table]`) uncommented, as a reader trying them would.
    fn blocks() -> Vec<(usize, String, String)> {
        let readme = include_str!("../../../../README.md");
        let mut blocks = Vec::new();
        let mut lines = readme.lines().enumerate();
        while let Some((at, line)) = lines.next() {
            if line.trim() != "```toml" {
                continue;
            }
            let (mut written, mut uncommented) = (String::new(), String::new());
            for (_, line) in lines.by_ref() {
                if line.trim() == "```" {
                    break;
                }
                written.push_str(line);
                written.push('\n');
                let setting = line.strip_prefix("# ").filter(|rest| {
                    rest.starts_with('[')
                        || rest.split_once(" = ").is_some_and(|(key, _)| {
                            !key.is_empty()
                                && key
                                    .chars()
                                    .all(|c| c.is_ascii_alphanumeric() || "_.\"".contains(c))
                        })
                });
                uncommented.push_str(setting.unwrap_or(line));
                uncommented.push('\n');
            }
            blocks.push((at + 1, written, uncommented));
        }
        blocks
    }

    #[test]
    fn every_toml_block_of_the_readme_is_a_configuration_commented_settings_too() {
        let blocks = blocks();
        assert!(blocks.len() >= 5, "found {} blocks", blocks.len());
        for (line, written, uncommented) in blocks {
            for (what, text) in [("as written", written), ("uncommented", uncommented)] {
                if let Err(e) = toml::from_str::<Config>(&text) {
                    panic!("README.md block at line {line}, {what}: {e}\n{text}");
                }
            }
        }
    }
}
