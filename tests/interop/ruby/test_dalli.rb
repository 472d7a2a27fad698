# Dalli (Ruby; 5.x speaks only the meta protocol) against a memcached-compatible server.
# Usage: ruby test_dalli.rb HOST:PORT. Prints one "  ok   dalli/<case>" or
# "  FAIL dalli/<case>: why" line per case, as the other interop suites do (scripts/interop
# counts them), and exits non-zero if any case failed.
#
# Dalli comes from Debian's ruby-dalli package (scripts/interop-deps unpacks it and names its
# lib directory in DALLI_LIB).
$LOAD_PATH.unshift ENV['DALLI_LIB'] if ENV['DALLI_LIB']
require 'logger'
require 'dalli'

# Dalli 5 asks for Ruby >= 3.3; Debian 12 has 3.1, which lacks only String#byteindex (3.2)
# among what Dalli uses. Byte offsets of a binary copy are the same thing.
unless String.method_defined?(:byteindex)
  class String
    def byteindex(sub, offset = 0) = b.index(sub.b, offset)
  end
end

Dalli.logger.level = Logger::ERROR
addr = ARGV[0] or abort 'usage: test_dalli.rb HOST:PORT'
PREFIX = "it:dalli:#{Process.pid}:#{rand(1 << 32).to_s(16)}:"
def k(name) = PREFIX + name

# Plain strings stored as they are (raw), so appends and counters work, and no Marshal.
$mc = Dalli::Client.new(addr, raw: true, socket_timeout: 3, socket_max_failures: 0)
$results = { ok: 0, fail: 0 }

class Fail < StandardError; end

def eq(actual, expected, what)
  raise Fail, "#{what}: expected #{expected.inspect}, got #{actual.inspect}" unless actual == expected
end

def check(cond, what)
  raise Fail, what unless cond
end

def run_case(name)
  yield
  $results[:ok] += 1
  puts "  ok   dalli/#{name}"
rescue StandardError => e
  $results[:fail] += 1
  where = e.is_a?(Fail) ? '' : " (#{e.class} at #{e.backtrace&.first})"
  puts "  FAIL dalli/#{name}: #{e.message}#{where}"
ensure
  $stdout.flush
end

started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
mc = $mc

run_case('version') { check(mc.version.values.first.to_s.match?(/\A\d+\.\d+/), "version #{mc.version}") }

run_case('set_get') do
  check(mc.set(k('a'), 'hello'), 'set')
  eq(mc.get(k('a')), 'hello', 'get')
  tricky = "a\r\nEND\r\nSTORED\r\n\x00\xff VALUE x 0 1\r\n".b
  mc.set(k('t'), tricky)
  eq(mc.get(k('t')).b, tricky, 'protocol bytes inside a value')
  eq(mc.get(k('absent')), nil, 'miss')
  big = Random.new(7).bytes(500 * 1024)
  mc.set(k('big'), big)
  eq(mc.get(k('big')).b, big, '500 KB value')
end

run_case('add_replace') do
  eq(mc.add(k('ar'), '1').is_a?(Integer), true, 'add a new key returns its CAS')
  eq(mc.add(k('ar'), '2'), false, 'add an existing key')
  eq(mc.get(k('ar')), '1', 'add kept the first value')
  eq(mc.replace(k('ar-missing'), 'x'), false, 'replace a missing key')
  check(mc.replace(k('ar'), '3'), 'replace an existing key')
  eq(mc.get(k('ar')), '3', 'after replace')
end

run_case('append_prepend') do
  mc.set(k('ap'), 'mid')
  check(mc.append(k('ap'), '-end'), 'append')
  check(mc.prepend(k('ap'), 'start-'), 'prepend')
  eq(mc.get(k('ap')), 'start-mid-end', 'appended and prepended')
  eq(mc.append(k('ap-missing'), 'x'), false, 'append to a missing key')
end

run_case('delete') do
  mc.set(k('d'), 'x')
  check(mc.delete(k('d')), 'delete an existing key')
  eq(mc.get(k('d')), nil, 'gone')
  eq(mc.delete(k('d')), false, 'delete a missing key')
  mc.set_multi({ k('dm1') => '1', k('dm2') => '2' }, 0)
  mc.delete_multi([k('dm1'), k('dm2')])
  eq(mc.get_multi(k('dm1'), k('dm2')), {}, 'delete_multi')
end

run_case('incr_decr') do
  eq(mc.incr(k('n'), 1, 0, 10), 10, 'incr a missing key with a default creates it')
  eq(mc.incr(k('n'), 5), 15, 'incr')
  eq(mc.decr(k('n'), 20), 0, 'decr clamps at 0')
  eq(mc.incr(k('n-missing'), 1), nil, 'incr a missing key without a default')
  mc.set(k('n2'), '18446744073709551615')
  eq(mc.incr(k('n2'), 1), 0, 'incr wraps at 2^64')
end

run_case('cas') do
  mc.set(k('c'), 'v1')
  check(mc.cas(k('c')) { |v| v + '+' }, 'cas with a fresh token')
  eq(mc.get(k('c')), 'v1+', 'after cas')
  value, token = mc.get_cas(k('c'))
  eq(value, 'v1+', 'get_cas value')
  mc.set(k('c'), 'other')
  eq(mc.set_cas(k('c'), 'late', token), false, 'set_cas with a stale token')
  eq(mc.get(k('c')), 'other', 'the stale cas stored nothing')
  eq(mc.cas(k('c-missing')) { |v| v }, nil, 'cas of a missing key')
  _, token = mc.get_cas(k('c'))
  check(mc.delete_cas(k('c'), token), 'delete_cas with the current token')
  eq(mc.get(k('c')), nil, 'delete_cas removed it')
end

run_case('get_multi') do
  pairs = (0...20).to_h { |i| [k("m#{i}"), "v#{i}"] }
  mc.set_multi(pairs, 0)
  eq(mc.get_multi(*pairs.keys, k('m-absent')), pairs, 'get_multi returns the hits only')
  cas = mc.get_multi_cas(k('m0'), k('m1'))
  eq(cas.keys.sort, [k('m0'), k('m1')].sort, 'get_multi_cas keys')
  check(cas.values.all? { |v, c| v.start_with?('v') && c.positive? }, "get_multi_cas #{cas}")
end

run_case('touch_gat') do
  mc.set(k('tt'), 'x', 100)
  check(mc.touch(k('tt'), 1000), 'touch')
  eq(mc.gat(k('tt'), 2000), 'x', 'gat')
  md = mc.get_with_metadata(k('tt'), return_ttl_remaining: true)
  check(md[:ttl_remaining].between?(1990, 2000), "ttl after gat: #{md[:ttl_remaining]}")
  eq(mc.touch(k('tt-missing'), 10), nil, 'touch a missing key')
end

run_case('get_with_metadata_hit_status') do
  mc.set(k('h'), 'v')
  md = mc.get_with_metadata(k('h'), return_hit_status: true)
  eq([md[:value], md[:miss], md[:hit_before]], ['v', false, false], 'first read after a set')
  md = mc.get_with_metadata(k('h'), return_hit_status: true)
  eq(md[:hit_before], true, 'second read: read before')
  mc.set(k('h'), 'v2')
  md = mc.get_with_metadata(k('h'), return_hit_status: true, skip_lru_bump: true)
  eq([md[:value], md[:hit_before]], ['v2', false], 'a rewrite clears it')
  md = mc.get_with_metadata(k('h'), return_hit_status: true)
  eq(md[:hit_before], false, 'skip_lru_bump did not mark it read')
  md = mc.get_with_metadata(k('h-missing'), return_hit_status: true)
  eq([md[:value], md[:miss]], [nil, true], 'a miss')
end

run_case('get_with_metadata_last_access_ttl_cas') do
  mc.set(k('la'), 'v', 300)
  md = mc.get_with_metadata(k('la'), return_last_access: true, return_ttl_remaining: true)
  check(md[:last_access].between?(0, 2), "last_access #{md[:last_access]}")
  check(md[:ttl_remaining].between?(295, 300), "ttl_remaining #{md[:ttl_remaining]}")
  _, token = mc.get_cas(k('la'))
  eq(mc.get_with_metadata(k('la'))[:cas], token, 'the CAS matches gets')
  mc.set(k('forever'), 'v')
  eq(mc.get_with_metadata(k('forever'), return_ttl_remaining: true)[:ttl_remaining], -1,
     'no expiry shows -1')
end

run_case('fetch_with_lock') do
  calls = 0
  v = mc.fetch_with_lock(k('fl'), ttl: 60, lock_ttl: 5) { calls += 1; 'computed' }
  eq([v, calls], ['computed', 1], 'the first caller wins and computes')
  v = mc.fetch_with_lock(k('fl'), ttl: 60, lock_ttl: 5) { calls += 1; 'again' }
  eq([v, calls], ['computed', 1], 'the next caller reads the cached value')
  other = Dalli::Client.new(ARGV[0], raw: true, socket_timeout: 3)
  stub = other.get_with_metadata(k('fl-race'), vivify_ttl: 5)
  eq([stub[:won_recache], stub[:value]], [true, ''], 'a vivifying miss wins the recache (an empty stub)')
  v = mc.fetch_with_lock(k('fl-race'), ttl: 60, lock_ttl: 5) { calls += 1; 'racer' }
  eq(calls, 1, 'a caller that lost the race does not compute')
  check(v.nil? || v == '', "the loser sees no value yet, got #{v.inspect}")
end

run_case('fetch') do
  eq(mc.fetch(k('f'), 60) { 'made' }, 'made', 'fetch a miss runs the block')
  eq(mc.fetch(k('f'), 60) { 'not again' }, 'made', 'fetch a hit')
end

run_case('key_validation') do
  long = k('L').ljust(250, 'x')
  mc.set(long, '250')
  eq(mc.get(long), '250', '250-byte key')
  spaced = k('with space')
  mc.set(spaced, 'sp')
  eq(mc.get(spaced), 'sp', 'a key with a space (Dalli sends it base64)')
end

# No flush: the suites share one server and run at once (scripts/interop).
run_case('stats') do
  stats = mc.stats.values.first
  check(stats.is_a?(Hash) && stats.key?('curr_items') && stats.key?('get_hits'), 'stats')
end

elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
puts format('dalli %s: %d passed, %d failed (%.1fs)', Dalli::VERSION, $results[:ok], $results[:fail], elapsed)
exit($results[:fail].zero? ? 0 : 1)
