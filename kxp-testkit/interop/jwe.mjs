// JWE interop, Node.js side: jose, at the version .ci/interop-install pins. The modes and
// files are those of jwe.py beside it (jose has no `zip`; such cases are left to jwcrypto).

import { readFileSync } from 'node:fs';

import { CompactEncrypt, compactDecrypt, importJWK } from 'jose';

async function decrypt(cases) {
  for (const c of cases) {
    let verdict;
    try {
      const key = await importJWK(c.jwk, 'ECDH-ES+A256KW');
      const { plaintext } = await compactDecrypt(c.jwe, key);
      verdict = `ok:${Buffer.from(plaintext).toString('base64')}`;
    } catch {
      verdict = 'error';
    }
    process.stdout.write(`${c.name}\tjose\t${verdict}\n`);
  }
}

async function encrypt(cases) {
  const answers = {};
  for (const c of cases) {
    const alg = c.alg ?? 'ECDH-ES+A256KW';
    const enc = c.enc ?? 'A256GCM';
    const key = await importJWK(c.jwk, alg);
    answers[c.name] = await new CompactEncrypt(Buffer.from(c.plaintext_b64, 'base64'))
      .setProtectedHeader({ alg, enc })
      .encrypt(key);
  }
  process.stdout.write(JSON.stringify(answers));
}

const [mode, path] = process.argv.slice(2);
const cases = JSON.parse(readFileSync(path, 'utf8'));
await ({ decrypt, encrypt })[mode](cases);
