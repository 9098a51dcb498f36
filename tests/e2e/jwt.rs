//! JWT bearer tokens: HS256 from a shared secret; EdDSA, RS256 and ES256 from a JWKS
//! served on loopback. The private keys in `tests/fixtures` are throwaway test keys.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use toolgate_e2e::{Gateway, client_with_key};
use toolgate_server::config::Secret;
use toolgate_server::jwt::JwtConfig;

const SECRET: &str = "a-test-secret-that-is-at-least-32-bytes-long";
const ED_PRIVATE_PEM: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIP2+v+7mxB5dkygUdQny7b1eyxZa0pg7Jnf9pNm7THIl
-----END PRIVATE KEY-----
";
/// The public half of `ED_PRIVATE_PEM`, base64url.
const ED_PUBLIC_X: &str = "-S-EEja0HTt88_qQbxvsfEsi9sgYaNBf4L9JwOdO-BE";

/// RSA-2048 and P-256 test keys, with the public halves' JWK parameters (base64url).
const RS_PRIVATE_PEM: &str = include_str!("../fixtures/jwt-rs256-test-key.pem");
const RS_PUBLIC_N: &str = "tCcB1cKCDLJ-yFJySG3A4gmRT_TsuQKxkia84HAI1oXUPNWnPgsNVRn5kc4cPE-GYru4j7jiKwIUdkzTs8xfuLmhrH3HPuM5_Oq7ncnhVfKAXkQRWf94JIyHNCNhdnR4YLEJpq6TnGFvbMuvoKzVlmpx9MAB6yNSxL594qYFILu5ODcvUtH7TqbAH5aYRY1MimzDEOqSl2803oSR75DmJzS-bpCHZ-4OdsHOS1-uPb3a2419sKuRunLEl8oLNTSifAqRW9MLUqe8KiABPZHibFlaLTRbHdOPw8ODMx7dtSalr16az3jMd3IK7e37L98ky3oEKwcgMZNH06dxGppgrw";
const EC_PRIVATE_PEM: &str = include_str!("../fixtures/jwt-es256-test-key.pem");
const EC_PUBLIC_X: &str = "4dYOjsz9H88Ps2c6owt1nox7stLlDsH_nJI4A7M7l6E";
const EC_PUBLIC_Y: &str = "hRRidvdSJQumHp8nMrjTMKYtxw4iiHcnwK-CvnMCS_M";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn claims(overrides: Value) -> Value {
    let mut claims = json!({
        "iss": "https://idp.test/",
        "aud": "toolgate",
        "sub": "alice@example.com",
        "tenant": "default",
        "scope": "tools:invoke audit:read",
        "exp": now() + 600,
        "iat": now(),
    });
    for (k, v) in overrides.as_object().expect("object") {
        if v.is_null() {
            claims.as_object_mut().expect("object").remove(k);
        } else {
            claims[k] = v.clone();
        }
    }
    claims
}

fn config(hs256: bool, jwks_url: Option<String>) -> JwtConfig {
    serde_json::from_value(json!({
        "issuer": "https://idp.test/",
        "audience": "toolgate",
        "leeway_secs": 5,
    }))
    .map(|mut c: JwtConfig| {
        if hs256 {
            c.hs256_secret = Some(Secret::new(SECRET));
        }
        c.jwks_url = jwks_url;
        c
    })
    .expect("config")
}

fn hs256(claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("encode")
}

fn unsigned(claims: &Value) -> String {
    use base64_url as b64;
    let header = b64::encode(br#"{"alg":"none","typ":"JWT"}"#);
    format!("{header}.{}.", b64::encode(claims.to_string().as_bytes()))
}

/// base64url without padding, enough for hand-made tokens.
mod base64_url {
    pub fn encode(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..=chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            }
        }
        out
    }
}

async fn status(gw: &Gateway, token: &str) -> u16 {
    client_with_key(token)
        .get(gw.url("/v1/audit"))
        .send()
        .await
        .expect("request")
        .status()
        .as_u16()
}

#[tokio::test]
async fn hs256_tokens_are_checked_for_signature_time_issuer_audience_and_tenant() {
    let gw = Gateway::start_with(|c| c.auth.jwt = Some(config(true, None))).await;
    assert_eq!(status(&gw, &hs256(&claims(json!({})))).await, 200);

    let expired = hs256(&claims(json!({"exp": now() - 120})));
    let not_yet = hs256(&claims(json!({"nbf": now() + 120})));
    let wrong_aud = hs256(&claims(json!({"aud": "another-service"})));
    let wrong_iss = hs256(&claims(json!({"iss": "https://evil.test/"})));
    let no_exp = hs256(&claims(json!({"exp": null})));
    let unknown_tenant = hs256(&claims(json!({"tenant": "no-such-tenant"})));
    let forged = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(json!({})),
        &EncodingKey::from_secret(b"some-other-secret-of-sufficient-length!!"),
    )
    .expect("encode");
    let none = unsigned(&claims(json!({})));
    for (name, token) in [
        ("expired", expired),
        ("not yet valid", not_yet),
        ("wrong audience", wrong_aud),
        ("wrong issuer", wrong_iss),
        ("no exp", no_exp),
        ("unknown tenant", unknown_tenant),
        ("forged", forged),
        ("alg none", none),
    ] {
        assert_eq!(status(&gw, &token).await, 401, "{name}");
    }

    // Scopes come from the token: without audit:read, 403.
    let narrow = hs256(&claims(json!({"scope": "tools:invoke"})));
    assert_eq!(status(&gw, &narrow).await, 403);
}

/// Rotating the HS256 secret: tokens signed with the secret being rotated out keep
/// working while it is in `hs256_previous_secrets` (checked as strictly as any), new
/// ones are signed with the new secret, and a secret listed nowhere is still refused.
/// Without the previous secret listed, every token issued before the change is refused.
#[tokio::test]
async fn hs256_tokens_signed_with_a_rotated_out_secret_are_accepted_while_it_is_listed() {
    const NEW: &str = "the-new-test-secret-also-at-least-32-bytes-long";
    let with_new = |c: &mut toolgate_server::config::Config| {
        let mut jwt = config(false, None);
        jwt.hs256_secret = Some(Secret::new(NEW));
        c.auth.jwt = Some(jwt);
    };
    let signed = |secret: &str, claims: &Value| {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .expect("encode")
    };
    let old_token = hs256(&claims(json!({})));
    let new_token = signed(NEW, &claims(json!({})));
    let gw = Gateway::start_with(with_new).await;
    assert_eq!(status(&gw, &new_token).await, 200);
    assert_eq!(status(&gw, &old_token).await, 401, "the new secret alone");
    gw.stop().await;

    let gw = Gateway::start_with(|c| {
        with_new(c);
        if let Some(jwt) = c.auth.jwt.as_mut() {
            jwt.hs256_previous_secrets = vec![Secret::new(SECRET)];
        }
    })
    .await;
    assert_eq!(status(&gw, &new_token).await, 200);
    assert_eq!(status(&gw, &old_token).await, 200, "the previous secret");
    let expired = hs256(&claims(json!({"exp": now() - 120})));
    let wrong_aud = hs256(&claims(json!({"aud": "another-service"})));
    let elsewhere = signed(
        "some-other-secret-of-sufficient-length!!",
        &claims(json!({})),
    );
    for (name, token) in [
        ("expired, previous secret", expired),
        ("wrong audience, previous secret", wrong_aud),
        ("a secret listed nowhere", elsewhere),
    ] {
        assert_eq!(status(&gw, &token).await, 401, "{name}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn jwks_tokens_verify_and_hmac_tokens_cannot_borrow_the_public_key() {
    let jwks = json!({"keys": [
        {"kty": "OKP", "crv": "Ed25519", "x": ED_PUBLIC_X, "kid": "k1", "alg": "EdDSA", "use": "sig"},
        {"kty": "RSA", "n": RS_PUBLIC_N, "e": "AQAB", "kid": "rsa-1", "alg": "RS256", "use": "sig"},
        {"kty": "EC", "crv": "P-256", "x": EC_PUBLIC_X, "y": EC_PUBLIC_Y, "kid": "ec-1", "alg": "ES256", "use": "sig"},
    ]});
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let served = jwks.clone();
    tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/jwks.json",
            axum::routing::get(move || async move { axum::Json(served) }),
        );
        let _ = axum::serve(listener, app).await;
    });
    let url = format!("http://{addr}/jwks.json");
    let gw = Gateway::start_with(|c| c.auth.jwt = Some(config(false, Some(url)))).await;

    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("k1".into());
    let key = EncodingKey::from_ed_pem(ED_PRIVATE_PEM.as_bytes()).expect("key");
    let good = jsonwebtoken::encode(&header, &claims(json!({})), &key).expect("encode");
    assert_eq!(status(&gw, &good).await, 200);

    header.kid = Some("k2".into());
    let unknown_kid = jsonwebtoken::encode(&header, &claims(json!({})), &key).expect("encode");
    assert_eq!(status(&gw, &unknown_kid).await, 401);

    // RS256 and ES256 from the same set, each by its kid.
    let rsa = EncodingKey::from_rsa_pem(RS_PRIVATE_PEM.as_bytes()).expect("rsa key");
    let ec = EncodingKey::from_ec_pem(EC_PRIVATE_PEM.as_bytes()).expect("ec key");
    for (alg, kid, key) in [
        (Algorithm::RS256, "rsa-1", &rsa),
        (Algorithm::ES256, "ec-1", &ec),
    ] {
        let mut header = Header::new(alg);
        header.kid = Some(kid.into());
        let good = jsonwebtoken::encode(&header, &claims(json!({})), key).expect("encode");
        assert_eq!(status(&gw, &good).await, 200, "{alg:?}");
        let expired = jsonwebtoken::encode(&header, &claims(json!({"exp": now() - 120})), key)
            .expect("encode");
        assert_eq!(status(&gw, &expired).await, 401, "{alg:?} expired");
        let wrong_aud =
            jsonwebtoken::encode(&header, &claims(json!({"aud": "another-service"})), key)
                .expect("encode");
        assert_eq!(status(&gw, &wrong_aud).await, 401, "{alg:?} wrong audience");
    }
    // A token signed by one key but naming another's kid fails.
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("rsa-1".into());
    let mismatched = jsonwebtoken::encode(&header, &claims(json!({})), &ec).expect("encode");
    assert_eq!(status(&gw, &mismatched).await, 401);
    // Signed with a key the JWKS does not hold, under a kid it does.
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rsa-1".into());
    let forged = jsonwebtoken::encode(
        &header,
        &claims(json!({})),
        &EncodingKey::from_rsa_pem(include_bytes!("../fixtures/jwt-rs256-other-test-key.pem"))
            .expect("rsa key"),
    )
    .expect("encode");
    assert_eq!(status(&gw, &forged).await, 401);

    // HS/RS confusion: an HMAC token keyed with a public key's bytes, under each kid.
    for kid in ["k1", "rsa-1", "ec-1"] {
        let mut hs = Header::new(Algorithm::HS256);
        hs.kid = Some(kid.into());
        for secret in [
            ED_PUBLIC_X.as_bytes(),
            RS_PUBLIC_N.as_bytes(),
            EC_PUBLIC_X.as_bytes(),
            jwks.to_string().as_bytes(),
        ] {
            let confused =
                jsonwebtoken::encode(&hs, &claims(json!({})), &EncodingKey::from_secret(secret))
                    .expect("encode");
            assert_eq!(status(&gw, &confused).await, 401, "HS256 under {kid}");
        }
    }
    assert_eq!(status(&gw, &unsigned(&claims(json!({})))).await, 401);
}

/// A token may not make its holder the gateway's operator, nor name a tenant its issuer is
/// not bound to, nor carry critical header extensions.
#[tokio::test]
async fn tokens_cannot_claim_operator_scopes_foreign_tenants_or_crit_extensions() {
    let gw = Gateway::start_with(|c| {
        let mut jwt = config(true, None);
        jwt.tenants = vec!["default".into()];
        c.auth.jwt = Some(jwt);
    })
    .await;
    gw.create_tenant("acme").await;
    let operator = hs256(&claims(
        json!({"scope": "tools:invoke audit:read tenants:manage"}),
    ));
    let response = client_with_key(&operator)
        .post(gw.url("/v1/tenants"))
        .json(&json!({"name": "minted-by-a-token"}))
        .send()
        .await
        .expect("request");
    assert_eq!(
        response.status(),
        403,
        "tenants:manage from a token is dropped"
    );
    assert_eq!(
        status(&gw, &operator).await,
        200,
        "its other scopes still count"
    );

    let foreign = hs256(&claims(json!({"tenant": "acme"})));
    assert_eq!(
        status(&gw, &foreign).await,
        401,
        "acme is not this issuer's"
    );

    let mut header = Header::new(Algorithm::HS256);
    header.crit = Some(vec!["exp-ext".into()]);
    let critical = jsonwebtoken::encode(
        &header,
        &claims(json!({})),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("encode");
    assert_eq!(status(&gw, &critical).await, 401);
}

/// The operator may grant operator scopes from tokens, explicitly.
#[tokio::test]
async fn operator_scopes_from_tokens_only_when_configured() {
    let gw = Gateway::start_with(|c| {
        let mut jwt = config(true, None);
        jwt.operator_scopes = true;
        c.auth.jwt = Some(jwt);
    })
    .await;
    let operator = hs256(&claims(json!({"scope": "tenants:manage"})));
    let response = client_with_key(&operator)
        .post(gw.url("/v1/tenants"))
        .json(&json!({"name": "acme"}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 201);
}

/// A JWKS endpoint that never answers holds up only the tokens whose kid is unknown, and
/// them only for the fetch's deadline; tokens with known kids go on meanwhile.
#[tokio::test]
async fn a_hanging_jwks_endpoint_does_not_stall_known_keys() {
    let jwks = json!({"keys": [
        {"kty": "OKP", "crv": "Ed25519", "x": ED_PUBLIC_X, "kid": "k1", "alg": "EdDSA", "use": "sig"},
    ]});
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/jwks.json",
            axum::routing::get(move || {
                let count = count.clone();
                let jwks = jwks.clone();
                async move {
                    // The first fetch answers; every later one hangs.
                    if count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0 {
                        std::future::pending::<()>().await;
                    }
                    axum::Json(jwks)
                }
            }),
        );
        let _ = axum::serve(listener, app).await;
    });
    let url = format!("http://{addr}/jwks.json");
    let gw = Gateway::start_with(|c| {
        let mut jwt = config(false, Some(url));
        jwt.jwks_refresh_secs = 1;
        c.auth.jwt = Some(jwt);
    })
    .await;
    let key = EncodingKey::from_ed_pem(ED_PRIVATE_PEM.as_bytes()).expect("key");
    let token = |kid: &str| {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, &claims(json!({})), &key).expect("encode")
    };
    assert_eq!(status(&gw, &token("k1")).await, 200);
    // Past the refresh interval, an unknown kid starts a fetch that hangs...
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let unknown = tokio::spawn({
        let gw_url = gw.url("/v1/audit");
        let token = token("k2");
        async move {
            client_with_key(&token)
                .get(gw_url)
                .send()
                .await
                .expect("request")
                .status()
                .as_u16()
        }
    });
    while served.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // ...while the known kid is served, and the hung fetch gives up with a 401.
    assert_eq!(status(&gw, &token("k1")).await, 200);
    assert!(!unknown.is_finished(), "the unknown kid waits on its fetch");
    assert_eq!(unknown.await.expect("join"), 401);
}
