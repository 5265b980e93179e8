// A real OpenID provider for the console's sign-in tests: the npm `oidc-provider` package (OpenID Certified),
// configured with one confidential client (the gateway's console) and the test users below.
//
// Usage: node provider.mjs <oidc-provider module URL> <port> <redirect_uri> <post_logout_redirect_uri> <client_secret>
// (the module is the pinned install of tests/support/oidc_provider.py, in the cache, not beside this file)
// Prints "ready <issuer>" once it listens. The sign-in page is the package's own development interaction
// (a login form, then no consent: the console is a first-party client); it signs in only the users below.
import { generateKeyPairSync } from "node:crypto";

const [moduleUrl, port, redirectUri, afterLogout, secret] = process.argv.slice(2);
const { default: Provider } = await import(moduleUrl);
const issuer = `http://127.0.0.1:${port}`;

const USERS = {
  "approver@acme.example": { email: "approver@acme.example", org: "acme", roles: ["approver"] },
  "Mallory@ACME.example": { email: "mallory@acme.example", org: "acme", roles: ["viewer"] },
};

const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
const signing = { ...privateKey.export({ format: "jwk" }), kid: "test-rs256", use: "sig", alg: "RS256" };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: "countersign-console",
      client_secret: secret,
      redirect_uris: [redirectUri],
      post_logout_redirect_uris: [afterLogout],
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  jwks: { keys: [signing] },
  cookies: { keys: ["countersign-tests-only"] },
  claims: { openid: ["sub"], email: ["email"], countersign: ["org", "roles"] },
  // Claims of the granted scopes go into the ID token itself, which is all the console reads.
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  pkce: { required: () => true },
  ttl: { IdToken: 300, AuthorizationCode: 60, Interaction: 600, Session: 3600, Grant: 3600 },
  async findAccount(ctx, id) {
    const user = USERS[id];
    if (!user) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...user }; } };
  },
  // The console is first-party: a grant of what it asks for, without a consent page.
  async loadExistingGrant(ctx) {
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope("openid email countersign");
    await grant.save();
    return grant;
  },
});

provider.listen(Number(port), "127.0.0.1", () => {
  console.log(`ready ${issuer}`);
});
