// The authorization server of scripts/oauth.sh: oidc-provider (npm, installed by the script into
// .tools/oauth-provider) issuing client_credentials access tokens as ES256 JWTs for one resource,
// the gateway's, plus a second resource only there to mint tokens of the wrong audience.
//
//   node scripts/oauth_provider.mjs MODULES PORT AUDIENCE
//
// MODULES is the node_modules directory holding oidc-provider (this file is outside it, so a bare
// import would not find it); PORT is the port to listen on, 0 for any free one; AUDIENCE is the
// gateway's resource URI, the default resource of every token request. Once serving it prints
// `listening on http://127.0.0.1:PORT` (the issuer), which conformance-lib.sh's `start` waits for.
//
// Clients (all client_credentials, client_secret_basic, secret "<id>-secret"):
//   alice       groups ["ops"],     may get mcp:tools
//   bob         groups ["readers"], may get mcp:tools
//   noscope     groups ["ops"],     may get mcp:other only
//   shortlived  groups ["ops"],     may get mcp:tools; its tokens live 1 s
// The `groups` claim is added to every access token (extraTokenClaims).
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, port, audience] = process.argv.slice(2);
if (!modules || port === undefined || !audience) {
  console.error('usage: node oauth_provider.mjs MODULES PORT AUDIENCE');
  process.exit(2);
}
const OTHER_RESOURCE = 'http://127.0.0.1:1/other';
const SCOPES = ['mcp:tools', 'mcp:other'];

const { default: Provider, errors } = await import(
  pathToFileURL(join(modules, 'oidc-provider', 'lib', 'index.js')).href
);

const CLIENTS = {
  alice: { groups: ['ops'], scope: 'mcp:tools', ttl: 300 },
  bob: { groups: ['readers'], scope: 'mcp:tools', ttl: 300 },
  noscope: { groups: ['ops'], scope: 'mcp:other', ttl: 300 },
  shortlived: { groups: ['ops'], scope: 'mcp:tools', ttl: 1 },
};

// A fresh P-256 key each run; oidc-provider signs with the private JWK and publishes the public
// half at /jwks.
const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'oauth-sh-es256', alg: 'ES256', use: 'sig' };

// Listen first, so that PORT 0 works: the issuer names the port actually bound.
const server = createServer();
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(Number(port), '127.0.0.1', resolve);
});
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: Object.entries(CLIENTS).map(([id, c]) => ({
    client_id: id,
    client_secret: `${id}-secret`,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
    scope: c.scope,
  })),
  // Listed so that each client's `scope` is enforced as an allow list.
  scopes: ['openid', ...SCOPES],
  jwks: { keys: [signingKey] },
  // The only key is an EC one; the default (RS256) would make every client invalid.
  clientDefaults: { id_token_signed_response_alg: 'ES256' },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: false },
    revocation: { enabled: false },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => audience,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource, client) => {
        if (resource !== audience && resource !== OTHER_RESOURCE) {
          throw new errors.InvalidTarget(`unknown resource ${resource}`);
        }
        return {
          scope: SCOPES.join(' '),
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: CLIENTS[client.clientId]?.ttl ?? 300,
          jwt: { sign: { alg: 'ES256' } },
        };
      },
    },
  },
  ttl: {
    ClientCredentials: (ctx, token) => token.resourceServer?.accessTokenTTL ?? 300,
  },
  extraTokenClaims: (ctx, token) => ({ groups: CLIENTS[token.clientId]?.groups ?? [] }),
  // What a bad request was, on stderr (the script shows it on failure).
  renderError: (ctx, out) => {
    ctx.type = 'json';
    ctx.body = out;
  },
});
provider.on('grant.error', (ctx, error) => console.error(`grant.error: ${error.message} ${error.error_description ?? ''}`));
provider.on('server_error', (ctx, error) => console.error(`server_error: ${error.stack}`));

server.on('request', provider.callback());
console.log(`listening on ${issuer}`);
