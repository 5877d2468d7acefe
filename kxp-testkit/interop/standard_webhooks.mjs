// Standard Webhooks interop, Node.js side: the official `standardwebhooks` package and Svix's
// `svix` SDK, at the versions .ci/interop-install pins, plus node:crypto for `v1a` (Ed25519),
// which neither library verifies. Driven by kxp-sender/tests/it/standard_webhooks.rs (through kxp_testkit::interop); the
// modes and files are those of standard_webhooks.py beside it, and a verify case may carry
// `whpk` (a public key) instead of `secret`, answered as library `node:crypto`.

import { createPublicKey, verify as edVerify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

import { Webhook as SvixWebhook } from 'svix';

const require = createRequire(import.meta.url);
const { Webhook: StandardWebhook } = require('standardwebhooks');

const LIBRARIES = { standardwebhooks: StandardWebhook, svix: SvixWebhook };

// Whether one `v1a,<base64>` item of `signature` verifies `<id>.<timestamp>.<body>` with the
// `whpk_` key.
function verifyEd25519(whpk, id, timestamp, signature, body) {
  const raw = Buffer.from(whpk.replace(/^whpk_/, ''), 'base64');
  const key = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') },
    format: 'jwk',
  });
  const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]);
  return signature.split(' ').some((item) => {
    const [version, value] = item.split(',');
    return version === 'v1a' && edVerify(null, signed, key, Buffer.from(value, 'base64'));
  });
}

function verify(cases) {
  for (const c of cases) {
    const body = Buffer.from(c.body_b64, 'base64');
    if (c.whpk !== undefined) {
      const ok = verifyEd25519(c.whpk, c.id, c.timestamp, c.signature, body);
      process.stdout.write(`${c.name}\tnode:crypto\t${ok ? 'ok' : 'error'}\n`);
      continue;
    }
    const headers = {
      'webhook-id': c.id,
      'webhook-timestamp': c.timestamp,
      'webhook-signature': c.signature,
    };
    for (const [name, Webhook] of Object.entries(LIBRARIES)) {
      let verdict;
      try {
        new Webhook(c.secret).verify(body.toString('utf8'), headers);
        verdict = 'ok';
      } catch {
        verdict = 'error';
      }
      process.stdout.write(`${c.name}\t${name}\t${verdict}\n`);
    }
  }
}

function sign(cases) {
  const answers = {};
  for (const [name, Webhook] of Object.entries(LIBRARIES)) {
    const signed = (answers[name] = {});
    for (const c of cases) {
      const at = new Date(c.timestamp * 1000);
      const body = Buffer.from(c.body_b64, 'base64').toString('utf8');
      signed[c.name] = c.secrets.map((s) => new Webhook(s).sign(c.id, at, body)).join(' ');
    }
  }
  process.stdout.write(JSON.stringify(answers));
}

const [mode, path] = process.argv.slice(2);
const cases = JSON.parse(readFileSync(path, 'utf8'));
({ verify, sign })[mode](cases);
