// Command interop checks github.com/bradfitz/gomemcache (text protocol) against a
// memcached-compatible server.
//
// Usage: go run . HOST:PORT
package main

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// tricky must be stored as opaque bytes: protocol terminators inside it must not end it.
var tricky = []byte("a\r\nEND\r\nSTORED\r\n\x00\xff VALUE x 0 1\r\n")

// largeSizes: 500 KB and a value close to memcached's default 1 MiB item limit.
var largeSizes = []int{500 * 1024, 1024*1024 - 1024}

type failure struct{ msg string }

func fail(format string, args ...any) { panic(failure{fmt.Sprintf(format, args...)}) }

func must(err error, what string) {
	if err != nil {
		fail("%s: unexpected error %v", what, err)
	}
}

func wantErr(err, want error, what string) {
	if !errors.Is(err, want) {
		fail("%s: expected error %v, got %v", what, want, err)
	}
}

func eqBytes(got, want []byte, what string) {
	if !bytes.Equal(got, want) {
		fail("%s: expected %s, got %s", what, short(want), short(got))
	}
}

func short(b []byte) string {
	if len(b) > 100 {
		return fmt.Sprintf("%q...(%d bytes)", b[:100], len(b))
	}
	return fmt.Sprintf("%q", b)
}

type suite struct {
	mc       *memcache.Client
	prefix   string
	passed   int
	failed   int
	deferred []check
	deferAt  time.Time
}

type check struct {
	name string
	fn   func()
}

func (s *suite) k(name string) string { return s.prefix + name }

func (s *suite) run(name string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			s.failed++
			if f, ok := r.(failure); ok {
				fmt.Printf("  FAIL gomemcache/%s: %s\n", name, f.msg)
			} else {
				fmt.Printf("  FAIL gomemcache/%s: panic: %v\n", name, r)
			}
			return
		}
		s.passed++
		fmt.Printf("  ok   gomemcache/%s\n", name)
	}()
	fn()
}

// get returns the value of key, or nil on a miss; any other error fails the test.
func (s *suite) get(key string) *memcache.Item {
	it, err := s.mc.Get(key)
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil
	}
	must(err, "get "+key)
	return it
}

func (s *suite) value(key string) []byte {
	it := s.get(key)
	if it == nil {
		return nil
	}
	return it.Value
}

func (s *suite) set(key string, v []byte) {
	must(s.mc.Set(&memcache.Item{Key: key, Value: v}), "set "+key)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: interop HOST:PORT")
		os.Exit(2)
	}
	mc := memcache.New(os.Args[1])
	mc.Timeout = 3 * time.Second
	s := &suite{mc: mc, prefix: fmt.Sprintf("it:gomemcache:%d:%x:", os.Getpid(), rand.Uint32())}
	k := s.k
	start := time.Now()

	s.run("set_get", func() {
		s.set(k("a"), []byte("hello"))
		eqBytes(s.value(k("a")), []byte("hello"), "get")
		s.set(k("a"), tricky)
		eqBytes(s.value(k("a")), tricky, "get overwritten value with protocol bytes inside")
		s.set(k("empty"), []byte{})
		it := s.get(k("empty"))
		if it == nil || len(it.Value) != 0 {
			fail("empty value: got %v", it)
		}
		long := k("L") + strings.Repeat("x", 250-len(k("L")))
		s.set(long, []byte("250"))
		eqBytes(s.value(long), []byte("250"), "get 250-byte key")
	})

	s.run("miss", func() {
		_, err := mc.Get(k("never-set"))
		wantErr(err, memcache.ErrCacheMiss, "get of a missing key")
	})

	s.run("multi_get", func() {
		s.set(k("m1"), []byte("1"))
		s.set(k("m2"), []byte("22"))
		s.set(k("m3"), []byte("333"))
		got, err := mc.GetMulti([]string{k("m1"), k("missing"), k("m2"), k("m3")})
		must(err, "GetMulti")
		if len(got) != 3 {
			fail("GetMulti: expected 3 items, got %d", len(got))
		}
		for key, want := range map[string]string{k("m1"): "1", k("m2"): "22", k("m3"): "333"} {
			if got[key] == nil {
				fail("GetMulti: %s missing", key)
			}
			eqBytes(got[key].Value, []byte(want), "GetMulti "+key)
		}
		if got[k("m1")].CasID == got[k("m2")].CasID {
			fail("distinct items have the same cas id %d", got[k("m1")].CasID)
		}
	})

	s.run("add_replace", func() {
		must(mc.Add(&memcache.Item{Key: k("ar"), Value: []byte("first")}), "add of a new key")
		wantErr(mc.Add(&memcache.Item{Key: k("ar"), Value: []byte("second")}), memcache.ErrNotStored, "add of an existing key")
		eqBytes(s.value(k("ar")), []byte("first"), "value after failed add")
		must(mc.Replace(&memcache.Item{Key: k("ar"), Value: []byte("third")}), "replace of an existing key")
		eqBytes(s.value(k("ar")), []byte("third"), "value after replace")
		wantErr(mc.Replace(&memcache.Item{Key: k("ar-missing"), Value: []byte("x")}), memcache.ErrNotStored, "replace of a missing key")
		if s.get(k("ar-missing")) != nil {
			fail("replace created a missing key")
		}
	})

	s.run("append_prepend", func() {
		s.set(k("ap"), []byte("mid"))
		must(mc.Append(&memcache.Item{Key: k("ap"), Value: []byte("-end")}), "append")
		must(mc.Prepend(&memcache.Item{Key: k("ap"), Value: []byte("start-")}), "prepend")
		eqBytes(s.value(k("ap")), []byte("start-mid-end"), "after append+prepend")
		wantErr(mc.Append(&memcache.Item{Key: k("ap-missing"), Value: []byte("x")}), memcache.ErrNotStored, "append to a missing key")
	})

	s.run("cas", func() {
		s.set(k("cas"), []byte("v1"))
		it := s.get(k("cas"))
		stale := *it
		it.Value = []byte("v2")
		must(mc.CompareAndSwap(it), "cas with the current id")
		eqBytes(s.value(k("cas")), []byte("v2"), "value after cas")
		stale.Value = []byte("v3")
		wantErr(mc.CompareAndSwap(&stale), memcache.ErrCASConflict, "cas with a stale id")
		eqBytes(s.value(k("cas")), []byte("v2"), "value after conflicting cas")
		if s.get(k("cas")).CasID == stale.CasID {
			fail("cas id did not change on update")
		}
		gone := s.get(k("cas"))
		must(mc.Delete(k("cas")), "delete")
		gone.Value = []byte("v4")
		wantErr(mc.CompareAndSwap(gone), memcache.ErrCacheMiss, "cas of a deleted key")
		if s.get(k("cas")) != nil {
			fail("cas recreated a deleted key")
		}
		// A new item under the same key must not accept the id of the one it replaced.
		s.set(k("cas"), []byte("v5"))
		old := s.get(k("cas"))
		must(mc.Delete(k("cas")), "delete")
		s.set(k("cas"), []byte("again"))
		old.Value = []byte("v6")
		wantErr(mc.CompareAndSwap(old), memcache.ErrCASConflict, "cas with the id of a deleted, re-set item")
		eqBytes(s.value(k("cas")), []byte("again"), "value after that cas")
	})

	s.run("incr_decr", func() {
		s.set(k("n"), []byte("10"))
		expectNum := func(got uint64, err error, want uint64, what string) {
			must(err, what)
			if got != want {
				fail("%s: expected %d, got %d", what, want, got)
			}
		}
		v, err := mc.Increment(k("n"), 5)
		expectNum(v, err, 15, "incr")
		v, err = mc.Decrement(k("n"), 3)
		expectNum(v, err, 12, "decr")
		v, err = mc.Decrement(k("n"), 100)
		expectNum(v, err, 0, "decr clamps at 0")
		// memcached pads a shrunk counter with spaces ("0 ").
		eqBytes(bytes.TrimRight(s.value(k("n")), " "), []byte("0"), "value after decr")
		_, err = mc.Increment(k("n-missing"), 1)
		wantErr(err, memcache.ErrCacheMiss, "incr of a missing key")
		_, err = mc.Decrement(k("n-missing"), 1)
		wantErr(err, memcache.ErrCacheMiss, "decr of a missing key")
		s.set(k("n64"), []byte("18446744073709551615"))
		v, err = mc.Increment(k("n64"), 1)
		expectNum(v, err, 0, "incr wraps at 2**64")
		s.set(k("nan"), []byte("abc"))
		if _, err = mc.Increment(k("nan"), 1); err == nil || !strings.Contains(err.Error(), "client error") {
			fail("incr of a non-numeric value: expected a client error, got %v", err)
		}
	})

	s.run("delete", func() {
		s.set(k("d"), []byte("x"))
		must(mc.Delete(k("d")), "delete of an existing key")
		if s.get(k("d")) != nil {
			fail("get after delete found the item")
		}
		wantErr(mc.Delete(k("d")), memcache.ErrCacheMiss, "delete of a missing key")
	})

	s.run("touch_gat", func() {
		// memcached's clock ticks once a second, so a TTL of N lasts N-1..N s; memfleet may expire
		// an item up to a second earlier still (Segcache TTL buckets). TTL 3 leaves about a second
		// for the immediate checks; the deferred ones run 3.5 s later.
		must(mc.Set(&memcache.Item{Key: k("t-extend"), Value: []byte("x"), Expiration: 3}), "set")
		s.set(k("t-shorten"), []byte("y"))
		must(mc.Set(&memcache.Item{Key: k("gat-shorten"), Value: []byte("g"), Flags: 77}), "set")
		must(mc.Touch(k("t-extend"), 3600), "touch extending")
		must(mc.Touch(k("t-shorten"), 3), "touch shortening")
		wantErr(mc.Touch(k("t-missing"), 10), memcache.ErrCacheMiss, "touch of a missing key")
		it, err := mc.GetAndTouch(k("gat-shorten"), 3)
		must(err, "gat")
		eqBytes(it.Value, []byte("g"), "gat value")
		if it.Flags != 77 {
			fail("gat flags: expected 77, got %d", it.Flags)
		}
		_, err = mc.GetAndTouch(k("gat-missing"), 2)
		wantErr(err, memcache.ErrCacheMiss, "gat of a missing key")
		must(mc.Set(&memcache.Item{Key: k("ttl"), Value: []byte("z"), Expiration: 1}), "set ttl 1")
		eqBytes(s.value(k("t-shorten")), []byte("y"), "touched item still there")
		s.deferAt = time.Now().Add(3500 * time.Millisecond)
		s.deferred = append(s.deferred,
			check{"touch_extended_survives", func() { eqBytes(s.value(k("t-extend")), []byte("x"), "extended item") }},
			check{"touch_shortened_expires", func() {
				if s.get(k("t-shorten")) != nil {
					fail("item touched with ttl 3 still there after 3.5 s")
				}
			}},
			check{"gat_shortened_expires", func() {
				if s.get(k("gat-shorten")) != nil {
					fail("item gat with ttl 3 still there after 3.5 s")
				}
			}},
			check{"set_ttl_expires", func() {
				if s.get(k("ttl")) != nil {
					fail("item set with ttl 1 still there after 3.5 s")
				}
			}},
		)
	})

	s.run("flags", func() {
		for i, f := range []uint32{0, 1, 0x8000, 0xDEADBEEF, 0xFFFFFFFF} {
			key := k(fmt.Sprintf("f%d", i))
			must(mc.Set(&memcache.Item{Key: key, Value: []byte("v"), Flags: f}), "set with flags")
			it := s.get(key)
			if it == nil || it.Flags != f {
				fail("flags %d: got item %+v", f, it)
			}
		}
		got, err := mc.GetMulti([]string{k("f3"), k("f4")})
		must(err, "GetMulti")
		if got[k("f3")] == nil || got[k("f3")].Flags != 0xDEADBEEF || got[k("f4")] == nil || got[k("f4")].Flags != 0xFFFFFFFF {
			fail("flags via GetMulti: %+v", got)
		}
	})

	s.run("large_values", func() {
		for _, size := range largeSizes {
			v := make([]byte, size)
			rand.New(rand.NewSource(int64(size))).Read(v)
			key := k(fmt.Sprintf("big%d", size))
			s.set(key, v)
			eqBytes(s.value(key), v, fmt.Sprintf("get %d bytes", size))
		}
	})

	s.run("too_large_rejected", func() {
		err := mc.Set(&memcache.Item{Key: k("huge"), Value: bytes.Repeat([]byte("h"), 2*1024*1024)})
		if err == nil {
			fail("set of a 2 MiB value succeeded")
		}
		if s.get(k("huge")) != nil {
			fail("oversized value was stored")
		}
		s.set(k("after-huge"), []byte("ok"))
		eqBytes(s.value(k("after-huge")), []byte("ok"), "get after oversized set")
	})

	s.run("ping", func() { must(mc.Ping(), "ping (version)") })

	if len(s.deferred) > 0 {
		time.Sleep(time.Until(s.deferAt))
		for _, c := range s.deferred {
			s.run(c.name, c.fn)
		}
	}
	fmt.Printf("gomemcache: %d passed, %d failed (%.1fs)\n", s.passed, s.failed, time.Since(start).Seconds())
	if s.failed > 0 {
		os.Exit(1)
	}
}
