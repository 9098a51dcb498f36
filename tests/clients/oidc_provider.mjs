// A real OpenID Provider for the console's single sign-on test: panva's oidc-provider
// (OpenID Certified), on loopback, with its development login and consent pages.
//   PORT=… REDIRECT_URI=… node oidc_provider.mjs
// One public client, `toolgate-console` (authorization code + PKCE, no secret), may sign
// in at REDIRECT_URI. Access tokens for the resource `urn:toolgate` are JWTs (RS256, keys
// at /jwks) carrying the requested scopes and the user's tenant: the gateway checks them
// as it checks any JWT ([auth.jwt]). Any login name and password sign in; the name is
// the subject; a name starting with "other-" belongs to the tenant "other", any other to
// "default".
//
// For the token exchange test (RFC 8693), two machine clients `ann-agent` and
// `bob-agent` (secret "<id>-secret") get access tokens of their own by client credentials
// (subject: the client id), and the confidential client `toolgate-gateway` (secret
// "gateway-secret", client_secret_basic) may exchange such a token, at the token
// endpoint, for one with the audience it asks for, the same subject, `act` naming the
// gateway, and the scopes `tools:invoke` and the tenant "default": RS256, signed with the
// provider's own key (at /jwks). oidc-provider has no token exchange grant of its own;
// it authenticates the client and parses the request, and the handler below is the
// exchange policy, which RFC 8693 leaves to each authorization server.
import Provider, { errors } from "oidc-provider";
import { SignJWT, createLocalJWKSet, exportJWK, generateKeyPair, jwtVerify } from "jose";

const port = Number(process.env.PORT);
const issuer = `http://127.0.0.1:${port}`;
const resource = "urn:toolgate";
const scopes = ["tools:invoke", "audit:read", "approvals:decide", "agents:run", "tenant:admin"];

const TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token";
const { privateKey } = await generateKeyPair("RS256", { extractable: true });
const signing = { ...(await exportJWK(privateKey)), kid: "toolgate-test", alg: "RS256", use: "sig" };
const { d, p, q, dp, dq, qi, ...published } = signing;
const ownKeys = createLocalJWKSet({ keys: [published] });
const machine = (id) => ({
  client_id: id,
  client_secret: `${id}-secret`,
  grant_types: ["client_credentials"],
  response_types: [],
  redirect_uris: [],
  scope: "tools:invoke",
});

const provider = new Provider(issuer, {
  jwks: { keys: [signing] },
  clients: [{
    client_id: "toolgate-console",
    token_endpoint_auth_method: "none",
    redirect_uris: [process.env.REDIRECT_URI],
    grant_types: ["authorization_code"],
    response_types: ["code"],
  }, machine("ann-agent"), machine("bob-agent"), {
    client_id: "toolgate-gateway",
    client_secret: "gateway-secret",
    token_endpoint_auth_method: "client_secret_basic",
    grant_types: [TOKEN_EXCHANGE],
    response_types: [],
    redirect_uris: [],
  }],
  scopes: ["openid", ...scopes],
  findAccount: async (ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => {
        if (indicator !== resource) throw new Error(`unknown resource ${indicator}`);
        return {
          scope: scopes.join(" "),
          audience: resource,
          accessTokenTTL: 600,
          accessTokenFormat: "jwt",
          jwt: { sign: { alg: "RS256" } },
        };
      },
    },
  },
  extraTokenClaims: async (ctx, token) => ({
    tenant: String(token.accountId).startsWith("other-") ? "other" : "default",
  }),
  // The console runs on another origin: its browser calls discovery and the token
  // endpoint across origins.
  clientBasedCORS: () => true,
  pkce: { required: () => true },
});
provider.registerGrantType(TOKEN_EXCHANGE, async (ctx) => {
  const { subject_token, subject_token_type, audience, scope } = ctx.oidc.params;
  if (ctx.oidc.client.clientId !== "toolgate-gateway") {
    throw new errors.UnauthorizedClient("this client may not exchange tokens");
  }
  if (subject_token_type !== ACCESS_TOKEN || !audience) {
    throw new errors.InvalidRequest("an access token to exchange, and an audience, are required");
  }
  let subject;
  try {
    ({ payload: subject } = await jwtVerify(subject_token, ownKeys, { issuer, audience: resource }));
  } catch (e) {
    throw new errors.InvalidGrant(`the subject token is not valid: ${e.message}`);
  }
  const granted = (scope ?? "tools:invoke").split(" ").filter((s) => s === "tools:invoke");
  const token = await new SignJWT({
    scope: granted.join(" "),
    tenant: "default",
    act: { sub: ctx.oidc.client.clientId },
    client_id: ctx.oidc.client.clientId,
  })
    .setProtectedHeader({ alg: "RS256", kid: signing.kid, typ: "at+jwt" })
    .setIssuer(issuer)
    .setSubject(subject.sub)
    .setAudience(audience)
    .setIssuedAt()
    .setExpirationTime("5m")
    .sign(privateKey);
  ctx.body = {
    access_token: token,
    issued_token_type: ACCESS_TOKEN,
    token_type: "Bearer",
    expires_in: 300,
  };
}, ["subject_token", "subject_token_type", "requested_token_type", "audience", "scope", "resource"]);

// Loopback over plain HTTP: tell the provider it is not behind a TLS-terminating proxy.
provider.proxy = false;
provider.listen(port, "127.0.0.1", () => console.log(`listening on ${issuer}`));
