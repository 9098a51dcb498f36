// A real OpenID Provider for the console's single sign-on test: panva's oidc-provider
// (OpenID Certified), on loopback, with its development login and consent pages.
//   PORT=… REDIRECT_URI=… node oidc_provider.mjs
// One public client, `toolgate-console` (authorization code + PKCE, no secret), may sign
// in at REDIRECT_URI. Access tokens for the resource `urn:toolgate` are JWTs (RS256, keys
// at /jwks) carrying the requested scopes and the user's tenant: the gateway checks them
// as it checks any JWT ([auth.jwt]). Any login name and password sign in; the name is
// the subject; a name starting with "other-" belongs to the tenant "other", any other to
// "default".
import Provider from "oidc-provider";

const port = Number(process.env.PORT);
const issuer = `http://127.0.0.1:${port}`;
const resource = "urn:toolgate";
const scopes = ["tools:invoke", "audit:read", "approvals:decide", "agents:run", "tenant:admin"];

const provider = new Provider(issuer, {
  clients: [{
    client_id: "toolgate-console",
    token_endpoint_auth_method: "none",
    redirect_uris: [process.env.REDIRECT_URI],
    grant_types: ["authorization_code"],
    response_types: ["code"],
  }],
  scopes: ["openid", ...scopes],
  findAccount: async (ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
  features: {
    devInteractions: { enabled: true },
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
// Loopback over plain HTTP: tell the provider it is not behind a TLS-terminating proxy.
provider.proxy = false;
provider.listen(port, "127.0.0.1", () => console.log(`listening on ${issuer}`));
