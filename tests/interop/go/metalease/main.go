// QuangTung97/go-memcache (a pipelined meta-protocol client with leases) against a
// memcached-compatible server: lease fills (mg N, W/Z), stale-while-revalidate after md I
// (X), and CAS races (ms C). Each check states memcached 1.6.45's behaviour
// (scripts/interop-leases runs it against both). Usage: metalease HOST:PORT
package main

import (
	"fmt"
	"math/rand"
	"os"

	"github.com/QuangTung97/go-memcache/memcache"
)

var passed, failed int

func check(name string, ok bool, detail string) {
	if ok {
		passed++
		fmt.Printf("  ok   go-memcache-meta/%s\n", name)
	} else {
		failed++
		fmt.Printf("  FAIL go-memcache-meta/%s: %s\n", name, detail)
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: metalease HOST:PORT")
		os.Exit(2)
	}
	a, err := memcache.New(os.Args[1], 1)
	if err != nil {
		fmt.Println("  FAIL go-memcache-meta/connect:", err)
		os.Exit(1)
	}
	b, err := memcache.New(os.Args[1], 1)
	if err != nil {
		fmt.Println("  FAIL go-memcache-meta/connect:", err)
		os.Exit(1)
	}
	defer a.Close()
	defer b.Close()
	prefix := fmt.Sprintf("it:go-meta:%d:%x:", os.Getpid(), rand.Uint32())
	mget := func(c *memcache.Client, key string, n uint32) memcache.MGetResponse {
		p := c.Pipeline()
		defer p.Finish()
		r, err := p.MGet(key, memcache.MGetOptions{N: n, CAS: true})()
		if err != nil {
			return memcache.MGetResponse{}
		}
		return r
	}
	mset := func(c *memcache.Client, key, value string, cas uint64) memcache.MSetResponseType {
		p := c.Pipeline()
		defer p.Finish()
		r, err := p.MSet(key, []byte(value), memcache.MSetOptions{CAS: cas, TTL: 60})()
		if err != nil {
			return 0
		}
		return r.Type
	}
	mdel := func(c *memcache.Client, key string, stale bool) memcache.MDelResponseType {
		p := c.Pipeline()
		defer p.Finish()
		r, err := p.MDel(key, memcache.MDelOptions{I: stale, TTL: 30})()
		if err != nil {
			return 0
		}
		return r.Type
	}
	w := func(r memcache.MGetResponse) bool { return r.Flags&memcache.MGetFlagW != 0 }
	z := func(r memcache.MGetResponse) bool { return r.Flags&memcache.MGetFlagZ != 0 }
	x := func(r memcache.MGetResponse) bool { return r.Flags&memcache.MGetFlagX != 0 }

	// A miss with N wins the lease (W, an empty placeholder, a token); the next reader loses
	// (Z); the winner's set with its token stores; then everyone reads the value.
	key := prefix + "lease"
	first := mget(a, key, 30)
	check("miss_wins_the_lease", first.Type == memcache.MGetResponseTypeVA && w(first) && len(first.Data) == 0 && first.CAS != 0,
		fmt.Sprintf("%+v", first))
	second := mget(b, key, 30)
	check("the_next_reader_loses", z(second) && !w(second), fmt.Sprintf("%+v", second))
	check("the_winner_fills_with_its_token", mset(a, key, "filled", first.CAS) == memcache.MSetResponseTypeHD, "")
	after := mget(b, key, 30)
	check("then_everyone_reads_it", string(after.Data) == "filled" && !w(after) && !z(after), fmt.Sprintf("%+v", after))

	// A write races a cas: the stale token is refused (EX), the value stays.
	key = prefix + "race"
	mset(a, key, "v1", 0)
	seen := mget(a, key, 0)
	mset(b, key, "v2", 0)
	check("a_stale_token_is_refused", mset(a, key, "v3", seen.CAS) == memcache.MSetResponseTypeEX, "")
	check("the_racing_write_stays", string(mget(a, key, 0).Data) == "v2", "")

	// md I keeps the value as stale: one reader wins the refresh (X and W), the others get the
	// stale value (X and Z) while it refreshes; its set with the token makes it fresh.
	key = prefix + "stale"
	mset(a, key, "old", 0)
	check("invalidate_keeps_it_stale", mdel(a, key, true) == memcache.MDelResponseTypeHD, "")
	refresher := mget(a, key, 30)
	check("one_reader_refreshes", string(refresher.Data) == "old" && x(refresher) && w(refresher), fmt.Sprintf("%+v", refresher))
	other := mget(b, key, 30)
	check("the_others_read_stale", string(other.Data) == "old" && x(other) && z(other), fmt.Sprintf("%+v", other))
	check("the_refresh_stores", mset(a, key, "new", refresher.CAS) == memcache.MSetResponseTypeHD, "")
	fresh := mget(b, key, 30)
	check("fresh_again", string(fresh.Data) == "new" && !x(fresh) && !w(fresh), fmt.Sprintf("%+v", fresh))

	fmt.Printf("go-memcache-meta: %d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
