// memjs (binary protocol only) against a memcached-compatible server. Usage: node interop.js HOST:PORT
//
// memjs 1.3.2 has no gets/cas, multi-get or flags API and its prepend sends the append opcode;
// cas and flags are exercised through its own request builder and transport (client.perform,
// a custom serializer), multi-get as pipelined GETs on one connection.
'use strict';

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const memjs = require('memjs');

const TRICKY = Buffer.from('a\r\nEND\r\nSTORED\r\n\x00\xff VALUE x 0 1\r\n', 'latin1');
const LARGE_SIZES = [500 * 1024, 1024 * 1024 - 1024];

if (process.argv.length !== 3) {
  console.error('usage: node interop.js HOST:PORT');
  process.exit(2);
}
const addr = process.argv[2];

// Values may be {data, flags}: the serializer writes those flags into the SET extras (flags,
// expiration) and hands back the flags memcached returns in the GET extras.
const flagSerializer = {
  serialize(opcode, value, extras) {
    if (value && value.data !== undefined) {
      const ex = Buffer.from(extras);
      ex.writeUInt32BE(value.flags >>> 0, 0);
      return { value: value.data, extras: ex };
    }
    return { value, extras };
  },
  deserialize(opcode, value, extras) {
    return { value, extras };
  },
};

const quietLogger = { log() {} };
const mc = memjs.Client.create(addr, {
  timeout: 3, conntimeout: 3, retries: 1, logger: quietLogger, serializer: flagSerializer,
});
const prefix = `it:memjs:${process.pid}:${crypto.randomBytes(4).toString('hex')}:`;
const k = (name) => prefix + name;

// Raw binary request through memjs's own framing and connection; resolves with the response.
function perform(opcode, key, extras, value, cas) {
  mc.incrSeq();
  const req = memjs.Utils.makeRequestBuffer(opcode, key, extras, value, mc.seq);
  if (cas) cas.copy(req, 16);
  return new Promise((resolve, reject) => {
    mc.perform(key, req, mc.seq, (err, resp) => (err ? reject(err) : resolve(resp)));
  });
}
const OP_GET = 0x00;
const OP_SET = 0x01;
const STATUS = { OK: 0, NOT_FOUND: 1, EXISTS: 2, TOO_LARGE: 3, NOT_STORED: 5, NON_NUMERIC: 6 };

function setExtras(flags, exp) {
  const b = Buffer.alloc(8);
  b.writeUInt32BE(flags >>> 0, 0);
  b.writeUInt32BE(exp, 4);
  return b;
}

const buf = (s) => Buffer.from(s);
async function value(key) {
  return (await mc.get(key)).value;
}
function eqBuf(actual, expected, what) {
  if (actual === null || !Buffer.isBuffer(actual) || !actual.equals(expected)) {
    const show = (b) => (b === null ? 'null' : `${b.length} bytes ${JSON.stringify(b.subarray(0, 60).toString('latin1'))}`);
    assert.fail(`${what}: expected ${show(expected)}, got ${show(actual)}`);
  }
}

const cases = [];
const deferred = [];
let deferredAt = 0;
const test = (name, fn) => cases.push([name, fn]);
const defer = (name, delayMs, fn) => {
  deferred.push([name, fn]);
  deferredAt = Math.max(deferredAt, Date.now() + delayMs);
};

test('set_get', async () => {
  assert.equal(await mc.set(k('a'), buf('hello')), true, 'set');
  eqBuf(await value(k('a')), buf('hello'), 'get');
  assert.equal(await mc.set(k('a'), TRICKY), true, 'overwrite');
  eqBuf(await value(k('a')), TRICKY, 'get value with protocol bytes inside');
  assert.equal(await mc.set(k('empty'), Buffer.alloc(0)), true, 'set empty');
  eqBuf(await value(k('empty')), Buffer.alloc(0), 'get empty value');
  const longKey = (k('L') + 'x'.repeat(250)).slice(0, 250);
  assert.equal(await mc.set(longKey, buf('250')), true, 'set 250-byte key');
  eqBuf(await value(longKey), buf('250'), 'get 250-byte key');
});

test('miss', async () => {
  const r = await mc.get(k('never-set'));
  assert.equal(r.value, null, 'get of a missing key: value');
  assert.equal(r.flags, null, 'get of a missing key: flags');
});

test('multi_get_pipelined', async () => {
  await Promise.all([mc.set(k('m1'), buf('1')), mc.set(k('m2'), buf('22')), mc.set(k('m3'), buf('333'))]);
  const got = await Promise.all([k('m1'), k('missing'), k('m2'), k('m3')].map((key) => mc.get(key)));
  eqBuf(got[0].value, buf('1'), 'm1');
  assert.equal(got[1].value, null, 'missing');
  eqBuf(got[2].value, buf('22'), 'm2');
  eqBuf(got[3].value, buf('333'), 'm3');
  // A burst of interleaved sets and gets on one connection: responses must match by opaque.
  const n = 200;
  await Promise.all(Array.from({ length: n }, (_, i) => mc.set(k(`p${i}`), buf(`v${i}`))));
  const vals = await Promise.all(Array.from({ length: n }, (_, i) => mc.get(k(`p${i}`))));
  vals.forEach((r, i) => eqBuf(r.value, buf(`v${i}`), `pipelined get ${i}`));
});

test('add_replace', async () => {
  assert.equal(await mc.add(k('ar'), buf('first')), true, 'add of a new key');
  assert.equal(await mc.add(k('ar'), buf('second')), false, 'add of an existing key');
  eqBuf(await value(k('ar')), buf('first'), 'value after failed add');
  assert.equal(await mc.replace(k('ar'), buf('third')), true, 'replace of an existing key');
  eqBuf(await value(k('ar')), buf('third'), 'value after replace');
  assert.equal(await mc.replace(k('ar-missing'), buf('x')), false, 'replace of a missing key');
  assert.equal(await value(k('ar-missing')), null, 'replace must not create');
});

test('append', async () => {
  await mc.set(k('ap'), buf('mid'));
  assert.equal(await mc.append(k('ap'), buf('-end')), true, 'append');
  eqBuf(await value(k('ap')), buf('mid-end'), 'after append');
  // memcached answers status 5 (not stored); memjs maps only status 1 to false, so it rejects.
  await assert.rejects(mc.append(k('ap-missing'), buf('x')), /not stored/i, 'append to a missing key');
  assert.equal(await value(k('ap-missing')), null, 'append must not create');
});

test('cas', async () => {
  await mc.set(k('cas'), buf('v1'));
  const g = await perform(OP_GET, k('cas'), '', '');
  assert.equal(g.header.status, STATUS.OK, 'get status');
  const cas1 = g.header.cas;
  assert.notDeepEqual(cas1, Buffer.alloc(8), 'get returns a non-zero cas');
  let r = await perform(OP_SET, k('cas'), setExtras(0, 0), buf('v2'), cas1);
  assert.equal(r.header.status, STATUS.OK, 'set with the current cas');
  assert.notDeepEqual(r.header.cas, cas1, 'set returns the new cas');
  eqBuf(await value(k('cas')), buf('v2'), 'value after cas');
  r = await perform(OP_SET, k('cas'), setExtras(0, 0), buf('v3'), cas1);
  assert.equal(r.header.status, STATUS.EXISTS, 'set with a stale cas (status 2, exists)');
  eqBuf(await value(k('cas')), buf('v2'), 'value after conflicting cas');
  await mc.delete(k('cas'));
  r = await perform(OP_SET, k('cas'), setExtras(0, 0), buf('v4'), cas1);
  assert.equal(r.header.status, STATUS.NOT_FOUND, 'set with cas of a deleted key (status 1, not found)');
  assert.equal(await value(k('cas')), null, 'cas must not recreate a deleted key');
  // A new item under the same key must not accept the cas of the one it replaced.
  await mc.set(k('cas'), buf('v5'));
  const old = (await perform(OP_GET, k('cas'), '', '')).header.cas;
  await mc.delete(k('cas'));
  await mc.set(k('cas'), buf('again'));
  r = await perform(OP_SET, k('cas'), setExtras(0, 0), buf('v6'), old);
  assert.equal(r.header.status, STATUS.EXISTS, 'set with the cas of a deleted, re-set item (status 2)');
  eqBuf(await value(k('cas')), buf('again'), 'value after that cas');
});

test('incr_decr', async () => {
  await mc.set(k('n'), buf('10'));
  assert.deepEqual(await mc.increment(k('n'), 5), { success: true, value: 15 }, 'incr');
  assert.deepEqual(await mc.decrement(k('n'), 3, {}), { success: true, value: 12 }, 'decr');
  assert.deepEqual(await mc.decrement(k('n'), 100, {}), { success: true, value: 0 }, 'decr clamps at 0');
  // memjs always sends an initial value (and expiration 0), so a missing counter is created.
  assert.deepEqual(await mc.increment(k('n-new'), 1, { initial: 7 }), { success: true, value: 7 }, 'incr of a missing key creates it with the initial value');
  assert.deepEqual(await mc.increment(k('n-new'), 1, { initial: 7 }), { success: true, value: 8 }, 'incr of the created counter');
  eqBuf(await value(k('n-new')), buf('8'), 'counter read back');
  await mc.set(k('n64'), buf('18446744073709551615'));
  assert.deepEqual(await mc.increment(k('n64'), 1), { success: true, value: 0 }, 'incr wraps at 2**64');
  await mc.set(k('nan'), buf('abc'));
  await assert.rejects(mc.increment(k('nan'), 1), /non-numeric|Incr\/Decr/i, 'incr of a non-numeric value');
  eqBuf(await value(k('nan')), buf('abc'), 'non-numeric value unchanged');
});

test('delete', async () => {
  await mc.set(k('d'), buf('x'));
  assert.equal(await mc.delete(k('d')), true, 'delete of an existing key');
  assert.equal(await value(k('d')), null, 'get after delete');
  assert.equal(await mc.delete(k('d')), false, 'delete of a missing key');
});

test('touch', async () => {
  // memcached's clock ticks once a second, so a TTL of N lasts N-1..N s; memfleet may expire an
  // item up to a second earlier still (Segcache TTL buckets). TTL 3 leaves about a second for
  // the immediate checks; the deferred ones run 3.5 s later.
  await mc.set(k('t-extend'), buf('x'), { expires: 3 });
  await mc.set(k('t-shorten'), buf('y'));
  assert.equal(await mc.touch(k('t-extend'), 3600), true, 'touch extending');
  assert.equal(await mc.touch(k('t-shorten'), 3), true, 'touch shortening');
  assert.equal(await mc.touch(k('t-missing'), 10), false, 'touch of a missing key');
  await mc.set(k('ttl'), buf('z'), { expires: 1 });
  eqBuf(await value(k('t-shorten')), buf('y'), 'touched item still there');
  defer('touch_extended_survives', 3500, async () => eqBuf(await value(k('t-extend')), buf('x'), 'extended item'));
  defer('touch_shortened_expires', 3500, async () => assert.equal(await value(k('t-shorten')), null, 'shortened item'));
  defer('set_ttl_expires', 3500, async () => assert.equal(await value(k('ttl')), null, 'item set with ttl 1'));
});

test('flags', async () => {
  const flags = [0, 1, 0x8000, 0x7fffffff, 0xdeadbeef, 0xffffffff];
  for (const [i, f] of flags.entries()) {
    assert.equal(await mc.set(k(`f${i}`), { data: buf(`v${i}`), flags: f }), true, `set with flags ${f}`);
    const r = await mc.get(k(`f${i}`));
    eqBuf(r.value, buf(`v${i}`), 'value');
    assert.ok(Buffer.isBuffer(r.flags) && r.flags.length === 4, `flags extras: ${r.flags && r.flags.toString('hex')}`);
    assert.equal(r.flags.readUInt32BE(0), f, 'flags round trip');
  }
});

test('large_values', async () => {
  for (const size of LARGE_SIZES) {
    const v = crypto.randomBytes(size);
    assert.equal(await mc.set(k(`big${size}`), v), true, `set ${size} bytes`);
    eqBuf(await value(k(`big${size}`)), v, `get ${size} bytes`);
  }
});

test('too_large_rejected', async () => {
  await assert.rejects(mc.set(k('huge'), Buffer.alloc(2 * 1024 * 1024)), /too large|E2BIG/i, 'set of a 2 MiB value');
  assert.equal(await value(k('huge')), null, 'oversized value must not be stored');
  assert.equal(await mc.set(k('after-huge'), buf('ok')), true, 'set after oversized set');
  eqBuf(await value(k('after-huge')), buf('ok'), 'get after oversized set');
});

test('stats', async () => {
  const st = await new Promise((resolve, reject) => {
    mc.stats((err, server, stats) => (err ? reject(err) : resolve(stats)));
  });
  assert.ok(st && Number(st.curr_items) >= 1, `stats curr_items: ${st && st.curr_items}`);
  assert.ok(st.version, 'stats has version');
});

async function main() {
  const start = Date.now();
  let passed = 0;
  let failed = 0;
  // memjs can leave a promise pending forever once its connection is in a bad state: each check
  // gets a deadline, and after one is missed the rest are reported as not run.
  let stuck = false;
  const run = async (name, fn) => {
    if (stuck) {
      failed++;
      console.log(`  FAIL memjs/${name}: not run, an earlier check hung`);
      return;
    }
    let timer;
    const deadline = new Promise((_, reject) => {
      timer = setTimeout(() => {
        stuck = true;
        reject(new Error('no answer within 15 s (check abandoned)'));
      }, 15000);
    });
    try {
      await Promise.race([fn(), deadline]);
      passed++;
      console.log(`  ok   memjs/${name}`);
    } catch (e) {
      failed++;
      console.log(`  FAIL memjs/${name}: ${e && e.message ? e.message.split('\n')[0] : e}`);
    } finally {
      clearTimeout(timer);
    }
  };
  for (const [name, fn] of cases) await run(name, fn);
  const wait = deferredAt - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  for (const [name, fn] of deferred) await run(name, fn);
  console.log(`memjs: ${passed} passed, ${failed} failed (${((Date.now() - start) / 1000).toFixed(1)}s)`);
  mc.close();
  process.exit(failed === 0 ? 0 : 1);
}

main();
