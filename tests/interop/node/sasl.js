// memjs (MemCachier's client: binary protocol, SASL PLAIN) against a server started with -S.
// Usage: node sasl.js HOST:PORT, the user and password in MEMFLEET_INTEROP_SASL_USER and
// MEMFLEET_INTEROP_SASL_PASSWORD.
'use strict';

const assert = require('node:assert/strict');
const memjs = require('memjs');

const addr = process.argv[2];
const user = process.env.MEMFLEET_INTEROP_SASL_USER;
const password = process.env.MEMFLEET_INTEROP_SASL_PASSWORD;
const prefix = `it:memjs-sasl:${process.pid}:${Math.floor(Math.random() * 2 ** 32).toString(16)}:`;
const quietLogger = { log() {} };
const client = (pw) => memjs.Client.create(addr, {
  username: user, password: pw, timeout: 3, conntimeout: 3, retries: 1, logger: quietLogger,
});

let passed = 0;
let failed = 0;
async function check(name, body) {
  try {
    await body();
    passed++;
    console.log(`  ok   memjs-sasl/${name}`);
  } catch (e) {
    failed++;
    console.log(`  FAIL memjs-sasl/${name}: ${e.message}`);
  }
}

(async () => {
  const mc = client(password);
  await check('plain_login_then_set_get', async () => {
    assert.equal(await mc.set(`${prefix}a`, 'hello', { expires: 0 }), true);
    const { value } = await mc.get(`${prefix}a`);
    assert.equal(value.toString(), 'hello');
    assert.equal(await mc.delete(`${prefix}a`), true);
  });
  await check('a_wrong_password_is_auth_failure', async () => {
    const bad = client(`${password}-wrong`);
    await assert.rejects(bad.set(`${prefix}bad`, 'x', { expires: 0 }), /Auth|auth|32/);
    bad.close();
    const { value } = await mc.get(`${prefix}bad`);
    assert.equal(value, null);
  });
  mc.close();
  console.log(`memjs-sasl: ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
})();
